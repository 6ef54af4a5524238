"""The retention janitor run now, batch after batch (functions/retention.sql, ``run_retention``,
and the worker rule, ``prune_workers``): written once as steps (harvest.db.steps) for its two
callers, ``harvest retention run-now`` over SQL (synchronous) and
``POST /admin/retention/run-now`` (asyncio). The janitor's own rounds (harvest.worker) run one
batch after another with no bound and log each; they are not this."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harvest.db import sqlapi
from harvest.db.steps import Sql, Steps


def sweep_retention_steps(
    max_age: str | None,
    batch_size: int | None,
    max_batches: int,
    operator: str | None,
    *,
    on_batch: Callable[[int], object] | None = None,
) -> Steps[dict[str, Any]]:
    """The stopped or stale worker rows the worker rule lets go, then the expired terminal
    executions, batch after batch until none remain, a batch deletes none, or ``max_batches``
    (one batch at least); ``on_batch`` is told each batch's count (a progress bar). Answers
    ``{deleted, batches, remaining, cutoff, workers_deleted}``."""
    workers = (yield Sql(sqlapi.prune_workers, operator=operator))["deleted"]
    deleted = batches = 0
    while True:
        result = yield Sql(sqlapi.run_retention, max_age, batch_size, operator)
        batches += 1
        deleted += result["deleted"]
        if on_batch is not None:
            on_batch(result["deleted"])
        if result["deleted"] == 0 or result["remaining"] == 0 or batches >= max_batches:
            break
    return {
        "deleted": deleted,
        "batches": batches,
        "remaining": result["remaining"],
        "cutoff": result["cutoff"],
        "workers_deleted": workers,
    }
