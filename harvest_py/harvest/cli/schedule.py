"""`harvest schedule create-workflow|list|get|pause|resume|trigger|update|delete|backfill`
(functions/schedules.sql, docs/schedules.md).

A schedule is addressed by its name. On a sharded deployment it lives on its home shard (the
router's choice from its name, ``ShardRouter.schedule_home``, where a declared one lives too):
every command by name goes there (``--shard-id`` overrides), and ``list`` reads every shard.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.decorators import FC

from harvest.cli.output import (
    ISO_TIME,
    cli_config,
    database_url_option,
    emit,
    mapping,
    operator_id_option,
    output_option,
)
from harvest.cli.output import sql_api as _sql_api
from harvest.cli.output import table as _table
from harvest.cli.shards import _pooled_api, cli_pools, emit_merged, read_shards, with_page_footer
from harvest.cli.workflow import read_json_option
from harvest.client.schedules import backfill as backfill_schedule
from harvest.client.schedules import firing_failures, schedule_refusal_for
from harvest.config import shards_configured
from harvest.core.errors import InvalidArgument, NotFound, ScheduleAlreadyExists, UnknownWorkflow
from harvest.declare import schedules
from harvest.declare.schedules import (
    MAX_ACTIVE_RUNS,
    OVERLAP_POLICIES,
    listed_schedule,
    schedule_view,
)
from harvest.declare.schedules import describe_row as _when
from harvest.shard.fanout import MAX_PAGE, SCHEDULE_PAGE

if TYPE_CHECKING:  # (the driver: not for `harvest schedule --help`)
    from harvest.db.sqlapi import SqlApi

T = TypeVar("T")
UPCOMING = 5  # next fire times `get` shows

LIST_COLUMNS = [
    "name",
    "kind",
    "workflow_name",
    "when",
    "paused",
    "next_fire_at",
    "next_fire",  # the scheduler's stored slot (scheduled, overdue) or computed: listed_schedule
    "last_slot_at",
    "missed_slots",
    "active_runs",
]
GET_KEYS = [
    "name",
    "kind",
    "workflow_name",
    "queue",
    "when",
    "args",
    "max_active_runs",
    "overlap",
    "catchup",
    "catchup_window_secs",
    "jitter_secs",
    "paused",
    "paused_note",
    "declared",
    "next_fire_times",
    "problem",
    "last_slot_at",
    "missed_slots",
    "active_runs",
    "buffered",
]

overlap_choice = click.Choice(OVERLAP_POLICIES)


@contextlib.contextmanager
def _schedule_api(
    database_url: str | None, name: str, shard: int | None, *, read_only: bool
) -> Iterator[SqlApi]:
    """The SQL API on the database that holds schedule ``name``: the one database, or its home
    shard (``shard`` to name another). Over HTTP: the schedule routes (the server finds its home)."""
    from harvest.cli.http import HttpApi, http_session
    from harvest.cli.output import selected

    settings = selected(database_url)
    if settings is not None:
        with http_session(settings) as http, _cli_refusal_hints(name):
            yield HttpApi(http, shard)  # type: ignore[misc]
        return
    config = cli_config()
    if not shards_configured(config):
        with _sql_api(database_url, read_only=read_only) as sql, _cli_refusal_hints(name):
            yield sql
        return
    with cli_pools(config, database_url) as pools, _cli_refusal_hints(name):
        target = pools.router.schedule_home(name) if shard is None else shard
        if target not in pools.router.readable:
            raise InvalidArgument(f"--shard-id {target} is not a shard of this deployment")
        with _pooled_api(pools, target, read_only=read_only) as sql:
            yield sql


@contextlib.contextmanager
def _cli_refusal_hints(name: str) -> Iterator[None]:
    """The server's refusals that say what to do name its routes (PATCH, DELETE, GET
    /admin/schedules); from the CLI they name the commands, in the words of the SQL's
    (create_schedule's HR014, get_schedule's HR002), and a workflow not registered (HR010)
    --allow-unregistered, whichever transport (harvest.client.schedules.schedule_refusal_for)."""
    try:
        yield
    except (UnknownWorkflow, ScheduleAlreadyExists, NotFound) as exc:
        said = schedule_refusal_for(exc, name, "cli")
        if said is exc:
            raise
        raise said from None


def _option(name: str) -> str:
    """A schedule field as this command spells it: catchup_window -> --catchup-window."""
    return "--" + name.replace("_", "-")


def _checked(check: Callable[..., T], *args: Any) -> T:
    """A shared rule's answer (harvest.declare.schedules), its refusal naming the option: two
    options given together a usage error, a bad value the rule's own (both exit 2)."""
    try:
        return check(*args, spell=_option)
    except InvalidArgument as exc:
        if getattr(exc, "usage", False):
            raise click.UsageError(str(exc)) from None
        raise


