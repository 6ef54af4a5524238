"""The group commit of activity results (harvest/worker/completions.py), with a fake SQL API."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from harvest import App, Worker, activity
from harvest.core.errors import InvalidArgument, StaleTask
from harvest.db.group_commit import MAX_BATCH
from harvest.telemetry.metrics import Metrics
from harvest.worker.completions import (
    DECISION_COMMANDS,
    CompletionBatcher,
    DecisionBatcher,
    Recorded,
    result_batch_size,
)


class FakeSql:
    """complete_activities: 'stale' for task ids in stale, handed tasks by id; records each batch.

    A decision is applied (decided) unless its commands hold {"type": "bad"}, which
    fails the whole call, as the database refuses an unknown command.
    """

    def __init__(self, stale=(), handed=None, fail_batches_over: int | None = None):
        self.stale = set(stale)
        self.handed = handed or {}
        self.fail_batches_over = fail_batches_over
        self.batches: list[list[int]] = []
        self.decisions: list[list[bool]] = []  # per batch: which items carried one

    async def complete_activities(self, worker_id, items, hand_off, workflow_lease_secs, event_cap, byte_cap):
        ids = [item[0] for item in items]
        self.batches.append(ids)
        self.decisions.append([item[3] is not None for item in items])
        await asyncio.sleep(0.01)  # a round trip: results finishing meanwhile wait for the next batch
        if self.fail_batches_over is not None and len(ids) > self.fail_batches_over:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        if any(item[3] is not None and {"type": "bad"} in item[3]["commands"] for item in items):
            raise InvalidArgument('unknown command type "bad"')
        rows = []
        for task_id in ids:
            if task_id in self.stale:
                rows.append(
                    {
                        "task_id": task_id,
                        "outcome": "stale",
                        "message": f"task {task_id} is stale",
                        "handed": None,
                    }
                )
            elif task_id == -1:
                rows.append(
                    {"task_id": task_id, "outcome": "kind", "message": "not an activity", "handed": None}
                )
            else:
                decision = next(item[3] for item in items if item[0] == task_id)
                rows.append(
                    {
                        "task_id": task_id,
                        "outcome": "completed",
                        "message": None,
                        "handed": self.handed.get(task_id),
                        "decided": None if decision is None else {"last_event_id": 9},
                    }
                )
        return rows


class FakeWorker:
    worker_id = "w"
    workflow_lease = 30.0
    history_event_hard_cap = 50_000
    history_byte_hard_cap = 1_000_000
    redis = None  # no Redis dispatch (worker/redis_dispatch.py)

    def __init__(self, sql: FakeSql):
        self.sql = sql
        self.metrics = Metrics()

    def accepts_hand_off(self) -> bool:
        return True


def run(coro):
    return asyncio.run(coro)


def test_results_finishing_together_share_a_commit_and_each_gets_its_answer():
    sql = FakeSql(handed={3: {"task_id": 99, "kind": "workflow"}})

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql))
        first = asyncio.ensure_future(batcher.complete(1, 1, 1))
        await asyncio.sleep(0.001)  # its flush is in flight
        rest = await asyncio.gather(*(batcher.complete(i, 1, i) for i in range(2, 11)))
        return [await first, *rest], batcher

    answers, batcher = run(main())
    assert answers[2] == Recorded(handed={"task_id": 99, "kind": "workflow"})
    assert [a for i, a in enumerate(answers) if i != 2] == [Recorded()] * 9
    # The first result went alone (an idle worker adds no delay); the rest queued behind it.
    assert sql.batches == [[1], list(range(2, 11))]
    assert (batcher.batches, batcher.items) == (2, 10)


def test_a_refused_item_raises_for_its_caller_only():
    sql = FakeSql(stale={2})

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql))
        return await asyncio.gather(
            *(batcher.complete(i, 1, None) for i in (1, 2, 3, -1)), return_exceptions=True
        )

    one, two, three, wrong_kind = run(main())
    assert one == Recorded() and three == Recorded()
    assert isinstance(two, StaleTask) and "stale" in str(two)
    assert isinstance(wrong_kind, InvalidArgument)


def test_a_failed_batch_is_retried_item_by_item():
    sql = FakeSql(fail_batches_over=1)
    worker = FakeWorker(sql)

    async def main():
        batcher = CompletionBatcher(worker)
        return await asyncio.gather(*(batcher.complete(i, 1, None) for i in range(1, 5)))

    assert run(main()) == [Recorded()] * 4
    assert sql.batches == [[1, 2, 3, 4], [1], [2], [3], [4]]
    # The retry is counted as the spec's harvest.db.transaction_retry{site, reason}.
    retried = worker.metrics.registry.get_sample_value(
        "harvest_db_transaction_retry_total", {"site": "activity_completion", "reason": "deadlock"}
    )
    assert retried == 1


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


def test_decisions_ride_with_their_results():
    sql = FakeSql()

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql))
        return await asyncio.gather(
            batcher.complete(1, 1, None, {"commands": []}), batcher.complete(2, 1, None)
        )

    assert run(main()) == [Recorded(decided={"last_event_id": 9}), Recorded()]


def test_a_refused_decision_does_not_lose_its_result_nor_sink_the_batch():
    """The database refuses a bad decision by failing the call: every result of the
    batch is then committed alone and without its decision."""
    sql = FakeSql()

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql))
        first = asyncio.ensure_future(batcher.complete(1, 1, None))
        await asyncio.sleep(0.001)  # in flight: the next two share a batch
        rest = await asyncio.gather(
            batcher.complete(2, 1, None, {"commands": [{"type": "bad"}]}),
            batcher.complete(3, 1, None, {"commands": []}),
        )
        return [await first, *rest]

    assert run(main()) == [Recorded()] * 3
    assert sql.batches == [[1], [2, 3], [2], [3]]
    assert sql.decisions == [[False], [True, True], [False], [False]]


def test_a_lone_refused_decision_is_retried_without_it():
    sql = FakeSql()

    async def main():
        return await CompletionBatcher(FakeWorker(sql)).complete(1, 1, None, {"commands": [{"type": "bad"}]})

    assert run(main()) == Recorded()
    assert sql.decisions == [[True], [False]]


class FakeDecisionSql:
    """complete_workflow_tasks: 'stale' for ids in stale; a {"type": "bad"} command fails the call."""

    def __init__(self, stale=()):
        self.stale = set(stale)
        self.batches: list[list[int]] = []

    async def complete_workflow_tasks(self, worker_id, items, event_cap, byte_cap):
        self.batches.append([item[0] for item in items])
        await asyncio.sleep(0.01)
        if any({"type": "bad"} in item[3] for item in items):
            raise InvalidArgument('unknown command type "bad"')
        return [
            {
                "task_id": task_id,
                "outcome": "stale" if task_id in self.stale else "completed",
                "message": f"task {task_id} is stale",
                "last_event_id": through + 1 + len(commands),
                "execution_status": "RUNNING",
                "handed": [],
            }
            for task_id, _token, through, commands, _slots, _epoch in items
        ]


class FakeDecidingWorker(FakeWorker):
    def __init__(self, sql: FakeDecisionSql):
        self.sql = sql
        self.metrics = Metrics()


def test_decisions_made_together_share_a_commit_and_a_bad_one_fails_alone():
    sql = FakeDecisionSql(stale={3})

    async def main():
        batcher = DecisionBatcher(FakeDecidingWorker(sql))
        first = asyncio.ensure_future(batcher.complete(1, 1, 4, [], 0))
        await asyncio.sleep(0.001)  # in flight: the next three share a batch
        rest = await asyncio.gather(
            batcher.complete(2, 1, 4, [{"type": "bad"}], 0),
            batcher.complete(3, 1, 4, [], 0),
            batcher.complete(4, 1, 7, [{"type": "x"}], 1),
            return_exceptions=True,
        )
        return [await first, *rest]

    first, bad, stale, fine = run(main())
    assert first["last_event_id"] == 5 and fine["last_event_id"] == 9
    assert isinstance(bad, InvalidArgument)
    assert isinstance(stale, StaleTask)
    # The batch with the bad decision failed as a whole, then went item by item.
    assert sql.batches == [[1], [2, 3, 4], [2], [3], [4]]


def test_a_lone_decision_the_database_refuses_raises_for_its_caller():
    sql = FakeDecisionSql()

    async def main():
        await DecisionBatcher(FakeDecidingWorker(sql)).complete(1, 1, 4, [{"type": "bad"}], 0)

    with pytest.raises(InvalidArgument):
        run(main())
    assert sql.batches == [[1]]


def test_a_burst_of_fan_out_decisions_commits_in_slices_of_commands():
    """A flush of decisions carries whole decisions up to DECISION_COMMANDS commands: a burst of
    fan-outs (each scheduling 100 activities) commits in slices the claims see one after another,
    not in two transactions of ten thousand activities; small decisions batch as before."""
    per = 100
    sql = FakeDecisionSql()
    fan = [{"type": "schedule_activity", "seq": i} for i in range(per)]

    async def main():
        batcher = DecisionBatcher(FakeDecidingWorker(sql))
        first = asyncio.ensure_future(batcher.complete(1, 1, 4, [], 0))
        await asyncio.sleep(0.001)  # in flight: the fan-outs made meanwhile wait behind it
        await asyncio.gather(*(batcher.complete(i, 1, 4, fan, 0) for i in range(2, 62)))
        await asyncio.gather(*(batcher.complete(i, 1, 4, [{"type": "x"}], 0) for i in range(100, 160)))
        huge = [{"type": "schedule_activity", "seq": i} for i in range(DECISION_COMMANDS * 2)]
        await batcher.complete(200, 1, 4, huge, 0)
        await first

    run(main())
    fans = [b for b in sql.batches if any(2 <= t < 62 for t in b)]
    assert sum(len(b) for b in fans) == 60
    assert max(len(b) for b in fans) == DECISION_COMMANDS // per  # not 30 a flush (half of 60)
    smalls = [b for b in sql.batches if any(100 <= t < 160 for t in b)]
    assert len(smalls) <= 3  # one command each: as many a flush as before (half, then the rest)
    assert [200] in sql.batches  # one decision over the bound still goes, alone


class ClaimingSql(FakeSql):
    """complete_activities_with_claim: the items as FakeSql answers them, then one claimed task
    per result that hands nothing back, up to the limit, while ``waiting`` lasts."""

    def __init__(self, waiting: int, **kwargs):
        super().__init__(**kwargs)
        self.waiting = waiting
        self.limits: list[int] = []

    async def complete_activities_with_claim(
        self, worker_id, queues, limit, items, hand_off, workflow_lease_secs, event_cap, byte_cap
    ):
        rows = await self.complete_activities(
            worker_id, items, hand_off, workflow_lease_secs, event_cap, byte_cap
        )
        self.limits.append(limit)
        freed = sum(1 for row in rows if row["outcome"] == "completed" and row["handed"] is None)
        n = min(limit, freed, self.waiting)
        self.waiting -= n
        claimed = [{"task_id": 1000 + self.waiting + i, "kind": "activity"} for i in range(n)]
        return rows + [
            {"task_id": t["task_id"], "outcome": "claimed", "message": None, "handed": t} for t in claimed
        ]


class FakeLane:
    def __init__(self, sql):
        self.sql = sql
        self.backlog = True


class ClaimingWorker(FakeWorker):
    def __init__(self, sql):
        super().__init__(sql)
        self.queues = ["q"]
        self.spawned: list[dict] = []

    def result_claim_limit(self, lane, results) -> int:
        return 8 if lane.backlog else 0

    def run_claimed(self, task) -> None:
        self.spawned.append(task)


def test_a_batch_claims_for_the_slots_its_results_free_and_its_last_completed_handler_runs_them():
    # Four results, one refused (stale) and one handing its run's workflow task back: two free
    # their slots, so two tasks are claimed, and both go to the last completed result (3), whose
    # handler resumes after the others have ended.
    sql = ClaimingSql(waiting=5, stale={4}, handed={2: {"task_id": 99, "kind": "workflow"}})
    worker = ClaimingWorker(sql)
    lane = FakeLane(sql)

    async def main():
        batcher = CompletionBatcher(worker, lane=lane)
        answers = await asyncio.gather(
            *(batcher.complete(i, 1, i) for i in (1, 2, 3, 4)), return_exceptions=True
        )
        return answers, batcher

    (one, two, three, four), batcher = run(main())
    assert one == Recorded() and two.handed == {"task_id": 99, "kind": "workflow"} and two.claimed is None
    assert [t["task_id"] for t in three.claimed] == [1003, 1004]
    assert all(t["_lane"] is lane for t in three.claimed)
    assert isinstance(four, StaleTask)
    assert (batcher.claimed, sql.limits, worker.spawned) == (2, [8], [])
    assert lane.backlog  # the claim came back full: work is still waiting


def test_a_short_claim_ends_the_batches_claims_until_the_claim_loop_finds_work_again():
    sql = ClaimingSql(waiting=1)
    lane = FakeLane(sql)

    async def main():
        batcher = CompletionBatcher(ClaimingWorker(sql), lane=lane)
        first = await asyncio.gather(*(batcher.complete(i, 1, i) for i in (1, 2)))
        second = await batcher.complete(3, 1, 3)
        return first, second

    (one, two), three = run(main())
    assert one.claimed is None and [t["task_id"] for t in two.claimed] == [1000]
    assert not lane.backlog  # one claimed for two freed slots: nothing more waits
    assert three == Recorded() and sql.limits == [8]  # the next batch did not claim


@activity
async def _noop(ctx) -> None:
    return None


def test_a_worker_of_many_slots_batches_up_to_half_of_them():
    # Up to 200 slots a batch carries MAX_BATCH results, as before; above, half the slots.
    assert result_batch_size(20) == result_batch_size(200) == MAX_BATCH == 100
    assert (result_batch_size(202), result_batch_size(500)) == (101, 250)
    for concurrency, size in ((50, 100), (500, 250)):
        worker = Worker(App(activities=[_noop]), "postgresql://unused/db", concurrency=concurrency)
        assert worker.completions._max_batch == size
        assert worker.decisions._max_batch == MAX_BATCH  # decisions keep theirs


def test_a_batch_of_a_busy_worker_carries_what_piled_up_behind_the_one_in_flight():
    sql = FakeSql()

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql), result_batch_size(500))
        first = asyncio.ensure_future(batcher.complete(1, 1, None))
        await asyncio.sleep(0.001)  # its flush is in flight
        await asyncio.gather(first, *(batcher.complete(i, 1, None) for i in range(2, 302)))

    run(main())
    assert [len(batch) for batch in sql.batches] == [1, 250, 50]
