"""Cancel, terminate, signal, pause, resume or reset the runs a filter selects, on every shard
(docs/operations.md, "Acting on many runs"): the batch executor the CLI, the HTTP route and
``Client.act_on_workflows`` share.

The SQL does the work a bounded step at a time (harvest.cancel_workflows, terminate_workflows,
signal_workflows, pause_workflows, resume_workflows: at most ``limit`` runs a call, each in a
subtransaction, continued by a keyset cursor; functions/executions.sql). Here: every shard's steps,
one after the other, and the runs a step names as moved (a rebalance sealed them since the scan, or
their copy is still being moved) acted on where they live, following the forwarding pointer as
every per-id write does: the id of a moved run still carries its origin shard, and a cancel sent
there would meet the seal, not the run. A shard that cannot be reached is named in the answer
(``unavailable_shards``), never skipped in silence.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from harvest.core import jsonb
from harvest.core.batches import BATCH_STEP as BATCH_STEP  # (re-exported: the step's one value)
from harvest.core.batches import BATCH_STEP_MAX as BATCH_STEP_MAX
from harvest.core.errors import InvalidArgument
from harvest.core.stepper import Do, Flow, adriven, driven

ACTIONS = ("cancel", "terminate", "signal", "pause", "resume", "reset")
# Failures listed in a summary (each is counted in failed all the same).
FAILURES_SHOWN = 100
# The HTTP cursor's prefix (a batch's position on every shard, and its id).
CURSOR_PREFIX = "wb1."
FILTER_KEYS = (
    "state",
    "workflow_name",
    "search_attributes",
    "created_after",
    "created_before",
    "filter",
    "workflow_id",
    "failing",
)


class StepKeywords(TypedDict):
    """A step's keyword arguments: SqlApi.act_on_workflows's (bar execution_ids, a moved run's:
    :func:`by_id`), the HTTP route's body fields of the same names; the clients build one
    with :func:`step_keywords`. The one list of them: :data:`STEP_KEYS`."""

    state: str | None
    workflow_name: str | None
    search_attributes: list[str]
    created_after: Any
    created_before: Any
    filter: str | None
    workflow_id: str | None
    failing: bool | None
    reason: str | None
    signal_name: str | None
    payload: Any
    cursor: str | None
    limit: int
    dry_run: bool
    operator_id: str | None
    batch_id: str | None
    reset_to: str
    before: Any
    signal_reapply: str


STEP_KEYS: tuple[str, ...] = tuple(StepKeywords.__annotations__)
# A step's keywords besides its filters (its options: :func:`step_arguments`).
OPTION_KEYS: tuple[str, ...] = tuple(k for k in STEP_KEYS if k not in FILTER_KEYS)


def step_keywords(arguments: Mapping[str, Any]) -> StepKeywords:
    """A batch's first step, from the arguments of ``Client.act_on_workflows`` or
    ``AsyncClient.act_on_workflows`` by their names (its ``locals()`` before it defines any):
    the one builder of both clients' steps."""
    return StepKeywords(
        state=arguments["state"],
        workflow_name=arguments["workflow_name"],
        search_attributes=list(arguments["search_attributes"] or ()),  # (None too, as before: filters_of)
        created_after=arguments["created_after"],
        created_before=arguments["created_before"],
        filter=arguments["filter"],
        workflow_id=arguments["workflow_id"],
        failing=arguments["failing"],
        reason=arguments["reason"],
        signal_name=arguments["signal_name"],
        payload=arguments["payload"],
        cursor=None,
        limit=arguments["batch_size"],
        dry_run=arguments["dry_run"],
        operator_id=arguments["operator_id"],
        batch_id=arguments["batch_id"],
        reset_to=arguments["reset_to"],
        before=arguments["before"],
        signal_reapply=arguments["signal_reapply"],
    )


def check_action(action: str) -> None:
    if action not in ACTIONS:
        raise InvalidArgument(f"unknown batch action {action!r}: use one of {', '.join(ACTIONS)}")


# A batch reset's points (harvest.reset_workflows' p_reset_to; docs/operations.md, "Resetting many
# runs"): before_time, the last valid boundary written before ``before`` (the bad deploy's time),
# and first_workflow_task.
RESET_POINTS = ("before_time", "first_workflow_task")


