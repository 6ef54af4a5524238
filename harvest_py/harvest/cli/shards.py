"""The CLI's one door to every shard: where the pools come from (:func:`cli_pools`), the fan-out
seam (:func:`shard_apis`), the database of an id-routed command (:func:`routed_call`,
:func:`routed_read`, which follow a moved run's forwarding pointer; :func:`shard_api`), the
client (:func:`cli_client`), and reading and printing a fan-out read (harvest/shard/fanout.py,
docs/sharding.md "Fan-out reads" and "Routing").

Without a ``[shards]`` section (and no ``HARVEST_SHARDS__*``) every command keeps its one
database (``--database-url``, ``HARVEST_DATABASE_URL``, ``database_url``) on one connection, as
before. With one, every command reads its shards through pools built here, and nowhere else:
shard 0 on that same database URL unless ``shards.urls`` names it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

import click

from harvest.cli.http import HttpApi, HttpClient, HttpReads, HttpSettings, PerShard, http_session
from harvest.cli.output import cli_config, cli_dsn, emit, sql_api
from harvest.cli.output import selected as http_selected
from harvest.config import Config, shard_pools, shards_configured
from harvest.core.errors import DatabaseUnavailable, HarvestError, InvalidArgument, WrongShard
from harvest.shard.fanout import (
    PARTIAL,
    UNAVAILABLE,
    FanOut,
    Merged,
    ShardReads,
    fan_out,
    is_shard_failure,
    shard_errors,
)

# The database driver is imported when a command reads a shard, never for its --help
# (tests/unit/test_startup.py).
if TYPE_CHECKING:
    from harvest.db.connection import DatabaseError
    from harvest.db.sqlapi import SqlApi

# How long a command waits for a shard (its connection, and each fan-out answer) before it
# counts the shard unavailable, unless shards.cli_timeout (HARVEST_SHARDS__CLI_TIMEOUT) says.
CLI_ACQUIRE_SECS = 5.0


def cli_timeout(config: Config) -> float:
    """``shards.cli_timeout`` (seconds), default :data:`CLI_ACQUIRE_SECS`."""
    value = config.get("shards.cli_timeout")
    return CLI_ACQUIRE_SECS if value is None else float(value)


@contextlib.contextmanager
def cli_pools(config: Config, database_url: str | None = None) -> Iterator[Any]:
    """The ShardPools of this command (``[shards]``; shard 0 on ``database_url`` unless
    ``shards.urls`` names it), closed when the command ends. The only place the CLI builds
    pools."""
    # close_timeout: a shard that hangs (accepts, never answers) must not hold the exit either;
    # fail_fast: one whose server refuses is named at once, not after shards.cli_timeout.
    with shard_pools(
        config,
        database_url,
        max_size=2,
        acquire_timeout=cli_timeout(config),
        close_timeout=0.5,
        fail_fast=True,
    ) as pools:
        yield pools


@contextlib.contextmanager
def _pooled_api(pools: Any, shard: int, *, read_only: bool) -> Iterator[SqlApi]:
    from harvest.db.sqlapi import SqlApi, translated_errors

    with pools.connection(shard) as conn, translated_errors():
        if not read_only:
            yield SqlApi(conn)
            return
        with conn.transaction():
            conn.execute("SET TRANSACTION READ ONLY")  # a read-only command cannot write by accident
            yield SqlApi(conn)


@contextlib.contextmanager
def shard_apis(config: Config, database_url: str | None = None) -> Iterator[Mapping[int, Any]]:
    """Shard number -> API provider (an API, or a zero-argument callable returning a context
    manager that yields one), for the fan-out reads.

    THE SEAM. One database (no ``[shards]``): shard 0 on one read-only connection opened here
    (a database that cannot be reached fails the command with its own message). Shards: one
    read-only provider per readable shard over :func:`cli_pools`, each connecting when read,
    so a shard that cannot be reached (or has no url) is named unavailable, not fatal."""
    with _providers(config, database_url, read_only=True) as apis:
        yield apis


@contextlib.contextmanager
def shard_writers(config: Config, database_url: str | None = None) -> Iterator[Mapping[int, Any]]:
    """:func:`shard_apis` for a command that writes on every shard (``worker drain``): the same
    mapping, each provider a writable connection (one database: one autocommit connection)."""
    with _providers(config, database_url, read_only=False) as apis:
        yield apis


@contextlib.contextmanager
def _providers(config: Config, database_url: str | None, *, read_only: bool) -> Iterator[Mapping[int, Any]]:
    if not shards_configured(config):
        with sql_api(database_url, read_only=read_only) as sql:
            yield {0: sql}
        return
    with cli_pools(config, database_url) as pools:
        yield {
            s: functools.partial(_pooled_api, pools, s, read_only=read_only) for s in pools.router.readable
        }


@contextlib.contextmanager
def open_shards(database_url: str | None) -> Iterator[tuple[dict[int, Any], list[int]]]:
    """Every readable shard's SQL API, each connected now and held until the block ends (what a
    command that goes from shard to shard while it writes needs), and the shards that could
    not be reached. One database (no ``[shards]``): that database as shard 0, its errors as
    before."""
    with contextlib.ExitStack() as stack:
        apis = stack.enter_context(shard_apis(cli_config(), database_url))
        opened: dict[int, Any] = {}
        unavailable: list[int] = []
        for s, provider in sorted(apis.items()):
            try:
                opened[s] = stack.enter_context(cast(Any, provider)()) if callable(provider) else provider
            except Exception as exc:
                if not is_shard_failure(exc):
                    raise
                unavailable.append(s)
        yield opened, unavailable


def each_shard(
    database_url: str | None,
    read: Callable[[Any], Any],
    *,
    read_only: bool = True,
    none_is_error: bool = True,
    refusals_apart: bool = False,
    incomplete: Callable[[Any, list[dict[str, Any]]], Any] | None = None,
) -> FanOut[Any]:
    """``read(api)`` on every shard (one database: on it alone, its errors as before), each
    shard bounded by ``shards.cli_timeout``. No shard answering is DatabaseUnavailable (unless
    ``none_is_error`` is False); the caller decides what a partial answer means for it.
    ``refusals_apart``: a shard's refusal goes to the answer's ``refused`` (for
    :func:`fail_if_refused`), not raised; the caller must then report it. ``incomplete(api,
    shard_errors)``: over SQL, on each shard that took a write that missed others."""
    return deployment_read(
        database_url,
        read,
        read_only=read_only,
        none_is_error=none_is_error,
        refusals_apart=refusals_apart,
        incomplete=incomplete,
    )[1]


def deployment_read(
    database_url: str | None,
    read: Callable[[Any], Any],
    one: Callable[[Any], Any] | None = None,
    *,
    read_only: bool = True,
    none_is_error: bool = True,
    refusals_apart: bool = False,
    incomplete: Callable[[Any, list[dict[str, Any]]], Any] | None = None,
) -> tuple[bool, FanOut[Any]]:
    """(whether the deployment is sharded, :func:`each_shard`'s answers). Sharded: over SQL a
    ``[shards]`` configuration, over HTTP a server that answered per shard (a
    :class:`PerShard`), so a command prints the same form over either transport. ``one``: the
    call on one database, and over HTTP (where the server fans out itself), when it differs
    from ``read`` (default: ``read``)."""
    settings = http_selected(database_url)
    if settings is not None:
        with _http_api(settings, None) as api:
            value = (one or read)(api)
        if isinstance(value, PerShard):  # the route answered for every shard of the server
            fan = FanOut.of(value.results, value.unavailable)
            if value.status is not None:
                fan.status = value.status
            fan.refused = list(value.refused)
            fan.reasons = dict(value.reasons)
            return value.sharded, fan
        return False, FanOut.of({0: value}, ())
    config = cli_config()
    opened = shard_apis if read_only else shard_writers
    with opened(config, database_url) as apis:
        if not shards_configured(config):
            return False, FanOut.of({0: (one or read)(apis[0])}, ())
        kept = functools.partial(_refusal_kept, read) if refusals_apart else read
        fan = fan_out(apis, kept, timeout=cli_timeout(config))
        if none_is_error:
            _require_some(fan.status, fan.unavailable_shards)
        if not refusals_apart:
            return True, fan
        # A write: one shard's refusal is that shard's outcome, not the command's (the others are
        # written all the same, at once): kept apart for fail_if_refused, as the server does.
        done = FanOut.of(
            {s: r for s, r in fan.results.items() if not isinstance(r, _Refusal)}, fan.unavailable_shards
        )
        done.refused = [(s, r.error) for s, r in fan.results.items() if isinstance(r, _Refusal)]
        if incomplete is not None and done.results and (done.refused or done.unavailable_shards):
            missed = shard_errors(done.unavailable_shards, done.refused)
            # Best effort: the command names the missed shards and exits 1 all the same.
            fan_out(
                apis,
                functools.partial(_refusal_kept, lambda api: incomplete(api, missed)),
                shards=list(done.results),
                timeout=cli_timeout(config),
            )
    return True, done


def _refusals() -> tuple[type[HarvestError] | type[DatabaseError], ...]:
    """What a shard may refuse with: a HarvestError, or a database error once the driver is
    loaded (none can be raised before: a command over HTTP never loads it)."""
    if "psycopg" not in sys.modules:
        return (HarvestError,)
    from harvest.db.connection import DatabaseError

    return (HarvestError, DatabaseError)


@dataclasses.dataclass(frozen=True)
class _Refusal:
    error: HarvestError


def _refusal_kept(read: Callable[[Any], Any], api: Any) -> Any:
    """``read(api)``, a refusal (a HarvestError that is not an outage, or a database error:
    :func:`_as_refusal`) answered as a value."""
    try:
        return read(api)
    except _refusals() as exc:
        if is_shard_failure(exc):
            raise
        return _Refusal(_as_refusal(exc))


def _as_refusal(exc: HarvestError | DatabaseError) -> HarvestError:
    """A shard's refusal as a HarvestError: a database error with no Harvest class (that shard's
    schema behind: the function missing there) as the management API answers it, so one shard's
    is never the whole command's (harvest.db.connection.database_refusal)."""
    if isinstance(exc, HarvestError):
        return exc
    from harvest.db.connection import database_refusal

    return database_refusal(exc)


