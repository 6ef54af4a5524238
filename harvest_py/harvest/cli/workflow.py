"""`harvest workflow`: start runs, read their state, and operate on them through the SQL API."""

from __future__ import annotations

import json
import math
import shlex
import sys
from datetime import datetime
from typing import Any, cast
from urllib.parse import quote

import click

from harvest.cli.output import (
    ISO_TIME,
    ROW_ID,
    SHARD_NUMBER,
    WAIT_SECS,
    AliasedOption,
    database_url_option,
    emit,
    execution_id_argument,
    mapping,
    output_file,
    output_option,
    read_input_bounded,
    selected,
    signal_reapply_option,
    table,
)
from harvest.cli.payloads import Reveal, app_option, app_write_option, signal_payload_options
from harvest.cli.shards import (
    cli_client,
    emit_merged,
    read_shards,
    routed_call,
    routed_read,
    run_handle,
    with_page_footer,
)
from harvest.client.history_export import EXPORT_PAGE_SIZE, export_chunks, resolved_in_batches
from harvest.core import jsonb
from harvest.core.codecs import describe_tree
from harvest.core.errors import InvalidArgument, TimeoutError_, failure_line, raised_at
from harvest.core.json_values import json_default
from harvest.core.payload import redact
from harvest.core.statuses import LIVE_STATUSES
from harvest.core.text import escape_controls
from harvest.shard.fanout import CHILDREN_PAGE, CHILDREN_PAGE_MAX, CHILDREN_WALK, CHILDREN_WALK_MAX


def _finite(text: str) -> float:
    """A JSON number as a float, refused when it is too large for one (``1e999``)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a number")
    return value


def _no_constant(name: str) -> Any:
    """NaN, Infinity and -Infinity, which Python's json reads and JSON does not have."""
    raise ValueError(f"{name} is not JSON (JSON has no NaN or Infinity)")


def loads_json_option(text: str, what: str) -> Any:
    """The JSON value of option --``what``: strict JSON only, so the value reads the same on
    every transport (the HTTP client refuses to send NaN or an infinite number; so do the
    database and the payload codecs); an error names the option."""
    try:
        return jsonb.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except ValueError as exc:
        raise InvalidArgument(f"--{what}: not valid JSON ({exc})") from None


# The most a --X-file (or stdin) is read: the HTTP API's request body limit
# (harvest.web.routes.MAX_BODY_BYTES), so no value the CLI sends could be larger than a request
# carries, and a pipe with no end is refused, not read into memory for ever (a device, /dev/zero,
# is refused before any read: read_path_bounded).
MAX_JSON_FILE_BYTES = 64 * 1024 * 1024