def _input(input_json: str | None, input_file: str | None, args_json: str | None) -> list[Any] | None:
    """The run's arguments: its one argument from --input-json or --input-file (- for stdin; a
    JSON null given is an argument, [None]), or the JSON array of --args-json; None: not given.
    Both, or --args-json not an array: a usage error (exit 2)."""
    if args_json is not None:
        if input_json is not None or input_file is not None:
            raise click.UsageError(
                "give --input-json/--input-file (the run's one argument) or --args-json (its arguments), "
                "not both"
            )
        given = read_json_option(args_json, None, "args")
        if not isinstance(given, list):
            raise click.UsageError(
                f"--args-json: expected a JSON array of the run's arguments, got {json.dumps(given)[:60]} "
                "(one argument: --input-json)"
            )
        return given
    if input_json is None and input_file is None:
        return None
    return [read_json_option(input_json, input_file, "input")]


# The options create-workflow and update share, in their order: each one's declarations, what
# both give it, then create-workflow's default and help, then update's (its defaults None: an
# option not given keeps what the schedule has).
_SPEC_OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any], dict[str, Any], dict[str, Any]], ...] = (
    (
        ("--workflow", "workflow_name"),
        {"default": None},
        {"help": "The workflow to start (default: --name)."},
        {},
    ),
    (
        ("--cron",),
        {"default": None},
        {"help": "A cron expression: 5 fields, 6 with seconds first, or @daily..."},
        {},
    ),
    (("--every",), {"default": None}, {"help": "An interval instead of a cron: 15m, 1h, 30s."}, {}),
    (
        ("--tz",),
        {"default": None},
        {"help": "The cron's IANA time zone (default UTC)."},
        {"help": "With --cron: its time zone."},
    ),
    (("--input-json",), {"default": None}, {"help": "The run's one argument, as JSON (null too)."}, {}),
    (
        ("--input-file",),
        {"default": None, "help": "Read the argument's JSON from a file (- for stdin)."},
        {},
        {},
    ),
    (
        ("--args-json",),
        {"default": None, "help": "The run's arguments, as a JSON array (not with --input-json)."},
        {},
        {},
    ),
    (
        ("--queue",),
        {"default": None},
        {
            "help": "Default: the served App's declared queue (over HTTP), else the queue its workers "
            "registered it on, else default."
        },
        {},
    ),
    (
        ("--max-active-runs",),
        {"type": click.IntRange(1, MAX_ACTIVE_RUNS)},
        {"default": 1, "show_default": True},
        {"default": None},
    ),
    (("--overlap",), {"type": overlap_choice}, {"default": "skip", "show_default": True}, {"default": None}),
    (
        ("--catchup/--no-catchup",),
        {"default": None},
        {"help": "Replay missed slots (a year back) after downtime."},
        {},
    ),
    (
        ("--catchup-window",),
        {"default": None},
        {"help": "Replay missed slots up to this far back (6h, 2d)."},
        {},
    ),
    (
        ("--jitter",),
        {},
        {"default": "0", "help": "Delay each firing by a stable random part of this (30s)."},
        {"default": None},
    ),
)


