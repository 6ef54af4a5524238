"""An activity's start_to_close bound (worker/activities.py, _run_within).

The first step of the activity's coroutine runs at once and a timer is armed only
when it suspends; these check that the bound, the results, exceptions and
cancellation behave as ``async with asyncio.timeout_at(deadline): await call`` does.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from harvest.worker.activities import StartToCloseExpired, _run_within


async def _deadline_in(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


def test_a_coroutine_that_never_suspends_returns_its_value_and_arms_no_timer() -> None:
    async def main() -> None:
        async def noop() -> int:
            return 7

        loop = asyncio.get_running_loop()
        before = len(loop._scheduled)  # type: ignore[attr-defined]
        assert await _run_within(noop(), await _deadline_in(300)) == 7
        assert len(loop._scheduled) == before  # type: ignore[attr-defined]

    asyncio.run(main())


def test_a_suspending_coroutine_gets_what_it_awaits_and_returns() -> None:
    async def main() -> None:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def waits() -> str:
            await asyncio.sleep(0)
            got = await future
            return got + "!"

        runner = asyncio.ensure_future(_run_within(waits(), await _deadline_in(300)))
        await asyncio.sleep(0)
        future.set_result("done")
        assert await runner == "done!"

    asyncio.run(main())


def test_no_deadline_means_no_bound() -> None:
    async def main() -> None:
        async def sleeps() -> str:
            await asyncio.sleep(0.01)
            return "slept"

        assert await _run_within(sleeps(), None) == "slept"

    asyncio.run(main())


def test_the_deadline_ends_a_suspended_activity_with_timeout_error() -> None:
    cleaned: list[str] = []

    async def main() -> None:
        async def hangs() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                cleaned.append("finally")

        with pytest.raises(TimeoutError):
            await _run_within(hangs(), await _deadline_in(0.01))

    asyncio.run(main())
    assert cleaned == ["finally"]  # the cancellation reached the activity's code


def test_a_first_step_that_overran_the_deadline_times_out_at_its_first_suspension() -> None:
    async def main() -> None:
        async def busy_then_waits() -> str:
            time.sleep(0.02)  # past the deadline, with no chance to be interrupted
            await asyncio.sleep(0)
            return "late"

        with pytest.raises(TimeoutError):
            await _run_within(busy_then_waits(), await _deadline_in(0.005))

    asyncio.run(main())


def test_exceptions_of_the_first_and_later_steps_propagate() -> None:
    async def main() -> None:
        async def fails_at_once() -> None:
            raise ValueError("first")

        async def fails_later() -> None:
            await asyncio.sleep(0)
            raise KeyError("later")

        with pytest.raises(ValueError, match="first"):
            await _run_within(fails_at_once(), await _deadline_in(300))
        with pytest.raises(KeyError, match="later"):
            await _run_within(fails_later(), await _deadline_in(300))

    asyncio.run(main())


def test_cancelling_the_handler_cancels_the_activity_and_it_may_handle_it() -> None:
    async def main() -> None:
        started = asyncio.Event()

        async def handles_cancel() -> str:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                return "handled"
            return "not reached"

        async def ignores_nothing() -> None:
            started.set()
            await asyncio.Event().wait()

        handler = asyncio.ensure_future(_run_within(handles_cancel(), await _deadline_in(300)))
        await started.wait()
        handler.cancel()
        assert await handler == "handled"

        started.clear()
        handler = asyncio.ensure_future(_run_within(ignores_nothing(), await _deadline_in(300)))
        await started.wait()
        handler.cancel()
        with pytest.raises(asyncio.CancelledError):
            await handler

    asyncio.run(main())


def test_only_the_deadline_s_expiry_is_a_start_to_close_timeout() -> None:
    """An activity's own TimeoutError passes as it was raised (it was typed StartToCloseTimeout)."""

    async def main() -> None:
        async def hangs() -> None:
            await asyncio.Event().wait()

        async def own_timeout_later() -> None:
            await asyncio.sleep(0)
            raise TimeoutError("upstream did not answer in 2s")

        with pytest.raises(StartToCloseExpired):
            await _run_within(hangs(), await _deadline_in(0.01))
        with pytest.raises(TimeoutError, match="upstream") as raised:
            await _run_within(own_timeout_later(), await _deadline_in(300))
        assert not isinstance(raised.value, StartToCloseExpired)

    asyncio.run(main())
