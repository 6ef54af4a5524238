"""`harvest replay` and `harvest version-usage`: release-safety checks for workflow code changes."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from harvest.cli.http import PerShard
from harvest.cli.output import ISO_TIME, SHARD_NUMBER, output_option, read_input_bounded
from harvest.cli.shards import deployment_read, shard_api
from harvest.core import jsonb
from harvest.core.errors import InvalidArgument, failure_traceback, raised_at
from harvest.core.json_values import json_default
from harvest.shard.fanout import COMPLETE, PARTIAL, UNAVAILABLE, FanOut, sum_versions

NO_MATCHES = "no_matches"  # every shard read, no run recorded the gate (the spec's status)

# The most `harvest replay` reads of its file. Not the 64 MiB of a --*-file option (a request
# body's, harvest.cli.workflow): one full export at the default caps holds up to 50 MiB of event
# data and 50,000 events, which `history export --full` writes at about 0.27 KiB each beside
# their data (100,000 small activity events measured 44 MiB), so over 64 MiB; and a batch
# (`history export-batch`) holds up to 10,000 exports. A bound still refuses a pipe with no end
# instead of reading it until memory runs out (a device, /dev/zero, is refused before any read).
MAX_HISTORY_FILE_BYTES = 1024 * 1024 * 1024


def _read_history(path: Path) -> Any:
    """The JSON value of the history file ``path``, read through a non-blocking open (a FIFO
    waits a while for its writer, never for ever) and at most MAX_HISTORY_FILE_BYTES;
    anything else one InvalidArgument naming the path (exit 2)."""
    larger = (
        ", the most `harvest replay` reads"
        " (export fewer runs a batch: `harvest history export-batch --limit`)"
    )
    raw = read_input_bounded(str(path), MAX_HISTORY_FILE_BYTES, str(path), larger)
    try:
        return jsonb.loads(raw)  # (bytes: UTF-8, or the UTF-16/32 JSON allows)
    except ValueError as exc:  # (a UnicodeDecodeError too)
        raise InvalidArgument(f"{path}: not valid JSON ({exc})") from None


def _check_history(history: object, path: Path) -> None:
    """One line, not a traceback, for a JSON file that is not an exported history."""
    events = history.get("events") if isinstance(history, dict) else history
    shape = (
        'a JSON list of events, or {"events": [...]} as `harvest history export --full` '
        "writes (each event with event_id, event_type and event_data)"
    )
    if not isinstance(events, list) or not events:
        raise InvalidArgument(f"{path}: not a Harvest history: expected {shape}")
    for index, event in enumerate(events):
        if not (
            isinstance(event, dict)
            and isinstance(event.get("event_type"), str)
            and isinstance(event.get("event_id"), int)
            and not isinstance(event.get("event_id"), bool)
        ):
            raise InvalidArgument(
                f"{path}: not a Harvest history: item {index} is not an event; expected {shape}"
            )


@click.command()
@click.option("--app", "target", required=True, help="module:attribute of the App holding the code.")
@click.option(
    "--workflow",
    "workflow_name",
    default=None,
    help="Workflow name (default: the one the history's WorkflowStarted names).",
)
@click.option(
    "--json-path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='An exported history: a JSON list of events, or {"events": [...]}.',
)
def replay(target: str, workflow_name: str | None, json_path: Path) -> None:
    """Replay an exported history against the current code; exit 0 on success, 1 on divergence."""
    from harvest.cli.worker import load_app
    from harvest.client.export_batch import BATCH_SCHEMA
    from harvest.testing import WorkflowReplayer

    app = load_app(target)
    history = _read_history(json_path)
    if isinstance(history, dict) and history.get("schema") == BATCH_SCHEMA:  # `history export-batch`
        _replay_batch(WorkflowReplayer(app), history, workflow_name, json_path)
        return
    _check_history(history, json_path)
    result = WorkflowReplayer(app).replay(history, workflow=workflow_name)
    if result.ok:
        click.echo(f"replay succeeded: {json_path}")
        return
    where = f" at seq {result.seq}" if result.seq is not None else ""
    click.echo(f"replay failed{where}: {result.error}", err=True)
    if result.expected is not None or result.got is not None:
        click.echo(f"  history recorded: {result.expected}\n  code issued:      {result.got}", err=True)
    where_raised = _raised_in(result)
    if where_raised:
        click.echo(f"  raised {where_raised}", err=True)
    sys.exit(1)


def _raised_in(result: Any) -> str | None:
    """The workflow's line that issued the diverging command, ``in fn (file.py:12)``, as
    ``harvest workflow stack`` names a worker's (the innermost frame outside Harvest)."""
    exc = getattr(result, "exception", None)
    return raised_at({"traceback": failure_traceback(exc)}) if exc is not None else None


def _replay_batch(replayer: Any, batch: dict[str, Any], workflow_name: str | None, path: Path) -> None:
    """Replay every export of a batch (of ``workflow_name`` only, when given); one line each;
    exit 1 when any diverges or the batch is not complete."""
    if workflow_name is not None:
        replayer.app.workflow(workflow_name)  # NotFound, as for one history: not "0 of 0 replayed"
        batch = {
            **batch,
            "exports": [e for e in batch.get("exports") or [] if e.get("workflow_name") == workflow_name],
        }
    results = replayer.replay_batch(batch)
    for execution_id, result in results.items():
        where_raised = None if result.ok else _raised_in(result)
        click.echo(
            f"{'ok    ' if result.ok else 'FAILED'} {execution_id}"
            + ("" if result.ok else f": {result.error}")
            + (f" [raised {where_raised}]" if where_raised else "")
        )
    failed = sum(1 for r in results.values() if not r.ok)
    click.echo(
        f"{len(results) - failed} of {len(results)} replayed ({path}, batch status {batch.get('status')})"
    )
    if failed or batch.get("status") != "complete":
        sys.exit(1)


