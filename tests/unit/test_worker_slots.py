"""Slots promised to hand-offs (Worker.reserve_slots): a finishing handler's own slot is its to
give, for a bounded chain of hand-offs."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from harvest import App, Worker, activity
from harvest.worker import worker as worker_module


@activity
async def noop(ctx) -> None:
    return None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def saturated_worker(concurrency: int, clock: Clock, **options) -> Worker:
    worker = Worker(App(activities=[noop]), "postgresql://unused/db", concurrency=concurrency, **options)
    worker._now = clock
    for i in range(concurrency):  # every slot busy, each claimed just now
        worker._inflight[key(i)] = object()
        worker._slot_claimed_at[key(i)] = clock.now
    return worker


# A task in flight is keyed by (shard, task id, fencing token), its shard the lane it came
# from (worker/lanes.py): one database is shard 0.
SHARD_0 = SimpleNamespace(shard=0, dispatched=0)


def key(i: int) -> tuple[int, int, int]:
    return (0, i, 1)


def task(i: int) -> dict:
    return {"task_id": i, "fencing_token": 1, "_lane": SHARD_0}


def test_handlers_finishing_together_can_each_hand_on_one_task():
    worker = saturated_worker(4, Clock())
    grants = [worker.reserve_slots(1, task(i)) for i in range(4)]
    assert [g.slots for g in grants] == [1, 1, 1, 1]  # each its own, none of the (zero) free ones
    assert worker.reserve_slots(3, task(0)).slots == 1  # more than its own needs free slots: none
    for grant in grants:
        worker.release_slots(grant)
    assert worker._reserved == 0


def test_extra_slots_come_out_of_the_free_ones():
    worker = saturated_worker(4, Clock())
    for i in (0, 1):  # two free slots
        del worker._inflight[key(i)]
    grant = worker.reserve_slots(5, task(2))
    assert (grant.slots, grant.from_free) == (3, 2)  # its own and both free ones
    assert worker.reserve_slots(2, task(3)).slots == 1  # only its own left
    worker.release_slots(grant)
    assert worker._reserved == 0


def test_a_slot_handed_on_for_too_long_goes_back_to_the_claims(monkeypatch):
    clock = Clock()
    worker = saturated_worker(2, clock)
    release = asyncio.Event()

    async def blocked_activity(_worker, _task):
        await release.wait()

    monkeypatch.setattr(worker_module, "run_activity_task", blocked_activity)

    async def main():
        # A handed task takes over its caller's slot, with the time that slot was claimed.
        worker.run_handed({"task_id": 9, "fencing_token": 1, "kind": "activity", "queue": "q"}, task(0))
        assert worker._slot_claimed_at[key(9)] == 100.0
        clock.now += worker_module.HAND_OFF_CHAIN_SECS - 0.01
        assert worker.reserve_slots(1, task(9)).slots == 1  # still within the chain's time
        clock.now += 0.02
        # Past it: the commit hands nothing, the slot frees and the claim loop takes the
        # oldest pending work (a new run, a signalled run, a due timer).
        assert worker.reserve_slots(1, task(9)).slots == 0
        assert worker.reserve_slots(1, task(1)).slots == 0  # claimed as long ago
        release.set()
        await worker._inflight[key(9)]
        assert key(9) not in worker._slot_claimed_at  # forgotten with the task

    asyncio.run(main())


def test_a_spawned_task_is_stamped_by_the_workers_clock(monkeypatch):
    """A slot's claim time comes from Worker._now, the clock reserve_slots ages it on (an
    injected clock, here, stands well apart from the loop's)."""
    clock = Clock()
    clock.now = 5.0
    worker = saturated_worker(1, clock)

    async def quick_activity(_worker, _task):
        return None

    monkeypatch.setattr(worker_module, "run_activity_task", quick_activity)

    async def main():
        worker._spawn(dict(task(7), kind="activity", queue="q"))
        assert worker._slot_claimed_at[key(7)] == 5.0
        await worker._inflight[key(7)]

    asyncio.run(main())


def test_no_slots_when_hand_off_is_off():
    worker = saturated_worker(2, Clock(), hand_off=False)
    assert worker.reserve_slots(1, task(0)).slots == 0


def test_a_result_batch_claims_only_while_work_waits_and_only_when_small():
    """Worker.result_claim_limit (worker/completions.py: the batch's claim for the slots it frees)."""
    worker = Worker(App(activities=[noop]), "postgresql://unused/db", concurrency=50, claim_batch=40)
    lane = SimpleNamespace(backlog=True)
    limit = worker_module.RESULT_CLAIM_MAX_BATCH
    assert worker.result_claim_limit(lane, 1) == 40
    assert worker.result_claim_limit(lane, limit) == 40
    assert worker.result_claim_limit(lane, limit + 1) == 0  # a large batch leaves it to the claim loop
    lane.backlog = False  # the last claim came back short: nothing is waiting
    assert worker.result_claim_limit(lane, 1) == 0
    lane.backlog = True
    worker.hand_off = False  # it rides on hand-off
    assert worker.result_claim_limit(lane, 1) == 0
    worker.hand_off = True
    worker.request_stop()  # not while stopping
    assert worker.result_claim_limit(lane, 1) == 0


def test_a_claim_in_flight_keeps_its_slots_from_a_hand_off(monkeypatch):
    """The claim loop's claim and a decision's hand-off must not both be promised the same free
    slots: the worker would run more tasks than its concurrency."""
    worker = Worker(App(activities=[noop]), "postgresql://unused/db", concurrency=4, claim_batch=8)
    worker._now = Clock()
    worker._inflight[key(0)] = object()  # a workflow task deciding: three slots are free
    answer = asyncio.Event()

    class Sql:
        async def claim_tasks(self, worker_id, queues, limit, lease):
            await answer.wait()
            return [dict(task(10 + i), kind="activity", queue="q") for i in range(limit - 1)]

    lane = SimpleNamespace(shard=0, dispatched=0, sql=Sql(), backlog=False, usable=True)
    lane.beat_at = time.monotonic()  # (its heartbeat just now: the claim needs none first, Worker._silent)
    worker.lanes = [lane]

    async def blocked_activity(_worker, _task):
        await asyncio.Event().wait()

    monkeypatch.setattr(worker_module, "run_activity_task", blocked_activity)

    async def main():
        claim = asyncio.create_task(worker._claim())
        await asyncio.sleep(0)  # the claim for the three free slots is in flight
        grant = worker.reserve_slots(5, task(0))
        assert (grant.slots, grant.from_free) == (1, 0)  # only the decider's own slot
        answer.set()
        claimed, full = await claim
        assert len(claimed) == 2 and not full
        assert len(worker._inflight) + worker._reserved <= worker.concurrency
        for handle in list(worker._inflight.values())[1:]:
            handle.cancel()

    asyncio.run(main())
