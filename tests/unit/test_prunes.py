"""The prunes' batches (harvest.db.prunes): `harvest retention run-now`'s, driven by the CLI over
SQL and by POST /admin/retention/run-now, and the audit log's stop (the janitor's, when the
worker stops), with counting fakes of the SQL calls (the audit prune's other rules:
test_cli_audit_prune.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from harvest.cli.retention import _sweep
from harvest.db.prunes import prune_audit_log_steps, sweep_retention_steps
from harvest.db.steps import arun_steps, run_steps

CUTOFF = "2025-01-01T00:00:00+00:00"


class _Sql:
    """run_retention answers ``answers`` in turn; every call is noted in ``calls``."""

    def __init__(self, answers: list[tuple[int, int]], workers: int = 0) -> None:
        self.answers, self.workers = answers, workers
        self.calls: list[tuple[Any, ...]] = []

    def prune_workers(self, max_age: str | None = None, operator: str | None = None) -> dict[str, Any]:
        self.calls.append(("prune_workers", operator))
        return {"deleted": self.workers, "cutoff": CUTOFF}

    def get_retention_status(self) -> dict[str, Any]:
        return {"eligible": sum(d for d, _ in self.answers)}

    def run_retention(self, *args: Any) -> dict[str, Any]:
        self.calls.append(("run_retention", *args))
        deleted, remaining = self.answers[len(self.calls) - 2]
        return {"deleted": deleted, "remaining": remaining, "cutoff": CUTOFF}


class _AsyncSql(_Sql):
    async def prune_workers(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return _Sql.prune_workers(self, *args, **kwargs)

    async def run_retention(self, *args: Any) -> dict[str, Any]:  # type: ignore[override]
        return _Sql.run_retention(self, *args)


def test_the_workers_then_batches_until_none_remain() -> None:
    sql = _Sql([(2, 3), (2, 1), (1, 0)], workers=4)
    done = _sweep(sql, "30 days", 2, 1000, "ops", "json")
    assert done == {"deleted": 5, "batches": 3, "remaining": 0, "cutoff": CUTOFF, "workers_deleted": 4}
    assert sql.calls[0] == ("prune_workers", "ops")
    assert sql.calls[1:] == [("run_retention", "30 days", 2, "ops")] * 3


def test_a_batch_that_deletes_nothing_ends_it_with_what_remains() -> None:
    sql = _Sql([(2, 2), (0, 2), (9, 0)])
    done = _sweep(sql, None, None, 1000, None, "json")
    assert (done["deleted"], done["batches"], done["remaining"]) == (2, 2, 2)


def test_max_batches_bounds_the_sweep_and_one_batch_is_always_made() -> None:
    sql = _Sql([(1, 9)] * 5)
    done = _sweep(sql, None, None, 3, None, "json")
    assert (done["deleted"], done["batches"], done["remaining"], len(sql.calls)) == (3, 3, 9, 4)
    none = _Sql([(0, 0)])
    assert _sweep(none, None, None, 1, None, "json")["batches"] == 1


def test_the_route_drives_the_same_steps_under_asyncio() -> None:
    sql = _AsyncSql([(2, 3), (2, 1), (1, 0)], workers=1)
    steps = sweep_retention_steps("30 days", 2, 2, "ops")
    done = asyncio.run(arun_steps(steps, sql))  # type: ignore[arg-type]
    assert done == {"deleted": 4, "batches": 2, "remaining": 1, "cutoff": CUTOFF, "workers_deleted": 1}


class _AuditSql:
    def __init__(self) -> None:
        self.batches = 0

    def prune_audit_log(self, *args: Any) -> dict[str, Any]:
        self.batches += 1
        return {"deleted": 2, "remaining": 10, "cutoff": CUTOFF}


def test_the_janitors_audit_prune_ends_when_the_worker_stops() -> None:
    sql = _AuditSql()
    stops = iter([False, True])
    done = run_steps(prune_audit_log_steps("400 days", 2, stop=lambda: next(stops)), sql)  # type: ignore[arg-type]
    assert (done["deleted"], done["batches"], done["remaining"], sql.batches) == (4, 2, 10, 2)
