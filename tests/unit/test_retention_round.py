"""The retention janitor's round (worker.Worker._retention): run_retention batch after batch while
rows remain, and the other prunes (worker rows, flow keys, the seals' page) once a round, as
docs/operations.md says, not once per batch. A counting fake of the SQL calls, no database."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from harvest import App, workflow
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

    async def run_retention(self) -> dict[str, Any]:
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