def _require_some(status: str, unavailable: list[int]) -> None:
    if status == UNAVAILABLE:
        shards = ", ".join(str(s) for s in unavailable)
        raise DatabaseUnavailable(
            f"no shard could be read (shard(s) {shards} unreachable); retry when one is up"
        )


@contextlib.contextmanager
def _http_api(settings: HttpSettings, shard: int | None) -> Iterator[Any]:
    with http_session(settings) as http:
        yield HttpApi(http, shard)


def _check_identity(sql: SqlApi, shard: int) -> None:
    found = sql.get_shard_id()
    if found != shard:
        raise WrongShard(
            f"--shard-id {shard}: this database is shard {found}; point --database-url at shard "
            f"{shard}'s database, or configure [shards]",
            shard,
            found,
        )


@contextlib.contextmanager
def shard_api(database_url: str | None, shard: int | None, *, read_only: bool) -> Iterator[SqlApi]:
    """The SQL API on one shard's database: ``shard`` (None: the default shard), for what is
    addressed by a number that is only unique per shard (a dead letter's id). One database
    (no ``[shards]``): that database, which must be ``shard`` when one is given. Over HTTP: the
    routes, with ``shard_id`` sent."""
    settings = http_selected(database_url)
    if settings is not None:
        with _http_api(settings, shard) as api:
            yield api
        return
    config = cli_config()
    if not shards_configured(config):
        with sql_api(database_url, read_only=read_only) as sql:
            if shard is not None:
                _check_identity(sql, shard)
            yield sql
        return
    with cli_pools(config, database_url) as pools:
        target = pools.router.default if shard is None else shard
        if target not in pools.router.readable:
            raise InvalidArgument(f"--shard-id {target} is not a shard of this deployment")
        with _pooled_api(pools, target, read_only=read_only) as sql:
            yield sql


