"""A workflow task whose run is out in another handler of the same worker waits for it
(harvest/worker/workflows.py, StickyCache: held, wait_back, release).

A decision commits before its handler hears the answer and puts the run back; under load the
run's next task can be claimed in between, and found nothing in the cache. It now waits for the
holder (bounded) and takes the run it puts back; a holder that drops the run wakes it at once,
to replay. No timed assertions: each waiter is a task, and the loop's steps are counted.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from harvest.runtime import WorkflowRun
from harvest.worker.workflows import StickyCache

FOREVER = 3600.0  # a bound no test reaches: a waiter that returns was woken


class FakeRun:
    """What the cache reads of a run."""

    def __init__(self, last_event_id: int = 3, settled: bool = True):
        self.last_event_id = last_event_id
        self.payload_bytes = 0
        self.settled = settled
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _run(last_event_id: int = 3, settled: bool = True) -> WorkflowRun:
    return cast(WorkflowRun, FakeRun(last_event_id, settled))


async def _steps(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _waiter(cache: StickyCache, holder: object, timeout: float = FOREVER) -> WorkflowRun | None:
    """A workflow task's take (workflows.run_workflow_task): wait while held, then take."""
    if cache.held("e"):
        await cache.wait_back("e", timeout)
    return cache.take("e", holder)


def test_a_task_waits_for_the_run_its_previous_task_puts_back() -> None:
    async def main() -> None:
        cache = StickyCache(10)
        first, second = {"task": 1}, {"task": 2}
        assert cache.take("e", first) is None  # the run's first task: a miss, and held
        assert cache.held("e")
        waiting = asyncio.ensure_future(_waiter(cache, second))
        await _steps()
        assert not waiting.done()  # the first handler has not heard its commit yet
        run = _run()
        cache.put("e", run)  # it has: the run goes back ...
        cache.release("e", first)  # ... and the hold ends, in the same step
        assert await waiting is run
        assert (cache.hits, cache.misses, cache.waits, cache.wait_timeouts) == (1, 1, 1, 0)
        assert cache.held("e") and "e" not in cache.ids()  # out again, in the second's hands
        cache.release("e", first)  # a second release of an ended hold changes nothing
        cache.put("e", run)
        cache.release("e", second)
        assert not cache.held("e") and cache.peek("e") is run

    asyncio.run(main())


def test_a_holder_that_drops_the_run_wakes_the_waiter_to_replay_at_once() -> None:
    async def main() -> None:
        cache = StickyCache(10)
        cache.put("e", _run())
        first, second = {"task": 1}, {"task": 2}
        run = cache.take("e", first)
        waiting = asyncio.ensure_future(_waiter(cache, second))
        await _steps()
        assert not waiting.done()
        cast(Any, run).close()  # refused, superseded, stale ... : closed, not put back
        cache.release("e", first)
        await _steps()
        assert waiting.done() and waiting.result() is None  # a miss: it replays, with no wait left
        assert cache.wait_timeouts == 0
        assert cache.held("e")  # now the replaying task holds it

    asyncio.run(main())


def test_a_holder_that_raises_releases_the_run_in_its_finally() -> None:
    async def holder(cache: StickyCache, task: dict[str, int], go: asyncio.Event) -> None:
        # As run_workflow_task: take, then release in a finally, whatever happens in between.
        try:
            cache.take("e", task)
            await go.wait()
            raise RuntimeError("the handler's commit failed")
        finally:
            cache.release("e", task)

    async def main() -> None:
        cache = StickyCache(10)
        cache.put("e", _run())
        go = asyncio.Event()
        failing = asyncio.ensure_future(holder(cache, {"task": 1}, go))
        await _steps()
        waiting = asyncio.ensure_future(_waiter(cache, {"task": 2}))
        await _steps()
        assert not waiting.done()
        go.set()
        await asyncio.gather(failing, return_exceptions=True)
        await _steps()
        assert waiting.done() and waiting.result() is None and cache.wait_timeouts == 0

    asyncio.run(main())


def test_a_waiter_cancelled_at_shutdown_holds_nothing_and_the_holder_still_puts_back() -> None:
    async def main() -> None:
        cache = StickyCache(10)
        cache.put("e", _run())
        first = {"task": 1}
        run = cache.take("e", first)
        waiting = asyncio.ensure_future(_waiter(cache, {"task": 2}))
        await _steps()
        waiting.cancel()  # the drain's grace ran out (Worker._drain cancels what is in flight)
        await asyncio.gather(waiting, return_exceptions=True)
        assert waiting.cancelled()
        cache.put("e", cast(WorkflowRun, run))
        cache.release("e", first)
        assert not cache.held("e") and cache.peek("e") is run
        assert cache.take("e", {"task": 3}) is run  # the next task finds it

    asyncio.run(main())


def test_two_waiters_take_turns() -> None:
    async def main() -> None:
        cache = StickyCache(10)
        cache.put("e", _run())
        first, second, third = {"task": 1}, {"task": 2}, {"task": 3}
        run = cache.take("e", first)
        b = asyncio.ensure_future(_waiter(cache, second))
        c = asyncio.ensure_future(_waiter(cache, third))
        await _steps()
        cache.put("e", cast(WorkflowRun, run))
        cache.release("e", first)
        await _steps()
        assert b.done() and b.result() is run  # the first waiter takes it ...
        assert not c.done()  # ... and the other waits for that one in turn
        cast(Any, run).close()  # which drops it
        cache.release("e", second)
        await _steps()
        assert c.done() and c.result() is None
        assert (cache.waits, cache.wait_timeouts) == (2, 0)

    asyncio.run(main())


def test_a_wait_is_bounded_and_the_late_put_keeps_the_run_that_read_further() -> None:
    async def main() -> None:
        cache = StickyCache(10)
        first, second = {"task": 1}, {"task": 2}
        cache.take("e", first)  # never released while the second task waits
        assert await _waiter(cache, second, timeout=0.01) is None  # ran out: it replays
        assert cache.wait_timeouts == 1
        newer, older = _run(last_event_id=9), _run(last_event_id=5)
        cache.put("e", newer)  # the replaying task's run
        cache.release("e", second)
        cache.put("e", older)  # the first handler's, late
        cache.release("e", first)  # (not its hold any more: nothing to release)
        assert cache.peek("e") is newer and cast(Any, older).closed and not cast(Any, newer).closed

    asyncio.run(main())


def test_a_decision_ahead_never_waits_and_its_hold_is_waited_for() -> None:
    async def main() -> None:
        cache = StickyCache(10)
        cache.put("e", _run())
        workflow_task, activity_task = {"task": 1}, {"task": 2}
        run = cache.take("e", workflow_task)
        # The run is out in a workflow task's handler: a result's decision ahead does not wait
        # for it (it is made the plain way), so no handler waits on one that waits on it.
        assert cache.take_settled("e", activity_task) is None
        cache.put("e", cast(WorkflowRun, run))
        cache.release("e", workflow_task)
        assert cache.take_settled("e", activity_task) is run  # settled: out, held by the activity
        waiting = asyncio.ensure_future(_waiter(cache, {"task": 3}))
        await _steps()
        assert not waiting.done()  # a workflow task of the run waits for the decision ahead
        cache.put("e", cast(WorkflowRun, run))  # its commit's answer: decided, put back
        cache.release("e", activity_task)
        assert await waiting is run

    asyncio.run(main())


def test_a_worker_without_a_cache_never_waits() -> None:
    cache = StickyCache(0)  # Worker(cache_size=0): every task replays, none waits for another's run
    cache.take("e", {"task": 1})
    assert not cache.held("e")
