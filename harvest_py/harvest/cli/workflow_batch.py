"""`harvest workflow bulk-cancel`, `bulk-terminate`, `bulk-signal`, `bulk-pause`, `bulk-resume`,
`bulk-reset`: act on every run a filter selects, on every shard (harvest.client.batch;
docs/operations.md, "Acting on many runs", "Resetting many runs")."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

import click
from click.decorators import FC

from harvest.cli.output import (
    ISO_TIME,
    database_url_option,
    emit,
    operator_id_option,
    output_option,
    signal_reapply_option,
    table,
)
from harvest.cli.payloads import app_write_option, signal_payload_options
from harvest.client.batch import (
    BATCH_STEP,
    BATCH_STEP_MAX,
    RESET_POINTS,
    BatchTally,
    reset_point_problem,
    run_batch,
)
from harvest.core.errors import InvalidArgument

# The exit code of a batch that left something undone: a run it could not act on (failed), or a
# shard it could not reach. 0: every run the filter selected was acted on, or had ended, or
# had it done already. A refused filter or option is 2, as for every command.
BATCH_INCOMPLETE = 1
DONE = {
    "cancel": "asked to cancel",
    "terminate": "terminated",
    "signal": "signalled",
    "pause": "paused",
    "resume": "resumed",
    "reset": "reset",
}


# What --batch-id does for each command: a signal's id dedupes it (its signal_id); for the
# others the id ties a continuation's audit rows and summary to the batch it goes on with (a run
# already acted on is left as it is whatever the id: the act is idempotent).
_AUDIT_ID = (
    "Name the batch (its batch_id in each step's audit row and the summary; a new one by default): "
    "go on with an interrupted one under its id."
)
BATCH_ID_HELP = {
    "cancel": f"{_AUDIT_ID} A run asked already counts unchanged.",
    "terminate": f"{_AUDIT_ID} A run it ended counts already_ended.",
    "signal": "Go on with a batch (its batch_id): a run it signalled is not signalled again.",
    "pause": f"{_AUDIT_ID} A run paused already counts unchanged.",
    "resume": f"{_AUDIT_ID} A run not paused counts unchanged.",
    "reset": "Go on with a batch (its batch_id): a run it reset, or a fork it made, is not reset again.",
}


def _batch_options(action: str) -> Callable[[FC], FC]:
    """The filters and options every bulk command takes (--batch-id's help says what the id does
    for ``action``)."""

    def decorate(f: FC) -> FC:
        return _with_options(f, BATCH_ID_HELP[action])

    return decorate


def _with_options(f: FC, batch_id_help: str) -> FC:
    for option in reversed(
        [
            click.option(
                "--state",
                "--status",
                "state",
                default=None,
                help="RUNNING, PAUSED or both (the default: every live run; bulk-pause's RUNNING, "
                "bulk-resume's PAUSED).",
            ),
            click.option("--workflow-name", default=None),
            click.option("--workflow-id", default=None, help="Only the runs of this workflow id."),
            click.option(
                "--search-attr",
                "search_attrs",
                multiple=True,
                help="As for `workflow list`: key=value or a typed comparison (repeatable, AND).",
            ),
            click.option("--created-after", default=None, type=ISO_TIME),
            click.option("--created-before", default=None, type=ISO_TIME),
            click.option("--filter", "filter_expr", default=None, help="As for `workflow list`."),
            click.option(
                "--failing/--not-failing",
                "failing",
                default=None,
                help="As for `workflow list`: only the runs whose workflow task is failing (or the others).",
            ),
            click.option(
                "--dry-run", is_flag=True, help="Write nothing: count the runs selected and show some."
            ),
            click.option(
                "--batch",
                default=BATCH_STEP,
                show_default=True,
                type=click.IntRange(1, BATCH_STEP_MAX),
                help="Runs per transaction (progress is shown per batch).",
            ),
            click.option(
                "--batch-id",
                default=None,
                help=batch_id_help,
            ),
            operator_id_option,
            database_url_option,
            output_option,
        ]
    ):
        f = option(f)
    return f


def _over_http(
    settings: Any, action: str, filters: dict[str, Any], options: dict[str, Any], bar: Any
) -> BatchTally:
    """The batch through the management API: one request a step (every shard a step), continued
    by its next_cursor until none comes back or a request moves nothing (only unreachable
    shards left)."""
    from harvest.cli.http import http_session

    tally = BatchTally(action, options["dry_run"], options.get("batch_id"))
    cursor: str | None = None
    with http_session(settings) as http:
        api = _http_api(http)
        while True:
            answer = api.act_on_workflows(action, **filters, **options, cursor=cursor)
            tally.absorb(answer)
            bar.update(int(answer.get("matched") or 0))
            cursor = answer.get("next_cursor")
            if options["dry_run"] or not cursor or not answer.get("matched"):
                return tally


def _http_api(http: Any) -> Any:
    from harvest.cli.http import HttpApi

    return HttpApi(http)


def _batch(
    action: str,
    *,
    state: str | None,
    workflow_name: str | None,
    workflow_id: str | None,
    search_attrs: tuple[str, ...],
    created_after: datetime | None,
    created_before: datetime | None,
    filter_expr: str | None,
    failing: bool | None,
    dry_run: bool,
    batch: int,
    batch_id: str | None,
    operator: str | None,
    database_url: str | None,
    output: str,
    yes: bool = False,
    reason: str | None = None,
    signal_name: str | None = None,
    payload: Any = None,
    reset_to: str = "before_time",
    before: Any = None,
    signal_reapply: str = "drop",
) -> None:
    from harvest.cli.output import progress, selected
    from harvest.cli.shards import each_shard_in_turn

    filters = {
        "state": state,
        "workflow_name": workflow_name,
        "search_attributes": list(search_attrs),
        "created_after": created_after,
        "created_before": created_before,
        "filter": filter_expr,
        "workflow_id": workflow_id,
        "failing": failing,
    }
    if workflow_id == "":
        raise InvalidArgument("workflow_id is empty: pass the workflow_id the runs were started with")
    # (--failing names the runs whose workflow task fails, a few; --not-failing, nearly every run)
    filtered = workflow_name or workflow_id or search_attrs or created_after or created_before or failing
    if not (filtered or (filter_expr or "").strip()):
        raise InvalidArgument(
            f"bulk-{action} needs a filter: give --workflow-name, --workflow-id, --search-attr, "
            "--created-after, --created-before, --failing or --filter (a state alone would select "
            "every live run)"
        )
    if action == "reset" and (problem := reset_point_problem(reset_to, before, dry_run)):
        raise InvalidArgument(f"bulk-reset --to {reset_to} --before: {problem}")
    options = {
        "reason": reason,
        "signal_name": signal_name,
        "payload": payload,
        "limit": batch,
        "operator_id": operator,
        "batch_id": batch_id,
        "reset_to": reset_to,
        "before": before,
        "signal_reapply": signal_reapply,
    }
    settings = selected(database_url)

    def execute(dry: bool, bar: Any) -> BatchTally:
        if settings is not None:
            return _over_http(settings, action, filters, {**options, "dry_run": dry}, bar)
        with each_shard_in_turn(database_url, read_only=dry) as (shards, on_shard, follow, is_outage):
            from harvest.db.connection import failure_reason

            seen: dict[int, int] = {}

            def moved(shard: int, done: int) -> None:
                bar.update(done - seen.get(shard, 0))
                seen[shard] = done

            return run_batch(
                shards,
                on_shard,
                follow,
                action,
                filters,
                **{**options, "limit": batch if not dry else min(batch, 20)},
                dry_run=dry,
                progress=moved,
                is_outage=is_outage,
                failure_text=failure_reason,
            )

    null = _NullBar()
    preview = execute(True, null)
    if dry_run:
        _emit(preview, output)
        _exit(preview)
        return
    matched = preview.total("matched")
    if matched == 0 and not preview.unavailable:
        _emit(preview, output)
        return
    if action in ("terminate", "reset") and not yes:
        what = "end" if action == "terminate" else "reset (each forked from its point)"
        if not sys.stdin.isatty():
            raise InvalidArgument(
                f"bulk-{action} would {what} {matched} run(s) at once: pass --yes to confirm "
                "(or --dry-run to see them first)"
            )
        question = "(no cleanup code runs)" if action == "terminate" else f"to {reset_to}"
        click.confirm(f"{action} {matched} run(s) now {question}?", abort=True, err=True)
    options["batch_id"] = options["batch_id"] or preview.batch_id
    with progress(matched, f"{action} runs", enabled=output != "json") as bar:
        done = execute(False, bar)
    _emit(done, output)
    _exit(done)


class _NullBar:
    def update(self, n: int) -> None:
        pass


def _emit(tally: BatchTally, output: str) -> None:
    def render(d: dict[str, Any]) -> str:
        if d["dry_run"]:
            which = "" if d["action"] == "reset" else "live "
            head = f"dry run: {d['matched']} {which}run(s) selected, nothing written"
            sample = d.get("execution_ids") or []
            if d.get("points"):  # (a reset's: each sampled run's point, or why it has none)
                lines = [head, table(d["points"], ["execution_id", "event_id", "at", "why"])]
            else:
                lines = [head] + ([f"  e.g. {', '.join(sample[:20])}"] if sample else [])
        else:
            done = f"{d['acted']} {DONE[d['action']]}"
            kept = f" ({d['forks_kept']} fork(s) kept at their fork boundary)" if d.get("forks_kept") else ""
            ended = (
                f"{d['already_ended']} already ended, {d['unchanged']} unchanged{kept}, {d['failed']} failed"
            )
            lines = [f"batch {d['batch_id']}: {d['matched']} matched, {done}, {ended}"]
        columns = (
            ["shard_id", "matched"]
            if d["dry_run"]
            else ["shard_id", "matched", "acted", "already_ended", "unchanged", "failed", "followed"]
            + (["forks_kept"] if "forks_kept" in d else [])
        )
        if len(d["shards"]) > 1:
            lines.append(table(d["shards"], columns))
        lines += [f"  failed: {f['execution_id']}: {f['error']}" for f in d["failures"]]
        return "\n".join(lines)

    emit(tally.as_dict(), output, render)
    for shard, reason in sorted(tally.unavailable.items()):
        click.echo(
            f"error: shard {shard} could not be reached ({reason}): its runs were not acted on; "
            "run the command again when it is up",
            err=True,
        )


def _exit(tally: BatchTally) -> None:
    if tally.unavailable or tally.total("failed"):
        raise SystemExit(BATCH_INCOMPLETE)


@click.command("bulk-cancel")
@click.option("--reason", default=None, help="Why (recorded in each run's history).")
@_batch_options("cancel")
def bulk_cancel(**options: Any) -> None:
    """Ask every live run the filter selects to cancel, on every shard.

    Exit 0: each was asked (or had ended, or was asked already); 1: a run failed or a shard
    could not be reached; 2: a bad or empty filter."""
    _batch("cancel", **options)


@click.command("bulk-terminate")
@click.option("--reason", default=None, help="Why (recorded in each run's history).")
@click.option("--yes", is_flag=True, help="Terminate without asking (needed when stdin is no terminal).")
@_batch_options("terminate")
def bulk_terminate(**options: Any) -> None:
    """End every live run the filter selects at once, on every shard (admin; no cleanup runs).

    Asks first unless --yes. Exit codes as bulk-cancel."""
    _batch("terminate", **options)


@click.command("bulk-signal")
@click.argument("signal_name")
@signal_payload_options
@click.option("--reason", default=None, help="Why (recorded in each step's audit row).")
@app_write_option
@_batch_options("signal")
def bulk_signal(
    signal_name: str,
    payload_json: str | None,
    payload_file: str | None,
    app_target: str | None,
    **options: Any,
) -> None:
    """Send signal SIGNAL_NAME to every live run the filter selects, on every shard (the payload
    encoded with --app's codecs).

    A run gets it once per batch (its signal_id is the batch id). Exit codes as bulk-cancel."""
    from harvest.cli.payloads import Reveal
    from harvest.cli.workflow import read_json_option

    payload = read_json_option(payload_json, payload_file, "input")
    reveal = Reveal(app_target)
    if reveal:  # encoded once, as a Client(codecs=...)'s signal_workflows encodes it (never offloaded)
        from harvest.client.payloads import batch_written

        with reveal.writing():
            payload = batch_written(reveal.payloads, signal_name, payload, None)
    _batch("signal", signal_name=signal_name, payload=payload, **options)


@click.command("bulk-pause")
@click.option("--reason", default=None, help="Why (recorded in each run's history and the audit log).")
@_batch_options("pause")
def bulk_pause(**options: Any) -> None:
    """Pause every RUNNING run the filter selects, on every shard: none of its work starts until
    it is resumed (work already running finishes).

    A run paused already counts unchanged. Exit codes as bulk-cancel."""
    _batch("pause", **options)


@click.command("bulk-resume")
@click.option("--reason", default=None, help="Why (recorded in each run's history and the audit log).")
@_batch_options("resume")
def bulk_resume(**options: Any) -> None:
    """Resume every PAUSED run the filter selects, on every shard: its waiting work is queued
    again, overdue timers fire once, buffered signals are delivered in order.

    A run not paused counts unchanged. Exit codes as bulk-cancel."""
    _batch("resume", **options)


@click.command("bulk-reset")
@click.option("--reason", required=True, help="Why (recorded in each source's and fork's history).")
@click.option(
    "--to",
    "reset_to",
    type=click.Choice(RESET_POINTS),
    default="before_time",
    show_default=True,
    help="The point in each run's history: the last completed workflow task written before --before "
    "(what the bad code wrote is not replayed), or its first (everything is done again).",
)
@click.option(
    "--before",
    default=None,
    type=ISO_TIME,
    help="The bad deploy's time (RFC 3339), for --to before_time (required there, refused otherwise).",
)
@signal_reapply_option
@click.option("--yes", is_flag=True, help="Reset without asking (needed when stdin is no terminal).")
@_batch_options("reset")
def bulk_reset(**options: Any) -> None:
    """Reset every RUNNING run the filter selects (runs stuck on a bad deploy's workflow code),
    on every shard, each to the point --to names in its own history (admin).

    Each source ends TERMINATED and its fork runs under the current code. A run is reset once per
    batch, and a reset's fork never to the very boundary it was forked at (it counts unchanged:
    the same command run again without --batch-id keeps the forks' progress; a --before in the
    future is refused). A
    terminal run cannot be reset (a FAILED one included): an activity's failure is recovered from
    its dead letter (harvest dlq bulk-replay). Asks first unless --yes. Exit codes as
    bulk-cancel."""
    _batch("reset", **options)


COMMANDS = (bulk_cancel, bulk_terminate, bulk_signal, bulk_pause, bulk_resume, bulk_reset)