@contextlib.contextmanager
def dead_letter_api(
    database_url: str | None, shard: int | None, dead_letter_id: int, *, read_only: bool
) -> Iterator[tuple[Any, int | None]]:
    """(the SQL API on the shard of dead letter ``dead_letter_id``, that shard) for `dlq get`,
    `replay` and `discard`. ``shard`` given: that shard (:func:`shard_api`). None with
    ``[shards]``: every readable shard is searched for the id (ids are unique per shard only)
    and the one that holds it is used; several holding it, one that could not be searched, or
    none is refused (harvest.shard.fanout.dead_letter_home), nothing done. One database: that
    database (shard None). Over HTTP the server searches: the shard is its answer's
    (``answered_shard`` of the API after the call), None here."""
    settings = http_selected(database_url)
    config = cli_config() if settings is None else None
    if shard is not None or config is None or not shards_configured(config):
        with shard_api(database_url, shard, read_only=read_only) as sql:
            yield sql, shard
        return
    from harvest.shard.fanout import dead_letter_home, holds_dead_letter

    with cli_pools(config, database_url) as pools:
        apis = {s: functools.partial(_pooled_api, pools, s, read_only=True) for s in pools.router.readable}
        found = fan_out(apis, holds_dead_letter(dead_letter_id), timeout=cli_timeout(config))
        home = dead_letter_home(dead_letter_id, found)
        with _pooled_api(pools, home, read_only=read_only) as sql:
            yield sql, home


