"""The group commit of activity results (harvest/worker/completions.py), with a fake SQL API."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from harvest.errors import InvalidArgument, StaleTask
from harvest.worker.completions import CompletionBatcher


class FakeSql:
    """complete_activities: 'stale' for task ids in stale, handed tasks by id; records each batch."""

    def __init__(self, stale=(), handed=None, fail_batches_over: int | None = None):
        self.stale = set(stale)
        self.handed = handed or {}
        self.fail_batches_over = fail_batches_over
        self.batches: list[list[int]] = []

    async def complete_activities(self, worker_id, items, hand_off, workflow_lease_secs):
        ids = [item[0] for item in items]
        self.batches.append(ids)
        await asyncio.sleep(0.01)  # a round trip: results finishing meanwhile wait for the next batch
        if self.fail_batches_over is not None and len(ids) > self.fail_batches_over:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        rows = []
        for task_id in ids:
            if task_id in self.stale:
                rows.append({"task_id": task_id, "outcome": "stale", "message": f"task {task_id} is stale",
                             "handed": None})
            elif task_id == -1:
                rows.append({"task_id": task_id, "outcome": "kind", "message": "not an activity",
                             "handed": None})
            else:
                rows.append({"task_id": task_id, "outcome": "completed", "message": None,
                             "handed": self.handed.get(task_id)})
        return rows


class FakeWorker:
    worker_id = "w"
    workflow_lease = 30.0

    def __init__(self, sql: FakeSql):
        self.sql = sql

    def accepts_hand_off(self) -> bool:
        return True


def run(coro):
    return asyncio.run(coro)


def test_results_finishing_together_share_a_commit_and_each_gets_its_answer():
    sql = FakeSql(handed={3: {"task_id": 99, "kind": "workflow"}})

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql))
        first = asyncio.create_task(batcher.complete(1, 1, 1))
        await asyncio.sleep(0.001)  # its flush is in flight
        rest = await asyncio.gather(*(batcher.complete(i, 1, i) for i in range(2, 11)))
        return [await first, *rest], batcher

    answers, batcher = run(main())
    assert answers[2] == {"task_id": 99, "kind": "workflow"}
    assert [a for i, a in enumerate(answers) if i != 2] == [None] * 9
    # The first result went alone (an idle worker adds no delay); the rest queued behind it.
    assert sql.batches == [[1], list(range(2, 11))]
    assert (batcher.batches, batcher.items) == (2, 10)


def test_a_refused_item_raises_for_its_caller_only():
    sql = FakeSql(stale={2})

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql))
        return await asyncio.gather(*(batcher.complete(i, 1, None) for i in (1, 2, 3, -1)),
                                    return_exceptions=True)

    one, two, three, wrong_kind = run(main())
    assert one is None and three is None
    assert isinstance(two, StaleTask) and "stale" in str(two)
    assert isinstance(wrong_kind, InvalidArgument)


def test_a_failed_batch_is_retried_item_by_item():
    sql = FakeSql(fail_batches_over=1)

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql))
        return await asyncio.gather(*(batcher.complete(i, 1, None) for i in range(1, 5)))

    assert run(main()) == [None] * 4
    assert sql.batches == [[1, 2, 3, 4], [1], [2], [3], [4]]


def test_a_batch_is_bounded():
    sql = FakeSql()

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql), max_batch=3)
        await asyncio.gather(*(batcher.complete(i, 1, None) for i in range(1, 9)))

    run(main())
    assert sql.batches == [[1, 2, 3], [4, 5, 6], [7, 8]]


def test_an_error_of_one_lone_item_reaches_its_caller():
    sql = FakeSql(fail_batches_over=0)

    async def main():
        await CompletionBatcher(FakeWorker(sql)).complete(1, 1, None)

    with pytest.raises(psycopg.errors.DeadlockDetected):
        run(main())
