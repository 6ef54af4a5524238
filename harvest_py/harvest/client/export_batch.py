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

from harvest.client import payloads as client_payloads
from harvest.client.history_export import MAX_LIMIT, STATE_GROUPS
from harvest.core.errors import HarvestError, InvalidArgument
from harvest.core.payload import redact
from harvest.db import sqlapi
from harvest.db.steps import Sql, Steps

BATCH_SCHEMA = "harvest.history_export_batch"
BATCH_VERSION = 1
PAGE = 500

# A run the batch takes (the newest ``limit`` matching runs over every shard): its id, shard,
# workflow name and when it was last updated; small, so 10,000 of them are no burden.
Candidate = dict[str, Any]


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
    stored: a full export carries payloads self-describing), from ``harvest.payloads``."""
    return (yield from client_payloads.resolved(None, value))


def export(candidate: Candidate, full: bool) -> Steps[dict[str, Any]]:
    """One run's export in the batch, whole (the CLI's document; the HTTP route streams the
    same export, harvest/web/routes/history.py)."""
    execution_id = candidate["execution_id"]
    execution = yield Sql(sqlapi.get_execution, execution_id)
    events = yield Sql(sqlapi.get_history, execution_id)
    if full:  # payloads as stored, offloaded ones resolved (as `history export --payload-policy full`)
        execution = yield from resolved(execution)
        events = yield from resolved(events)
        doc = {"execution": execution, "events": events, "redacted": False}
    else:
        doc = redact({"execution": execution, "events": events, "redacted": True})
    return {**export_key(candidate), **doc}


def export_key(candidate: Candidate) -> dict[str, Any]:
    """The fields an export starts with, before its ``execution``, ``events`` and ``redacted``."""
    return {
        "execution_id": candidate["execution_id"],
        "shard_id": candidate["shard_id"],
        "workflow_name": candidate["workflow_name"],
    }


def failure(candidate: Candidate, error: str) -> dict[str, Any]:
    return {"execution_id": candidate["execution_id"], "shard_id": candidate["shard_id"], "error": error}


def check(state_group: str, limit: int) -> None:
    if state_group not in STATE_GROUPS:
        raise InvalidArgument(f"state_group {state_group!r} is not one of {', '.join(sorted(STATE_GROUPS))}")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit {limit} is out of range 1..{MAX_LIMIT}")


def shard_id() -> Steps[int]:
    try:
        return int((yield Sql(sqlapi.get_shard_id)))
    except (HarvestError, TypeError, ValueError):  # pragma: no cover - a database without identity
        raise InvalidArgument("this database has no shard identity; run `harvest migrate run`") from None


def shard_candidates(
    workflow_name: str | None, state_group: str, after: datetime | None, limit: int
) -> Steps[list[Candidate]]:
    """One shard's newest ``limit`` matching runs, exported nothing yet: the batch first picks
    its runs over every shard (:func:`newest`), then exports those, one at a time."""
    check(state_group, limit)
    shard = yield from shard_id()
    return [
        {
            "execution_id": str(row["execution_id"]),
            "shard_id": shard,
            "workflow_name": row["workflow_name"],
            "updated_at": updated_at(row),
        }
        for row in (yield from _matching(workflow_name, STATE_GROUPS[state_group], after, limit))
    ]


def newest(results: Mapping[int, list[Candidate]], limit: int) -> list[Candidate]:
    """The batch's runs: the newest ``limit`` (by when they were last updated) over every shard."""
    found = [c for candidates in results.values() for c in candidates]
    return sorted(found, key=lambda c: c["updated_at"], reverse=True)[:limit]


# A run's outcome in the batch: (True, its export) or (False, its failure).
Outcome = tuple[bool, dict[str, Any]]


def shard_exports(chosen: list[Candidate], full: bool) -> Steps[dict[str, Outcome]]:
    """The exports of this shard's runs among ``chosen``, by execution id; a run that could not
    be exported has its failure instead (the batch goes on)."""
    shard = yield from shard_id()
    out: dict[str, Outcome] = {}
    for candidate in chosen:
        if candidate["shard_id"] == shard:
            try:
                out[candidate["execution_id"]] = (True, (yield from export(candidate, full)))
            except HarvestError as exc:
                out[candidate["execution_id"]] = (False, failure(candidate, str(exc)))
    return out


def head(status: str, payload_policy: str) -> dict[str, Any]:
    """The document's fields before ``exports``."""
    return {
        "schema": BATCH_SCHEMA,
        "version": BATCH_VERSION,
        "status": status,
        "payload_policy": payload_policy,
    }


def coverage(read: Iterable[int], unavailable: Iterable[int]) -> dict[str, Any]:
    return {"read": sorted(read), "unavailable": list(unavailable)}


def assemble(
    chosen: list[Candidate],
    exported: Mapping[int, dict[str, Outcome]],
    read: Iterable[int],
    unavailable: Iterable[int],
    status: str,
    payload_policy: str,
) -> dict[str, Any]:
    """The batch document: the export of each of ``chosen`` in order (newest first), the
    failures of those that could not be exported, and which shards were read."""
    outcomes = {eid: outcome for found in exported.values() for eid, outcome in found.items()}
    exports: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    for candidate in chosen:
        # (not there: its shard answered the pick but not the export)
        ok, doc = outcomes.get(candidate["execution_id"]) or (
            False,
            failure(candidate, f"shard {candidate['shard_id']} could not be read"),
        )
        (exports if ok else failures).append(doc)
    return {
        **head(status, payload_policy),
        "exports": exports,
        "failures": failures,
        "shard_coverage": coverage(read, unavailable),
    }
