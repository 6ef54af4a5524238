"""What a finished task wakes the claim loop for (Worker._finished): a claim, or only a fresh
read of the next due time when every shard's producers already notify this worker."""

from __future__ import annotations

import asyncio

import pytest

from harvest import App, Worker, activity, workflow
from harvest.declare.flow_control import Concurrency


@activity
async def noop(ctx) -> None:
    return None


@workflow(concurrency=Concurrency(key="input", limit=1, on_conflict="defer"))
async def one_per_key(ctx, key: str) -> None:
    return None


def _woken_for(app: App, options: dict | None, sleeping: bool) -> str:
    async def go() -> str:
        worker = Worker(app, "postgresql://unused/db")
        worker.lanes[0].sleeping = sleeping
        worker._finished({"task_id": 1, "kind": "activity", "options": options})
        assert worker._wake.is_set()
        return "due" if worker._due_only else "claim"

    return asyncio.run(go())


PLAIN = App(activities=[noop])


def test_a_worker_producers_notify_only_rereads_the_next_due_time():
    assert _woken_for(PLAIN, {"retry": {}}, sleeping=True) == "due"
    assert _woken_for(PLAIN, None, sleeping=True) == "due"


def test_a_busy_worker_claims_again():
    assert _woken_for(PLAIN, None, sleeping=False) == "claim"


@pytest.mark.parametrize("gate", [{"concurrency_key": "k", "max_concurrent": 1}, {"rate_limit": {"rps": 1}}])
def test_a_task_that_held_an_admission_gate_makes_it_claim(gate: dict):
    assert _woken_for(PLAIN, gate, sleeping=True) == "claim"


def test_an_app_with_flow_policies_claims_after_every_task():
    assert _woken_for(App(workflows=[one_per_key], activities=[noop]), None, sleeping=True) == "claim"


def test_a_wake_that_asks_for_a_claim_is_not_downgraded_by_a_finish():
    async def go() -> bool:
        worker = Worker(PLAIN, "postgresql://unused/db")
        worker.lanes[0].sleeping = True
        worker.wake()  # a notification, a scan that moved work, a stop
        worker._finished({"task_id": 1, "kind": "activity", "options": None})
        return worker._due_only

    assert asyncio.run(go()) is False


def test_the_idle_loop_rereads_the_due_time_on_a_finish_and_returns_to_claim_on_a_wake():
    class Sql:
        reads = 0

        async def next_due_at(self, queues: list[str]) -> None:
            Sql.reads += 1
            return

    async def go() -> list[int]:
        worker = Worker(PLAIN, "postgresql://unused/db", poll_interval=30.0)
        lane = worker.lanes[0]
        lane.sql, lane.ready, lane.sleeping = Sql(), True, True
        idle = asyncio.create_task(worker._idle())
        seen = []
        for _ in range(3):  # three tasks finish: the loop reads the due time again each time
            await asyncio.sleep(0.01)
            seen.append(Sql.reads)
            worker._finished({"task_id": 1, "kind": "activity", "options": None})
        await asyncio.sleep(0.01)
        assert not idle.done()  # no claim: still asleep
        worker.wake()  # new work notified: back to the claim loop
        await asyncio.wait_for(idle, 5)
        return seen

    assert asyncio.run(go()) == [1, 2, 3]


class _Shard:
    """A shard's SQL API as the claim loop uses it: claims answer ``answers`` in turn."""

    def __init__(self, answers: list[list[dict]]):
        self.answers, self.reads = answers, 0
        self.hold: asyncio.Event | None = None  # set: next_due_at waits for it

    async def next_due_at(self, queues: list[str]) -> None:
        self.reads += 1
        if self.hold is not None:
            await self.hold.wait()

    async def claim_tasks(self, *args: object) -> list[dict]:
        return self.answers.pop(0)

    async def set_worker_sleeping(self, *args: object) -> None:
        return None


def _sleeping_worker(shard: _Shard) -> Worker:
    worker = Worker(PLAIN, "postgresql://unused/db", poll_interval=30.0)
    worker._spawn = lambda task, slot_claimed_at=None: None  # type: ignore[method-assign]
    lane = worker.lanes[0]
    lane.sql, lane.ready, lane.sleeping = shard, True, True
    worker.claim_decides = False  # (this fake answers claim_tasks only: no claim is left open)
    return worker


async def _idle_once(worker: Worker) -> None:
    idle = asyncio.create_task(worker._idle())
    await asyncio.sleep(0.01)
    worker.wake()
    await asyncio.wait_for(idle, 5)