def _spec_options(*, create: bool) -> Callable[[FC], FC]:
    """The schedule's options create-workflow and update both take (_SPEC_OPTIONS), each
    command's defaults and help."""

    def add(f: FC) -> FC:
        for decls, both, created, updated in reversed(_SPEC_OPTIONS):
            f = click.option(*decls, **both, **(created if create else updated))(f)
        return f

    return add


@click.group()
def schedule() -> None:
    """Workflows started on a cron or an interval (docs/schedules.md)."""


def _allow_unregistered_option(f: FC) -> FC:
    return click.option(
        "--allow-unregistered",
        is_flag=True,
        help="Keep it though no worker registered its workflow (its queue's workers registered others) "
        "or its DAG: it fires once one does (a schedule made before the deploy that brings it).",
    )(f)


@schedule.command("create-workflow")
@click.option("--name", required=True, help="The schedule's name (runs are sched:NAME:UNIX_TS).")
@_spec_options(create=True)
@click.option("--kind", default="workflow", show_default=True, type=click.Choice(["workflow", "dag"]))
@click.option("--paused", is_flag=True, help="Create it paused.")
@_allow_unregistered_option
@operator_id_option
@database_url_option
@output_option
def create_workflow(
    name: str,
    workflow_name: str | None,
    cron: str | None,
    every: str | None,
    tz: str | None,
    input_json: str | None,
    input_file: str | None,
    args_json: str | None,
    queue: str | None,
    max_active_runs: int,
    overlap: str,
    catchup: bool | None,
    catchup_window: str | None,
    jitter: str,
    kind: str,
    paused: bool,
    allow_unregistered: bool,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Create a workflow schedule (refused when its workflow, or its DAG with --kind dag, is not
    registered where the database can tell: --allow-unregistered keeps it)."""
    timing = _checked(schedules.timing, cron, every, tz)
    if not timing:
        raise click.UsageError("give --cron or --every")
    # (read before connecting: a bad file holds no connection)
    run_input = _input(input_json, input_file, args_json)
    with _schedule_api(database_url, name, None, read_only=False) as sql:
        data = sql.create_schedule(
            name,
            workflow_name or name,
            input=run_input,
            max_active_runs=max_active_runs,
            overlap=overlap,
            jitter_secs=_checked(schedules.jitter_secs, jitter),
            kind=kind,
            paused=paused,
            operator_id=operator,
            **({"allow_unregistered": True} if allow_unregistered else {}),
            **timing,
            **_checked(schedules.catchup_options, catchup, catchup_window),
            **({} if queue is None else {"queue": queue}),  # none: the server's App decides
        )
    _emit_schedule(data, output)


@schedule.command("list")
@click.option("--kind", default=None, type=click.Choice(["workflow", "dag"]), help="Only this kind.")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_PAGE),
    default=SCHEDULE_PAGE,
    show_default=True,
    help="Schedules at most on this page.",
)
@click.option("--cursor", default=None, help="next_cursor from the previous page (every shard).")
@click.option(
    "--paused/--running",
    "paused",
    default=None,
    help="Only paused schedules, or only running (not paused) ones (default: both).",
)
@database_url_option
@output_option
def list_(
    kind: str | None,
    limit: int,
    cursor: str | None,
    paused: bool | None,
    database_url: str | None,
    output: str,
) -> None:
    """List the schedules by name, DAG and workflow kinds together (every shard): a page of
    --limit, the next with --cursor (and the same filters)."""
    merged = read_shards(database_url, lambda reads: reads.list_schedules(kind, limit, cursor, paused))
    sharded = bool(merged.sharded)  # the shard column on a sharded deployment (read_shards)
    merged.value = [
        {
            **({"shard_id": row["shard_id"]} if sharded else {}),
            **_sql_row(listed_schedule(row)),
            "when": _when(row),
        }
        for row in merged.value
    ]
    columns = (["shard_id"] if sharded else []) + LIST_COLUMNS
    emit_merged(
        merged,
        "schedules",
        output,
        lambda d: with_page_footer(_table(d, columns), d, "schedule(s)", merged),
    )


def _sql_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "shard_id"}


def _emit_schedule(data: dict[str, Any], output: str) -> None:
    data = {**schedule_view(data, UPCOMING), "when": _when(data)}

    def render(d: dict[str, Any]) -> str:
        parts = [mapping(d, [k for k in GET_KEYS if k in d])]
        if d.get("firings"):
            parts.append(
                "last firings:\n"
                + _table(
                    d["firings"], ["slot_at", "origin", "status", "reason", "execution_id", "run_status"]
                )
            )
        if d.get("misses"):
            parts.append(
                "missed:\n"
                + _table(d["misses"], ["first_slot_at", "last_slot_at", "slots", "reason", "recorded_at"])
            )
        return "\n\n".join(parts)

    emit(data, output, render)


def _shard_option(f: FC) -> FC:
    return click.option(
        "--shard-id",
        "shard",
        type=int,
        default=None,
        help="The shard that holds it (default: its home shard).",
    )(f)


@schedule.command("get")
@click.argument("name")
@click.option(
    "--limit", default=20, show_default=True, type=click.IntRange(1, 1000), help="Firings and misses."
)
@_shard_option
@database_url_option
@output_option
def get(name: str, limit: int, shard: int | None, database_url: str | None, output: str) -> None:
    """Show a schedule: next fire times, last firings with run ids and outcomes, misses."""
    with _schedule_api(database_url, name, shard, read_only=True) as sql:
        data = sql.get_schedule(name, limit)
    _emit_schedule(data, output)


@schedule.command("pause")
@click.argument("name")
@click.option("--note", default=None, help="Why (shown by get).")
@_shard_option
@operator_id_option
@database_url_option
@output_option
def pause(
    name: str,
    note: str | None,
    shard: int | None,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Pause a schedule (a worker restart keeps the pause)."""
    with _schedule_api(database_url, name, shard, read_only=False) as sql:
        data = sql.pause_schedule(name, note, operator)
    _emit_schedule(data, output)


@schedule.command("resume")
@click.argument("name")
@_shard_option
@operator_id_option
@database_url_option
@output_option
def resume(name: str, shard: int | None, operator: str | None, database_url: str | None, output: str) -> None:
    """Resume a paused schedule from now (what it skipped while paused is not fired)."""
    with _schedule_api(database_url, name, shard, read_only=False) as sql:
        data = sql.resume_schedule(name, operator)
    _emit_schedule(data, output)


@schedule.command("trigger")
@click.argument("name")
@click.option("--overlap", default=None, type=overlap_choice, help="Instead of the schedule's policy.")
@_shard_option
@operator_id_option
@database_url_option
@output_option
def trigger(
    name: str,
    overlap: str | None,
    shard: int | None,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Fire a schedule now (exit 1 when its firing failed, saying why)."""
    with _schedule_api(database_url, name, shard, read_only=False) as sql:
        data = sql.trigger_schedule(name, overlap, operator)
    emit(data, output, lambda d: mapping(d))
    _fail_if_failed(name, data, "its firing failed")


def _fail_if_failed(name: str, answer: dict[str, Any], what: str) -> None:
    """A trigger's or a backfill's firing recorded failed (an unregistered workflow, a quota, ...):
    the answer is printed; say why on stderr and exit 1, so a script checking $? sees it."""
    failures = firing_failures(answer)
    if failures:
        click.echo(f"error: schedule {name}: {what}: {'; '.join(failures)}", err=True)
        raise SystemExit(1)


# update --clear: the fields it clears, each back to what create-workflow without it takes
# (harvest.web.schedule_spec.CLEARABLE, as the API's PATCH clears a field given as null).
_CLEARABLE = {"input": "input", "queue": "queue", "max-active-runs": "max_active_runs"}


@schedule.command("update")
@click.argument("name")
@_spec_options(create=False)
@click.option(
    "--clear",
    "clear",
    multiple=True,
    type=click.Choice(tuple(_CLEARABLE)),
    help="Clear a field, back to what create-workflow without it takes: input (none), queue (the "
    "served App's over HTTP, else the workflow's registered one), max-active-runs (1). Repeatable.",
)
@_allow_unregistered_option
@_shard_option
@operator_id_option
@database_url_option
@output_option
def update(
    name: str,
    workflow_name: str | None,
    cron: str | None,
    every: str | None,
    tz: str | None,
    input_json: str | None,
    input_file: str | None,
    args_json: str | None,
    queue: str | None,
    max_active_runs: int | None,
    overlap: str | None,
    catchup: bool | None,
    catchup_window: str | None,
    jitter: str | None,
    clear: tuple[str, ...],
    allow_unregistered: bool,
    shard: int | None,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Change fields of a schedule (a new cron, interval, zone or jitter counts from now)."""
    # (--cron alone: the expression, in the zone the schedule has)
    changes: dict[str, Any] = {
        **_checked(schedules.timing_changes, cron, every, tz),
        **_checked(schedules.catchup_options, catchup, catchup_window),
    }
    for key, value in (
        ("workflow_name", workflow_name),
        ("input", _input(input_json, input_file, args_json)),
        ("queue", queue),
        ("max_active_runs", max_active_runs),
        ("overlap", overlap),
        ("jitter_secs", None if jitter is None else _checked(schedules.jitter_secs, jitter)),
    ):
        if value is not None:
            changes[key] = value
    for option in clear:
        if _CLEARABLE[option] in changes:
            raise click.UsageError(f"--clear {option} and a new {option} together: give one")
        changes[_CLEARABLE[option]] = None  # (update_schedule: back to its default)
    if not changes:
        raise click.UsageError("nothing to change: give at least one option")
    with _schedule_api(database_url, name, shard, read_only=False) as sql:
        data = sql.update_schedule(name, changes, operator, allow_unregistered)
    _emit_schedule(data, output)


@schedule.command("delete")
@click.argument("name")
@_shard_option
@operator_id_option
@database_url_option
@output_option
def delete(name: str, shard: int | None, operator: str | None, database_url: str | None, output: str) -> None:
    """Delete a schedule and its firing history (its runs go on)."""
    with _schedule_api(database_url, name, shard, read_only=False) as sql:
        deleted = sql.delete_schedule(name, operator)
    if not deleted:
        # (the words get_schedule's HR002 and its hint print for the other verbs)
        raise NotFound(
            f"schedule {name!r} does not exist: harvest schedule list shows the schedules of this database"
        )
    emit({"name": name, "deleted": True}, output, lambda d: f"deleted schedule {d['name']}")


# A backfill of at least this many slots says so on stderr before it fires them (one call, no
# progress of its own: 10000 slots took 17 to 21 s on a busy two-core machine).
BACKFILL_NOTICE_SLOTS = 1000


@schedule.command("backfill")
@click.argument("name")
@click.option(
    "--from",
    "start",
    required=True,
    type=ISO_TIME,
    help="First slot time (ISO 8601, e.g. 2026-01-01T09:30+01:00; a date is UTC midnight, no offset UTC).",
)
@click.option(
    "--to",
    "end",
    required=True,
    type=ISO_TIME,
    help="Last slot time, inclusive.",
)
@click.option("--overlap", default="buffer_all", show_default=True, type=overlap_choice)
@_shard_option
@operator_id_option
@database_url_option
@output_option
def backfill(
    name: str,
    start: dt.datetime,
    end: dt.datetime,
    overlap: str,
    shard: int | None,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Fire the schedule's slots in [--from, --to] that never fired (at most 10000; exit 1 when
    a slot's firing failed, saying why)."""
    if end < start:
        raise click.UsageError("--to is before --from")

    def announce(slots: int) -> None:
        if slots >= BACKFILL_NOTICE_SLOTS:  # seconds of silence otherwise (about 1 ms a slot)
            click.echo(f"backfill: firing {slots} slots of {name} in one transaction ...", err=True)

    with _schedule_api(database_url, name, shard, read_only=False) as sql:
        data = backfill_schedule(sql, name, start, end, overlap, operator, on_slots=announce)
    emit(data, output, lambda d: mapping({k: v for k, v in d.items() if k != "failures"}))
    _fail_if_failed(name, data, f"{data.get('failed')} slot(s) failed")