def routed_call(
    database_url: str | None, execution_id: str, fn: Callable[[SqlApi], Any], *, read_only: bool = False
) -> Any:
    """``fn(sql)`` on the database of the shard ``execution_id`` lives on (one database: that
    database, as before): the shard its id carries first, then the forwarding pointer of a run a
    rebalance moved (a seal refuses every write with HR013, ExecutionMigrated naming the shard),
    each attempt on a fresh connection (read-only commands in a read-only transaction). A shard
    with no url, or down, is ShardUnavailable (exit 1), never another shard's database."""
    return _routed(database_url, execution_id, lambda sql, sharded: fn(sql), read_only)


def routed_read(
    database_url: str | None,
    execution_id: str,
    fn: Callable[[SqlApi, Callable[[dict[str, Any]], dict[str, Any]]], Any],
) -> Any:
    """:func:`routed_call` for a read, in a read-only transaction: ``fn(sql, resident)``, where
    ``resident(row)`` passes a row read by id (status, migrated_to_shard) and, over shards,
    raises ExecutionMigrated for a seal, so the read is made again where the run lives. Over
    one database a seal reads as it is."""
    return _routed(
        database_url,
        execution_id,
        lambda sql, sharded: fn(sql, lambda row: _resident(sql, execution_id, row, sharded)),
        True,
    )


def _routed(
    database_url: str | None, execution_id: str, fn: Callable[[SqlApi, bool], Any], read_only: bool
) -> Any:
    settings = http_selected(database_url)
    if settings is not None:  # the server routes it (and follows a moved run)
        with _http_api(settings, None) as api:
            return fn(api, False)
    config = cli_config()
    if not shards_configured(config):
        with sql_api(database_url, read_only=read_only) as sql:
            return fn(sql, False)
    with cli_pools(config, database_url) as pools:
        try:
            pools.router.route(execution_id)
        except ValueError:
            raise InvalidArgument(f"{execution_id!r} is not an execution id (a UUID)") from None

        def attempt(shard: int) -> Any:
            with _pooled_api(pools, shard, read_only=read_only) as sql:
                return fn(sql, True)

        return pools.follow(execution_id, attempt)


def _resident(sql: SqlApi, execution_id: str, row: dict[str, Any], sharded: bool) -> dict[str, Any]:
    if sharded and row.get("status") in ("MIGRATED", "MIGRATING"):
        from harvest.client.routing import resident  # the client: only for a moved execution

        # A row without the pointer (the stack) has its residence read, on a seal only.
        resident(row if "migrated_to_shard" in row else sql.get_residence(execution_id), True)
    return row


@contextlib.contextmanager
def cli_client(database_url: str | None, payloads: Any = None) -> Iterator[Any]:
    """A Client for this command: ``Client(dsn)`` for one database, ``Client(shards=...)`` over
    :func:`cli_pools` with ``[shards]`` (placement, and every call routed by its id).
    ``payloads``: the codecs and store of an App given by ``--app`` (harvest.cli.payloads), to
    encode what the command writes and decode what it reads (over HTTP, decoded here)."""
    from harvest.client import Client

    settings = http_selected(database_url)
    if settings is not None:
        with http_session(settings) as http:
            yield HttpClient(http, payloads)
        return
    config = cli_config()
    if not shards_configured(config):
        with Client(cli_dsn(database_url), codecs=payloads) as client:
            yield client
        return
    with cli_pools(config, database_url) as pools, Client(shards=pools, codecs=payloads) as client:
        yield client


