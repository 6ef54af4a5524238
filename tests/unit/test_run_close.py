"""``WorkflowRun.close``: a run that ended with nothing of its code left to run is freed by its
reference count; any other run keeps its references for the code that may still run.

A run and its context, and a run and its handlers, refer to each other. A closed run left in those
cycles waited for the cyclic collector, and the closed runs of a busy worker were what set off its
passes (docs/performance.md, "Cheaper Python, eighth cut"). ``close`` breaks both cycles when the
run's only task (its main one) is done; a run with a task of its own still suspended, or one evicted
before it ended, keeps them: that code still runs (a ``finally``) when its coroutine is finalized,
and sees its context as before. (On the base a closed run is never freed by its reference count:
the first test fails there.)
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from harvest.declare.definitions import App, activity, workflow
from harvest.runtime import WorkflowRun


@activity(name="noop")
async def noop(ctx: Any, i: int) -> int:
    return i


@workflow(name="three_steps")
async def three_steps(ctx: Any, n: int) -> int:
    a = await ctx.execute_activity(noop, 1)
    b = await ctx.execute_activity(noop, 2)
    c = await ctx.execute_activity(noop, 3)
    return a + b + c + n


SEEN_IN_FINALLY: list[bool] = []


@workflow(name="leaves_a_task")
async def leaves_a_task(ctx: Any, n: int) -> int:
    never = asyncio.Event()

    async def waits() -> None:
        try:
            await never.wait()
        finally:  # runs when the abandoned coroutine is finalized
            SEEN_IN_FINALLY.append(ctx.is_replaying)

    left = asyncio.ensure_future(waits())  # never awaited: suspended when the run ends
    assert not left.done()
    return await ctx.execute_activity(noop, n)


APP = App(workflows=[three_steps, leaves_a_task], activities=[noop])


@pytest.fixture
def no_collector() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _started(name: str, n: int) -> list[dict[str, Any]]:
    return [
        {
            "event_id": 1,
            "event_type": "WorkflowStarted",
            "event_data": {"workflow_name": name, "workflow_id": "w", "input": [n], "task_queue": "default"},
        },
        {"event_id": 2, "event_type": "WorkflowTaskScheduled", "event_data": {}},
    ]


async def _drive(run: WorkflowRun, name: str, n: int, results: int) -> list[dict[str, Any]]:
    """Step ``run`` as a worker deciding ahead does: its first step, then ``results`` activity
    results, each step's own events taken as recorded. Returns the last step's commands."""
    activation = await run.advance(_started(name, n))
    last = 2
    for seq in range(1, results + 1):
        last += 1 + len(activation.commands)  # the decision's marker and one event per command
        assert run.recorded(last)
        last += 1
        data = {"seq": seq, "result": seq}
        completed = {"event_id": last, "event_type": "ActivityCompleted", "event_data": data}
        activation = await run.advance([completed])
    return activation.commands


def test_a_run_that_ended_on_its_main_task_is_freed_by_its_reference_count(no_collector: None) -> None:
    run = WorkflowRun(APP, "three_steps", "e-1")
    commands = asyncio.run(_drive(run, "three_steps", 10, 3))
    assert commands == [{"type": "complete_workflow", "result": 16}]
    gone = weakref.ref(run)
    context = weakref.ref(run.ctx)
    run.close()
    run.close()  # (a second close is harmless)
    del run
    assert gone() is None
    assert context() is None


def test_a_run_evicted_before_it_ended_keeps_its_references() -> None:
    run = WorkflowRun(APP, "three_steps", "e-2")
    asyncio.run(_drive(run, "three_steps", 10, 1))
    ctx = run.ctx
    run.close()
    assert run.ctx is ctx
    assert run.handlers.run is run


def test_a_task_of_its_own_left_suspended_still_sees_its_context() -> None:
    SEEN_IN_FINALLY.clear()
    run = WorkflowRun(APP, "leaves_a_task", "e-3")
    commands = asyncio.run(_drive(run, "leaves_a_task", 7, 1))
    assert commands == [{"type": "complete_workflow", "result": 1}]
    ctx = run.ctx
    run.close()
    assert run.ctx is ctx
    assert run.handlers.run is run
    del run, ctx
    gc.collect()  # the abandoned task's coroutine is finalized: its finally reads the context
    assert SEEN_IN_FINALLY == [False]