def reset_point_problem(reset_to: str | None, before: Any, dry_run: bool = False) -> str | None:
    """What is wrong with a batch reset's point and its time (the field is ``before``), as the SQL
    says it (HR001; a dry run, a count, needs no time); None when nothing: the CLI, the HTTP route
    and the dashboard ask first."""
    if reset_to not in RESET_POINTS:
        return f"unknown reset point {reset_to!r}: use {' or '.join(RESET_POINTS)}"
    if reset_to == "before_time" and before in (None, "") and not dry_run:
        return "the reset point before_time needs a time: the bad deploy's (e.g. 2026-05-03T14:00:00Z)"
    if reset_to == "first_workflow_task" and before not in (None, ""):
        return "a time is only for the reset point before_time: leave it out, or use before_time"
    return None


@dataclass
class ShardTally:
    """What a batch did on one shard (moved runs count where they were acted on)."""

    shard_id: int
    matched: int = 0
    acted: int = 0
    already_ended: int = 0
    unchanged: int = 0
    failed: int = 0
    followed: int = 0
    forks_kept: int = 0  # (a reset's: of unchanged, forks left at their own fork boundary)

    def as_dict(self, action: str | None = None) -> dict[str, Any]:
        """The shard's row; forks_kept only in a reset's (``action``), as the SQL answers it."""
        out = dict(self.__dict__)
        if action != "reset":
            del out["forks_kept"]
        return out


@dataclass
class BatchTally:
    """A batch's summary, step by step: :meth:`add` takes a step's answer and says which runs
    it named as moved, :meth:`add_followed` takes the answer of one acted on at its residence."""

    action: str
    dry_run: bool = False
    batch_id: str | None = None
    shards: dict[int, ShardTally] = field(default_factory=dict)
    unavailable: dict[int, str] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    sample: list[str] = field(default_factory=list)
    acted_ids: set[str] = field(default_factory=set)
    # A reset's dry run: each sampled run's point (event_id, at) or why it has none (why), with its shard
    points: list[dict[str, Any]] = field(default_factory=list)
    unplaced_failures: int = 0  # moved runs whose shard could not be told

    def _shard(self, shard: int) -> ShardTally:
        return self.shards.setdefault(shard, ShardTally(shard))

    def add(self, shard: int, answer: dict[str, Any]) -> list[str]:
        """A step's answer on ``shard``; the ids it named as moved, for the caller to follow."""
        self.batch_id = self.batch_id or answer.get("batch_id")
        tally = self._shard(shard)
        tally.matched += int(answer.get("matched") or 0)
        if answer.get("dry_run"):
            self.sample += [str(i) for i in answer.get("execution_ids") or []]
            self.points += [{**p, "shard_id": shard} for p in answer.get("points") or []]
            return []
        self._count(shard, tally, answer)
        return [str(i) for i in answer.get("moved") or [] if str(i) not in self.acted_ids]

    def add_followed(self, shard: int, answer: dict[str, Any]) -> None:
        """The answer of a moved run acted on at ``shard``, where it lives."""
        tally = self._shard(shard)
        tally.followed += 1
        self._count(shard, tally, answer)

    def followed_failed(self, execution_id: str, shard: int | None, error: str, code: str | None) -> None:
        """A moved run that could not be reached where it lives (``shard``: where it was sought,
        when the error names one)."""
        if shard is not None:
            self._shard(shard).failed += 1
        else:
            self.unplaced_failures += 1
        self._failure({"execution_id": execution_id, "shard_id": shard, "sqlstate": code, "error": error})

    def _count(self, shard: int, tally: ShardTally, answer: dict[str, Any]) -> None:
        acted = [str(i) for i in answer.get("execution_ids") or []]
        fresh = [i for i in acted if i not in self.acted_ids]
        self.acted_ids.update(fresh)
        tally.acted += len(fresh)
        tally.unchanged += int(answer.get("unchanged") or 0) + len(acted) - len(fresh)
        tally.already_ended += int(answer.get("already_ended") or 0)
        tally.forks_kept += int(answer.get("forks_kept") or 0)
        for failure in answer.get("failures") or []:
            tally.failed += 1
            self._failure({**failure, "shard_id": shard})

    def _failure(self, failure: dict[str, Any]) -> None:
        if len(self.failures) < FAILURES_SHOWN:
            self.failures.append(failure)

    def absorb(self, summary: dict[str, Any]) -> None:
        """Another summary of this batch (an HTTP request's, :meth:`as_dict`) added to this one."""
        self.batch_id = self.batch_id or summary.get("batch_id")
        for row in summary.get("shards") or []:
            tally = self._shard(int(row["shard_id"]))
            for key in ("matched", "acted", "already_ended", "unchanged", "failed", "followed", "forks_kept"):
                setattr(tally, key, getattr(tally, key) + int(row.get(key) or 0))
        for failure in summary.get("failures") or []:
            self._failure(failure)
        self.sample += [str(i) for i in summary.get("execution_ids") or []]
        self.points += [p for p in summary.get("points") or [] if isinstance(p, dict)]
        errors = {int(e["shard_id"]): str(e.get("error")) for e in summary.get("shard_errors") or []}
        self.unavailable = {
            int(s): errors.get(int(s), "unreachable") for s in summary.get("unavailable_shards") or []
        }

    def unreachable(self, shard: int, reason: str) -> None:
        self.unavailable[shard] = reason

    def total(self, key: str) -> int:
        extra = self.unplaced_failures if key == "failed" else 0
        return extra + sum(int(getattr(t, key)) for t in self.shards.values())

    def as_dict(self) -> dict[str, Any]:
        """The summary every face answers (the CLI's JSON, the HTTP route's body)."""
        out: dict[str, Any] = {
            "action": self.action,
            "dry_run": self.dry_run,
            "batch_id": self.batch_id,
            **{k: self.total(k) for k in ("matched", "acted", "already_ended", "unchanged", "failed")},
            "failures": self.failures,
            "shards": [self.shards[s].as_dict(self.action) for s in sorted(self.shards)],
            "unavailable_shards": sorted(self.unavailable),
            "shard_errors": [{"shard_id": s, "error": r} for s, r in sorted(self.unavailable.items())],
            "status": "partial" if self.unavailable else "complete",
        }
        if self.action == "reset":  # (of unchanged: forks left at their own fork boundary)
            out["forks_kept"] = self.total("forks_kept")
        if self.dry_run:
            out["execution_ids"] = self.sample
            if self.action == "reset":  # (each sampled run's point, or why it has none)
                out["points"] = self.points
        return out


