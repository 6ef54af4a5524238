"""A worker's stop ends even when a background task loses its cancellation (worker/stopping.py)."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from harvest.worker import event_loop, stopping


async def _loses_the_first_cancellation(ran: list[str]) -> None:
    # What a driver that turns a CancelledError into an ordinary error does to a retry loop.
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        ran.append("first cancellation swallowed")
    await asyncio.sleep(3600)


async def _never_ends() -> None:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass


async def _fails() -> None:
    raise RuntimeError("boom")


@pytest.fixture(autouse=True)
def short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stopping, "STOP_WAIT_SECS", 0.05)


def test_a_task_that_loses_its_first_cancellation_is_cancelled_again_and_stops() -> None:
    async def main() -> asyncio.Task[None]:
        ran: list[str] = []
        task = asyncio.create_task(_loses_the_first_cancellation(ran), name="listener-0")
        await asyncio.sleep(0)
        await stopping.cancel_and_wait([task], "background")
        assert ran == ["first cancellation swallowed"]
        return task

    assert asyncio.run(main()).cancelled()


def test_a_task_that_ignores_every_cancellation_is_named_in_the_log_and_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="harvest.worker")

    async def main() -> tuple[bool, bool]:
        stuck = asyncio.create_task(_never_ends(), name="queries-1")
        fine = asyncio.create_task(asyncio.sleep(3600), name="scanner-1")
        await asyncio.sleep(0)
        await stopping.cancel_and_wait([stuck, fine], "background")  # returns: the stop goes on
        return stuck.done(), fine.cancelled()

    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(main()) == (False, True)
    finally:
        loop.close()  # the stuck task is abandoned with its loop, as a stopping worker leaves it
    [record] = [r for r in caplog.records if "did not stop" in r.getMessage()]
    assert "1 background task(s)" in record.getMessage() and "queries-1" in record.getMessage()


def test_a_failed_task_is_reaped_without_an_unretrieved_exception_report() -> None:
    reports: list[dict[str, object]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: reports.append(context))
        task = asyncio.create_task(_fails())
        await asyncio.sleep(0.01)
        await stopping.cancel_and_wait([task], "background")
        del task

    asyncio.run(main())
    assert reports == []


def test_a_process_loop_ends_though_a_task_ignores_its_cancellation(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # harvest worker's loop (worker/event_loop.py): asyncio.run's own end would wait for the
    # stuck task forever. One a stop already left behind (and named) is not waited for again.
    monkeypatch.setattr(event_loop, "LEFTOVER_WAIT_SECS", 0.05)
    caplog.set_level(logging.WARNING, logger="harvest.worker")

    async def main() -> str:
        left = asyncio.create_task(_never_ends(), name="in-flight-1")
        await asyncio.sleep(0)
        await stopping.cancel_and_wait([left], "in-flight")
        others.append(asyncio.create_task(_never_ends(), name="other-1"))
        await asyncio.sleep(0)
        return "returned"

    others: list[asyncio.Task[None]] = []
    answers: list[str] = []
    runs = threading.Thread(
        target=lambda: answers.append(event_loop.choose_event_loop("asyncio").run(main())), daemon=True
    )
    runs.start()
    runs.join(30)  # (a bound that only tells an end from a hang)
    assert answers == ["returned"]
    messages = [r.getMessage() for r in caplog.records]
    assert "1 task(s) still running 0s after their cancellation" in " ".join(messages)  # other-1 only


def test_a_task_left_behind_is_held_until_it_ends_and_no_longer() -> None:
    # One registry (worker/stopping.py) for both: what a stop named and gave up on, and what a
    # closed loop was left with (worker/event_loop.py). Held while running, dropped once ended.
    async def main() -> tuple[bool, bool]:
        release = asyncio.Event()

        async def late() -> None:
            while not release.is_set():
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    pass  # ignores its cancellation until released

        task = asyncio.create_task(late(), name="in-flight-2")
        await asyncio.sleep(0)
        await stopping.cancel_and_wait([task], "in-flight")
        held = stopping.left_behind(task)
        release.set()
        await task
        await asyncio.sleep(0)  # (its done callbacks)
        return held, stopping.left_behind(task)

    assert asyncio.run(main()) == (True, False)


def test_a_claim_that_lands_after_the_stop_began_gives_its_tasks_back() -> None:
    # A batch of activity results that claimed for the slots it freed (or a Redis claim) in
    # flight when the stop began: a stopping worker releases what it claimed instead of running it.
    from types import SimpleNamespace

    from harvest import App, Worker

    released: list[tuple[int, int]] = []

    class Sql:
        async def release_task(self, task_id: int, token: int) -> bool:
            released.append((task_id, token))
            return True

    async def main() -> tuple[int, int]:
        worker = Worker(App(), "postgresql://unused/db")
        worker._stopping.set()
        lane = SimpleNamespace(shard=0, sql=Sql(), dispatched=0)
        task = {"task_id": 7, "fencing_token": 3, "kind": "activity", "queue": "q", "_lane": lane}
        worker.run_claimed(task)
        pending = len(worker._giving_back)
        await asyncio.wait(list(worker._giving_back))
        return pending, len(worker._inflight)

    assert asyncio.run(main()) == (1, 0)
    assert released == [(7, 3)]
