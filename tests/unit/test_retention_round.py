"""The retention janitor's round (worker.Worker._retention): run_retention batch after batch while
rows remain, and the other prunes (worker rows, flow keys, the seals' page) once a round, as
docs/operations.md says, not once per batch. A counting fake of the SQL calls, no database."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import psycopg
import pytest

from harvest import App, workflow
from harvest.core.errors import InvalidArgument
from harvest.worker import Worker


@workflow
async def plain(ctx: Any) -> None:
    return None


class _CountingSql:
    """The janitor's SQL calls, counted; run_retention deletes ``batches`` batches then stops the
    passes (one round only)."""

    def __init__(self, worker: Worker, batches: int) -> None:
        self.worker, self.left, self.calls = worker, batches, Counter[str]()

    async def prune_workers(self) -> dict[str, Any]:
        self.calls["prune_workers"] += 1
        return {"deleted": 0, "cutoff": None}

    async def prune_flow_keys(self) -> dict[str, Any]:
        self.calls["prune_flow_keys"] += 1
        return {"deleted": 0}

    async def run_retention(self, batch_size: int | None = None) -> dict[str, Any]:
        self.calls["run_retention"] += 1
        self.left -= 1
        if self.left <= 0:
            self.worker._passes_ending.set()  # the round's last batch: no second round
        return {"deleted": 10 if self.left >= 0 else 0, "remaining": max(self.left, 0) * 10}


def _one_round(batches: int) -> Counter[str]:
    worker = Worker(App(workflows=[plain]), "postgresql://localhost:1/none")
    (lane,) = worker.lanes
    sql = _CountingSql(worker, batches)
    lane.sql, lane.ready = sql, True  # type: ignore[assignment]

    async def seals(_lane: Any) -> None:
        sql.calls["collect_seals"] += 1

    worker.relay_pump = object()  # type: ignore[assignment]  # as with [shards]: the seals' pass
    worker._collect_seals = seals  # type: ignore[method-assign]
    asyncio.run(worker._retention(lane))
    return sql.calls


def test_a_round_behind_a_backlog_runs_each_batch_and_each_other_prune_once() -> None:
    assert _one_round(batches=4) == Counter(
        run_retention=4, prune_workers=1, prune_flow_keys=1, collect_seals=1
    )


def test_a_round_of_one_batch_runs_each_prune_once() -> None:
    assert _one_round(batches=1) == Counter(
        run_retention=1, prune_workers=1, prune_flow_keys=1, collect_seals=1
    )


class _AuditSql(_CountingSql):
    """The calls of a round with ``retention.audit_max_age`` set: prune_audit_log answers
    ``audit`` (deleted, remaining) in turn, its ages kept."""

    def __init__(self, worker: Worker, batches: int, audit: list[tuple[int, int]]) -> None:
        super().__init__(worker, batches)
        self.audit, self.ages = audit, list[str]()

    async def prune_audit_log(
        self, older_than: str, batch_size: int = 10_000, operator: str | None = None
    ) -> dict[str, Any]:
        self.calls["prune_audit_log"] += 1
        self.ages.append(older_than)
        deleted, remaining = self.audit.pop(0)
        return {"deleted": deleted, "remaining": remaining, "cutoff": "2025-01-01T00:00:00+00:00"}


def _one_audit_round(audit_max_age: str | None, audit: list[tuple[int, int]]) -> _AuditSql:
    worker = Worker(App(workflows=[plain]), "postgresql://localhost:1/none", audit_max_age=audit_max_age)
    (lane,) = worker.lanes
    sql = _AuditSql(worker, 1, audit)
    lane.sql, lane.ready = sql, True  # type: ignore[assignment]
    asyncio.run(worker._retention(lane))
    return sql


def test_the_audit_log_is_pruned_by_its_configured_age_batch_by_batch_once_a_round() -> None:
    sql = _one_audit_round("400 days", [(10_000, 10_000), (10_000, 3), (3, 0)])
    assert sql.calls["prune_audit_log"] == 3 and sql.ages == ["400 days"] * 3
    assert (sql.calls["prune_workers"], sql.calls["run_retention"]) == (1, 1)


def test_the_audit_log_is_never_pruned_without_a_configured_age() -> None:
    assert _one_audit_round(None, []).calls["prune_audit_log"] == 0


@pytest.mark.timeout(20)  # an uncaught refusal failed each round before run_retention: no end
@pytest.mark.parametrize(
    ("age", "refusal", "said_of_it"),
    [
        # refused by prune_audit_log (HR001)
        ("0 days", InvalidArgument("audit log max age 00:00:00 must be positive"), "must be positive"),
        # HARVEST_RETENTION__AUDIT_MAX_AGE=banana: the server's cast to interval (SQLSTATE 22007, a
        # DataError) failed the whole round, every round, so no run was ever pruned, under a
        # warning that named no key
        (
            "banana",
            psycopg.errors.InvalidDatetimeFormat('invalid input syntax for type interval: "banana"'),
            "'banana'",
        ),
    ],
    ids=["hr001", "no_interval"],
)
def test_an_age_the_database_refuses_is_a_warning_and_the_rest_of_the_round_runs(
    caplog: pytest.LogCaptureFixture, age: str, refusal: Exception, said_of_it: str
) -> None:
    """A bad retention.audit_max_age is a warning naming the key, not the debug line of retention
    not configured nor `retention run failed`, and runs still pruned."""

    class _Refusing(_AuditSql):
        async def prune_audit_log(
            self, older_than: str, batch_size: int = 10_000, operator: str | None = None
        ) -> dict[str, Any]:
            self.calls["prune_audit_log"] += 1
            raise refusal

    worker = Worker(App(workflows=[plain]), "postgresql://localhost:1/none", audit_max_age=age)
    (lane,) = worker.lanes
    sql = _Refusing(worker, 1, [])
    lane.sql, lane.ready = sql, True  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING, logger="harvest.worker"):
        asyncio.run(worker._retention(lane))
    assert (sql.calls["prune_audit_log"], sql.calls["run_retention"]) == (1, 1)
    said = [r.getMessage() for r in caplog.records if r.name == "harvest.worker"]
    assert any("retention.audit_max_age" in line and said_of_it in line for line in said), said
    assert not any("retention run failed" in line for line in said), said
