"""Fan-out reads: one read asked of every shard, the answers merged, a shard that is down named.

Every read here takes ``apis``, a ``Mapping[int, provider]`` from shard number to one of:

* an API object (``SqlApi``, ``AsyncSqlApi``, or anything with the same methods), used as is;
* a zero-argument callable returning a context manager (an async context manager for the
  async runner) that yields such an object, e.g. ``functools.partial(pools.api, shard)``.

A shard whose connection fails (``harvest.db.pools.database_unreachable``, ``DatabaseUnavailable``,
or a ``ShardUnavailable``) is named in ``unavailable_shards`` and the read goes on with the others:
``status`` is ``"complete"`` (every shard answered), ``"partial"`` (some did) or
``"unavailable"`` (none did). Any other error (an ``InvalidArgument`` every shard would raise
alike, a bug) is raised. Nothing here retries; the caller decides what partial means to it.

The workflow list is a k-way keyset merge on ``(created_at, id)``: each shard is asked for
``page_size`` rows after the cursor (its ``list_executions`` reads ``page_size + 1`` to know
whether more follow), so one page reads at most ``N x (page_size + 1)`` rows on N shards. The
cursor guarantees are in docs/sharding.md, "Fan-out reads", and on :func:`list_workflows`.

Each read is a *plan*: a generator that yields :class:`Step` (one call to ask each shard) and
receives the :class:`FanOut` of answers, then returns the merged :class:`Merged`. :func:`run` and
:func:`run_async` drive a plan, so the sync and async readers share every merge.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import heapq
import inspect
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast, overload

from harvest.core import jsonb
from harvest.core.errors import DatabaseUnavailable, HarvestError, InvalidArgument, NoShardReached, NotFound
from harvest.core.ids import MAX_SHARD, ROW_ID_MAX

__all__ = [
    "COMPLETE",
    "PARTIAL",
    "UNAVAILABLE",
    "AsyncShardReads",
    "FanOut",
    "Merged",
    "ShardReads",
    "Step",
    "count_dead_letters",
    "count_executions",
    "count_usage",
    "dead_letter_home",
    "fan_out",
    "fan_out_async",
    "get_worker_health",
    "holds_dead_letter",
    "is_shard_failure",
    "list_audit_log",
    "list_children",
    "list_concurrency_keys",
    "list_dag_runs",
    "list_dead_letters",
    "list_schedules",
    "list_tree",
    "list_workers",
    "list_workflows",
    "page_children",
    "run",
    "run_async",
    "status_of",
]

T = TypeVar("T")
R = TypeVar("R")

COMPLETE, PARTIAL, UNAVAILABLE = "complete", "partial", "unavailable"
MAX_PAGE = 1000  # list_executions' and list_dead_letters' own bound
EXECUTION_STATUSES = (
    "RUNNING",
    "PAUSED",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TERMINATED",
    "TIMED_OUT",
    "CONTINUED_AS_NEW",
)


# -- the result types --------------------------------------------------------------------------
def status_of(answered: int, unavailable: int) -> str:
    """complete when no shard was missing, unavailable when none answered, else partial."""
    if not unavailable:
        return COMPLETE
    return UNAVAILABLE if not answered else PARTIAL


@dataclass
class FanOut(Generic[T]):
    """One call's answers, per shard (the contract's type, docs/sharding.md)."""

    results: dict[int, T]
    unavailable_shards: list[int]
    status: str
    # A write's refusals, each with its shard, when a server answered them (the CLI over HTTP).
    refused: list[tuple[int, Any]] = field(default_factory=list)
    # Why each unavailable shard could not be read, in one line with no secret (unreachable_reason);
    # a diagnostic, not part of the answer (equal answers stay equal).
    reasons: dict[int, str] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, results: dict[int, T], unavailable: Iterable[int]) -> FanOut[T]:
        missing = sorted(set(unavailable))
        return cls(dict(sorted(results.items())), missing, status_of(len(results), len(missing)))

    def merged(self, value: R) -> Merged[R]:
        """``value`` (made of these answers) as a merged read: the shards not read, the status,
        and why each was not read (a partial read's warning names it)."""
        return Merged(value, self.unavailable_shards, self.status, reasons=self.reasons)


@dataclass
class Merged(Generic[R]):
    """A merged read: its ``value`` (rows or one object), which shards could not be read and
    the status; ``next_cursor`` for the paginated ones (None: nothing after this page)."""

    value: R
    unavailable_shards: list[int] = field(default_factory=list)
    status: str = COMPLETE
    next_cursor: str | None = None
    # For a bounded list read whole on no page: how many rows matched (the value holds the first).
    total: int | None = None
    # For a list read from a bounded walk (a deeper page of children): whether the walk cut.
    truncated: bool | None = None
    # Whether the deployment that answered is sharded, where a server says so (None: not said).
    sharded: bool | None = None
    # Why each unavailable shard could not be read (a refused login is not a server down).
    reasons: dict[int, str] = field(default_factory=dict, compare=False)

    def envelope(self, key: str) -> dict[str, Any]:
        """The JSON shape the CLI prints: {key: value, status, unavailable_shards[, next_cursor]}."""
        out: dict[str, Any] = {
            key: self.value,
            "status": self.status,
            "unavailable_shards": self.unavailable_shards,
        }
        if self.next_cursor is not None or key in (
            "executions",
            "dead_letters",
            "audit_log",
            "runs",
            "keys",
            "schedules",
            "items",
            "pending_starts",
        ):
            out["next_cursor"] = self.next_cursor
        if self.total is not None:
            out["total"] = self.total
            out["truncated"] = self.total > len(cast("list[Any]", self.value))
        elif self.truncated is not None:
            out["truncated"] = self.truncated
        return out


# -- the per-shard answers the CLI and the management API both give ----------------------------


def newest_audit_first(row: dict[str, Any]) -> tuple[Any, int, int]:
    """The sort key (reversed) of every shard's audit rows merged: newest first, ties by shard
    then id, so the CLI and ``GET /admin/audit`` keep the same ``limit`` rows."""
    return (row["at"], -int(row["shard_id"]), int(row["id"]))


AUDIT_PRUNE_COUNTS = ("deleted", "batches", "remaining")


def audit_prune_totals(
    older_than: str, dry_run: bool, results: Mapping[int, dict[str, Any]], unavailable: Iterable[int]
) -> dict[str, Any]:
    """The answer of ``harvest audit prune`` (or its dry run) over the shards' answers, the CLI
    over SQL and ``POST /admin/audit/prune`` alike: the counts summed (a dry run's ``older``),
    the earliest cutoff, each shard's answer under ``shards`` and the shards missed."""
    shards = [{"shard_id": s, **r} for s, r in sorted(results.items())]
    counts = ("older",) if dry_run else AUDIT_PRUNE_COUNTS
    return {
        "older_than": older_than,
        "dry_run": dry_run,
        **{k: sum(r.get(k) or 0 for r in shards) for k in counts},
        "cutoff": min((str(r["cutoff"]) for r in shards if r.get("cutoff")), default=None),
        "shards": shards,
        "unavailable_shards": sorted(unavailable),
    }


def newest_run_first(row: dict[str, Any]) -> tuple[datetime, uuid.UUID]:
    """The sort key (reversed) of runs merged from every shard (a DAG's runs): newest first,
    ties by the greater execution id, as each shard's ``list_dag_runs`` orders them, so each
    shard's first ``limit`` hold its share of the merged first ``limit``."""
    return _key(row)


def no_worker_anywhere(worker_id: str, unavailable: Iterable[int]) -> NotFound:
    """A worker no readable shard has (naming the shards that could not be read)."""
    missed = ", ".join(map(str, unavailable))
    where = f" (shard(s) {missed} could not be read)" if missed else ""
    return NotFound(
        f"no worker {worker_id!r} on any shard{where}; list them with harvest worker list (GET /workers)"
    )


# -- which failures make a shard "unavailable" -------------------------------------------------
def _is_named_shard_unavailable(exc: BaseException) -> bool:
    # shard/pools.py's ShardUnavailable (core/errors.py) by name, so this module does not
    # depend on where or when it lands.
    return isinstance(exc, HarvestError) and any(c.__name__ == "ShardUnavailable" for c in type(exc).__mro__)


def _unreachable(exc: BaseException) -> bool:
    """harvest.db.pools.database_unreachable once the driver is loaded: no driver error can be
    raised before, and a process that reads over HTTP (or prints --help) never loads it."""
    if "psycopg" not in sys.modules:
        return False
    from harvest.db.pools import database_unreachable

    return database_unreachable(exc)


def is_shard_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the shard could not be read (rather than that the read was wrong: an
    error the shard's database answered with, a statement timeout included, is raised)."""
    return (
        isinstance(exc, (DatabaseUnavailable, TimeoutError))
        or _is_named_shard_unavailable(exc)
        or _unreachable(exc)
    )


# -- the runners -------------------------------------------------------------------------------
# Internally a read gets (api, shard): the workflow list gives each shard its own position.
def _call_sync(provider: Any, read: Callable[[Any, int], T], shard: int) -> T:
    if callable(provider):
        with cast(Any, provider)() as api:
            return read(api, shard)
    return read(provider, shard)


async def _call_async(provider: Any, read: Callable[[Any, int], Any], shard: int) -> Any:
    if callable(provider):
        async with cast(Any, provider)() as api:
            answer = read(api, shard)
            return await answer if inspect.isawaitable(answer) else answer
    answer = read(provider, shard)
    return await answer if inspect.isawaitable(answer) else answer


def _targets(
    apis: Mapping[int, Any], shards: Iterable[int] | None, skip: Iterable[int] = ()
) -> tuple[list[int], list[int]]:
    """(shards to ask, shards asked for that have no provider: unavailable)."""
    wanted = sorted((set(apis) if shards is None else set(shards)) - set(skip))
    return [s for s in wanted if s in apis], [s for s in wanted if s not in apis]


def _per_shard(read: Callable[[Any], T]) -> Callable[[Any, int], T]:
    return lambda api, _shard: read(api)


def fan_out(
    apis: Mapping[int, Any],
    read: Callable[[Any], T],
    *,
    shards: Iterable[int] | None = None,
    concurrent: bool = True,
    timeout: float | None = None,
) -> FanOut[T]:
    """``read(api)`` on every shard (or on ``shards``), in threads when there are several.

    A shard that cannot be reached lands in ``unavailable_shards``; a shard asked for that has
    no provider too. Another error is raised (the first one, in shard order). ``timeout``
    (seconds), as in :func:`fan_out_async`, bounds each shard's answer: a shard that does not
    answer in time counts as unavailable (its thread is left to finish on its own)."""
    return _fan_out(apis, _per_shard(read), shards=shards, concurrent=concurrent, timeout=timeout)


def _fan_out(
    apis: Mapping[int, Any],
    read: Callable[[Any, int], T],
    *,
    shards: Iterable[int] | None = None,
    concurrent: bool = True,
    skip: Iterable[int] = (),
    timeout: float | None = None,
) -> FanOut[T]:
    asked, missing = _targets(apis, shards, skip)
    outcomes: dict[int, Any] = {}
    if timeout is not None and asked:
        # A thread per shard (even for one, or with concurrent=False): only a thread's answer
        # can be waited for with a bound. A shard past the deadline is unavailable; its thread
        # is not waited for.
        pool = ThreadPoolExecutor(max_workers=min(len(asked), 16))
        try:
            futures = {s: pool.submit(_call_sync, apis[s], read, s) for s in asked}
            deadline = time.monotonic() + timeout
            for s, future in futures.items():
                try:
                    outcomes[s] = future.result(max(0.0, deadline - time.monotonic()))
                except FutureTimeout:
                    outcomes[s] = TimeoutError(f"shard {s} did not answer within {timeout:g} s")
                except Exception as exc:
                    outcomes[s] = exc
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
    elif concurrent and len(asked) > 1:
        with ThreadPoolExecutor(max_workers=min(len(asked), 16)) as pool:
            futures = {s: pool.submit(_call_sync, apis[s], read, s) for s in asked}
            for s, future in futures.items():
                try:
                    outcomes[s] = future.result()
                except Exception as exc:  # sorted in _collect: a shard failure or a real error
                    outcomes[s] = exc
    else:
        for s in asked:
            try:
                outcomes[s] = _call_sync(apis[s], read, s)
            except Exception as exc:
                outcomes[s] = exc
    return _collect(outcomes, missing)


@overload
async def fan_out_async(
    apis: Mapping[int, Any],
    read: Callable[[Any], Awaitable[T]],
    *,
    shards: Iterable[int] | None = None,
    timeout: float | None = None,
) -> FanOut[T]: ...
@overload
async def fan_out_async(
    apis: Mapping[int, Any],
    read: Callable[[Any], T],
    *,
    shards: Iterable[int] | None = None,
    timeout: float | None = None,
) -> FanOut[T]: ...
async def fan_out_async(
    apis: Mapping[int, Any],
    read: Callable[[Any], Awaitable[T] | T],
    *,
    shards: Iterable[int] | None = None,
    timeout: float | None = None,
) -> FanOut[T]:
    """The async :func:`fan_out`: every shard at once; ``timeout`` (seconds) bounds each shard's
    answer, and a shard that does not answer in time counts as unavailable."""
    return await _fan_out_async(apis, _per_shard(read), shards=shards, timeout=timeout)


async def _fan_out_async(
    apis: Mapping[int, Any],
    read: Callable[[Any, int], Any],
    *,
    shards: Iterable[int] | None = None,
    timeout: float | None = None,
    skip: Iterable[int] = (),
) -> FanOut[Any]:
    import asyncio  # (loaded: this runs on its loop; a process that only reads in threads never needs it)

    asked, missing = _targets(apis, shards, skip)

    async def one(s: int) -> Any:
        if timeout is None:
            return await _call_async(apis[s], read, s)
        return await asyncio.wait_for(_call_async(apis[s], read, s), timeout)

    answers = await asyncio.gather(*(one(s) for s in asked), return_exceptions=True)
    for answer in answers:  # cancellation and the like are not a shard's answer
        if isinstance(answer, BaseException) and not isinstance(answer, Exception):
            raise answer
    return _collect(dict(zip(asked, answers, strict=True)), missing)


def unreachable_reason(exc: BaseException) -> str:
    """Why a shard could not be read, in one line: Harvest's own message (a refused login, no
    url, a server down), a timeout's, or a driver error's first line and SQLSTATE, redacted
    (never a password or a DSN's secret: harvest.db.connection.redact)."""
    # A ShardUnavailable's own reason: the shard is named beside it.
    exc_text = str(getattr(exc, "reason", "") or "") if _is_named_shard_unavailable(exc) else ""
    if "psycopg" not in sys.modules:  # (then no driver error, and nothing to redact a DSN from)
        return exc_text or str(exc) or type(exc).__name__
    from harvest.db.connection import error_line, redact

    text = exc_text or (str(exc) if isinstance(exc, (HarvestError, TimeoutError)) else error_line(exc))
    return redact(text or type(exc).__name__)


def _collect(outcomes: dict[int, Any], missing: list[int]) -> FanOut[Any]:
    results: dict[int, Any] = {}
    unavailable = list(missing)
    reasons = dict.fromkeys(missing, "no database is configured for it in this process")
    for s in sorted(outcomes):
        outcome = outcomes[s]
        if isinstance(outcome, Exception):
            if is_shard_failure(outcome):
                unavailable.append(s)
                reasons[s] = unreachable_reason(outcome)
                continue
            raise outcome
        results[s] = outcome
    fan = FanOut.of(results, unavailable)
    fan.reasons = reasons
    return fan


def _with_reasons(merged: Merged[Any], reasons: dict[int, str]) -> Merged[Any]:
    """``merged`` with the reason of each of its unavailable shards (the last round's)."""
    merged.reasons = {s: reasons[s] for s in merged.unavailable_shards if s in reasons}
    return merged


# -- plans ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One round of a plan: ``read(api, shard)`` on ``shards`` (None: every shard); ``read``
    returns its answer (or an awaitable of it, for the async APIs)."""

    read: Callable[[Any, int], Any]
    shards: tuple[int, ...] | None = None
    skip: frozenset[int] = frozenset()  # shards not to ask (read to the end already)


Plan = Generator[Step, FanOut[Any], Merged[Any]]


def run(
    apis: Mapping[int, Any], plan: Plan, *, concurrent: bool = True, timeout: float | None = None
) -> Merged[Any]:
    """Drive a plan with the synchronous APIs; ``timeout`` bounds each shard of each round."""
    reasons: dict[int, str] = {}
    try:
        step = next(plan)
        while True:
            fan = _fan_out(
                apis,
                step.read,
                shards=step.shards,
                concurrent=concurrent,
                skip=step.skip,
                timeout=timeout,
            )
            reasons.update(fan.reasons)
            step = plan.send(fan)
    except StopIteration as done:
        return _with_reasons(cast("Merged[Any]", done.value), reasons)


async def run_async(apis: Mapping[int, Any], plan: Plan, *, timeout: float | None = None) -> Merged[Any]:
    """Drive a plan with the async APIs (every shard of a round at once)."""
    reasons: dict[int, str] = {}
    try:
        step = next(plan)
        while True:
            fan = await _fan_out_async(apis, step.read, shards=step.shards, timeout=timeout, skip=step.skip)
            reasons.update(fan.reasons)
            step = plan.send(fan)
    except StopIteration as done:
        return _with_reasons(cast("Merged[Any]", done.value), reasons)


def _tagged(fan: FanOut[list[dict[str, Any]]]) -> Iterable[dict[str, Any]]:
    """Every row of every shard, with its shard_id."""
    for s, rows in fan.results.items():
        for row in rows:
            yield {**row, "shard_id": s}


# -- cursors ---------------------------------------------------------------------------------------
def _encode_token(prefix: str, body: dict[str, Any]) -> str:
    raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return prefix + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(prefix: str, token: str, what: str) -> dict[str, Any]:
    bad = InvalidArgument(
        f"{what} cursor {token[:40]!r} is malformed: pass the next_cursor of a previous page "
        "unchanged, or no cursor for the first page"
    )
    if not isinstance(token, str) or not token.startswith(prefix):
        raise bad
    text = token[len(prefix) :]
    try:
        body = jsonb.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise bad from None
    if not isinstance(body, dict):
        raise bad
    return body


def _fingerprint(filters: dict[str, Any]) -> str:
    text = json.dumps(filters, sort_keys=True, default=_filter_text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _filter_text(value: Any) -> str:
    """A filter's value as the fingerprint reads it: an aware time in UTC, so one instant is one
    filter whatever offset a client wrote it with (the API keeps the offset it was given)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        value = value.astimezone(UTC)
    return str(value)


def _shard_key(value: Any, what: str) -> int:
    try:
        shard = int(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{what} cursor is malformed: {value!r} is not a shard number") from None
    if not 0 <= shard <= MAX_SHARD or str(shard) != str(value):
        raise InvalidArgument(f"{what} cursor is malformed: {value!r} is not a shard number")
    return shard


# A position in the workflow list: the (created_at, id) of the last row delivered, or None
# (nothing delivered yet: start from the first row).
Position = tuple[datetime, uuid.UUID] | None


def _position_out(pos: Position) -> list[str] | None:
    if pos is None:
        return None
    return [pos[0].astimezone(UTC).isoformat(timespec="microseconds"), str(pos[1])]


def _position_in(value: Any) -> Position:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, str) for v in value):
        raise ValueError("position")
    created_at = datetime.fromisoformat(value[0])
    if created_at.tzinfo is None:
        raise ValueError("naive time")
    return created_at, uuid.UUID(value[1])


def shard_cursor(pos: Position) -> str | None:
    """The one-shard cursor of harvest.list_executions for a position (its _encode_cursor form:
    base64 of "<created_at UTC, microseconds>|<id>")."""
    if pos is None:
        return None
    text = pos[0].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") + "|" + str(pos[1])
    return base64.b64encode(text.encode()).decode()


@dataclass(frozen=True)
class ListCursor:
    """The workflow list's cross-shard cursor: the anchor (the last row of the page it follows)
    and the shards still behind it (unavailable when an earlier page was made), each with its
    own position. A shard not named in ``behind`` is at the anchor."""

    order: str
    anchor: Position
    behind: dict[int, Position]
    filters: str

    def position(self, shard: int) -> Position:
        return self.behind.get(shard, self.anchor)

    def encode(self) -> str:
        return _encode_token(
            "wf1.",
            {
                "o": self.order,
                "a": _position_out(self.anchor),
                "b": {str(s): _position_out(p) for s, p in sorted(self.behind.items())},
                "f": self.filters,
            },
        )

    @classmethod
    def decode(cls, token: str) -> ListCursor:
        body = _decode_token("wf1.", token, "workflow list")
        try:
            order = body["o"]
            if (
                order not in ("asc", "desc")
                or not isinstance(body["f"], str)
                or not isinstance(body["b"], dict)
            ):
                raise ValueError("fields")
            anchor = _position_in(body["a"])
            behind = {_shard_key(s, "workflow list"): _position_in(p) for s, p in body["b"].items()}
        except (KeyError, TypeError, ValueError):
            raise InvalidArgument(
                f"workflow list cursor {token[:40]!r} is malformed: pass the next_cursor of a previous "
                "page unchanged, or no cursor for the first page"
            ) from None
        if anchor is None and not behind:
            raise InvalidArgument(f"workflow list cursor {token[:40]!r} is malformed: it names no position")
        return cls(order, anchor, behind, body["f"])


def _key(row: dict[str, Any]) -> tuple[datetime, uuid.UUID]:
    execution_id = row["execution_id"]
    return row["created_at"], execution_id if isinstance(execution_id, uuid.UUID) else uuid.UUID(
        str(execution_id)
    )


def _later(a: Position, b: Position, order: str) -> Position:
    """The further along of two positions in ``order`` (None is before everything)."""
    if a is None:
        return b
    if b is None:
        return a
    if order == "asc":
        return max(a, b)
    return min(a, b)


# -- the workflow list: k-way keyset merge -------------------------------------------------------
def list_workflows(
    *,
    state: str | None = None,
    workflow_name: str | None = None,
    search_attributes: list[str] | None = None,
    created_after: Any = None,
    created_before: Any = None,
    page_size: int = 50,
    cursor: str | None = None,
    order: str = "desc",
    filter: str | None = None,
    workflow_id: str | None = None,
    failing: bool | None = None,
) -> Plan:
    """One page of the workflow list across shards, ordered by (created_at, id).

    ``workflow_id``: only that id's runs. Every shard is still asked, as :func:`current_run`
    asks them: a pinned start's run is not on the id's hashed shard, the hash takes the
    workflow's name, which the filter need not give, and a moved run lives on another shard
    (each shard reads the id's runs down its index, a few rows).

    Cursor guarantees (docs/sharding.md, "Fan-out reads"): paging from the first page to the
    last with every shard up delivers every row that existed throughout exactly once, in order
    (ties on created_at broken by id, which is unique across shards; a moved run's rows on the
    shards it passed through are one row, its home's: _homes). A shard unavailable for
    a page keeps its own position in the cursor: when it answers again, its rows from that
    position on come in the following pages, merged into them (so such a row can come after
    rows that sort later than it; it is never skipped, and no row comes twice). While a shard
    is unavailable next_cursor stays set, even on a page that is otherwise the last: "could
    not inspect" is not "no more rows".
    """
    order = (order or "desc").lower()
    if order not in ("asc", "desc"):
        raise InvalidArgument(f"order {order!r} is not asc or desc")
    if not isinstance(page_size, int) or not 1 <= page_size <= MAX_PAGE:
        raise InvalidArgument(f"page size {page_size} is out of range 1..{MAX_PAGE}")
    filters = _fingerprint(
        {
            "state": state,
            "workflow_name": workflow_name,
            "search_attributes": list(search_attributes or []),
            "created_after": created_after,
            "created_before": created_before,
            **({"filter": filter} if filter else {}),
            **({"workflow_id": workflow_id} if workflow_id is not None else {}),
            **({"failing": failing} if failing is not None else {}),
        }
    )
    start: ListCursor | None = None
    if cursor:
        start = ListCursor.decode(cursor)
        if start.order != order:
            raise InvalidArgument(
                f"the cursor was issued for order {start.order}, not {order}: pass the same order, "
                "or no cursor for the first page"
            )
        if start.filters != filters:
            raise InvalidArgument(
                "the cursor was issued for other filters: pass the same filters as the first page, "
                "or no cursor to start again"
            )
    anchor: Position = start.anchor if start else None
    behind: dict[int, Position] = dict(start.behind) if start else {}

    def position(s: int) -> Position:
        return behind.get(s, anchor)

    def read(api: Any, shard: int) -> Any:
        return api.list_executions(
            state=state,
            workflow_name=workflow_name,
            search_attributes=list(search_attributes) if search_attributes else None,
            created_after=created_after,
            created_before=created_before,
            page_size=page_size,
            cursor=shard_cursor(position(shard)),
            order=order,
            filter=filter,
            **({"workflow_id": workflow_id} if workflow_id is not None else {}),
            **({"failing": failing} if failing is not None else {}),
        )

    fan = yield Step(read)
    # Shards still behind that this process has no API for: asked nothing, still behind.
    missing = [s for s in behind if s not in fan.results and s not in fan.unavailable_shards]
    unavailable = sorted(set(fan.unavailable_shards) | set(missing))
    rows: list[dict[str, Any]] = []
    more = False
    for s, answer in fan.results.items():
        if answer and answer[-1].get("next_cursor"):
            more = True  # this shard has rows past the ones it sent
        for row in answer:
            tagged = {k: v for k, v in row.items() if k != "next_cursor"}
            tagged["shard_id"] = s
            rows.append(tagged)
    # A moved run has a row on each shard it passed through, all with one (created_at, id): its
    # home's is kept (_homes), so it is listed once and a page never ends between its rows.
    rows = _homes(rows)
    rows.sort(key=_key, reverse=order == "desc")
    page, more = rows[:page_size], more or len(rows) > page_size
    if page:
        last = _key(page[-1])
        # Every shard that answered delivered all its rows up to `last` (it sent page_size
        # rows after its position, or all it had), so it moves to `last` (or stays, if
        # ahead). A shard that did not answer keeps its position.
        positions = {s: _later(position(s), last, order) for s in fan.results}
    else:
        positions = {s: position(s) for s in fan.results}
    for s in unavailable:
        positions[s] = position(s)
    next_cursor = None
    if more or unavailable:
        new_anchor: Position = None
        for p in positions.values():
            new_anchor = _later(new_anchor, p, order)
        new_behind = {s: p for s, p in positions.items() if p != new_anchor}
        if new_anchor is None:  # nothing delivered yet anywhere: every shard from the top
            new_behind = dict.fromkeys(positions)
        next_cursor = ListCursor(order, new_anchor, new_behind, filters).encode()
    return Merged(page, unavailable, status_of(len(fan.results), len(unavailable)), next_cursor)


# -- counts --------------------------------------------------------------------------------------
def _summed(
    fan: FanOut[list[dict[str, Any]]],
    keys: tuple[str, ...],
    sums: tuple[str, ...],
    mins: tuple[str, ...] = (),
    maxes: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """The shards' grouped rows added up per group (``keys``): ``sums`` summed, ``mins`` /
    ``maxes`` their least / greatest non-null value."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rows in fan.results.values():
        for row in rows:
            group = tuple(row.get(k) for k in keys)
            into = groups.get(group)
            if into is None:
                groups[group] = dict(row)
                continue
            for k in sums:
                into[k] = (into.get(k) or 0) + (row.get(k) or 0)
            for k, pick in [(k, min) for k in mins] + [(k, max) for k in maxes]:
                values = [v for v in (into.get(k), row.get(k)) if v is not None]
                into[k] = pick(values) if values else None
    return list(groups.values())


# What a count with no --state counts: every status but a moved run's seal (MIGRATED), whose run
# is counted where it lives. A staged copy (MIGRATING) is counted: after the cutover it is the run.
_COUNTED_STATES = ",".join((*EXECUTION_STATUSES, "MIGRATING"))


def count_executions(
    *,
    group_by: str = "status",
    state: str | None = None,
    workflow_name: str | None = None,
    search_attributes: list[str] | None = None,
    created_after: Any = None,
    created_before: Any = None,
    filter: str | None = None,
    limit: int | None = None,
    workflow_id: str | None = None,
    failing: bool | None = None,
) -> Plan:
    """How many executions match, per status (or workflow name, or both), over every shard
    (``workflow_id``: one id's runs, every shard asked, as :func:`list_workflows`). A
    moved run counts once, as the workflow list shows it: its MIGRATED seals on the shards it
    left are counted only when ``state`` names MIGRATED (_COUNTED_STATES). ``limit``: each shard
    counts at most that many runs a status, a row ``capped`` when any shard's count reached it."""
    states = _COUNTED_STATES if state is None else state
    fan = yield Step(
        lambda api, _s: api.count_executions(
            group_by=group_by,
            state=states,
            workflow_name=workflow_name,
            search_attributes=list(search_attributes) if search_attributes else None,
            created_after=created_after,
            created_before=created_before,
            filter=filter,
            limit=limit,
            workflow_id=workflow_id,
            failing=failing,
        )
    )
    rows = _summed(fan, ("status", "workflow_name"), ("executions",), maxes=("capped",))
    rows.sort(key=lambda r: (-r["executions"], r.get("status") or "", r.get("workflow_name") or ""))
    return Merged(rows, fan.unavailable_shards, fan.status)


def count_dead_letters(group_by: str = "all") -> Plan:
    """Dead letters per activity, workflow and error type, added up over every shard."""
    fan = yield Step(lambda api, _s: api.count_dead_letters(group_by))
    rows = _summed(
        fan,
        ("activity_name", "workflow_name", "error_type"),
        ("dead_letters",),
        mins=("first_failed_at",),
        maxes=("last_failed_at",),
    )
    rows.sort(
        key=lambda r: (
            -r["dead_letters"],
            r.get("activity_name") or "",
            r.get("workflow_name") or "",
            r.get("error_type") or "",
        )
    )
    return Merged(rows, fan.unavailable_shards, fan.status)


USAGE_SUMS = (
    "workflow_starts",
    "completed",
    "failed",
    "cancelled",
    "timed_out",
    "activity_executions",
    "activity_executions_failed",
    "activity_compute_seconds",
    "llm_calls",
    "llm_input_tokens",
    "llm_output_tokens",
    "llm_cost_usd_micros",
    "llm_unpriced_calls",
    "llm_latency_ms",
)


def count_usage(from_: Any, to: Any, group_by: str = "workflow_name") -> Plan:
    """The usage report summed per group over every shard (no roll-up of a long tail: a
    chargeback report that dropped small tenants would be wrong)."""
    fan = yield Step(lambda api, _s: api.count_usage(from_, to, group_by))
    rows = _summed(fan, ("group_name",), USAGE_SUMS)
    rows.sort(key=lambda r: r["group_name"] or "")
    return Merged(rows, fan.unavailable_shards, fan.status)


# GET /admin/concurrency, `harvest concurrency status` and the dashboard: at most this many keys a
# page (100,000 tenants were 100,000 keys in one answer); the keys after it by next_cursor.
CONCURRENCY_PAGE = 1000
CONCURRENCY_PAGE_MAX = 10_000


@dataclass(frozen=True)
class Place:
    """Where a page of a list merged over the shards starts on each shard: after ``anchor`` (the
    last row of the page before; None: from the first row), but a shard in ``behind`` after its
    own position: it could not be read when a page was made, so the pages moved on without it,
    and it is read from where it stopped when it answers again (the workflow list's rule,
    :class:`ListCursor`): none of its rows is skipped. ``later(a, b)`` is the further along of
    two positions in the list's order (None before everything)."""

    anchor: Any
    behind: dict[int, Any]

    def position(self, shard: int) -> Any:
        return self.behind.get(shard, self.anchor)

    def after(self, fan: FanOut[Any], last: Any, later: Callable[[Any, Any], Any]) -> Place:
        """The place of the next page: each shard that answered has delivered every row up to
        ``last`` (the page's last; None, an empty page); a shard that did not keeps its own."""
        positions = {
            s: self.position(s) if last is None else later(self.position(s), last) for s in fan.results
        }
        for s in {*fan.unavailable_shards, *(s for s in self.behind if s not in fan.results)}:
            positions[s] = self.position(s)
        anchor = None
        for p in positions.values():
            anchor = later(anchor, p)
        return Place(anchor, {s: p for s, p in positions.items() if p != anchor})

    def unread(self, fan: FanOut[Any]) -> list[int]:
        """The shards this page could not read: unavailable, or behind and not asked (this
        process has no API for them)."""
        return sorted({*fan.unavailable_shards, *(s for s in self.behind if s not in fan.results)})

    def encode(self, prefix: str, filters: str, out: Callable[[Any], Any]) -> str:
        return _encode_token(
            prefix,
            {
                "a": None if self.anchor is None else out(self.anchor),
                "b": {str(s): None if p is None else out(p) for s, p in sorted(self.behind.items())},
                "f": filters,
            },
        )

    @classmethod
    def decode(
        cls, cursor: str | None, prefix: str, what: str, filters: str, into: Callable[[Any], Any]
    ) -> Place:
        """The cursor's place (refused when malformed or issued for other filters); no cursor,
        the first page. A cursor of before the shards' own positions (no "b") is at its anchor
        on every shard."""
        if not cursor:
            return cls(None, {})
        body = _decode_token(prefix, cursor, what)
        try:
            if not isinstance(body.get("f"), str) or not isinstance(body.get("b", {}), dict):
                raise ValueError("fields")
            anchor = None if body.get("a") is None else into(body["a"])
            behind = {
                _shard_key(s, what): None if p is None else into(p) for s, p in body.get("b", {}).items()
            }
        except (KeyError, TypeError, ValueError):
            raise InvalidArgument(
                f"{what} cursor {cursor[:40]!r} is malformed: pass the next_cursor of a previous "
                "page unchanged, or no cursor for the first page"
            ) from None
        if body["f"] != filters:
            raise InvalidArgument(
                "the cursor was issued for other filters: pass the same filters as the first page, "
                "or no cursor to start again"
            )
        return cls(anchor, behind)


def _a_name(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("name")
    return value


def _later_name(a: str | None, b: str | None) -> str | None:
    return b if a is None else a if b is None else max(a, b)


def list_concurrency_keys(
    key: str | None = None, limit: int | None = None, cursor: str | None = None
) -> Plan:
    """Per concurrency key, in key order: in_flight and pending summed over the shards (each
    shard enforces max_concurrent on its own, so the sum may exceed it), the workflows on it
    merged, and ``shards``: where the key has live work. ``limit``: a page of at most that many
    keys after ``cursor``'s, each shard asked for limit + 1 keys, and next_cursor (the page's
    last key) when a shard has more; None, every key (and no cursor). A shard that could not be
    read for a page is named there and keeps its own place in the cursor (:class:`Place`): its
    keys come on a later page, when it answers, so next_cursor stays set while it does not. Such
    a key can then come twice, each time with the counts of the shards read for it then."""
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= CONCURRENCY_PAGE_MAX
    ):
        raise InvalidArgument(f"limit {limit} is out of range 1..{CONCURRENCY_PAGE_MAX}")
    filters = _fingerprint({"key": key})
    place = Place.decode(cursor, "ck1.", "concurrency key", filters, _a_name)
    ask = None if limit is None else limit + 1
    fan = yield Step(lambda api, s: api.list_concurrency_keys(key, place.position(s), ask))
    groups: dict[tuple[Any, Any], dict[str, Any]] = {}
    for s, rows in fan.results.items():
        for row in rows:
            group = (row["key"], row["task_type"])
            into = groups.setdefault(
                group, {**row, "in_flight": 0, "pending": 0, "workflows": None, "shards": []}
            )
            into["in_flight"] += row["in_flight"] or 0
            into["pending"] += row["pending"] or 0
            if row.get("max_concurrent") is not None:
                into["max_concurrent"] = max(into.get("max_concurrent") or 0, row["max_concurrent"])
            if row.get("workflows"):
                seen = {json.dumps(w, sort_keys=True): w for w in (into["workflows"] or [])}
                seen.update({json.dumps(w, sort_keys=True): w for w in row["workflows"]})
                into["workflows"] = [seen[k] for k in sorted(seen)]
            into["shards"].append(s)
    rows = [groups[g] for g in sorted(groups)]
    unread = place.unread(fan)
    next_cursor = None
    if limit is not None:
        # A shard answers limit + 1 keys when it has more than a page: the union then has more.
        keys = sorted({r["key"] for r in rows})
        more = len(keys) > limit
        if more:
            rows = [r for r in rows if r["key"] <= keys[limit - 1]]
        if more or unread:
            last = keys[min(limit, len(keys)) - 1] if keys else None
            next_cursor = place.after(fan, last, _later_name).encode("ck1.", filters, str)
    return Merged(rows, unread, status_of(len(fan.results), len(unread)), next_cursor)


# GET /admin/schedules, `harvest schedule list` and the dashboard's schedules page: at most this
# many schedules a page (a schedule a tenant was 100,000 rows an answer); the rest by next_cursor.
SCHEDULE_PAGE = 100


def list_schedules(
    kind: str | None = None, limit: int | None = None, cursor: str | None = None, paused: bool | None = None
) -> Plan:
    """The schedules of every shard by name (then shard), each with its ``shard_id``; ``limit``:
    a page of at most that many after ``cursor``'s name, each shard asked for limit + 1, and
    next_cursor (the page's last name) when there are more. A name on several shards stays on
    one page (a page ends before a name it would split; a page of one such name holds all of
    its rows). None: every schedule. A shard that could not be read for a page keeps its own
    place in the cursor, as for the concurrency keys: its schedules come on a later page."""
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE
    ):
        raise InvalidArgument(f"limit {limit} is out of range 1..{MAX_PAGE}")
    filters = _fingerprint({"kind": kind, "paused": paused})
    place = Place.decode(cursor, "sc1.", "schedule", filters, _a_name)
    ask = None if limit is None else limit + 1
    fan = yield Step(lambda api, s: api.list_schedules(kind, place.position(s), ask, paused))
    rows = sorted(
        ({**row, "shard_id": s} for s, found in fan.results.items() for row in found),
        key=lambda r: (r["name"], r["shard_id"]),
    )
    unread = place.unread(fan)
    next_cursor = None
    if limit is not None:
        more = len(rows) > limit
        if more:
            page = rows[:limit]
            if page[-1]["name"] == rows[limit]["name"]:  # the page would split a name's rows: end before it
                cut = [r for r in page if r["name"] != page[-1]["name"]]
                page = cut or [r for r in rows if r["name"] == page[-1]["name"]]
            rows = page
        if more or unread:
            last = rows[-1]["name"] if rows else None
            next_cursor = place.after(fan, last, _later_name).encode("sc1.", filters, str)
    return Merged(rows, unread, status_of(len(fan.results), len(unread)), next_cursor)


# -- workers -------------------------------------------------------------------------------------
_STATUS_RANK = {"active": 0, "draining": 1}


# GET /workers, `harvest worker list` and the dashboard's workers page: at most this many workers
# (a churning fleet leaves a row a pod until retention prunes it), with the total matched.
WORKER_LIMIT = 200
WORKER_LIMIT_MAX = 10_000


def list_workers(
    queue: str | None = None,
    status: str | None = None,
    health: str | None = None,
    shard_id: int | None = None,
    limit: int | None = None,
) -> Plan:
    """Every shard's workers (each row pinned to the shard it polls: ``shard_id``), stale first
    within each status group, as on one shard; ``shard_id`` asks that shard only. ``limit``: the
    first that many, each shard asked for that many, and ``total`` the matched summed over the
    shards (None: every worker)."""
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= WORKER_LIMIT_MAX
    ):
        raise InvalidArgument(f"limit {limit} is out of range 1..{WORKER_LIMIT_MAX}")
    shards = None if shard_id is None else (shard_id,)
    fan = yield Step(lambda api, _s: api.list_workers(queue, status, health, limit), shards)
    total = sum(found[0]["total"] for found in fan.results.values() if found)
    rows = [{k: v for k, v in row.items() if k != "total"} for row in _tagged(fan)]
    rows.sort(
        key=lambda r: (
            _STATUS_RANK.get(r["status"], 2),
            r.get("health") != "stale",
            r["worker_id"],
            r["shard_id"],
        )
    )
    if limit is None:
        return Merged(rows, fan.unavailable_shards, fan.status)
    return Merged(rows[:limit], fan.unavailable_shards, fan.status, total=total)


_HEALTH_COUNTS = ("healthy", "stale", "draining", "stopped", "total")


def get_worker_health() -> Plan:
    """The fleet roll-up over every shard: counts and by_queue added up, by_queue_health split
    added up, and by_shard with one entry per shard that answered (its workers not stopped).

    by_shard is keyed by the shard number of the mapping, which is the number each database's
    own get_worker_health() reports (pools check the identity when they open)."""
    fan = yield Step(lambda api, _s: api.get_worker_health())
    total: dict[str, Any] = dict.fromkeys(_HEALTH_COUNTS, 0)
    by_queue: dict[str, int] = {}
    by_queue_health: dict[str, dict[str, int]] = {}
    by_shard: dict[str, int] = {}
    for s, health in fan.results.items():
        for k in _HEALTH_COUNTS:
            total[k] += health.get(k) or 0
        for q, n in (health.get("by_queue") or {}).items():
            by_queue[q] = by_queue.get(q, 0) + n
        for q, split in (health.get("by_queue_health") or {}).items():
            into = by_queue_health.setdefault(q, {})
            for k, n in split.items():
                into[k] = into.get(k, 0) + n
        by_shard[str(s)] = sum((health.get("by_shard") or {}).values())
    total["by_queue"] = dict(sorted(by_queue.items()))
    total["by_queue_health"] = dict(sorted(by_queue_health.items()))
    total["by_shard"] = by_shard
    return Merged(total, fan.unavailable_shards, fan.status)


# -- children and the tree -----------------------------------------------------------------------
# Which of a moved run's rows says where it is: any status but these (the run lives there), then
# the staged copy (between the cutover and its activation), last the source's seal.
_HOME_RANK = {"MIGRATING": 1, "MIGRATED": 2}
# The states a child filter takes (the CLI over SQL and GET /workflows/{id}/children alike).
CHILD_STATUSES = (*EXECUTION_STATUSES, *_HOME_RANK)


def _check_children_args(status: str | None, depth: int) -> str | None:
    if status is not None and status.upper() not in CHILD_STATUSES:
        raise InvalidArgument(
            f'unknown status "{status}": use RUNNING, PAUSED, COMPLETED, FAILED, CANCELLED, TERMINATED, '
            "TIMED_OUT, CONTINUED_AS_NEW, MIGRATING or MIGRATED"
        )
    if not isinstance(depth, int) or not 1 <= depth <= 100:
        raise InvalidArgument(f"depth {depth} is out of range 1..100")
    return status.upper() if status is not None else None


def _descendants(
    execution_id: Any, depth: int, max_nodes: int | None = None
) -> Generator[Step, FanOut[Any], tuple[list[dict[str, Any]], set[int], set[int], bool]]:
    """Breadth first: each level asks every shard for the children of the whole level before
    (a child may live on any shard), so a tree of depth d costs d rounds of one query per shard.
    A run that moved has a row on each shard it passed through: its home's row is kept (a live
    row over the staged copy over the seal, _HOME_RANK), whatever order the shards answered in.
    ``max_nodes``: keep at most that many runs, every level whole before the next; the level
    that fills it keeps its first parents' children (the level before's order, each parent's
    newest first), and no shard is asked for more rows than can be kept, plus one to tell
    whether there were more. Returns (rows with shard_id and depth, the shards unavailable in
    some round, the shards that answered every round, whether max_nodes cut the tree)."""
    frontier = [str(execution_id)]
    seen = set(frontier)
    found: list[dict[str, Any]] = []
    at: dict[str, int] = {}  # execution id -> its row's index in found
    unavailable: set[int] = set()
    answered: set[int] = set()
    for level in range(1, depth + 1):
        ids = list(frontier)
        room = None if max_nodes is None else max_nodes - len(found)
        limit = None if room is None else room + 1
        while True:
            fan = yield Step(
                lambda api, _s, ids=ids, limit=limit: api.list_children_of(ids, limit)  # type: ignore[misc]  # bound per level
            )
            unavailable |= set(fan.unavailable_shards)
            answered |= set(fan.results)
            rows = _in_level_order(_tagged(fan), ids)
            new = len({str(r["execution_id"]) for r in rows} - seen)
            shard_cut = limit is not None and any(len(r) >= limit for r in fan.results.values())
            if room is None or not shard_cut or new > room:
                break
            # A shard sent all it was asked for, but a moved run's rows (its seal and its home,
            # on two shards) took places: ask again with as many more.
            limit = cast(int, limit) + len(rows) - new
        truncated = room is not None and new > room
        frontier = []
        for row in rows:
            child = str(row["execution_id"])
            if child in at:  # a moved run: its seal and its copy, each on its shard
                if _HOME_RANK.get(row["status"], 0) < _HOME_RANK.get(found[at[child]]["status"], 0):
                    found[at[child]] = {**row, "depth": found[at[child]]["depth"]}
                continue
            if child in seen or (room is not None and len(frontier) == room):
                continue
            seen.add(child)
            at[child] = len(found)
            found.append({**row, "depth": level})
            frontier.append(child)
        if truncated:
            return found, unavailable, answered - unavailable, True
        if not frontier:
            break
    return found, unavailable, answered - unavailable, False


def _in_level_order(rows: Iterable[dict[str, Any]], parents: list[str]) -> list[dict[str, Any]]:
    """A level's rows in the order it is kept: by their parent's place in ``parents`` (the
    level before's), each parent's children newest first (created_at DESC, then id)."""
    place = {p: i for i, p in enumerate(parents)}
    ordered = _newest_first(list(rows))
    ordered.sort(key=lambda r: place.get(str(r["parent_id"]), len(place)))  # stable: keeps the above
    return ordered


def _newest_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` sorted in place in the children list's order: newest first (created_at DESC),
    then by id (the order each shard's list_children answers in)."""
    rows.sort(key=_key)
    rows.sort(key=lambda r: r["created_at"], reverse=True)
    return rows


# Where a page of children starts: after the (created_at, execution id) of the last row shown.
ChildPosition = tuple[datetime, str]

# GET /workflows/{id}/children and `harvest workflow children`: a page of at most this many
# children (the default and the cap are GET /workflows' own); the rest by next_cursor.
CHILDREN_PAGE = 50
CHILDREN_PAGE_MAX = 1000
# A page that cannot be read as a page from each shard (depth above 1: a level's children are
# found from the level before, on any shard; a MIGRATING or MIGRATED filter: a moved run's
# rows are on two shards) walks at most this many descendants, breadth first, as the tree does,
# and says when it cut (``truncated``): the runs past the walk are on no page.
CHILDREN_WALK = 1000
CHILDREN_WALK_MAX = 10_000


def _after_position(row: dict[str, Any], after: ChildPosition | None) -> bool:
    if after is None:
        return True
    at, last = after
    return row["created_at"] < at or (row["created_at"] == at and _key(row)[1] > uuid.UUID(last))


def _child_position(row: dict[str, Any]) -> ChildPosition:
    return row["created_at"], str(row["execution_id"])


def _later_child(a: ChildPosition | None, b: ChildPosition | None) -> ChildPosition | None:
    """The further along of two positions in the children's order (newest first, then id)."""
    if a is None or b is None:
        return b if a is None else a
    if a[0] != b[0]:
        return a if a[0] < b[0] else b
    return a if uuid.UUID(a[1]) > uuid.UUID(b[1]) else b


def _child_position_out(pos: ChildPosition) -> list[str]:
    return [pos[0].isoformat(), pos[1]]


def _child_position_in(value: Any) -> ChildPosition:
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, str) for v in value):
        raise ValueError("position")
    at = datetime.fromisoformat(value[0])
    if at.tzinfo is None:
        raise ValueError("naive time")
    return at, str(uuid.UUID(value[1]))


def _children_filters(status: str | None, depth: int, max_nodes: int | None) -> str:
    return _fingerprint({"status": status, "depth": depth, "max_nodes": max_nodes})


def children_place(cursor: str | None, status: str | None, depth: int, max_nodes: int | None) -> Place:
    """Where a page of children starts: the cursor's place (InvalidArgument when malformed or
    issued for another status, depth or max_nodes). A ``ch1.`` cursor (before the shards' own
    places) is its one position on every shard."""
    if cursor and cursor.startswith("ch1."):
        body = _decode_token("ch1.", cursor, "children")
        try:
            return Place(_child_position_in([body["c"], body["i"]]), {})
        except (KeyError, TypeError, ValueError):
            raise InvalidArgument(
                f"children cursor {cursor[:40]!r} is malformed: pass the next_cursor of a previous "
                "page unchanged, or no cursor for the first page"
            ) from None
    wanted = status.upper() if status is not None else None
    filters = _children_filters(wanted, depth, max_nodes)
    return Place.decode(cursor, "ch2.", "children", filters, _child_position_in)


def _children(
    execution_id: Any,
    wanted: str | None,
    depth: int,
    place: Place,
    limit: int | None,
    walk: int | None,
) -> Generator[Step, FanOut[Any], tuple[list[dict[str, Any]], FanOut[Any], bool | None]]:
    """The children after ``place``, newest first, at most ``limit`` (None: all), the shards'
    answers (which answered, which did not) and whether the walk cut (None: no page, no bound)."""
    if limit is not None and depth == 1 and wanted not in _HOME_RANK:
        # A moved run's seal (MIGRATED) and staged copy (MIGRATING) never pass a live status,
        # so each shard may filter: the rows left are the runs' homes, once each.
        fan = yield Step(
            lambda api, s: api.list_children_page(execution_id, wanted, place.position(s), limit)
        )
        rows = [{**r, "depth": 1} for r in _homes(_tagged(fan))]
        truncated: bool | None = False
    else:
        # Not a page of each shard: the walk, bounded by ``walk`` descendants (None: all).
        found, unavailable, answered, cut = yield from _descendants(execution_id, depth, walk)
        fan = FanOut.of(dict.fromkeys(answered), unavailable)
        # A page: a shard down in any round is unread for the whole page and keeps its place
        # (Place.after), so none of its rows are shown, as for a shard down for a depth-1 page:
        # the rows of a round it did answer would come again when it answers.
        shown = set(answered) if limit is not None else None
        rows = [
            r
            for r in found
            if (wanted is None or r["status"] == wanted)
            and (shown is None or r["shard_id"] in shown)
            and _after_position(r, place.position(r["shard_id"]))
        ]
        truncated = cut if walk is not None else None
    _newest_first(rows)
    return (rows if limit is None else rows[:limit]), fan, truncated


def list_children(
    execution_id: Any,
    status: str | None = None,
    depth: int = 1,
    after: ChildPosition | None = None,
    limit: int | None = None,
    max_nodes: int | None = None,
) -> Plan:
    """An execution's children (to ``depth`` levels) on every shard, newest first (created_at
    DESC, then id), each row with its ``shard_id`` and ``depth``; ``status`` filters the rows
    shown, never the walk. ``after`` and ``limit``: the first ``limit`` rows after that
    position (None, all). The direct children's rows are read as a page on each shard
    (``limit`` rows after the position, in the database: the k-way merge of the workflow list);
    a deeper list, or a MIGRATING / MIGRATED one, walks the tree, at most ``max_nodes``
    descendants when a limit is given (default CHILDREN_WALK; ``truncated`` says it cut), every
    one without (the client's whole list). :func:`page_children` is the cursor's page of it."""
    wanted = _check_children_args(status, depth)
    walk = max_nodes if max_nodes is not None else (None if limit is None else CHILDREN_WALK)
    rows, fan, truncated = yield from _children(execution_id, wanted, depth, Place(after, {}), limit, walk)
    return Merged(rows, fan.unavailable_shards, fan.status, truncated=truncated)


def page_children(
    execution_id: Any,
    status: str | None = None,
    depth: int = 1,
    page_size: int = CHILDREN_PAGE,
    cursor: str | None = None,
    max_nodes: int | None = None,
) -> Plan:
    """A page of :func:`list_children` (GET /workflows/{id}/children, `harvest workflow
    children`): ``page_size`` rows after ``cursor`` and next_cursor (``ch2.``) while there are
    more. Direct children read ``page_size + 1`` rows a shard; a deeper page walks at most
    ``max_nodes`` descendants (default CHILDREN_WALK), breadth first, and ``truncated`` says the
    walk cut. A shard that could not be read for a page (a deeper page: in any round of its
    walk) keeps its own place in the cursor (:class:`Place`, as the workflow list's shards do)
    and has none of its rows on the page: its children come on a later page when it answers,
    once, and next_cursor stays set while it does not."""
    if (
        not isinstance(page_size, int)
        or isinstance(page_size, bool)
        or not 1 <= page_size <= CHILDREN_PAGE_MAX
    ):
        raise InvalidArgument(f"page size {page_size} is out of range 1..{CHILDREN_PAGE_MAX}")
    if max_nodes is not None and (
        not isinstance(max_nodes, int)
        or isinstance(max_nodes, bool)
        or not 1 <= max_nodes <= CHILDREN_WALK_MAX
    ):
        raise InvalidArgument(f"max_nodes {max_nodes} is out of range 1..{CHILDREN_WALK_MAX}")
    wanted = _check_children_args(status, depth)
    place = children_place(cursor, status, depth, max_nodes)
    walk = max_nodes if max_nodes is not None else CHILDREN_WALK
    # One row more than the page: whether there is a next one.
    rows, fan, truncated = yield from _children(execution_id, wanted, depth, place, page_size + 1, walk)
    unread = place.unread(fan)
    page = rows[:page_size]
    next_cursor = None
    if len(rows) > page_size or unread:
        last = _child_position(page[-1]) if page else None
        next_cursor = place.after(fan, last, _later_child).encode(
            "ch2.", _children_filters(wanted, depth, max_nodes), _child_position_out
        )
    return Merged(page, unread, status_of(len(fan.results), len(unread)), next_cursor, truncated=truncated)


def _homes(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per run: a moved run's home row (_HOME_RANK) over its others."""
    kept: dict[str, dict[str, Any]] = {}
    for row in rows:
        child = str(row["execution_id"])
        if child not in kept or _HOME_RANK.get(row["status"], 0) < _HOME_RANK.get(kept[child]["status"], 0):
            kept[child] = row
    return list(kept.values())


def list_tree(execution_id: Any, depth: int = 100, max_nodes: int | None = None) -> Plan:
    """The descendants of an execution as a tree: {execution_id, children: [...], truncated},
    each node with its row (shard_id, depth); siblings newest first. ``max_nodes``: at most that
    many descendants, breadth first (``_descendants``); ``truncated`` says it cut."""
    _check_children_args(None, depth)
    if max_nodes is not None and max_nodes < 1:
        raise InvalidArgument(f"max_nodes {max_nodes} is below 1")
    found, unavailable, answered_all, truncated = yield from _descendants(execution_id, depth, max_nodes)
    answered = len(answered_all)
    nodes = {str(r["execution_id"]): {**r, "children": []} for r in found}
    root: dict[str, Any] = {"execution_id": str(execution_id), "children": [], "truncated": truncated}
    # Siblings in the children list's order (ties in created_at by id, as /children pages them).
    for r in _newest_first(list(found)):
        parent = nodes.get(str(r["parent_id"]), root)
        parent["children"].append(nodes[str(r["execution_id"])])
    return Merged(root, sorted(unavailable), status_of(answered, len(unavailable)))


# -- the API tokens (one database: the default shard) ---------------------------------------------
# GET /admin/tokens and `harvest token list`: at most this many tokens a page (revoked ones are
# kept for good: a token a tenant, rotated, piles them up); the rest by next_cursor.
TOKEN_PAGE = 100
TOKEN_PAGE_MAX = 1000
# A token's place in the list: (revoked, name, token_id) of the last row shown.
TokenPosition = tuple[bool, str, int]


def token_after(cursor: str | None, include_revoked: bool) -> TokenPosition | None:
    """The position a page of tokens starts after: the cursor's (the last row of the page
    before); InvalidArgument when malformed or issued for the other include_revoked."""
    if not cursor:
        return None
    body = _decode_token("tk1.", cursor, "token list")
    position = body.get("p")
    if (
        body.get("f") != _fingerprint({"include_revoked": bool(include_revoked)})
        or not isinstance(position, list)
        or len(position) != 3
        or not isinstance(position[0], bool)
        or not isinstance(position[1], str)
        or not isinstance(position[2], int)
        or isinstance(position[2], bool)
    ):
        raise InvalidArgument(
            f"token list cursor {cursor[:40]!r}: pass the next_cursor of a previous page unchanged, "
            "with the same include_revoked"
        )
    return position[0], position[1], position[2]


def token_page(
    rows: list[dict[str, Any]], limit: int, include_revoked: bool
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of tokens from ``limit + 1`` rows read after the position: the first ``limit``
    and the cursor of the next page (None: no more)."""
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    last = rows[-1]
    return rows, token_cursor(
        (last["revoked_at"] is not None, last["name"], last["token_id"]), include_revoked
    )


def token_cursor(position: TokenPosition, include_revoked: bool) -> str:
    """The cursor of the page of tokens after ``position``."""
    filters = _fingerprint({"include_revoked": bool(include_revoked)})
    return _encode_token("tk1.", {"p": list(position), "f": filters})


# -- lists whose ids are per shard: dead letters, the audit log, a DAG's runs ------------------
# A shard's place in such a list: the (time, id) of the last row delivered, or None (nothing
# delivered yet: from its newest). Its time as well as its id: the list is ordered by both, and
# the row itself may be gone (a dead letter replayed, discarded) when the next page asks.
ShardPosition = tuple[datetime, Any] | None
DeadLetterPosition = ShardPosition


@dataclass(frozen=True)
class ShardCursor:
    """The cursor of a list read newest first from every shard, each shard from its own
    position: one position per shard, where that shard continues, and the shards already read
    to the end. A subclass names its token's ``PREFIX``, what it pages (``WHAT``, for the
    errors) and how its ids read back (``parse_id``)."""

    positions: dict[int, ShardPosition]
    done: frozenset[int]
    filters: str

    PREFIX: ClassVar[str]
    WHAT: ClassVar[str]

    @staticmethod
    def parse_id(value: Any) -> Any:
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= ROW_ID_MAX:
            raise ValueError("id")
        return value

    def encode(self) -> str:
        def out(pos: ShardPosition) -> list[Any] | None:
            if pos is None:
                return None
            return [pos[0].astimezone(UTC).isoformat(timespec="microseconds"), pos[1]]

        return _encode_token(
            self.PREFIX,
            {
                "p": {str(s): out(p) for s, p in sorted(self.positions.items())},
                "d": sorted(self.done),
                "f": self.filters,
            },
        )

    @classmethod
    def decode(cls, token: str) -> Any:
        body = _decode_token(cls.PREFIX, token, cls.WHAT)
        try:
            positions: dict[int, ShardPosition] = {}
            for s, p in body["p"].items():
                if p is not None:
                    if not isinstance(p, list) or len(p) != 2:
                        raise ValueError("position")
                    at, id_ = datetime.fromisoformat(p[0]), cls.parse_id(p[1])
                    if at.tzinfo is None:
                        raise ValueError("position")
                    p = (at, id_)
                positions[_shard_key(s, cls.WHAT)] = p
            done = frozenset(_shard_key(s, cls.WHAT) for s in body["d"])
            if not isinstance(body["f"], str):
                raise ValueError("filters")
        except (KeyError, TypeError, ValueError, AttributeError):
            raise InvalidArgument(
                f"{cls.WHAT} cursor {token[:40]!r} is malformed: pass the next_cursor of a previous "
                "page unchanged, or no cursor for the first page"
            ) from None
        return cls(positions, done, body["f"])

    @classmethod
    def start(cls, cursor: str | None, filters: str) -> Any:
        """The cursor to read from: ``cursor`` decoded (refused when issued for other filters),
        or the first page's."""
        if not cursor:
            return cls({}, frozenset(), filters)
        state = cls.decode(cursor)
        if state.filters != filters:
            raise InvalidArgument(
                "the cursor was issued for other filters: pass the same filters as the first page, "
                "or no cursor to start again"
            )
        return state


class DeadLetterCursor(ShardCursor):
    PREFIX, WHAT = "dl2.", "dead-letter"

    @classmethod
    def decode(cls, token: str) -> Any:
        if isinstance(token, str) and token.startswith("dl1."):
            raise InvalidArgument(
                "this dead-letter cursor was made by an older version (pages by id): list from the first "
                "page again, without a cursor"
            )
        return super().decode(token)


class AuditCursor(ShardCursor):
    PREFIX, WHAT = "au1.", "audit log"


class DagRunCursor(ShardCursor):
    PREFIX, WHAT = "dr1.", "DAG run"

    @staticmethod
    def parse_id(value: Any) -> Any:
        return str(uuid.UUID(value))  # (ValueError, TypeError, AttributeError: malformed)


def _page_over_shards(
    state: ShardCursor,
    fan: Any,
    limit: int,
    ask: int,
    newest_first: Callable[[dict[str, Any]], Any],
    position: Callable[[dict[str, Any]], tuple[datetime, Any]],
    *,
    oldest_first: bool = False,
) -> Merged[list[dict[str, Any]]]:
    """One page of ``limit`` rows merged from every shard's (each asked for ``ask``, newest
    first by ``newest_first``; ``oldest_first``: the key's ascending order, as each shard read
    them), each row with its ``shard_id``, and the cursor of the next: a
    shard's position moves to the last row of it on the page; a shard that answered fewer than
    it was asked and had all of them on the page is done; a shard that could not be read keeps
    its position, so it loses nothing (next_cursor stays set while one is unread)."""
    results = fan.results
    streams = [[{**row, "shard_id": s} for row in rows] for s, rows in results.items()]
    merged = heapq.merge(*streams, key=newest_first, reverse=not oldest_first)
    page = [row for _, row in zip(range(limit), merged, strict=False)]
    positions = dict(state.positions)
    done = set(state.done)
    taken: dict[int, int] = {}
    for row in page:
        taken[row["shard_id"]] = taken.get(row["shard_id"], 0) + 1
        positions[row["shard_id"]] = position(row)
    for s, rows in results.items():
        if len(rows) < ask and taken.get(s, 0) == len(rows):
            done.add(s)
    # A shard the cursor has a position for that this process has no API for: still unread.
    asked = set(results) | set(fan.unavailable_shards)
    unavailable = sorted(
        set(fan.unavailable_shards) | {s for s in positions if s not in asked and s not in done}
    )
    more = any(s not in done for s in results) or bool(unavailable)
    next_cursor = type(state)(positions, frozenset(done), state.filters).encode() if more else None
    return Merged(page, unavailable, status_of(len(results), len(unavailable)), next_cursor)


def newest_failure_first(row: dict[str, Any]) -> tuple[Any, int, int]:
    """The sort key (reversed) of every shard's dead letters merged: newest failure first, ties by
    shard then id; each shard's list_dead_letters orders its own rows so (failed_at, id)."""
    return (row["failed_at"], -int(row["shard_id"]), int(row["id"]))


def list_dead_letters(
    limit: int = 100,
    activity_name: str | None = None,
    workflow_name: str | None = None,
    cursor: str | None = None,
    before_id: int | None = None,
) -> Plan:
    """A page of dead letters over every shard, newest failure first, each row with its
    ``shard_id`` (a dead letter is named by (shard_id, id): ids are per shard). Each shard is
    read from its own position in the cursor, so a shard unavailable for a page loses nothing:
    its rows come when it answers again. ``before_id`` (the one-shard way to page: after that
    dead letter) is refused when more than one shard is read: an id names a row of one shard
    only."""
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"limit {limit} is out of range 1..{MAX_PAGE}")
    filters = _fingerprint({"activity_name": activity_name, "workflow_name": workflow_name})
    state = DeadLetterCursor.start(cursor, filters)
    if before_id is not None and cursor:
        raise InvalidArgument("give a cursor or before_id, not both")
    ask = min(limit + 1, MAX_PAGE)

    def read(api: Any, shard: int) -> Any:
        pos = state.positions.get(shard)
        if pos is None:
            return api.list_dead_letters(ask, activity_name, workflow_name, before_id)
        return api.list_dead_letters(ask, activity_name, workflow_name, pos[1], pos[0])

    fan = yield Step(read, skip=state.done)  # a shard read to the end is not asked again
    if before_id is not None and len(fan.results) + len(fan.unavailable_shards) > 1:
        raise InvalidArgument(
            "before_id names a dead letter of one shard; with several shards, page with next_cursor"
        )
    return _page_over_shards(
        state, fan, limit, ask, newest_failure_first, lambda r: (r["failed_at"], r["id"])
    )


def list_audit_log(limit: int = 100, operation: str | None = None, cursor: str | None = None) -> Plan:
    """A page of the audit log over every shard, newest first, each row with its ``shard_id``
    (ids are per shard); paged by ``cursor`` as the dead letters are."""
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"limit {limit} is out of range 1..{MAX_PAGE}")
    state = AuditCursor.start(cursor, _fingerprint({"operation": operation}))
    ask = min(limit + 1, MAX_PAGE)

    def read(api: Any, shard: int) -> Any:
        at, id_ = state.positions.get(shard) or (None, None)
        return api.list_audit_log(ask, operation, at, id_)

    fan = yield Step(read, skip=state.done)
    return _page_over_shards(state, fan, limit, ask, newest_audit_first, lambda r: (r["at"], r["id"]))


class PendingStartCursor(ShardCursor):
    PREFIX, WHAT = "ps1.", "held-back start"


def oldest_start_first(row: dict[str, Any]) -> tuple[Any, int, int]:
    """The sort key of every shard's held-back starts merged: longest held first (created_at),
    ties by shard then id; each shard's list_pending_starts orders its own rows so (created_at, id)."""
    return (row["created_at"], int(row["shard_id"]), int(row["id"]))


def list_pending_starts(
    workflow_name: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    cursor: str | None = None,
    *,
    shard_id: int | None = None,
) -> Plan:
    """A page of the starts a throttle, debounce or batch holds back over every shard, oldest
    first, each row with its ``shard_id`` (ids are per shard) and its input's size; paged by
    ``cursor`` as the dead letters are, each shard from its own (created_at, id). ``shard_id``:
    the caller reads that shard alone (its APIs are that shard's); a filter of the cursor as the
    others are, so a cursor of every shard's list is refused there (its other shards' positions
    read as shards unavailable, and the pages never ended)."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"limit {limit} is out of range 1..{MAX_PAGE}")
    filters: dict[str, Any] = {"workflow_name": workflow_name, "kind": kind}
    if shard_id is not None:  # (absent otherwise: every shard's cursors read as they did)
        filters["shard_id"] = shard_id
    state = PendingStartCursor.start(cursor, _fingerprint(filters))
    ask = min(limit + 1, MAX_PAGE)

    def read(api: Any, shard: int) -> Any:
        at, id_ = state.positions.get(shard) or (None, None)
        return api.list_pending_starts(workflow_name, kind, ask, at, id_)

    fan = yield Step(read, skip=state.done)
    return _page_over_shards(
        state, fan, limit, ask, oldest_start_first, lambda r: (r["created_at"], r["id"]), oldest_first=True
    )


def _none_if_absent(call: Callable[[], Any], shard: int, lacking: set[int]) -> Any:
    """``call()``'s answer (a shard's read, sync or awaitable), or no rows where the shard has no
    such thing (NotFound), ``shard`` then noted in ``lacking``."""
    try:
        answer = call()
    except NotFound:
        lacking.add(shard)
        return []
    if not inspect.isawaitable(answer):
        return answer

    async def awaited() -> Any:
        try:
            return await answer
        except NotFound:
            lacking.add(shard)
            return []

    return awaited()


def list_dag_runs(
    dag_name: str, limit: int = 50, status: str | None = None, cursor: str | None = None
) -> Plan:
    """A page of one DAG's runs over every shard, newest first, each with its ``shard_id``;
    paged by ``cursor`` as the dead letters are. A DAG is registered on the shards its workers
    poll only, and each shard's ``list_dag_runs`` refuses a DAG it does not have (NotFound): such
    a shard has no runs of it, and NotFound is the answer only when every shard read lacks it
    (naming those that could not be read)."""
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"limit {limit} is out of range 1..{MAX_PAGE}")
    state = DagRunCursor.start(cursor, _fingerprint({"dag_name": dag_name, "status": status}))
    ask = min(limit + 1, MAX_PAGE)

    lacking: set[int] = set()

    def read(api: Any, shard: int) -> Any:
        at, id_ = state.positions.get(shard) or (None, None)
        return _none_if_absent(lambda: api.list_dag_runs(dag_name, ask, status, at, id_), shard, lacking)

    fan = yield Step(read, skip=state.done)
    if lacking and lacking == set(fan.results) and not state.positions:
        raise no_dag_anywhere(dag_name, fan.unavailable_shards)
    return _page_over_shards(
        state, fan, limit, ask, newest_run_first, lambda r: (r["created_at"], str(r["execution_id"]))
    )


def no_dag_anywhere(dag_name: str, unavailable: list[int]) -> NotFound:
    """A DAG no shard read has (each registers the DAGs its workers poll), judged by the shards
    read, naming those that could not be (as no_worker_anywhere): the one message of
    `dag runs` and `dag pause|unpause` over either transport."""
    missed = ", ".join(map(str, unavailable))
    where = f" (shard(s) {missed} could not be read)" if missed else ""
    return NotFound(
        f"no DAG {dag_name!r} is registered on any shard{where}; list them with harvest dag list (GET /dags)"
    )


def list_dags() -> Plan:
    """Every shard's DAGs (a shard registers those its workers poll), each row with its
    ``shard_id``, by name then shard: one DAG on two shards is two rows, each with its own pause."""
    fan = yield Step(lambda api, _s: api.list_dags())
    rows = [{**row, "shard_id": s} for s, found in fan.results.items() for row in found]
    rows.sort(key=lambda r: (r["dag_name"], r["shard_id"]))
    return Merged(rows, fan.unavailable_shards, fan.status)


# -- the readers: every plan as a method, over one mapping ----------------------------------------
# A run a lookup by workflow id prefers, best first: a RUNNING one, a live one, one that is not a
# moved run's seal (its copy on another shard answers), then the newest (created_at, id).
def _current_rank(row: dict[str, Any]) -> tuple[Any, ...]:
    status = row["status"]
    live = status in ("RUNNING", "PAUSED")
    return (
        status == "RUNNING",
        live,
        status not in ("MIGRATED", "MIGRATING"),
        row["created_at"],
        str(row["id"]),
    )


def current_run(workflow_id: str, workflow_name: str | None = None) -> Plan:
    """The current run of a workflow id (the start's idempotency key) over every shard: its
    RUNNING run, else its newest (harvest.get_execution_by_workflow_id on each shard: a pinned
    start's run is not on the id's hashed shard, and the name is optional). InvalidArgument when
    two workflows used the id and no name says which; NotFound when no shard has a run of it; a
    shard not read while no live run was found elsewhere is NoShardReached (it may hold the
    current run: never a NotFound or an older run)."""
    lacking: set[int] = set()

    def read(api: Any, shard: int) -> Any:
        return _none_if_absent(
            lambda: api.get_execution_by_workflow_id(workflow_id, workflow_name), shard, lacking
        )

    fan = yield Step(read)
    rows = [row for row in fan.results.values() if row]
    names = sorted({row["workflow_name"] for row in rows})
    if len(names) > 1:  # (each shard alone saw one: the SQL's own ambiguity, over the shards)
        raise InvalidArgument(
            f"workflow_id {workflow_id} is used by several workflows ({', '.join(names)}): "
            "name the workflow as well"
        )
    best = max(rows, key=_current_rank, default=None)
    if fan.unavailable_shards and (best is None or best["status"] not in ("RUNNING", "PAUSED")):
        missed = ", ".join(str(s) for s in fan.unavailable_shards)
        raise NoShardReached(
            f"shard(s) {missed} could not be read: the current run of workflow_id {workflow_id} "
            "may be there; retry when they are up"
        )
    if best is None:
        of = f" of workflow {workflow_name}" if workflow_name else ""
        raise NotFound(
            f"no run has workflow_id {workflow_id}{of}: check the workflow_id (and the workflow name) "
            "it was started with; a deferred start has no run until it is released"
        )
    return fan.merged(best)


PLANS: dict[str, Callable[..., Plan]] = {
    "current_run": current_run,
    "list_workflows": list_workflows,
    "count_executions": count_executions,
    "list_children": list_children,
    "page_children": page_children,
    "list_tree": list_tree,
    "count_usage": count_usage,
    "list_concurrency_keys": list_concurrency_keys,
    "list_schedules": list_schedules,
    "list_dead_letters": list_dead_letters,
    "count_dead_letters": count_dead_letters,
    "list_audit_log": list_audit_log,
    "list_pending_starts": list_pending_starts,
    "list_dag_runs": list_dag_runs,
    "list_dags": list_dags,
    "list_workers": list_workers,
    "get_worker_health": get_worker_health,
}


def sum_versions(results: Mapping[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """``count_versions`` rows of several shards: each (version, state_group) summed, with the
    sample ids of every shard (`harvest version-usage`, over SQL and over HTTP)."""
    rows: dict[tuple[Any, Any], dict[str, Any]] = {}
    for found in results.values():
        for row in found:
            into = rows.setdefault(
                (row["version"], row["state_group"]), {**row, "executions": 0, "sample_execution_ids": []}
            )
            into["executions"] += row["executions"]
            into["sample_execution_ids"] = into["sample_execution_ids"] + list(
                row["sample_execution_ids"] or []
            )
    return [rows[k] for k in sorted(rows, key=lambda k: (k[0], str(k[1])))]


class ShardReads:
    """The fan-out reads over a mapping of synchronous APIs: ``ShardReads(apis).list_workflows(...)``
    returns a :class:`Merged`. One method per entry of PLANS, with the plan's arguments;
    ``timeout`` bounds each shard, as for :class:`AsyncShardReads`."""

    def __init__(self, apis: Mapping[int, Any], *, concurrent: bool = True, timeout: float | None = None):
        self.apis, self.concurrent, self.timeout = apis, concurrent, timeout

    if TYPE_CHECKING:  # the reads of PLANS are set on the class below

        def __getattr__(self, name: str) -> Callable[..., Merged[Any]]: ...


class AsyncShardReads:
    """The same reads over async APIs (every shard at once); ``timeout`` bounds each shard."""

    def __init__(self, apis: Mapping[int, Any], *, timeout: float | None = None):
        self.apis, self.timeout = apis, timeout

    if TYPE_CHECKING:  # the reads of PLANS are set on the class below

        def __getattr__(self, name: str) -> Callable[..., Awaitable[Merged[Any]]]: ...


def _sync_method(plan: Callable[..., Plan]) -> Callable[..., Merged[Any]]:
    @functools.wraps(plan)
    def method(self: ShardReads, *args: Any, **kwargs: Any) -> Merged[Any]:
        return run(self.apis, plan(*args, **kwargs), concurrent=self.concurrent, timeout=self.timeout)

    return method


def _async_method(plan: Callable[..., Plan]) -> Callable[..., Awaitable[Merged[Any]]]:
    @functools.wraps(plan)
    async def method(self: AsyncShardReads, *args: Any, **kwargs: Any) -> Merged[Any]:
        return await run_async(self.apis, plan(*args, **kwargs), timeout=self.timeout)

    return method


for _name, _plan in PLANS.items():
    setattr(ShardReads, _name, _sync_method(_plan))
    setattr(AsyncShardReads, _name, _async_method(_plan))
del _name, _plan


def shard_errors(
    unavailable: Iterable[int], refused: Iterable[tuple[int, Exception]]
) -> list[dict[str, Any]]:
    """Every shard a write on every shard did not do, by shard: ``{"shard_id", "error":
    "unreachable"}``, or ``{"shard_id", "error": "refused", "code", "message"}`` (the code and
    message its own error would answer): the HTTP API's ``shard_errors``, and what
    harvest.record_incomplete_write records."""
    from harvest.core.errors import error_code
    from harvest.db.connection import redact

    out: list[dict[str, Any]] = [{"shard_id": s, "error": "unreachable"} for s in unavailable]
    out += [
        {"shard_id": s, "error": "refused", "code": error_code(exc), "message": redact(str(exc))}
        for s, exc in refused
    ]
    return sorted(out, key=lambda e: e["shard_id"])


# -- one dead letter by its id, with no shard named ------------------------------------------------
def holds_dead_letter(dead_letter_id: int) -> Callable[[Any], Any]:
    """A shard's read for :func:`dead_letter_home`: whether the shard holds dead letter
    ``dead_letter_id`` (its ``get_dead_letter`` answers, or is NotFound), sync or awaitable."""

    def read(api: Any) -> Any:
        try:
            answer = api.get_dead_letter(dead_letter_id)
        except NotFound:
            return False
        if not inspect.isawaitable(answer):
            return True

        async def awaited() -> bool:
            try:
                await answer
            except NotFound:
                return False
            return True

        return awaited()

    return read


def dead_letter_home(dead_letter_id: int, found: FanOut[bool]) -> int:
    """The shard of dead letter ``dead_letter_id`` from every readable shard's
    :func:`holds_dead_letter` answer, when no shard was named: ids are unique on one shard
    only, so the same id can be on several. Exactly one shard holds it: that shard. Several:
    InvalidArgument naming them (the caller names one). A shard that could not be searched:
    NoShardReached naming it (it may hold the id too: refused, never guessed, as "could
    not inspect" is never "not there"). None: NotFound naming the shards searched."""
    holders = sorted(s for s, has in found.results.items() if has)
    searched = ", ".join(str(s) for s in sorted(found.results))
    if len(holders) > 1:
        on = ", ".join(map(str, holders))
        raise InvalidArgument(
            f"dead letter {dead_letter_id} is on shards {on} (a dead letter's id is unique on its shard "
            f"only): name one with --shard-id (shard_id); dlq list shows each row's shard_id"
        )
    if found.unavailable_shards:
        missed = ", ".join(str(s) for s in found.unavailable_shards)
        held = f"it is on shard {holders[0]}, and " if holders else ""
        why = "; ".join(f"shard {s}: {r}" for s, r in sorted(found.reasons.items()))
        raise NoShardReached(
            f"dead letter {dead_letter_id}: {held}shard(s) {missed} could not be searched and may hold "
            "the same id; nothing was done: retry when they are up, or name the shard with --shard-id "
            "(shard_id)",
            why or None,
        )
    if not holders:
        raise NotFound(f"no dead letter {dead_letter_id} on any shard (searched shard(s) {searched})")
    return holders[0]