def _read_json_file(path: str, what: str) -> str:
    """The text of --``what``-file ``path`` (- for stdin), at most MAX_JSON_FILE_BYTES, UTF-8;
    anything else one InvalidArgument naming the option and the path."""
    name = f"--{what}-file {path}"
    raw = read_input_bounded(path, MAX_JSON_FILE_BYTES, name, " (the most one request can carry)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        why = f"not UTF-8 text (byte {exc.start}: {exc.reason}); JSON is UTF-8"
        raise InvalidArgument(f"{name}: {why}") from None


def read_json_option(inline: str | None, path: str | None, what: str) -> Any:
    """--X-json TEXT or --X-file PATH (- for stdin); a parse error names the option."""
    if inline is not None and path is not None:
        raise InvalidArgument(f"give --{what}-json or --{what}-file, not both")
    text = inline if path is None else _read_json_file(path, what)
    if text is None:
        return None
    # (The error names the option that was given: --input-json, or --input-file and its path.)
    return loads_json_option(text, f"{what}-json" if path is None else f"{what}-file {path}")


def _echo(data: Any, output: str) -> None:
    text = json.dumps(data, default=json_default, indent=None if output == "json" else 2)
    click.echo(text)


@click.group()
def workflow() -> None:
    """Start workflows and inspect executions."""


@workflow.command("start")
@click.argument("name")
@click.option("--input-json", default=None, help="Arguments: a JSON array, or one JSON value.")
@click.option("--input-file", default=None, help="Read the input JSON from a file (- for stdin).")
@click.option("--workflow-id", default=None)
@click.option(
    "--queue",
    "--task-queue",
    "queue",
    cls=AliasedOption,
    default=None,
    help="Default: the served App's declared queue (over HTTP), else the queue its workers "
    "registered it on, else default.",
)
@click.option("--reuse-policy", default="allow_duplicate", show_default=True)
@click.option("--conflict-policy", default="unspecified", show_default=True)
@click.option(
    "--shard-id",
    type=SHARD_NUMBER,
    default=None,
    help="Pin the run to this shard (must be writable); not with --residency-key.",
)
@click.option(
    "--residency-key",
    default=None,
    help="Pin the run to the shard this declared key maps to ([shards.residency]).",
)
@app_write_option
@click.option("--database-url", default=None, help="Prefer HARVEST_DATABASE_URL.")
@output_option
def start(
    name: str,
    input_json: str | None,
    input_file: str | None,
    workflow_id: str | None,
    queue: str | None,
    reuse_policy: str,
    conflict_policy: str,
    shard_id: int | None,
    residency_key: str | None,
    app_target: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Start workflow NAME (or attach to its run, per the policies); its input encoded with
    --app's codecs.

    Without --shard-id or --residency-key a sharded deployment hashes NAME and the workflow id
    over the writable shards; with one, the run is placed there and the output names its
    shard_id."""
    if not name.strip():
        raise InvalidArgument("workflow name is empty: give the name a worker registers")

    value = read_json_option(input_json, input_file, "input")
    args = [] if value is None else (value if isinstance(value, list) else [value])
    reveal = Reveal(app_target)  # (each argument encoded as a Client(codecs=...) encodes it)
    with reveal.writing(), cli_client(database_url, reveal.payloads) as client:
        handle = client.start_workflow(
            name,
            *args,
            workflow_id=workflow_id,
            queue=queue,
            reuse_policy=reuse_policy,
            conflict_policy=conflict_policy,
            shard_id=shard_id,
            residency_key=residency_key,
        )
    data: dict[str, Any] = {
        "execution_id": handle.execution_id,
        "workflow_id": handle.workflow_id,
        "started_fresh": handle.started_fresh,
    }
    if shard_id is not None or residency_key is not None:
        data["shard_id"] = handle.shard_id  # only when placement was asked for, as the guide says
    deferred = handle.execution_id is None  # (a throttle, debounce or batch held it: no run yet)
    if deferred:
        data["deferred"] = True  # (as the API's 202 says it)
    _echo(data, output)
    if deferred:
        # What to follow it by: the run of its workflow id, once released (the 202's Location).
        follow = f"harvest workflow current {shlex.quote(handle.workflow_id)} --workflow {shlex.quote(name)}"
        said = f"deferred by a throttle, debounce or batch: no run yet; {follow} finds its run once released"
        click.echo(escape_controls(said), err=True)


@workflow.command("get")
@click.argument("execution_id", callback=execution_id_argument)
@app_option
@database_url_option
@output_option
def get(execution_id: str, app_target: str | None, database_url: str | None, output: str) -> None:
    """Show one execution."""
    reveal = Reveal(app_target)
    # An encoded payload shows as "<encrypted (key k2)>", or decoded by --app (docs/payloads.md).
    data = routed_read(
        database_url,
        execution_id,
        lambda sql, resident: reveal.shown(sql, resident(sql.get_execution(execution_id))),
    )
    emit(
        data,
        output,
        lambda d: mapping(d, [*RUN_FIELDS, *GET_FIELDS]),
    )


# Who a run is: what `workflow current` shows of the run it found (no payload), and the first
# lines of `workflow get` (which shows the rest, decoded with --app).
RUN_FIELDS = ["id", "workflow_name", "workflow_id", "status", "queue", "parent_id"]
RUN_FIELDS += ["created_at", "completed_at"]
GET_FIELDS = ["cancel_requested", "last_event_id", "search_attributes", "failure"]  # and the rest


@workflow.command("current")
@click.argument("workflow_id")
@click.option(
    "--workflow",
    "workflow_name",
    default=None,
    help="The workflow's name: needed when two workflows used the same workflow id.",
)
@database_url_option
@output_option
def current(workflow_id: str, workflow_name: str | None, database_url: str | None, output: str) -> None:
    """Show the current run of WORKFLOW_ID (the id a start was given): its RUNNING run, else its
    newest, looked up on every shard; an error when no run has it."""
    if not workflow_id.strip():
        raise InvalidArgument("workflow_id is empty: give the workflow id the run was started with")
    merged = read_shards(database_url, lambda reads: reads.current_run(workflow_id, workflow_name))
    row = {k: merged.value.get(k) for k in RUN_FIELDS}
    merged.value = row
    emit_merged(merged, None, output, lambda d: mapping(d, RUN_FIELDS))


# `workflow result` exit codes (docs/operations.md): 0 the run COMPLETED (its result on stdout);
# 1 it ended otherwise (failed, cancelled, terminated, timed out); 3 --timeout ran out first and
# the run is still going; 2 a bad argument, as for every command.
RESULT_NOT_COMPLETED = 1
RESULT_WAIT_TIMED_OUT = 3
# A `workflow result` given no --timeout that has waited this long says once, on stderr, why the
# run has not ended (a forgotten worker waited in silence for ever), and waits on.
RESULT_NOTE_AFTER = 5.0


@workflow.command("result")
@click.argument("execution_id", callback=execution_id_argument)
@click.option(
    "--timeout",
    "--timeout-secs",
    "timeout",
    default=None,
    type=WAIT_SECS,
    help=f"Seconds to wait (default: forever, with a note after {RESULT_NOTE_AFTER:g} s saying why "
    "it has not ended).",
)
@app_option
@click.option("--database-url", default=None)
def result(
    execution_id: str, timeout: float | None, app_target: str | None, database_url: str | None
) -> None:
    """Wait for an execution to end and print its result (decoded with --app's codecs).

    Exit 0: completed; 1: it ended without completing; 3: --timeout ran out while it still runs.
    """
    from harvest.core.errors import (
        PayloadKeyMissing,
        WorkflowCancelled,
        WorkflowFailed,
        WorkflowTerminated,
        WorkflowTimedOut,
    )

    reveal = Reveal(app_target)
    try:
        with cli_client(database_url, reveal.payloads) as client:
            value = _wait_for_result(run_handle(client, execution_id), timeout)
    except PayloadKeyMissing as exc:
        if reveal:  # the App given lacks the key: one line naming it, exit 1
            raise reveal.key_missing(exc) from None
        # Without --app the CLI holds no codec keys: it says what the result is (docs/payloads.md).
        row = routed_read(
            database_url, execution_id, lambda sql, resident: resident(sql.get_execution(execution_id))
        )
        if row.get("status") != "COMPLETED":
            # The failure's details were what it could not decode: the run still did not complete.
            # (the same line the HTTP transport's typed error prints)
            ended = WorkflowFailed(execution_id, row.get("failure") or {"error_type": row.get("status")})
            click.echo(f"error: {ended}", err=True)
            click.echo(
                f"note: its failure details are encrypted with key {exc.key_id!r}: give --app module:app "
                "to read them",
                err=True,
            )
            sys.exit(RESULT_NOT_COMPLETED)
        click.echo(
            f"note: the result is encrypted with key {exc.key_id!r} and the CLI holds no keys: give "
            f"--app module:app, an App whose AesGcmCodec holds key {exc.key_id!r} (or read it through "
            "a Client(codecs=...))",
            err=True,
        )
        value = describe_tree(row.get("output"))
    except TimeoutError_ as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(RESULT_WAIT_TIMED_OUT)
    except (WorkflowFailed, WorkflowCancelled, WorkflowTerminated, WorkflowTimedOut) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(RESULT_NOT_COMPLETED)
    _echo(value, "json")


def _wait_for_result(handle: Any, timeout: float | None) -> Any:
    """``handle.result(timeout)``. With no timeout, a run that has not ended within
    RESULT_NOTE_AFTER gets one ``note:`` line on stderr, the diagnosis a timed-out wait gives
    (no live worker polls its queue, an activity dead-lettered, ...), and the wait goes on."""
    if timeout is not None:
        return handle.result(timeout=timeout)
    try:
        return handle.result(timeout=RESULT_NOTE_AFTER)
    except TimeoutError_ as exc:
        click.echo(
            f"note: {exc}; still waiting (Ctrl-C stops the wait, not the run; --timeout bounds it)",
            err=True,
        )
    return handle.result()


@workflow.command("history")
@click.argument("execution_id", callback=execution_id_argument)
@click.option("--full", is_flag=True, help="Include payload values (input, result, payload, details).")
@app_option
@database_url_option
@output_option
def history(
    execution_id: str, full: bool, app_target: str | None, database_url: str | None, output: str
) -> None:
    """Show an execution's event history (payload values redacted unless --full)."""
    doc = _history_rows(execution_id, full, database_url, Reveal(app_target))
    if output == "json":
        click.echo(json.dumps(doc, default=json_default))
        return
    rows = [dict(e, summary=_summary(e)) for e in doc["events"]]
    click.echo(table(rows, ["event_id", "event_type", "created_at", "summary"]))


@workflow.command("terminate")
@click.argument("execution_id", callback=execution_id_argument)
@click.option("--reason", default=None)
@database_url_option
@output_option
def terminate(execution_id: str, reason: str | None, database_url: str | None, output: str) -> None:
    """End a run at once; no cleanup code runs."""
    routed_call(database_url, execution_id, lambda sql: sql.terminate_workflow(execution_id, reason))
    emit(
        {"execution_id": execution_id, "status": "TERMINATED"}, output, lambda d: f"terminated {execution_id}"
    )


# -- the operator commands (SQL API: functions/executions.sql, signals.sql) -----


def _summary(event: dict[str, Any]) -> str:
    data = event.get("event_data") or {}
    parts = [f"{k}={data[k]}" for k in ("seq", "name", "workflow_name", "signal_id", "reason") if k in data]
    failure = data.get("failure")
    if isinstance(failure, dict):
        parts.append(failure_line(failure))
        where = raised_at(failure)  # (a --full history's: the traceback is a payload)
        if where:
            parts.append(f"[raised {where}]")
    return " ".join(str(p) for p in parts)


@workflow.command("list")
@click.option(
    "--state",
    "--status",
    "state",
    default=None,
    help="RUNNING, PAUSED, COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT, "
    "CONTINUED_AS_NEW, MIGRATING, MIGRATED (comma-separated for several).",
)
@click.option("--workflow-name", default=None)
@click.option(
    "--workflow-id",
    default=None,
    help="Only the runs of this workflow id (a continue-as-new chain, a reset's forks, earlier runs that "
    "reused it); its current run: harvest workflow current.",
)
@click.option(
    "--search-attr",
    "search_attrs",
    multiple=True,
    help="key=value (or key:value), or a typed comparison key>=10, key<2026-01-01 (repeatable, AND).",
)
@click.option("--created-after", default=None, type=ISO_TIME)
@click.option("--created-before", default=None, type=ISO_TIME)
@click.option(
    "--filter",
    "filter_expr",
    default=None,
    help="An expression with AND, OR, IN and parentheses: 'tenant = acme OR (region IN (eu, us) AND "
    'amount >= 100)\' (docs/http-api.md, "Filter expressions"); ANDed with the other filters.',
)
@click.option(
    "--page-size",
    "--limit",
    "page_size",
    default=50,
    show_default=True,
    type=int,
    help="Rows per page (max 1000).",
)
@click.option("--cursor", default=None, help="next_cursor from the previous page.")
@click.option("--order", type=click.Choice(["desc", "asc"]), default="desc", show_default=True)
@click.option(
    "--failing/--not-failing",
    "failing",
    default=None,
    help="Only the runs whose workflow task is failing (a non-determinism error, a WorkflowCallError, an "
    "unknown workflow: retried every 5 s while the run stays RUNNING), or only the others "
    '(docs/failures.md, "Runs whose workflow task fails").',
)
@database_url_option
@output_option
def list_(
    state: str | None,
    workflow_name: str | None,
    workflow_id: str | None,
    search_attrs: tuple[str, ...],
    created_after: datetime | None,
    created_before: datetime | None,
    filter_expr: str | None,
    page_size: int,
    cursor: str | None,
    order: str,
    failing: bool | None,
    database_url: str | None,
    output: str,
) -> None:
    """List executions, newest first, with filters and keyset pagination, over every shard."""
    if not 1 <= page_size <= 1000:  # the SQL check's words; a huge int would not even reach it
        raise InvalidArgument(f"page size {page_size} is out of range 1..1000")
    if workflow_id == "":  # (the SQL's words: over HTTP an empty parameter is an absent one)
        raise InvalidArgument("workflow_id is empty: pass the workflow_id the runs were started with")
    merged = read_shards(
        database_url,
        lambda reads: reads.list_workflows(
            state=state,
            workflow_name=workflow_name,
            search_attributes=list(search_attrs),
            created_after=created_after,
            created_before=created_before,
            page_size=page_size,
            cursor=cursor,
            order=order,
            filter=filter_expr,
            workflow_id=workflow_id,
            **({"failing": failing} if failing is not None else {}),
        ),
    )

    shard = ["shard_id"] if merged.sharded else []  # the shard column on a sharded deployment (read_shards)

    def render(rows: list[dict[str, Any]]) -> str:
        # A run whose workflow task is failing says so in a column of its own, on a page that has one.
        task = ["task_failing"] if any(r.get("task_error_type") for r in rows) else []
        text = table(
            [{**r, "task_failing": _task_failing(r)} for r in rows] if task else rows,
            [
                *shard,
                "execution_id",
                "workflow_name",
                "workflow_id",
                "status",
                "created_at",
                "completed_at",
                *task,
            ],
            [*shard, "execution_id", "workflow", "workflow_id", "status", "created", "completed", *task],
        )
        return with_page_footer(text, rows, "execution(s)", merged)

    emit_merged(merged, "executions", output, render)


def _task_failing(row: dict[str, Any]) -> str:
    """A listed run's failing workflow task in a cell: its error type, attempt and since when."""
    if not row.get("task_error_type"):
        return ""
    since = row.get("task_failing_since")
    return f"{row['task_error_type']} (attempt {row.get('task_attempt')}" + (
        f", since {since})" if since else ")"
    )


@workflow.command("count")
@click.option(
    "--by",
    "group_by",
    type=click.Choice(["status", "workflow_name", "all"]),
    default="status",
    show_default=True,
    help="Group by status, by workflow name, or by both.",
)
@click.option("--state", "--status", "state", default=None, help="Only these states (comma-separated).")
@click.option("--workflow-name", default=None)
@click.option(
    "--search-attr", "search_attrs", multiple=True, help="As for `workflow list` (repeatable, AND)."
)
@click.option("--created-after", default=None, type=ISO_TIME)
@click.option("--created-before", default=None, type=ISO_TIME)
@click.option("--filter", "filter_expr", default=None, help="As for `workflow list`.")
@click.option("--workflow-id", default=None, help="Only the runs of this workflow id (every shard asked).")
@click.option(
    "--failing/--not-failing",
    "failing",
    default=None,
    help="As for `workflow list`.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Count at most this many runs of each status on each shard (with --by status): a status "
    "that reaches it prints N+. An exact count reads every matching run.",
)
@database_url_option
@output_option
def count(
    group_by: str,
    state: str | None,
    workflow_name: str | None,
    search_attrs: tuple[str, ...],
    created_after: datetime | None,
    created_before: datetime | None,
    filter_expr: str | None,
    workflow_id: str | None,
    failing: bool | None,
    limit: int | None,
    database_url: str | None,
    output: str,
) -> None:
    """Count executions (per status by default) over every shard, with the list's filters."""
    if workflow_id == "":  # (the SQL's words: over HTTP an empty parameter would be refused too)
        raise InvalidArgument("workflow_id is empty: pass the workflow_id the runs were started with")
    if limit is not None and group_by != "status":
        raise click.UsageError("--limit counts by status only: drop --by, or drop --limit for an exact count")
    merged = read_shards(
        database_url,
        lambda reads: reads.count_executions(
            group_by=group_by,
            state=state,
            workflow_name=workflow_name,
            search_attributes=list(search_attrs),
            created_after=created_after,
            created_before=created_before,
            filter=filter_expr,
            limit=limit,
            workflow_id=workflow_id,
            **({"failing": failing} if failing is not None else {}),
        ),
    )
    columns = {"status": ["status"], "workflow_name": ["workflow_name"], "all": ["status", "workflow_name"]}

    def render(rows: list[dict[str, Any]]) -> str:
        # A capped row (--limit) is at least its count, and so is the total.
        shown = [
            {**r, "executions": f"{r['executions']}+" if r.get("capped") else r["executions"]} for r in rows
        ]
        total = sum(r["executions"] for r in rows)
        more = "at least " if any(r.get("capped") for r in rows) else ""
        return table(shown, [*columns[group_by], "executions"]) + f"\n{more}{total} execution(s)"

    emit_merged(merged, "counts", output, render)


@workflow.command("signal")
@click.argument("execution_id", callback=execution_id_argument)
@click.argument("signal_name")
@signal_payload_options
@app_write_option
@database_url_option
@output_option
def signal(
    execution_id: str,
    signal_name: str,
    payload_json: str | None,
    payload_file: str | None,
    app_target: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Send signal SIGNAL_NAME to a running execution (its payload encoded with --app's codecs)."""
    payload = read_json_option(payload_json, payload_file, "input")
    reveal = Reveal(app_target)
    if reveal:  # sent as a Client(codecs=...) sends it: encoded, and offloaded over its threshold
        with reveal.writing(), cli_client(database_url, reveal.payloads) as client:
            receipt = client.get_handle(execution_id).signal(signal_name, payload)
    else:
        receipt = routed_call(
            database_url, execution_id, lambda sql: sql.signal_workflow(execution_id, signal_name, payload)
        )
    emit(
        {
            "execution_id": execution_id,
            "signal": signal_name,
            "event_id": int(receipt),
            "awaited": receipt.awaited,
            "awaited_signals": list(receipt.awaited_signals),
        },
        output,
        lambda d: f"signalled {execution_id}: {signal_name} (event {int(receipt)})" + _not_awaited(receipt),
    )


def _not_awaited(receipt: Any) -> str:
    """The signal line's note when the run waits for other signals than the one sent (a misspelt
    name): it is buffered, and no pending wait asks for it (SignalReceipt.not_awaited)."""
    return f"; {receipt.not_awaited}" if receipt.not_awaited else ""


@workflow.command("cancel")
@click.argument("execution_id", callback=execution_id_argument)
@click.option("--reason", default=None)
@database_url_option
@output_option
def cancel(execution_id: str, reason: str | None, database_url: str | None, output: str) -> None:
    """Ask a running execution to cancel (its code may clean up)."""
    requested = routed_call(database_url, execution_id, lambda sql: sql.cancel_workflow(execution_id, reason))
    emit(
        {"execution_id": execution_id, "cancel_requested": True, "first_request": requested},
        output,
        lambda d: f"cancel requested for {execution_id}" + ("" if requested else " (already requested)"),
    )


@workflow.command("pause")
@click.argument("execution_id", callback=execution_id_argument)
@click.option("--reason", default=None, help="Why (kept in the history and the audit log).")
@click.option("--operator-id", default=None, help="Who asks (a person, a ticket, a bot).")
@database_url_option
@output_option
def pause(
    execution_id: str, reason: str | None, operator_id: str | None, database_url: str | None, output: str
) -> None:
    """Pause a running execution: none of its work starts until it is resumed (docs/lifecycle.md)."""
    _pause_or_resume(execution_id, reason, operator_id, database_url, output, pause=True)


@workflow.command("resume")
@click.argument("execution_id", callback=execution_id_argument)
@click.option("--reason", default=None, help="Why (kept in the history and the audit log).")
@click.option("--operator-id", default=None, help="Who asks (a person, a ticket, a bot).")
@database_url_option
@output_option
def resume(
    execution_id: str, reason: str | None, operator_id: str | None, database_url: str | None, output: str
) -> None:
    """Resume a paused execution: overdue timers fire once, kept signals arrive in order."""
    _pause_or_resume(execution_id, reason, operator_id, database_url, output, pause=False)


def _pause_or_resume(
    execution_id: str,
    reason: str | None,
    operator_id: str | None,
    database_url: str | None,
    output: str,
    *,
    pause: bool,
) -> None:
    """One flip, both ways: the same answer ({execution_id, status, changed}, as the HTTP
    route's _pause_or_resume) and the same words, so a change to either is made once."""
    flip = (
        (lambda sql: sql.pause_workflow(execution_id, reason, operator_id))
        if pause
        else (lambda sql: sql.resume_workflow(execution_id, reason, operator_id))
    )
    changed = routed_call(database_url, execution_id, flip)
    if pause:
        status, done, unchanged = "PAUSED", "paused", "it was paused already"
    else:
        status, done, unchanged = "RUNNING", "resumed", "it was not paused"
    emit(
        {"execution_id": execution_id, "status": status, "changed": changed},
        output,
        lambda d: f"{done} {execution_id}" + ("" if changed else f" ({unchanged})"),
    )


# How many characters of an activity's heartbeat details `harvest workflow stack` prints on its
# line (decoded by --app they may be longer than the stack's own cap, 4096 bytes of JSON).
PROGRESS_CHARS = 200


def progress_line(activity: dict[str, Any]) -> str:
    """An activity's last heartbeat on one line: when, and its details (ctx.heartbeat(details)),
    cut at PROGRESS_CHARS; the stack's clipped details as it clipped them; redacted ones (a
    token that sees no payloads) by their size."""
    details = activity.get("heartbeat_details")
    if details is None:
        shown = "no details"
    elif isinstance(details, dict) and details.get("redacted") is True:
        # (clipped, the redacted value is the clipped string's size: the stack's is theirs)
        shown = f"details redacted ({activity.get('heartbeat_details_bytes') or details.get('bytes')} bytes)"
    elif activity.get("heartbeat_details_clipped") and isinstance(details, str):
        shown = escape_controls(details, newlines=False)  # (its first 200 characters and its size)
    else:
        text = escape_controls(json.dumps(details, default=json_default, ensure_ascii=False), newlines=False)
        shown = (
            text if len(text) <= PROGRESS_CHARS else f"{text[:PROGRESS_CHARS]}... ({len(text)} characters)"
        )
    return f"  seq {activity['seq']} last heartbeat {activity['heartbeat_at']}: {shown}"


@workflow.command("stack")
@click.argument("execution_id", callback=execution_id_argument)
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help=(
        "Entries at most in each list (activities, timers, children, awaited signals, signals, mutexes); "
        "the rest are counted."
    ),
)
@app_option
@database_url_option
@output_option
def stack(
    execution_id: str, limit: int, app_target: str | None, database_url: str | None, output: str
) -> None:
    """What an execution is waiting on now, and its last event id; each activity's last heartbeat
    (a failure's and a heartbeat's details decoded with --app's codecs)."""
    reveal = Reveal(app_target)
    # An encoded payload shows what it is, or decoded by --app (docs/payloads.md).
    data = routed_read(
        database_url,
        execution_id,
        lambda sql, resident: reveal.shown(sql, resident(sql.get_execution_stack(execution_id, limit))),
    )

    def more(d: dict[str, Any], key: str) -> list[str]:
        """The line that says how many of a list's entries --limit left out, if any."""
        left = (d.get("totals") or {}).get(key, 0) - len(d[key])
        return [f"... and {left} more (--limit up to 10000)"] if left > 0 else []

    def render(d: dict[str, Any]) -> str:
        parts = [
            mapping(
                d,
                [
                    "execution_id",
                    "workflow_name",
                    "workflow_id",
                    "status",
                    "cancel_requested",
                    "last_event_id",
                    "signals_since_last_task",
                ],
            )
        ]
        if d.get("paused"):
            paused = d["paused"]
            parts += [
                "",
                f"paused since {paused['since']}"
                + (f" by {paused['operator_id']}" if paused.get("operator_id") else "")
                + (f": {paused['reason']}" if paused.get("reason") else "")
                + " (harvest workflow resume)",
            ]
        if d.get("dead_letter"):  # the run's own (absent from a server of an older release)
            own = d["dead_letter"]
            parts += ["", f"dead letter {own['id']}: {failure_line(own)} (harvest dlq get {own['id']})"]
        if d["pending_activities"]:
            parts += [
                "",
                "activities:",
                table(
                    d["pending_activities"],
                    [
                        "seq",
                        "name",
                        "queue",
                        "status",
                        "attempt",
                        "due_at",
                        "lease_owner",
                        "lease_expires_at",
                    ],
                ),
                *more(d, "pending_activities"),
                # Why an attempt is being retried, or was parked (a killed worker's lease timed out,
                # the handler raised): the JSON's last_failure, one line an activity.
                *(
                    f"  seq {a['seq']} last failure: {failure_line(a['last_failure'])}"
                    for a in d["pending_activities"]
                    if a.get("last_failure")
                ),
                # Its progress: its last heartbeat, when and its details (ctx.heartbeat(details)),
                # one line an activity (absent from a server of an older release).
                *(progress_line(a) for a in d["pending_activities"] if a.get("heartbeat_at")),
            ]
        if d["timers"]:
            parts += ["", "timers:", table(d["timers"], ["seq", "fire_at", "status"]), *more(d, "timers")]
        if d["children"]:
            parts += [
                "",
                "children:",
                table(d["children"], ["seq", "execution_id", "workflow_name", "status"]),
                *more(d, "children"),
            ]
        if d.get("awaited_signals"):  # absent from a server of an older release
            shown = table(d["awaited_signals"], ["name", "since", "timeout_at", "timer_seq"])
            parts += ["", "awaited signals:", shown, *more(d, "awaited_signals")]
        if d.get("signals"):  # absent from a server of an older release
            shown = table(d["signals"], ["event_id", "name", "received_at"])
            parts += ["", "signals:", shown, *more(d, "signals")]
        if d.get("mutexes"):  # absent from a server of an older release
            shown = table(d["mutexes"], ["key", "status", "since", "holder_execution_id"])
            parts += ["", "mutexes:", shown, *more(d, "mutexes")]
        if d.get("workflow_task"):
            task = dict(d["workflow_task"])
            failure = task.pop("last_failure", None)
            # One line, `key value; key value`: the mapping's padding would stay between each pair.
            pairs = (" ".join(line.split(None, 1)) for line in mapping(task).splitlines())
            parts += ["", "workflow task: " + "; ".join(pairs)]
            if isinstance(failure, dict):  # why it is being retried (its details may be large or encoded)
                where = raised_at(failure)  # (decoded: --app's codecs, or none)
                said = failure_line(failure) + (f" [raised {where}]" if where else "")
                parts += [f"  last failure: {said}"]
            if task.get("live_workers") == 0 and task.get("status") == "pending":  # (absent: an older server)
                from harvest.client.client import no_poller  # (the driver: not for --help)

                parts += [f"  {no_poller(task['queue'])}"]
        waits = ("pending_activities", "timers", "children", "mutexes", "workflow_task", "awaited_signals")
        if not any(d.get(key) for key in waits):
            # A live run with nothing open awaits what only a client sends.
            awaits = "a signal, an update or a cancel (no activity, timer or child is open)"
            ended = f"nothing (the run has ended: {d['status']})"
            parts += ["", "waiting on: " + (awaits if d["status"] in LIVE_STATUSES else ended)]
        return "\n".join(parts)

    emit(data, output, render)


@workflow.command("children")
@click.argument("execution_id", callback=execution_id_argument)
@click.option(
    "--status",
    "--state",
    "state",
    default=None,
    help="Only children in this state (RUNNING, COMPLETED, FAILED, ...; case-insensitive).",
)
@click.option("--depth", default=1, show_default=True, type=click.IntRange(1, 100))
@click.option(
    "--page-size",
    "--limit",
    "page_size",
    type=click.IntRange(1, CHILDREN_PAGE_MAX),
    default=CHILDREN_PAGE,
    show_default=True,
    help="Children at most on this page.",
)
@click.option("--cursor", default=None, help="next_cursor from the previous page (every shard).")
@click.option(
    "--max-nodes",
    type=click.IntRange(1, CHILDREN_WALK_MAX),
    default=None,
    help=f"With --depth above 1: descendants walked at most (default {CHILDREN_WALK}), breadth first.",
)
@database_url_option
@output_option
def children(
    execution_id: str,
    state: str | None,
    depth: int,
    page_size: int,
    cursor: str | None,
    max_nodes: int | None,
    database_url: str | None,
    output: str,
) -> None:
    """List an execution's child workflows (to --depth levels), on every shard, newest first: a
    page of --page-size, the next with --cursor (as GET /workflows/{id}/children)."""
    merged = read_shards(
        database_url,
        lambda reads: reads.page_children(execution_id, state, depth, page_size, cursor, max_nodes),
    )

    def render(d: Any) -> str:
        text = with_page_footer(
            table(
                d,
                [
                    "execution_id",
                    "workflow_name",
                    "status",
                    "depth",
                    "shard_id",
                    "created_at",
                    "completed_at",
                    "error_summary",
                ],
            ),
            d,
            "child(ren)",
            merged,
        )
        if merged.truncated:
            text += f"\nthe walk stopped at --max-nodes (default {CHILDREN_WALK}): deeper runs are not listed"
        return text

    emit_merged(merged, "items", output, render)


def _history_rows(execution_id: str, full: bool, database_url: str | None, reveal: Reveal) -> dict[str, Any]:
    def read(sql: Any, resident: Any) -> dict[str, Any]:
        doc = {
            "execution": resident(sql.get_execution(execution_id)),
            "events": sql.get_history(execution_id),
            "redacted": not full,
        }
        # An encoded payload shows what it is, not its bytes, or decoded by --app.
        return cast("dict[str, Any]", reveal.shown(sql, doc) if full else redact(doc))

    return cast("dict[str, Any]", routed_read(database_url, execution_id, read))


def _resolved(sql: Any, value: Any, reveal: Reveal) -> Any:
    """``value`` with its offloaded payloads read back from the store (codec envelopes stay as
    they are: a full export carries payloads as stored, self-describing), or, with --app, read
    back through the App's store and decoded."""
    if reveal:
        return reveal.decoded(sql, value)
    from harvest.client.export_batch import resolved
    from harvest.db.steps import run_steps

    return run_steps(resolved(value), sql)


@click.group("history")
def history_group() -> None:
    """Export execution histories."""


@history_group.command("export")
@click.argument("execution_id", callback=execution_id_argument)
@click.option("--full", is_flag=True, help="Include payload values (the same as --payload-policy full).")
@click.option(
    "--payload-policy",
    type=click.Choice(["redacted", "full"]),
    default=None,
    help='redacted (the default: each payload value becomes {"redacted": true, "bytes": n}) or full.',
)
@click.option(
    "--output-file", "--file", "path", default="-", show_default=True, help="Write here (- for stdout)."
)
@app_option
@database_url_option
def export(
    execution_id: str,
    full: bool,
    payload_policy: str | None,
    path: str,
    app_target: str | None,
    database_url: str | None,
) -> None:
    """Export an execution and its history as one JSON document (redacted by default).

    The events stream from a server-side cursor to the output as they are read, so an
    export of any size needs no more memory than a page of events."""
    if full and payload_policy == "redacted":
        raise InvalidArgument("--full and --payload-policy redacted contradict each other: give one")
    full = full or payload_policy == "full"
    reveal = Reveal(app_target)  # (decodes a full export's payloads; a redacted one has none)

    def write(sql: Any, resident: Any) -> None:
        # The seal check comes before a byte is written: a moved run is exported where it lives.
        execution = resident(sql.get_execution(execution_id))
        events = sql.iter_history(execution_id, EXPORT_PAGE_SIZE)
        if full:  # offloaded payloads are resolved, so the file stands alone (docs/payloads.md)
            execution = _resolved(sql, execution, reveal)
            events = resolved_in_batches(
                events, lambda batch: _resolved(sql, batch, reveal), EXPORT_PAGE_SIZE
            )
        with output_file(path, private=full) as out:
            out.writelines(export_chunks(execution, events, full))

    settings = selected(database_url)
    if settings is not None:  # the same bytes, written by the route
        from harvest.cli.http import http_session

        with http_session(settings) as http:
            route = f"/workflows/{quote(execution_id, safe='')}/history/export"
            policy = {"payload_policy": "full" if full else "redacted"}
            if full and reveal:  # the route's envelopes, decoded here: the answer is held whole
                doc = reveal.decoded(None, json.loads(http.read_text(route, policy)))
                with output_file(path, private=True) as out:
                    out.writelines(export_chunks(doc["execution"], doc["events"], full))
            else:
                http.download(route, policy, lambda: output_file(path, private=full))
    else:
        routed_read(database_url, execution_id, write)
    if path != "-":
        click.echo(f"wrote {path}", err=True)


# -- queries, updates, reset and the handler catalog ------------------------------------------


@workflow.command("query")
@click.argument("execution_id", callback=execution_id_argument)
@click.argument("name")
@click.option(
    "--input-json",
    "--arg-json",
    "input_json",
    cls=AliasedOption,
    default=None,
    help="The query argument as JSON.",
)
@click.option(
    "--input-file",
    "--arg-file",
    "input_file",
    cls=AliasedOption,
    default=None,
    help="Read the argument JSON from a file (- for stdin).",
)
@click.option(
    "--timeout",
    "--timeout-secs",
    "timeout",
    default=10.0,
    show_default=True,
    type=WAIT_SECS,
    help="Seconds to wait for an answer.",
)
@app_option
@database_url_option
@output_option
def query(
    execution_id: str,
    name: str,
    input_json: str | None,
    input_file: str | None,
    timeout: float,
    app_target: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Ask a running execution's query handler NAME; a live worker answers, nothing is written."""
    arg = read_json_option(input_json, input_file, "input")
    reveal = Reveal(app_target)
    with reveal.keys_named(), cli_client(database_url, reveal.payloads) as client:
        value = run_handle(client, execution_id).query(name, arg, timeout=timeout)
    emit(
        {"execution_id": execution_id, "query": name, "result": value},
        output,
        lambda d: json.dumps(d["result"], default=json_default, indent=2),
    )


@workflow.command("update")
@click.argument("execution_id", callback=execution_id_argument)
@click.argument("name")
@click.option("--input-json", default=None, help="The update argument as JSON.")
@click.option("--input-file", default=None, help="Read the argument JSON from a file (- for stdin).")
@click.option(
    "--wait",
    type=click.Choice(["accepted", "completed"]),
    default="completed",
    show_default=True,
    help="Return once the update is recorded (accepted) or once its handler finished.",
)
@click.option("--update-id", default=None, help="An idempotency id: the same id is applied once.")
@click.option("--timeout-secs", default=30.0, show_default=True, type=WAIT_SECS)
@app_option
@database_url_option
@output_option
def update(
    execution_id: str,
    name: str,
    input_json: str | None,
    input_file: str | None,
    wait: str,
    update_id: str | None,
    timeout_secs: float,
    app_target: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Validate, record and run update NAME on a running execution."""
    from harvest.client.messages import UpdateHandle

    arg = read_json_option(input_json, input_file, "input")
    reveal = Reveal(app_target)
    with reveal.keys_named(), cli_client(database_url, reveal.payloads) as client:
        outcome = run_handle(client, execution_id).update(
            name, arg, wait=wait, timeout=timeout_secs, update_id=update_id
        )
    if isinstance(outcome, UpdateHandle):
        data = {
            "execution_id": execution_id,
            "update": name,
            "update_id": outcome.update_id,
            "status": "accepted",
        }
        emit(data, output, lambda d: f"update {name} accepted on {execution_id} (update_id {d['update_id']})")
    else:
        data = {"execution_id": execution_id, "update": name, "status": "completed", "result": outcome}
        emit(data, output, lambda d: json.dumps(d["result"], default=json_default, indent=2))


RESET_KEYS = [
    "valid",
    "source_execution_id",
    "to_event",
    "carried_events",
    "discarded_events",
    "signal_reapply",
    "pending_signals",
    "dry_run",
    "new_execution_id",
]


@workflow.command("reset")
@click.argument("execution_id", callback=execution_id_argument)
@click.option("--to-event", required=True, type=ROW_ID, help="The last event id the fork keeps.")
@click.option("--reason", required=True, help="Why (recorded on both runs).")
@click.option("--operator-id", default=None, help="Who you are, for the record.")
@signal_reapply_option
@click.option(
    "--dry-run",
    is_flag=True,
    help="Show the plan and its problems; write nothing (exit 1 when the plan is not valid).",
)
@database_url_option
@output_option
def reset(
    execution_id: str,
    to_event: int,
    reason: str,
    operator_id: str | None,
    signal_reapply: str,
    dry_run: bool,
    database_url: str | None,
    output: str,
) -> None:
    """Fork a running execution from a completed boundary under the current code (admin).

    The source ends TERMINATED; new_execution_id names the fork.
    """
    # Not read-only even for --dry-run: the plan locks the run's row (FOR UPDATE) while it reads.
    plan = routed_call(
        database_url,
        execution_id,
        lambda sql: sql.reset_workflow(execution_id, to_event, reason, operator_id, signal_reapply, dry_run),
    )

    def render(d: dict[str, Any]) -> str:
        text = mapping(d, RESET_KEYS)
        if d.get("problems"):
            text += "\nproblems:\n" + "\n".join(f"  - {p}" for p in d["problems"])
        return text

    emit(plan, output, render)
    if not plan.get("valid"):
        raise SystemExit(1)


# -- payloads: erasure and legal holds (functions/payloads.sql, docs/payloads.md) --------------

ERASE_KEYS = [
    "execution_id",
    "shard_id",
    "status",
    "events",
    "tasks",
    "dead_letters",
    "queries",
    "offloaded",
    "prior_residences",
]


@workflow.command("erase-payloads")
@click.argument("execution_id", callback=execution_id_argument)
@click.option("--operator-id", default=None, help="Who you are, for the audit log.")
@database_url_option
@output_option
def erase_payloads(execution_id: str, operator_id: str | None, database_url: str | None, output: str) -> None:
    """Erase a terminal execution's payloads everywhere it lives (admin).

    Inputs, results, signal/query/update payloads and failure details become
    {"_harvest_erased": true}; refused (exit 2, nothing changed) while a legal hold is set or the
    run is open. Over shards, every prior residence of a moved run is scrubbed too."""
    from harvest.cli.output import cli_config, selected, sql_api
    from harvest.cli.shards import cli_pools
    from harvest.config import shards_configured
    from harvest.shard.erasure import erase_payloads_everywhere

    config = cli_config()
    # The transport first (over HTTP the server erases everywhere), then this config's shards.
    if selected(database_url) is None and shards_configured(config):
        with cli_pools(config, database_url) as pools:
            summary = erase_payloads_everywhere(pools, execution_id, operator_id)
    else:
        with sql_api(database_url, read_only=False) as sql:
            summary = sql.erase_payloads(execution_id, operator_id)
            summary.setdefault("prior_residences", [])  # over HTTP the server names them
    emit(summary, output, lambda d: mapping(d, ERASE_KEYS))


@workflow.group("legal-hold")
def legal_hold() -> None:
    """Set or release a legal hold: a held execution's payloads cannot be erased (admin)."""


@legal_hold.command("set")
@click.argument("execution_id", callback=execution_id_argument)
@click.option("--reason", required=True, help="Why (a case number); kept with the hold and audited.")
@click.option("--operator-id", default=None, help="Who you are, for the audit log.")
@database_url_option
@output_option
def legal_hold_set(
    execution_id: str, reason: str, operator_id: str | None, database_url: str | None, output: str
) -> None:
    """Set a legal hold on an execution."""
    hold = routed_call(
        database_url, execution_id, lambda sql: sql.set_legal_hold(execution_id, reason, operator_id)
    )
    emit(hold, output, lambda d: f"legal hold set on {execution_id}: {reason}")


@legal_hold.command("release")
@click.argument("execution_id", callback=execution_id_argument)
@click.option("--operator-id", default=None, help="Who you are, for the audit log.")
@database_url_option
@output_option
def legal_hold_release(
    execution_id: str, operator_id: str | None, database_url: str | None, output: str
) -> None:
    """Release an execution's legal hold."""
    hold = routed_call(
        database_url, execution_id, lambda sql: sql.release_legal_hold(execution_id, operator_id)
    )
    emit(
        hold,
        output,
        lambda d: (
            f"legal hold released on {execution_id}" if d["released"] else f"{execution_id} had no legal hold"
        ),
    )


@workflow.command("handlers")
@click.option("--app", "app_target", required=True, help="module:app that registers the workflow.")
@click.argument("name")
@output_option
def handlers(app_target: str, name: str, output: str) -> None:
    """The queries and updates workflow NAME declares in the App (no database needed)."""
    from harvest.cli.worker import load_app
    from harvest.declare.messages import describe_handlers

    data = describe_handlers(load_app(app_target), name)

    def render(d: dict[str, Any]) -> str:
        parts = [f"workflow: {d['workflow']}", "", "queries:"]
        parts.append(
            table(d["queries"], ["name", "input_type_hint", "output_type_hint"])
            if d["queries"]
            else "  (none)"
        )
        parts += ["", "updates:"]
        parts.append(
            table(d["updates"], ["name", "input_type_hint", "output_type_hint", "has_validator"])
            if d["updates"]
            else "  (none)"
        )
        return "\n".join(parts)

    emit(data, output, render)
