"""harvest.worker.heartbeats: the background sends of an async activity's ``ctx.heartbeat`` and
``ctx.record_llm_call`` (the integration tests run them against a real worker:
tests/integration/test_heartbeat_unawaited.py, test_activity_context_sync_async.py)."""

from __future__ import annotations

import asyncio

import pytest

from harvest.core.errors import StaleTask
from harvest.worker.executors import ProcessActivityContext
from harvest.worker.heartbeats import MAX_INTERVAL, Beats, Records, send_interval


class Sends:
    """A send that records its details and the most sends ever in flight at once; ``gate``
    holds each send until it is set."""

    def __init__(self, fail: Exception | None = None):
        self.details: list = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = fail

    async def __call__(self, details, *rest):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
            if self.fail is not None:
                raise self.fail
            self.details.append(details)
        finally:
            self.in_flight -= 1


async def steps(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_the_interval_is_half_the_heartbeat_timeout_at_most_30_s() -> None:
    assert send_interval(0.6) == 0.3
    assert send_interval(3600) == MAX_INTERVAL == 30.0
    assert send_interval(None) == MAX_INTERVAL


def test_calls_within_an_interval_coalesce_and_no_details_keep_the_latest() -> None:
    async def main() -> list:
        sends = Sends()
        beats = Beats(sends, interval=60)
        beats.beat({"n": 1})  # an idle start: sent at once
        await steps()
        for n in range(2, 50):
            beats.beat({"n": n})
        beats.beat(None)  # no new details: the pending ones stay
        await steps()
        assert sends.details == [{"n": 1}]  # the rest wait out the interval
        await beats.end(RuntimeError("failed"), "test")  # a failure sends the pending details first
        return sends.details

    assert asyncio.run(main()) == [{"n": 1}, {"n": 49}]


def test_a_completed_attempt_drops_its_pending_details_and_sends_nothing_after() -> None:
    async def main() -> None:
        sends = Sends()
        beats = Beats(sends, interval=60)
        beats.beat(1)
        await steps()
        beats.beat(2)
        await beats.end(None, "test")
        beats.beat(3)  # (a task the activity left behind calls on: recorded, never sent)
        await steps()
        assert sends.details == [1]

    asyncio.run(main())


def test_one_send_in_flight_and_aheartbeat_sends_after_it() -> None:
    async def main() -> None:
        sends = Sends()
        beats = Beats(sends, interval=0)
        sends.gate.clear()
        beats.beat("a")
        await steps()
        assert sends.in_flight == 1
        beats.beat("b")
        now = asyncio.ensure_future(beats.send_now("c"))  # await ctx.aheartbeat("c")
        await steps()
        assert sends.in_flight == 1  # it waits for the send in flight
        sends.gate.set()
        await now
        await steps()
        await beats.end(None, "test")
        assert sends.most_in_flight == 1
        assert sends.details == ["a", "c"]  # "c" replaced the pending "b"

    asyncio.run(main())


def test_a_failed_send_raises_at_the_next_call_and_that_call_records_nothing() -> None:
    async def main() -> None:
        sends = Sends(fail=StaleTask("task 1 is no longer held by this worker"))
        beats = Beats(sends, interval=0)
        beats.beat("a")
        await steps()
        with pytest.raises(StaleTask, match="no longer held"):
            beats.beat("b")
        sends.fail = None
        beats.beat("c")  # raised once: the next call sends again
        await steps()
        await beats.end(None, "test")
        assert sends.details == ["c"]

    asyncio.run(main())


def test_an_error_the_activity_returned_without_seeing_is_raised_at_its_end() -> None:
    async def main() -> None:
        beats = Beats(Sends(fail=StaleTask("task 1 is no longer held by this worker")), interval=0)
        beats.beat("a")
        await steps()
        with pytest.raises(StaleTask):
            await beats.end(None, "test")

    asyncio.run(main())


def test_an_activity_s_own_error_stays_the_outcome_and_the_unseen_one_is_logged(caplog) -> None:
    async def main() -> None:
        beats = Beats(Sends(fail=StaleTask("task 1 is no longer held by this worker")), interval=0)
        beats.beat("a")
        await steps()
        await beats.end(ValueError("its own"), "activity x")

    asyncio.run(main())
    expected = "activity x: a heartbeat it sent without awaiting failed: StaleTask: task 1 is no longer held"
    assert expected in caplog.text


def test_the_end_waits_for_a_send_in_flight_and_stops_a_waiting_sender() -> None:
    async def main() -> None:
        sends = Sends()
        beats = Beats(sends, interval=3600)
        sends.gate.clear()
        beats.beat("a")
        await steps()
        ending = asyncio.ensure_future(beats.end(None, "test"))
        await steps()
        assert not ending.done()  # the send in flight is not cut
        sends.gate.set()
        await asyncio.wait_for(ending, 10)  # and the sender, waiting out its hour, is stopped
        assert sends.details == ["a"]

    asyncio.run(main())


async def stopped_by_the_worker(beats: Beats, details: list) -> None:
    """An attempt's task that heartbeats ``details`` and waits, cancelled as the worker's stop
    cancels it; its handler ends the heartbeats as the worker's does (worker/activities.py)."""
    started = asyncio.Event()

    async def attempt() -> None:
        try:
            for d in details:
                beats.beat(d)
                await steps()
            started.set()
            await asyncio.Event().wait()
        except BaseException as raised:
            await beats.end(raised, "test")
            raise

    task = asyncio.get_running_loop().create_task(attempt())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_the_workers_stop_sends_the_pending_details_before_the_task_is_handed_back() -> None:
    """Before: the stop cancelled the sender and dropped them, so the next attempt resumed from
    details up to one interval old."""

    async def main() -> list:
        sends = Sends()
        await stopped_by_the_worker(Beats(sends, interval=60), [{"n": 1}, {"n": 7}])
        return sends.details

    assert asyncio.run(main()) == [{"n": 1}, {"n": 7}]


def test_the_workers_stop_does_not_wait_past_its_bound_for_a_send(monkeypatch, caplog) -> None:
    monkeypatch.setattr("harvest.worker.heartbeats.STOP_FLUSH_SECS", 0.05)

    async def main() -> list:
        sends = Sends()
        beats = Beats(sends, interval=60)
        beats.beat({"n": 1})
        await steps()
        sends.gate.clear()  # the database stops answering
        await stopped_by_the_worker(beats, [{"n": 2}])
        return sends.details

    assert asyncio.run(main()) == [{"n": 1}]
    assert "were not sent before the stop" in caplog.text


# -- Records: ctx.record_llm_call in an async def activity (the same sender, each call kept)
def test_records_are_each_sent_in_order_and_sent_when_the_attempt_completes() -> None:
    """Heartbeat details are dropped at a completion; ledger records are not (the calls were
    made): the end sends the ones still queued."""

    async def main() -> list:
        sends = Sends()
        records = Records(sends)
        sends.gate.clear()
        for n in range(3):
            records.add(f"m{n}", n)
        await steps()
        ending = asyncio.ensure_future(records.end(None, "test"))
        await steps()
        sends.gate.set()
        await asyncio.wait_for(ending, 10)
        return sends.details

    assert asyncio.run(main()) == ["m0", "m1", "m2"]


def test_a_failed_record_is_raised_by_the_next_call_which_records_nothing() -> None:
    async def main() -> None:
        sends = Sends(fail=StaleTask("task 1 is no longer held by this worker"))
        records = Records(sends)
        records.add("m0", 1)
        await steps()
        with pytest.raises(StaleTask):
            records.add("m1", 1)
        assert not records._pending()
        sends.fail = None
        records.add("m2", 1)
        await steps()
        await records.end(None, "test")
        assert sends.details == ["m2"]

    asyncio.run(main())


def test_an_awaited_record_raises_the_unseen_error_then_goes_after_the_queued_ones() -> None:
    async def main() -> list:
        sends = Sends(fail=StaleTask("task 1 is no longer held by this worker"))
        records = Records(sends)
        records.add("m0", 1)
        await steps()
        with pytest.raises(StaleTask):
            await records.send_now("m1", 1)
        sends.fail = None
        sends.gate.clear()
        records.add("m2", 1)
        awaited = asyncio.ensure_future(records.send_now("m3", 1))
        await steps()
        sends.gate.set()
        await asyncio.wait_for(awaited, 10)
        return sends.details

    assert asyncio.run(main()) == ["m2", "m3"]


def test_the_workers_stop_sends_the_queued_records_before_the_task_is_handed_back() -> None:
    async def main() -> list:
        sends = Sends()
        records = Records(sends)
        started = asyncio.Event()

        async def attempt() -> None:
            try:
                sends.gate.clear()
                records.add("m0", 1)
                records.add("m1", 1)
                started.set()
                await asyncio.Event().wait()
            except BaseException as raised:
                sends.gate.set()
                await records.end(raised, "test")
                raise

        task = asyncio.get_running_loop().create_task(attempt())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return sends.details

    assert asyncio.run(main()) == ["m0", "m1"]


def test_a_process_activity_s_ctx_names_the_thread_executor_for_what_needs_the_worker() -> None:
    """Before: an AttributeError for each but heartbeat (and for its logger and cancel_requested)."""
    ctx = ProcessActivityContext("e", "w", "wf", "crunch", "default", None, 1, 1)
    with pytest.raises(RuntimeError, match=r"cannot record model calls .* run it in a thread"):
        ctx.record_llm_call("model-a", 1)
    with pytest.raises(RuntimeError, match=r"cannot hand its task token on .* run it in a thread"):
        ctx.complete_async()
    assert ctx.cancel_requested is False
    assert ctx.logger.extra == {
        "execution_id": "e",
        "workflow_id": "w",
        "workflow": "wf",
        "activity": "crunch",
        "attempt": 1,
    }