def _as_fan_out(found: Any, shard: int) -> FanOut[Any]:
    """One shard's count_versions rows, or a server's answer for each of its shards (a
    :class:`PerShard`, with the shards it could not read), as a fan-out's answers."""
    if not isinstance(found, PerShard):
        return FanOut.of({shard: found}, ())
    fan = FanOut.of(found.results, found.unavailable)
    if found.status is not None:
        fan.status = found.status
    return fan


@click.command("version-usage")
@click.option("--change-id", required=True)
@click.option(
    "--version",
    "version",
    type=click.IntRange(-1, 2**31 - 1),
    default=None,
    help="Only this recorded version (-1, DEFAULT_VERSION: with --history-before).",
)
@click.option(
    "--history-before",
    type=ISO_TIME,
    default=None,
    help="Also count version -1 (DEFAULT_VERSION): the active runs that recorded no marker of the gate and "
    "whose history began before this time (when the rollout of the gate ended: the last old worker stopped).",
)
@click.option(
    "--state-group", type=click.Choice(["active", "terminal", "all"]), default="active", show_default=True
)
@click.option(
    "--guard",
    is_flag=True,
    help="Exit 1 while any active run recorded the version (safe to delete the branch at 0).",
)
@click.option("--workflow-name", default=None, help="Only runs of this workflow.")
@click.option(
    "--shard-id",
    type=SHARD_NUMBER,
    default=None,
    help="Only this shard (default: every configured shard; with no [shards], the one database).",
)
@click.option("--database-url", default=None, help="Prefer HARVEST_DATABASE_URL.")
@output_option
def version_usage(
    change_id: str,
    version: int | None,
    history_before: datetime | None,
    state_group: str,
    guard: bool,
    workflow_name: str | None,
    shard_id: int | None,
    database_url: str | None,
    output: str,
) -> None:
    """Which recorded versions of a ctx.version() gate are still in use (read-only). The JSON's
    status is complete, no_matches (every shard read, no run recorded it), partial or
    unavailable (a shard could not be read: exit 1, never a false zero)."""
    group = "active" if guard else state_group
    if version == -1 and history_before is None:
        raise click.BadParameter(
            "-1 (DEFAULT_VERSION) is recorded by no marker: give --history-before (when the gate's"
            " rollout ended)",
            param_hint="--version",
        )
    if history_before is not None and group != "active":
        raise click.BadParameter("--history-before counts active runs only", param_hint="--state-group")
    before = {"history_before": history_before} if history_before is not None else {}

    def count(api: Any) -> Any:  # a shard's rows; over HTTP each shard's (a PerShard)
        return api.count_versions(change_id, version, group, workflow_name, **before)

    # Every shard (one database: it alone) over either transport, or the one --shard-id names;
    # a shard not read leaves the others' rows printed, then exit 1 (below).
    if shard_id is not None:
        with shard_api(database_url, shard_id, read_only=True) as api:
            fan = _as_fan_out(count(api), shard_id)
    else:
        fan = deployment_read(database_url, count, none_is_error=False)[1]
    rows, unavailable, status = sum_versions(fan.results), fan.unavailable_shards, fan.status
    if status == COMPLETE and not rows:
        status = NO_MATCHES
    extra = {"status": status, "unavailable_shards": unavailable}
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "change_id": change_id,
                    "version": version,
                    "state_group": group,
                    "workflow_name": workflow_name,
                    "shard_id": shard_id,
                    **({"history_before": history_before} if history_before is not None else {}),
                    "usage": rows,
                    **extra,
                },
                default=json_default,
            )
        )
    else:
        if not rows:
            # `is not None`: version 0 is a real version, not "no version given".
            click.echo(
                f"no {'' if group == 'all' else group + ' '}run recorded {change_id}"
                + (f" version {version}" if version is not None else "")
            )
        for row in rows:
            sample = ", ".join(str(i) for i in row["sample_execution_ids"])
            # Version -1: no marker, a history begun before --history-before (DEFAULT_VERSION's runs).
            label = f"v{row['version']}" if row["version"] >= 0 else "no marker (DEFAULT_VERSION)"
            click.echo(
                f"{change_id} {label}  {row['state_group']:<8} {row['executions']:>6} run(s)  e.g. {sample}"
            )
    if extra.get("status") in (PARTIAL, UNAVAILABLE):
        # A shard not inspected may hold the runs: a false zero would be worse than a failure.
        shards = ", ".join(str(s) for s in extra["unavailable_shards"])
        click.echo(
            f"{extra['status']}: shard(s) {shards} could not be read; the usage above is incomplete, "
            "do not remove a version branch on it",
            err=True,
        )
        sys.exit(1)
    if guard and rows:
        what = f"{change_id} version {version}" if version is not None else change_id
        click.echo(f"guard: {sum(r['executions'] for r in rows)} active run(s) still use {what}", err=True)
        sys.exit(1)