def test_a_claim_that_found_work_does_not_read_the_due_time_again_an_end_or_an_empty_claim_does():
    task = {"task_id": 1, "kind": "workflow", "options": None, "queue": "default"}

    async def go() -> list[int]:
        shard = _Shard([[task], [task], []])
        worker = _sleeping_worker(shard)
        seen = []
        await _idle_once(worker)  # the first sleep reads it
        seen.append(shard.reads)
        await worker._claim()  # found work: the time read before stands
        await _idle_once(worker)
        seen.append(shard.reads)
        worker._finished(task)  # a task ended: it may have made a timer
        await _idle_once(worker)
        seen.append(shard.reads)
        await worker._claim()  # found work again
        await _idle_once(worker)
        seen.append(shard.reads)
        await worker._claim()  # came back empty: read again
        await _idle_once(worker)
        seen.append(shard.reads)
        return seen

    assert asyncio.run(go()) == [1, 1, 2, 2, 3]


@pytest.mark.parametrize(
    ("quiet", "reads"),
    [(False, 2), (True, 1)],
    ids=["an end that may make work due later: read again", "a quiet end: the read before it stands"],
)
def test_a_due_time_read_that_a_task_end_overtook(quiet: bool, reads: int):
    async def go() -> int:
        shard = _Shard([])
        worker = _sleeping_worker(shard)
        shard.hold = asyncio.Event()
        idle = asyncio.create_task(worker._idle())
        await asyncio.sleep(0.01)  # the read is in flight
        end = {"task_id": 1, "kind": "activity", "options": None}
        worker._finished({**end, "_nothing_due_later": True} if quiet else end)
        shard.hold.set()
        await asyncio.sleep(0.01)  # an end that may make work due later woke the loop: it read again
        worker.wake()
        await asyncio.wait_for(idle, 5)
        await _idle_once(worker)  # the read after the end (or, quiet, before it) stands
        return shard.reads

    assert asyncio.run(go()) == reads


@pytest.mark.parametrize(
    ("commands", "nothing_later"),
    [
        ([], True),
        ([{"type": "schedule_activity", "options": {"retry": {}}}, {"type": "complete_workflow"}], True),
        ([{"type": "schedule_activity", "options": {"rate_limit": {"rps": 1}}}], False),
        ([{"type": "schedule_activity", "options": {"concurrency_key": "k"}}], False),
        ([{"type": "schedule_activity"}, {"type": "start_timer", "seq": 2}], False),
        ([{"type": "fail_workflow"}], False),
        ([{"type": "start_child_workflow"}], False),
        ([{"type": "continue_as_new"}], False),
        ([{"type": "record_marker"}], False),
    ],
)
def test_which_decisions_make_nothing_due_later(commands: list[dict], nothing_later: bool):
    from harvest.worker.workflows import makes_nothing_due_later

    assert makes_nothing_due_later(commands) is nothing_later


def test_an_end_that_made_nothing_due_later_leaves_the_due_time_read_before_standing():
    plain = {"task_id": 1, "kind": "activity", "options": None, "queue": "default"}
    quiet = dict(plain, _nothing_due_later=True)

    async def go() -> list[int]:
        shard = _Shard([])
        worker = _sleeping_worker(shard)
        seen = []
        await _idle_once(worker)  # the first sleep reads it
        seen.append(shard.reads)
        worker._finished(quiet)  # a result recorded, an activity handed: the time stands
        await _idle_once(worker)
        seen.append(shard.reads)
        worker._finished(plain)  # an end that may have made a timer or a retry: read again
        await _idle_once(worker)
        seen.append(shard.reads)
        return seen

    assert asyncio.run(go()) == [1, 1, 2]


def test_only_a_claim_woken_by_a_notification_on_an_idle_worker_may_keep_its_transaction_open():
    async def go() -> list[bool]:
        worker = _sleeping_worker(_Shard([]))
        worker.claim_decides = True
        seen = []
        await _idle_once(worker)  # woken (a notification): the next claim may decide
        seen += [worker._claim_may_decide(), worker._claim_may_decide()]  # once
        idle = asyncio.create_task(worker._idle())
        await asyncio.sleep(0.01)
        # A task's end wakes it for the due time only (it sleeps on), then a notification.
        worker._finished({"task_id": 1, "kind": "activity", "options": None, "_nothing_due_later": True})
        await asyncio.sleep(0.01)
        assert not idle.done()
        worker.wake()
        await asyncio.wait_for(idle, 5)
        seen.append(worker._claim_may_decide())
        worker.poll_interval = 0.01
        await worker._idle()  # the poll's timeout, not a notification
        seen.append(worker._claim_may_decide())
        await _idle_once(worker)
        worker._inflight[(0, 1, 1)] = None  # type: ignore[assignment]  # busy: claims commit alone
        seen.append(worker._claim_may_decide())
        return seen

    assert asyncio.run(go()) == [True, False, True, False, False]
