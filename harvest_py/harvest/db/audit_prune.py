"""The audit log pruned by age, batch after batch (functions/audit.sql, ``prune_audit_log``):
written once as steps (harvest.db.steps) for its three callers, ``harvest audit prune`` over
SQL (synchronous), ``POST /admin/audit/prune`` and the retention janitor's
``retention.audit_max_age`` (asyncio)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harvest.db import sqlapi
from harvest.db.steps import Sql, Steps

# prune_audit_log's own default: rows deleted a batch (one transaction each).
BATCH_SIZE = 10_000


def prune_audit_log_steps(
    older_than: str,
    batch_size: int = BATCH_SIZE,
    operator: str | None = None,
    *,
    on_batch: Callable[[int], object] | None = None,
    stop: Callable[[], bool] | None = None,
) -> Steps[dict[str, Any]]:
    """Batches until none older remains, or a batch deletes none while some remain (another
    prune holds them), or ``stop()``; ``on_batch`` is told each batch's count (a progress bar).
    One batch at least: a prune that names an operator is audited, 0 rows or not. Answers
    ``{deleted, batches, remaining, cutoff}``."""
    deleted = batches = 0
    while True:
        result = yield Sql(sqlapi.prune_audit_log, older_than, batch_size, operator)
        batches += 1
        deleted += result["deleted"]
        if on_batch is not None:
            on_batch(result["deleted"])
        if result["remaining"] == 0 or result["deleted"] == 0 or (stop is not None and stop()):
            break
    return {
        "deleted": deleted,
        "batches": batches,
        "remaining": result["remaining"],
        "cutoff": result["cutoff"],
    }
