"""Slots promised to hand-offs (Worker.reserve_slots): a finishing handler's own slot is its to give."""

from __future__ import annotations

from harvest import App, Worker, activity


@activity
async def noop(ctx) -> None:
    return None


def saturated_worker(concurrency: int) -> Worker:
    worker = Worker(App(activities=[noop]), "postgresql://unused/db", concurrency=concurrency)
    worker._inflight = {(i, 1): object() for i in range(concurrency)}  # every slot busy
    return worker


def test_handlers_finishing_together_can_each_hand_on_one_task():
    worker = saturated_worker(4)
    grants = [worker.reserve_slots(1) for _ in range(4)]
    assert grants == [1, 1, 1, 1]  # each its own slot, none of the (zero) free ones
    assert worker.reserve_slots(3) == 1  # more than its own needs free slots: none
    for granted in [*grants, 1]:
        worker.release_slots(granted)
    assert worker._reserved == 0


def test_extra_slots_come_out_of_the_free_ones():
    worker = saturated_worker(4)
    worker._inflight.pop((0, 1))
    worker._inflight.pop((1, 1))  # two free slots
    assert worker.reserve_slots(5) == 3  # its own and both free ones
    assert worker.reserve_slots(2) == 1  # only its own left
    worker.release_slots(3)
    worker.release_slots(1)
    assert worker._reserved == 0


def test_no_slots_when_hand_off_is_off():
    worker = Worker(App(activities=[noop]), "postgresql://unused/db", concurrency=2, hand_off=False)
    assert worker.reserve_slots(1) == 0
