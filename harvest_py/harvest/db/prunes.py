"""The prunes run batch after batch, written once as steps (harvest.db.steps) for their callers:
the audit log by age (functions/audit.sql, ``prune_audit_log``: ``harvest audit prune`` over
SQL, ``POST /admin/audit/prune`` and the retention janitor's ``retention.audit_max_age``) and
the retention janitor run now (functions/retention.sql, ``run_retention`` after the worker rule,
``prune_workers``: ``harvest retention run-now`` over SQL and ``POST /admin/retention/run-now``).
The CLI drives them with ``run_steps``, the server and the worker with ``arun_steps``. The
janitor's own rounds of ``run_retention`` (harvest.worker) log each batch; they are not these."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harvest.db import sqlapi
from harvest.db.steps import Sql, Steps

# prune_audit_log's own default: rows deleted a batch (one transaction each).
BATCH_SIZE = 10_000
# The retention sweep's bound when the caller gives none: `harvest retention run-now
# --max-batches` and POST /admin/retention/run-now's ``max_batches`` alike.
MAX_BATCHES = 1000
# The counts of a sweep's answer that add up over shards (sweep_totals).
SWEEP_COUNTS = ("deleted", "batches", "remaining", "workers_deleted")


def _batches(
    prune: Callable[..., dict[str, Any]],
    *args: Any,
    max_batches: int | None = None,
    on_batch: Callable[[int], object] | None = None,
    stop: Callable[[], bool] | None = None,
) -> Steps[dict[str, Any]]:
    """``prune(*args)`` (answering ``{deleted, remaining, cutoff}``) batch after batch until none
    remains, or a batch deletes none while some remain (another prune holds them), or
    ``max_batches``, or ``stop()``; one batch at least. ``on_batch`` is told each batch's count
    (a progress bar). Answers ``{deleted, batches, remaining, cutoff}``."""
    deleted = batches = 0
    while True:
        result = yield Sql(prune, *args)
        batches += 1
        deleted += result["deleted"]
        if on_batch is not None:
            on_batch(result["deleted"])
        if (
            result["remaining"] == 0
            or result["deleted"] == 0
            or (max_batches is not None and batches >= max_batches)
            or (stop is not None and stop())
        ):
            break
    return {
        "deleted": deleted,
        "batches": batches,
        "remaining": result["remaining"],
        "cutoff": result["cutoff"],
    }


def prune_audit_log_steps(
    older_than: str,
    batch_size: int = BATCH_SIZE,
    operator: str | None = None,
    *,
    on_batch: Callable[[int], object] | None = None,
    stop: Callable[[], bool] | None = None,
) -> Steps[dict[str, Any]]:
    """The audit rows older than ``older_than`` deleted to the end (or ``stop()``). One batch at
    least: a prune that names an operator is audited, 0 rows or not. Answers ``{deleted,
    batches, remaining, cutoff}``."""
    return (
        yield from _batches(
            sqlapi.prune_audit_log, older_than, batch_size, operator, on_batch=on_batch, stop=stop
        )
    )


def sweep_retention_steps(
    max_age: str | None,
    batch_size: int | None,
    max_batches: int,
    operator: str | None,
    *,
    on_batch: Callable[[int], object] | None = None,
) -> Steps[dict[str, Any]]:
    """The stopped or stale worker rows the worker rule lets go, then the expired terminal
    executions to the end or ``max_batches``. Answers ``{deleted, batches, remaining, cutoff,
    workers_deleted}``."""
    workers = (yield Sql(sqlapi.prune_workers, operator=operator))["deleted"]
    swept = yield from _batches(
        sqlapi.run_retention, max_age, batch_size, operator, max_batches=max_batches, on_batch=on_batch
    )
    return {**swept, "workers_deleted": workers}


def sweep_totals(shards: list[dict[str, Any]], unavailable: list[int]) -> dict[str, Any]:
    """A sweep's totals over each shard's answer (one database: its one answer), the one figure
    for `harvest retention run-now` over SQL and POST /admin/retention/run-now alike: every count
    of SWEEP_COUNTS summed (the worker rows too, not the executions alone), the earliest cutoff,
    each shard's answer under ``shards`` and the shards missed under ``unavailable_shards``."""
    out: dict[str, Any] = {k: sum(r.get(k) or 0 for r in shards) for k in SWEEP_COUNTS}
    out["cutoff"] = min((r["cutoff"] for r in shards if r.get("cutoff")), default=None)
    return {**out, "shards": shards, "unavailable_shards": list(unavailable)}
