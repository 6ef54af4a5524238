"""`harvest history export-batch`: a bounded batch of histories for a release gate's replay
(docs/payloads.md "Exports", the spec's "Exporting a history fixture").

One JSON document ``{schema, version, status, exports, failures, shard_coverage}``: ``exports``
holds one ``harvest history export`` document per run (with its ``shard_id``); ``failures`` the
runs that matched but could not be exported; ``status`` is ``complete``, or ``partial`` /
``unavailable`` when a shard could not be read (``shard_coverage`` names which). A batch that is
not complete exits 1 after writing the file: treat it as a blocked release gate.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any, cast

import click

from harvest.cli.output import database_url_option
from harvest.cli.shards import each_shard
from harvest.core.errors import HarvestError, InvalidArgument
from harvest.shard.fanout import COMPLETE

BATCH_VERSION = 1
MAX_LIMIT = 10_000
_PAGE = 500
STATE_GROUPS = {
    "terminal": {"COMPLETED", "FAILED", "CANCELLED", "TERMINATED", "TIMED_OUT", "CONTINUED_AS_NEW"},
    "running": {"RUNNING"},
    "all": {"RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TERMINATED", "TIMED_OUT", "CONTINUED_AS_NEW"},
}


def _updated(row: dict[str, Any]) -> datetime:
    return cast(datetime, row.get("completed_at") or row["created_at"])


def _matching(
    api: Any, workflow_name: str | None, group: set[str], after: datetime | None, limit: int
) -> list[Any]:
    """The newest ``limit`` runs of one shard in ``group`` updated after ``after`` (seals skipped:
    the live copy is listed on its own shard)."""
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        rows = api.list_executions(workflow_name=workflow_name, page_size=_PAGE, cursor=cursor)
        for row in rows:
            if row["status"] in group and (after is None or _updated(row) > after):
                found.append(row)
        cursor = rows[-1].get("next_cursor") if rows else None
        if cursor is None or len(found) >= limit:
            return found[:limit]


def _export_of(api: Any, shard: int, row: dict[str, Any], full: bool) -> dict[str, Any]:
    from harvest.cli.workflow import _resolved
    from harvest.core.payload import redact

    execution_id = str(row["execution_id"])
    execution = api.get_execution(execution_id)
    events = api.get_history(execution_id)
    if full:  # payloads as stored, offloaded ones resolved (as `history export --payload-policy full`)
        doc = {"execution": _resolved(api, execution), "events": _resolved(api, events), "redacted": False}
    else:
        doc = redact({"execution": execution, "events": events, "redacted": True})
    return {"execution_id": execution_id, "shard_id": shard, "workflow_name": row["workflow_name"], **doc}


@click.command("export-batch")
@click.option("--workflow-name", default=None, help="Only runs of this workflow.")
@click.option("--state-group", type=click.Choice(sorted(STATE_GROUPS)), default="terminal", show_default=True)
@click.option(
    "--updated-after",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d"]),
    default=None,
    help="Only runs that ended (or, still running, started) after this instant (UTC unless given).",
)
@click.option("--limit", type=click.IntRange(1, MAX_LIMIT), default=100, show_default=True)
@click.option(
    "--payload-policy", type=click.Choice(["redacted", "full"]), default="redacted", show_default=True
)
@click.option(
    "--output-file", "--file", "path", default="-", show_default=True, help="Write here (- for stdout)."
)
@database_url_option
def export_batch(
    workflow_name: str | None,
    state_group: str,
    updated_after: datetime | None,
    limit: int,
    payload_policy: str,
    path: str,
    database_url: str | None,
) -> None:
    """Export a bounded batch of recent histories (every shard) for replay in CI.

    Exit 0 when every shard was read; 1 (the file still written) when the batch is partial."""
    from datetime import UTC

    from harvest.testing.replay import BATCH_SCHEMA  # one name for the writer and the reader

    if updated_after is not None and updated_after.tzinfo is None:
        updated_after = updated_after.replace(tzinfo=UTC)
    group, full = STATE_GROUPS[state_group], payload_policy == "full"

    def read(api: Any) -> tuple[list[Any], list[Any]]:
        exports, failures = [], []
        shard = _shard_of(api)
        for row in _matching(api, workflow_name, group, updated_after, limit):
            try:
                exports.append((_updated(row), _export_of(api, shard, row, full)))
            except HarvestError as exc:
                failures.append(
                    {"execution_id": str(row["execution_id"]), "shard_id": shard, "error": str(exc)}
                )
        return exports, failures

    fan = each_shard(database_url, read, none_is_error=False)
    exports = sorted(
        (e for found, _ in fan.results.values() for e in found), key=lambda p: p[0], reverse=True
    )
    failures = [f for _, failed in fan.results.values() for f in failed]
    batch: dict[str, Any] = {
        "schema": BATCH_SCHEMA,
        "version": BATCH_VERSION,
        "status": fan.status,
        "payload_policy": payload_policy,
        "exports": [doc for _, doc in exports[:limit]],
        "failures": failures,
        "shard_coverage": {
            "read": sorted(fan.results),
            "unavailable": fan.unavailable_shards,
        },
    }
    text = json.dumps(batch, default=str, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w") as out:
            out.write(text)
        click.echo(f"wrote {path}: {len(batch['exports'])} export(s), status {fan.status}", err=True)
    if fan.status != COMPLETE:
        click.echo(
            f"warning: shard(s) {', '.join(map(str, fan.unavailable_shards))} could not be read: the "
            "batch is partial (a blocked release gate until they are exported or waived)",
            err=True,
        )
        sys.exit(1)


def _shard_of(api: Any) -> int:
    try:
        return int(api.get_shard_id())
    except (HarvestError, TypeError, ValueError):  # pragma: no cover - a database without identity
        raise InvalidArgument("this database has no shard identity; run `harvest migrate run`") from None
