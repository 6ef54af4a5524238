"""The deterministic loop can be stepped from inside a worker's own asyncio loop."""

from __future__ import annotations

import asyncio

import pytest
from history_builder import HistoryBuilder, new_run

from harvest.declare.definitions import workflow
from harvest.runtime import DeterministicEventLoop, IllegalWorkflowOperation


def test_stepping_restores_the_callers_running_loop():
    seen = {}

    @workflow
    async def peek(ctx) -> str:
        seen["inner"] = asyncio.get_running_loop()
        seen["task"] = asyncio.current_task()
        await asyncio.sleep(0)  # a bare yield is deterministic and allowed
        return "ok"

    async def worker():
        outer = asyncio.get_running_loop()
        act = await new_run(None, peek).advance(HistoryBuilder("peek").events)
        assert asyncio.get_running_loop() is outer
        return outer, act

    outer, act = asyncio.run(worker())
    assert isinstance(seen["inner"], DeterministicEventLoop) and seen["inner"] is not outer
    assert seen["task"] is not None
    assert act.commands == [{"type": "complete_workflow", "result": "ok"}]


def test_loop_primitives():
    loop = DeterministicEventLoop()
    order = []
    loop.call_soon(order.append, 1)
    loop.call_soon(order.append, 2)
    assert loop.time() == 0.0 and not loop.get_debug() and not loop.is_running()
    loop.run_until_idle()
    assert order == [1, 2]
    fut = loop.create_future()

    async def waiter():
        return await fut

    task = loop.create_task(waiter())
    loop.run_until_idle()
    assert not task.done()
    fut.set_result(5)
    loop.run_until_idle()
    assert task.result() == 5


def test_wall_clock_and_threads_are_refused():
    loop = DeterministicEventLoop()

    async def bad():
        await asyncio.to_thread(print, "x")

    task = loop.create_task(bad())
    loop.run_until_idle()
    assert isinstance(loop.fatal_error, IllegalWorkflowOperation)
    assert "activity" in str(loop.fatal_error)
    assert task.done()
    with pytest.raises(IllegalWorkflowOperation):
        loop.call_later(1, print)


def test_busy_workflow_is_stopped(monkeypatch):
    import harvest.runtime.loop as loop_mod

    monkeypatch.setattr(loop_mod, "MAX_CALLBACKS_PER_STEP", 50)

    @workflow
    async def spin(ctx) -> None:
        while True:
            await asyncio.sleep(0)

    with pytest.raises(IllegalWorkflowOperation, match="without blocking"):
        asyncio.run(new_run(None, spin).advance(HistoryBuilder("spin").events))