def run_handle(client: Any, execution_id: str) -> Any:
    """The handle of the run a command's EXECUTION_ID names, on :func:`cli_client`'s client. Not
    ``Client.get_handle``'s: its NotFound tells a Python caller to try
    ``get_handle(workflow_id=...)``, no advice at a shell prompt (the database's own hint names
    the lookup by workflow id, as the HTTP API's 404 does)."""
    from harvest.client import Client, WorkflowHandle

    if isinstance(client, Client):
        return WorkflowHandle(client, execution_id, "")
    return client.get_handle(execution_id)


def read_shards(database_url: str | None, read: Callable[[ShardReads], Merged[Any]]) -> Merged[Any]:
    """``read`` over every shard. No shard answering is an error (exit code of
    DatabaseUnavailable); some answering is a partial answer, printed with a warning. Over
    HTTP the server fans out: the route's answer is the same Merged. Its ``sharded`` (whether a
    table shows each row's shard) is over HTTP the server's word (an older server's silence:
    this config's), over SQL this config's [shards]."""
    settings = http_selected(database_url)
    if settings is not None:
        with http_session(settings) as http:
            merged = read(HttpReads(http))  # type: ignore[arg-type]
        _require_some(merged.status, merged.unavailable_shards)
        if merged.sharded is None:
            merged.sharded = shards_configured(cli_config())
        return merged
    config = cli_config()
    with shard_apis(config, database_url) as apis:
        merged = read(ShardReads(apis, timeout=cli_timeout(config) if shards_configured(config) else None))
    _require_some(merged.status, merged.unavailable_shards)
    merged.sharded = shards_configured(config)
    return merged


def warn_partial(merged: Merged[Any]) -> None:
    """The one-line warning on stderr for a partial answer (stdout stays the answer)."""
    if merged.status == PARTIAL:
        shards = ", ".join(str(s) for s in merged.unavailable_shards)
        # Why (a refused login is not a server down), as `harvest shard health` says it.
        why = "; ".join(f"shard {s}: {r}" for s, r in sorted(merged.reasons.items()))
        click.echo(
            f"warning: partial: shard(s) {shards} could not be read{f' ({why})' if why else ''}; "
            "the output holds the other shards only",
            err=True,
        )


def fail_if_unreached(unavailable: list[int], what: str) -> None:
    """A write on every shard that missed some: name them on stderr (``what`` says what that
    left undone, e.g. "were not drained") and exit 1, so a script sees it; nothing otherwise."""
    if unavailable:
        shards = ", ".join(str(s) for s in unavailable)
        click.echo(
            f"error: shard(s) {shards} could not be reached and {what}; run it again when they are up",
            err=True,
        )
        raise SystemExit(1)


@dataclasses.dataclass
class InTurn:
    """What a write made shard by shard (:func:`in_turn`) left: each shard's answer, the shards
    that could not be reached, and the refusals, each with its shard."""

    results: dict[int, Any] = dataclasses.field(default_factory=dict)
    unavailable: list[int] = dataclasses.field(default_factory=list)
    refused: list[tuple[int, HarvestError]] = dataclasses.field(default_factory=list)


def in_turn(apis: Mapping[int, Any], shards: Iterable[int], call: Callable[[int, Any], Any]) -> InTurn:
    """``call(shard, api)`` on each of ``shards``, one after the other, each to its end (a write
    that may take many batches: no shard is cut off by shards.cli_timeout). A shard that cannot
    be reached and a shard that refuses (a HarvestError that is not an outage: not configured
    there, permission denied there) are both noted, and the next shard is done all the same:
    one shard's refusal never leaves the others undone. :func:`fail_if_refused` reports them."""
    done = InTurn()
    for shard in shards:
        try:
            fan = fan_out(apis, functools.partial(call, shard), shards=[shard], concurrent=False)
        except _refusals() as exc:
            done.refused.append((shard, _as_refusal(exc)))
            continue
        done.results.update(fan.results)
        done.unavailable.extend(fan.unavailable_shards)
    return done


