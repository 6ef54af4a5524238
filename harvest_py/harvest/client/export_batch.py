"""A history export batch: a bounded set of recent histories for a release gate's replay
(docs/payloads.md "Exports"), written once for `harvest history export-batch` and
``GET /history/export-batch``.

The work on one shard is a step generator (:mod:`harvest.db.steps`): the CLI drives it with
``run_steps`` on each shard's connection, the HTTP API with ``arun_steps`` on each shard's pool;
:func:`assemble` merges the shards' answers into one document ``{schema, version, status,
payload_policy, exports, failures, shard_coverage}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from harvest.core.codecs import refs_in, replace_refs
from harvest.core.errors import HarvestError, InvalidArgument
from harvest.core.payload import redact
from harvest.core.statuses import LIVE_STATUSES
from harvest.db import sqlapi
from harvest.db.steps import Sql, Steps

BATCH_SCHEMA = "harvest.history_export_batch"
BATCH_VERSION = 1
MAX_LIMIT = 10_000
PAGE = 500
_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TERMINATED", "TIMED_OUT", "CONTINUED_AS_NEW")
STATE_GROUPS: dict[str, set[str]] = {
    "terminal": set(_ENDED),
    # running: every live run, a PAUSED one too (docs/lifecycle.md).
    "running": set(LIVE_STATUSES),
    "all": {*LIVE_STATUSES, *_ENDED},
}

# One shard's answer: (when each export's run was last updated, the export), and the failures.
ShardBatch = tuple[list[tuple[datetime, dict[str, Any]]], list[dict[str, Any]]]


def updated_at(row: dict[str, Any]) -> datetime:
    """When a run last changed: its end, or (still running) its start."""
    moment: datetime = row.get("completed_at") or row["created_at"]
    return moment


def _matching(
    workflow_name: str | None, group: set[str], after: datetime | None, limit: int
) -> Steps[list[dict[str, Any]]]:
    """The newest ``limit`` runs of the shard in ``group`` updated after ``after`` (seals
    skipped: the live copy is listed on its own shard)."""
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        rows = yield Sql(sqlapi.list_executions, workflow_name=workflow_name, page_size=PAGE, cursor=cursor)
        for row in rows:
            if row["status"] in group and (after is None or updated_at(row) > after):
                found.append(row)
        cursor = rows[-1].get("next_cursor") if rows else None
        if cursor is None or len(found) >= limit:
            return found[:limit]


def resolved(value: Any) -> Steps[Any]:
    """``value`` with its offloaded payloads read back from the store (codec envelopes stay as
    stored: a full export carries payloads self-describing)."""
    ids = refs_in(value)
    if not ids:
        return value
    return replace_refs(value, (yield Sql(sqlapi.get_payloads, ids)))


def _export(shard: int, row: dict[str, Any], full: bool) -> Steps[dict[str, Any]]:
    execution_id = str(row["execution_id"])
    execution = yield Sql(sqlapi.get_execution, execution_id)
    events = yield Sql(sqlapi.get_history, execution_id)
    if full:  # payloads as stored, offloaded ones resolved (as `history export --payload-policy full`)
        execution = yield from resolved(execution)
        events = yield from resolved(events)
        doc = {"execution": execution, "events": events, "redacted": False}
    else:
        doc = redact({"execution": execution, "events": events, "redacted": True})
    return {"execution_id": execution_id, "shard_id": shard, "workflow_name": row["workflow_name"], **doc}


def check(state_group: str, limit: int) -> None:
    if state_group not in STATE_GROUPS:
        raise InvalidArgument(f"state_group {state_group!r} is not one of {', '.join(sorted(STATE_GROUPS))}")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit {limit} is out of range 1..{MAX_LIMIT}")


def shard_batch(
    workflow_name: str | None, state_group: str, after: datetime | None, limit: int, full: bool
) -> Steps[ShardBatch]:
    """One shard's part of the batch: its newest matching runs exported, and the runs that
    matched but could not be exported (a failure each, the batch goes on)."""
    check(state_group, limit)
    try:
        shard = int((yield Sql(sqlapi.get_shard_id)))
    except (HarvestError, TypeError, ValueError):  # pragma: no cover - a database without identity
        raise InvalidArgument("this database has no shard identity; run `harvest migrate run`") from None
    exports: list[tuple[datetime, dict[str, Any]]] = []
    failures: list[dict[str, Any]] = []
    for row in (yield from _matching(workflow_name, STATE_GROUPS[state_group], after, limit)):
        try:
            exports.append((updated_at(row), (yield from _export(shard, row, full))))
        except HarvestError as exc:
            failures.append({"execution_id": str(row["execution_id"]), "shard_id": shard, "error": str(exc)})
    return exports, failures


def assemble(
    results: Mapping[int, ShardBatch],
    unavailable: Iterable[int],
    status: str,
    payload_policy: str,
    limit: int,
) -> dict[str, Any]:
    """The batch document from the shards' answers: the newest ``limit`` exports over all of
    them, every failure, and which shards were read."""
    exports = sorted((e for found, _ in results.values() for e in found), key=lambda p: p[0], reverse=True)
    return {
        "schema": BATCH_SCHEMA,
        "version": BATCH_VERSION,
        "status": status,
        "payload_policy": payload_policy,
        "exports": [doc for _, doc in exports[:limit]],
        "failures": [f for _, failed in results.values() for f in failed],
        "shard_coverage": {"read": sorted(results), "unavailable": list(unavailable)},
    }
