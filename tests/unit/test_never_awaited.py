"""No "coroutine ... was never awaited" RuntimeWarning from a closed run.

The fast suite printed two (``WorkflowContext.execute_activity``, ``WorkflowRun._run_main``),
each at an unrelated test's ``gc.collect()``: runs the tests dropped without ``close()``
(history_builder's cold replays, runs whose advance raised). ``WorkflowRun.close()`` closed the
ctx calls and the main coroutine it knew of, but the workflow's own tasks whose first step
never ran (the step stopped on a fatal error first) were dropped with the loop's ready queue,
their coroutines never started: Python warned at the next collection, pointing at whatever
ran then. The loop now closes what it drops.
"""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest
from history_builder import HistoryBuilder, new_run

from harvest.declare.definitions import App, workflow
from harvest.runtime import IllegalWorkflowOperation
from harvest.runtime.loop import DeterministicEventLoop


def _never_awaited(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "never awaited" in str(w.message)]


async def _helper() -> int:
    return 1


@workflow(name="spawns_then_breaks")
async def spawns_then_breaks(ctx) -> int:
    asyncio.get_running_loop().create_task(_helper())  # its first step waits in the ready queue
    await asyncio.get_running_loop().getaddrinfo("example.com", 80)  # illegal: the step stops
    return 0


def test_a_task_whose_first_step_never_ran_is_closed_with_the_run() -> None:
    run = new_run(App(workflows=[spawns_then_breaks]), spawns_then_breaks)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(IllegalWorkflowOperation, match="I/O is not allowed"):
            asyncio.run(run.advance(HistoryBuilder("spawns_then_breaks").events))
        run.close()
        del run
        gc.collect()
    assert _never_awaited(caught) == []


def test_closing_the_loop_closes_the_coroutines_of_the_tasks_it_drops() -> None:
    loop = DeterministicEventLoop()
    made = _helper()
    loop.create_task(made)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop.close()
        gc.collect()
    assert made.cr_frame is None, "the dropped task's coroutine was left unstarted, not closed"
    assert _never_awaited(caught) == []