def fail_if_refused_over_http(answer: dict[str, Any], emit_done: Callable[[], None]) -> None:
    """:func:`fail_if_refused` for a write a server made on every shard: its refusals
    (``shard_errors``) printed and raised as over SQL, after what the other shards did."""
    from harvest.cli.http import shard_refusals

    refused = shard_refusals(answer)
    done = InTurn(
        {int(r["shard_id"]): r for r in answer.get("shards") or []},
        list(answer.get("unavailable_shards") or []),
        refused,
    )
    fail_if_refused(done, emit_done)


def fail_if_refused(done: InTurn, emit_done: Callable[[], None]) -> None:
    """After :func:`in_turn`, when a shard refused: what the other shards did printed
    (``emit_done``, when any did anything), then every refusal named with its shard (and the
    shards not reached), raised as the first refusal, whose class sets the exit code; nothing
    otherwise."""
    if not done.refused:
        return
    if done.results:
        emit_done()
    from harvest.cli.http import raise_refusals

    raise_refusals(done.refused, done.unavailable)


def report_shard_write(done: InTurn, emit_done: Callable[[], None], what: str) -> None:
    """How every write on every shard ends, over SQL or over HTTP: a shard that refused, what
    the others did printed and every refusal named, raised as the first (its exit code,
    :func:`fail_if_refused`); else what was done printed, and the shards not reached named on
    stderr (``what`` says what that left undone), exit 1 (:func:`fail_if_unreached`). A write
    made on some shards only never exits 0."""
    fail_if_refused(done, emit_done)
    emit_done()
    fail_if_unreached(done.unavailable, what)


def with_page_footer(text: str, rows: list[Any], noun: str, merged: Merged[Any]) -> str:
    """A page's table and its footer: how many ``noun`` it shows and, when there is a next page,
    how to ask for it (JSON carries next_cursor itself)."""
    footer = f"{len(rows)} {noun}"
    if merged.next_cursor:
        footer += f"; next page: --cursor {merged.next_cursor}"
    return f"{text}\n{footer}"


def emit_merged(
    merged: Merged[Any], key: str | None, output: str, render: Callable[[Any], str], *, warn: bool = True
) -> None:
    """JSON: the value under ``key`` with status and unavailable_shards (next_cursor when
    paginated), or, with ``key`` None, the value's own keys plus those two; table: render(value)
    and, when partial, the warning. Partial exits 0: a read that shows what it could is an answer.
    ``warn`` False: a write's answer, whose shards not reached its own error names
    (:func:`fail_if_unreached`): they were not written, not "not read"."""
    if output == "json":
        if key is None:
            data = {**merged.value, "status": merged.status, "unavailable_shards": merged.unavailable_shards}
        else:
            data = merged.envelope(key)
        emit(data, output, render)
    else:
        emit(merged.value, output, render)
    if warn:
        warn_partial(merged)


@contextlib.contextmanager
def each_shard_in_turn(
    database_url: str | None, *, read_only: bool
) -> Iterator[tuple[list[int], Any, Any, Any]]:
    """(the shards, on_shard, follow, is_outage) of a write made shard by shard over SQL
    (harvest.client.batch.run_batch): one database as shard 0, or every readable shard of
    ``[shards]``, each call on a connection of its own, ``follow`` acting on a run where it
    lives (the forwarding pointer of a moved run followed, as :func:`routed_call`)."""
    config = cli_config()
    if not shards_configured(config):
        with sql_api(database_url, read_only=read_only) as sql:
            yield [0], lambda shard, fn: fn(sql), lambda execution_id, fn: (0, fn(sql)), lambda exc: False
        return
    with cli_pools(config, database_url) as pools:

        def on_shard(shard: int, fn: Any) -> Any:
            with _pooled_api(pools, shard, read_only=read_only) as sql:
                return fn(sql)

        def follow(execution_id: str, fn: Any) -> tuple[int, Any]:
            return cast(
                "tuple[int, Any]", pools.follow(execution_id, lambda shard: (shard, on_shard(shard, fn)))
            )

        yield sorted(pools.router.readable), on_shard, follow, is_shard_failure
