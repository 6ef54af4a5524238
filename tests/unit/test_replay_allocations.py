"""A replay reads a long history without a container per step (docs/performance.md, replay7 row).

Reading a history (``WorkflowRun._ingest``) used to build, for every ``WorkflowTaskCompleted``,
a tuple and a dict of its command events, all alive until their step ran: on a 100,000-event
history about 67,000 container objects that the cyclic collector counted and walked while the
replay ran. Now it keeps references to the history's own events in two queues, and a step
builds its group when it runs. What a replay decides is unchanged (the equivalence and
non-determinism tests); these pin the allocations and the one new error.
"""

from __future__ import annotations

import asyncio
import functools
import gc
from collections.abc import Iterator

import pytest
from history_builder import Engine, new_run
from workflows_fixture import app, fan_out, send_email

from harvest.declare.definitions import App, workflow
from harvest.runtime import HistoryMismatch, WorkflowRun


@workflow(name="chain")
async def chain(ctx, n: int) -> int:
    for i in range(n):
        await ctx.execute_activity(send_email, f"to-{i}")
    return n


CHAIN_APP = App(workflows=[chain], activities=[send_email])


@functools.cache
def chain_history(steps: int) -> list[dict]:
    """A running chain's history: one activity per step, each completed (3 events a step)."""
    engine = Engine(CHAIN_APP, chain, [steps + 5], resolver=lambda out: [(c, ("result", {})) for c in out])
    engine.check_cold = False  # (a cold replay per task would make this quadratic)
    for _ in range(steps):
        asyncio.run(engine.task())
        engine.resolve()
    return engine.history.events


@pytest.fixture
def collector_paused() -> Iterator[None]:
    """Count objects with the collector off; its state is put back as it was."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def tracked_after_ingest(events: list[dict]) -> int:
    run = WorkflowRun(CHAIN_APP, chain, "exec-1", "wf-1", "default")
    batch = [dict(e) for e in events]  # in the run's shape: kept as they are
    before = len(gc.get_objects())
    run._ingest(batch)
    grown = len(gc.get_objects()) - before
    run.close()
    return grown


@pytest.mark.usefixtures("collector_paused")
def test_reading_a_history_keeps_no_container_per_step() -> None:
    small, large = chain_history(20), chain_history(400)
    assert len(large) > 1_200
    # The same few objects whatever the length (the run's queues); the old reading kept
    # two per step (a dict of the step's command events and a (marker, through) tuple).
    assert tracked_after_ingest(large) - tracked_after_ingest(small) < 20


@pytest.mark.usefixtures("collector_paused")
def test_a_replay_frees_what_its_steps_made() -> None:
    events = chain_history(400)
    run = WorkflowRun(CHAIN_APP, chain, "exec-1", "wf-1", "default")
    batch = [dict(e) for e in events]
    before = len(gc.get_objects())
    activation = asyncio.run(run.advance(batch))
    assert [c["type"] for c in activation.commands] == ["schedule_activity"]
    assert activation.commands[0]["seq"] == 401
    # The run's own state (its task, context, loop, the next command) and no more.
    assert len(gc.get_objects()) - before < 200
    run.close()


def test_a_command_event_of_a_step_already_taken_is_a_history_mismatch() -> None:
    """A cached run handed a command event of a step it already confirmed: the history is not
    the continuation it expected (HistoryMismatch sends a worker to a full replay; reading it
    used to fail with a KeyError)."""
    engine = Engine(app, fan_out, [3], check_cold=False)
    asyncio.run(engine.task())  # one step, three schedule_activity commands
    events = engine.history.events
    marker = next(i for i, e in enumerate(events) if e["event_type"] == "WorkflowTaskCompleted")
    assert [e["event_type"] for e in events[marker + 1 :]] == ["ActivityScheduled"] * 3
    run = new_run(app, fan_out)
    first = asyncio.run(run.advance(events[:marker]))
    assert [c["seq"] for c in first.commands] == [1, 2, 3]
    assert asyncio.run(run.advance(events[marker:])).commands == []  # confirmed; nothing new
    late = {**events[-1], "event_id": len(events) + 1, "event_data": {**events[-1]["event_data"], "seq": 4}}
    with pytest.raises(HistoryMismatch, match=f"belongs to the step of event {marker + 1}, which was"):
        asyncio.run(run.advance([late]))
    # A step cut short by the end of a batch is still not taken for the whole step.
    run = new_run(app, fan_out)
    asyncio.run(run.advance(events[:marker]))
    with pytest.raises(HistoryMismatch, match="is not the activation this cached run produced"):
        asyncio.run(run.advance(events[marker : marker + 2]))