def filters_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """A batch's filters among ``values`` (a client's arguments, a request's body), by the names
    of FILTER_KEYS; search_attributes a list."""
    filters = {k: values.get(k) for k in FILTER_KEYS}
    filters["search_attributes"] = list(filters["search_attributes"] or ())
    return filters


def options_of(step: Mapping[str, Any]) -> dict[str, Any]:
    """A batch's options among ``step`` (:class:`StepKeywords`), by the names of OPTION_KEYS."""
    return {k: step.get(k) for k in OPTION_KEYS}


def step_arguments(filters: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``SqlApi.act_on_workflows`` for a batch's filters and options."""
    return {**{k: filters.get(k) for k in FILTER_KEYS}, **options}


def _start(
    action: str, filters: Mapping[str, Any], dry_run: bool, batch_id: str | None, options: Mapping[str, Any]
) -> tuple[BatchTally, dict[str, Any]]:
    """A batch's tally and the arguments of each of its steps."""
    check_action(action)
    if action == "reset" and (
        problem := reset_point_problem(options.get("reset_to"), options.get("before"), dry_run)
    ):
        raise InvalidArgument(problem)
    tally = BatchTally(action, dry_run, batch_id or str(uuid.uuid4()))
    return tally, step_arguments(filters, {**options, "dry_run": dry_run, "batch_id": tally.batch_id})


def by_id(arguments: Mapping[str, Any], execution_id: str) -> dict[str, Any]:
    """The arguments of the step that acts on one moved run, where it lives."""
    return {**arguments, "limit": 1, "execution_ids": [execution_id], "cursor": None}


def follow_failed(
    tally: BatchTally,
    execution_id: str,
    exc: Exception,
    is_outage: Callable[[BaseException], bool],
    text: str,
) -> None:
    """A moved run that could not be acted on where it lives: a failure of the batch (an outage or
    a refusal); anything else is raised."""
    from harvest.core.errors import HarvestError

    if not (is_outage(exc) or isinstance(exc, HarvestError)):
        raise exc
    tally.followed_failed(execution_id, getattr(exc, "shard", None), text, _code(exc))


def _follow_moved(
    tally: BatchTally,
    shard: int,
    answer: dict[str, Any],
    follow: Callable[[str, Callable[[Any], Any]], Any],
    action: str,
    arguments: Mapping[str, Any],
    is_outage: Callable[[BaseException], bool],
    failure_text: Callable[[BaseException], str],
) -> Flow[None]:
    """A step's answer on ``shard`` added to ``tally``, and each run it named as moved acted on
    where it lives (``follow``), or counted as failed there."""
    for moved in tally.add(shard, answer):
        try:
            found = yield Do(functools.partial(follow, moved, _acting(action, by_id(arguments, moved))))
        except Exception as exc:
            follow_failed(tally, moved, exc, is_outage, failure_text(exc))
            continue
        tally.add_followed(*found)


def step_each_shard(
    positions: Mapping[int, str | None],
    on_shard: Callable[[int, Callable[[Any], Any]], Any],
    follow: Callable[[str, Callable[[Any], Any]], Any],
    action: str,
    arguments: Mapping[str, Any],
    tally: BatchTally,
    *,
    is_outage: Callable[[BaseException], bool] = lambda exc: False,
    failure_text: Callable[[BaseException], str] = str,
) -> Flow[dict[int, str | None]]:
    """One bounded step of a batch on each shard of ``positions`` (shard -> its SQL cursor, None
    from its start), added to ``tally``, its moved runs acted on where they live through
    ``follow`` (-> (its shard, the answer)); the positions still to go on (a shard not done, or
    one ``is_outage`` says could not be reached, which keeps its place). ``arguments``:
    :func:`step_arguments`'s, the batch id's included. The flow of every face: the whole batch
    (:func:`batch_flow`) steps each shard to its end with it; a face that answers one step a
    request (the HTTP route, the dashboard: :func:`astep_each_shard`) makes its next_cursor of
    what this answers (:func:`encode_cursor`). ``on_shard(shard, fn)`` and ``follow`` make the
    call ``fn(sql)`` (a sync or an asyncio SQL API: :func:`harvest.core.stepper.drive`,
    ``adrive``)."""
    dry_run = bool(arguments.get("dry_run"))
    after: dict[int, str | None] = {}
    for shard, position in sorted(positions.items()):
        try:
            answer = yield Do(
                functools.partial(on_shard, shard, _acting(action, {**arguments, "cursor": position}))
            )
        except Exception as exc:
            if not is_outage(exc):
                raise
            tally.unreachable(shard, failure_text(exc))
            after[shard] = position  # (a later step goes on there)
            continue
        yield from _follow_moved(tally, shard, answer, follow, action, arguments, is_outage, failure_text)
        if answer.get("next_cursor") and not dry_run:
            after[shard] = answer["next_cursor"]
    return after


def batch_flow(
    shards: Iterable[int],
    on_shard: Callable[[int, Callable[[Any], Any]], Any],
    follow: Callable[[str, Callable[[Any], Any]], Any],
    action: str,
    filters: Mapping[str, Any],
    *,
    dry_run: bool = False,
    batch_id: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    is_outage: Callable[[BaseException], bool] = lambda exc: False,
    failure_text: Callable[[BaseException], str] = str,
    **options: Any,
) -> Flow[BatchTally]:
    """The batch on every shard of ``shards``, one after the other, each to its end: steps of
    ``limit`` runs (one transaction each, :func:`step_each_shard`) through ``on_shard(shard,
    fn)``, the moved runs each acted on through ``follow(execution_id, fn)`` (-> (its shard, fn's
    answer)). A shard whose outage ``is_outage`` recognises is named in the tally and the next
    shard done all the same; any other error is the caller's (a refused filter, a missing
    permission). ``progress(shard, matched so far)`` after each step. A dry run makes one step a
    shard (the count and a sample). ``options``: reason, signal_name, payload, limit, operator_id
    (SqlApi.act_on_workflows). :func:`run_batch` drives it, :func:`arun_batch` under asyncio."""
    tally, arguments = _start(action, filters, dry_run, batch_id, options)
    for shard in shards:
        positions: dict[int, str | None] = {shard: None}
        while positions:
            positions = yield from step_each_shard(
                positions,
                on_shard,
                follow,
                action,
                arguments,
                tally,
                is_outage=is_outage,
                failure_text=failure_text,
            )
            if shard in tally.unavailable:
                break  # (named in the tally; the next shard is done all the same)
            if progress is not None:
                progress(shard, tally.shards[shard].matched)
    return tally


# :func:`batch_flow` (its arguments) driven: each call made as it comes (``Client``, the CLI), or
# awaited (``AsyncClient``).
run_batch = driven(batch_flow)
arun_batch = adriven(batch_flow)


def _acting(action: str, arguments: Mapping[str, Any]) -> Callable[[Any], Any]:
    """The call of one step (``sql.act_on_workflows``) with these arguments, for a face's runner."""
    return lambda sql: sql.act_on_workflows(action, **arguments)


# :func:`step_each_shard` under asyncio: the HTTP route's and the dashboard's request.
astep_each_shard = adriven(step_each_shard)


def shard_outage(sharded: bool) -> Callable[[BaseException], bool]:
    """The ``is_outage`` of a face over ``sharded`` databases: a shard that could not be reached
    (harvest.shard.fanout.is_shard_failure); on one database, none (its error is the caller's)."""
    from harvest.shard.fanout import is_shard_failure

    return is_shard_failure if sharded else (lambda exc: False)


async def astep_request(
    positions: Mapping[int, str | None],
    tally: BatchTally,
    arguments: Mapping[str, Any],
    *,
    on_shard: Callable[[int, Callable[[Any], Any]], Any],
    routed: Callable[[str, Callable[[Any], Any]], Awaitable[Mapping[str, Any]]],
    sharded: bool,
    unreachable: str,
    detail: Callable[[BaseException], str] = str,
) -> dict[int, str | None]:
    """One step of ``tally``'s batch for a face that answers a step a request (the HTTP route,
    the dashboard): :func:`astep_each_shard` with a moved run acted on through ``routed(execution_id,
    fn)`` (fn's answer, its ``shard_id`` where it lives), a shard's outage (:func:`shard_outage`)
    named ``unreachable`` in the tally, and a moved run's other failure told by ``detail``."""
    is_outage = shard_outage(sharded)

    async def follow(execution_id: str, fn: Callable[[Any], Any]) -> tuple[int, Any]:
        found = await routed(execution_id, fn)
        return int(found.get("shard_id") or 0), found

    return await astep_each_shard(
        positions,
        on_shard,
        follow,
        tally.action,
        arguments,
        tally,
        is_outage=is_outage,
        failure_text=lambda exc: unreachable if is_outage(exc) else detail(exc),
    )


def _code(exc: BaseException) -> str | None:
    code = getattr(exc, "sqlstate", None)
    return code if isinstance(code, str) else None


# -- the HTTP route's cursor: each shard's position and the batch's id -------------------------


def encode_cursor(batch_id: str, positions: Mapping[int, str | None]) -> str:
    """The next_cursor of a batch request: every shard still to go on, with its SQL cursor (None:
    from its start), and the batch id (so a signal reaches a run once however often it is found)."""
    body = json.dumps({"b": batch_id, "p": {str(s): c for s, c in positions.items()}}, separators=(",", ":"))
    return CURSOR_PREFIX + base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def decode_cursor(token: str) -> tuple[str, dict[int, str | None]]:
    """(batch id, shard -> SQL cursor) of :func:`encode_cursor`; InvalidArgument naming the cursor
    for a token this route did not make."""
    try:
        if not token.startswith(CURSOR_PREFIX):
            raise ValueError(token)
        raw = token[len(CURSOR_PREFIX) :]
        body = jsonb.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        batch, positions = body["b"], body["p"]
        if not isinstance(batch, str) or not isinstance(positions, dict):
            raise ValueError(token)
        out: dict[int, str | None] = {}
        for shard, position in positions.items():
            if position is not None and not isinstance(position, str):
                raise ValueError(token)
            out[int(shard)] = position
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidArgument("cursor: not a next_cursor of this route: pass it unchanged") from None
    return batch, out
