"""A replay steps while it reads its history (docs/performance.md, replay9 row).

``WorkflowRun._ingest`` takes each recorded step as soon as its events are all read (when the
next marker is), so a long history is walked once while it is in the CPU's caches. What a
replay raises must stay what reading the whole batch first and then stepping raised: an error
in the batch wins over a step's, a batch that ends the run replays nothing, and a step is only
taken early when it sees what it would have seen after the whole batch. The one new error: a
second ``WorkflowStarted``.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from typing import Any

import pytest
from history_builder import Engine, made_runs
from workflows_fixture import send_email

from harvest.core.errors import NonDeterminismError
from harvest.declare.definitions import App, workflow
from harvest.runtime import HistoryMismatch, WorkflowRun
from harvest.runtime.commands import Pending


@workflow(name="chain")
async def chain(ctx, n: int) -> int:
    for i in range(n):
        await ctx.execute_activity(send_email, f"to-{i}")
    return n


@workflow(name="chain")
async def renamed_chain(ctx, n: int) -> int:
    """Non-deterministic against chain's history from its first step."""
    for i in range(n):
        await ctx.execute_activity("send_sms", f"to-{i}")
    return n


APP = App(workflows=[chain], activities=[send_email])


@functools.cache
def chain_history(steps: int) -> tuple[dict[str, Any], ...]:
    """A running chain's history, one activity per step, each completed (3 events a step)."""
    engine = Engine(APP, chain, [steps + 5], resolver=lambda out: [(c, ("result", {})) for c in out])
    engine.check_cold = False
    for _ in range(steps):
        asyncio.run(engine.task())
        engine.resolve()
    return tuple(engine.history.events)


def events_of(steps: int) -> list[dict[str, Any]]:
    return [dict(e) for e in chain_history(steps)]


def new_run(definition: Any = chain) -> WorkflowRun:
    run = WorkflowRun(APP, definition, "exec-1", "wf-1", "default")
    made_runs.append(run)  # (closed after the test: tests/unit/conftest.py)
    return run


def event(event_id: int, event_type: str, **data: Any) -> dict[str, Any]:
    return {"event_id": event_id, "event_type": event_type, "event_data": data}


def test_each_step_is_taken_when_the_next_marker_is_read() -> None:
    """Fails on the base, which read the whole batch before its first step."""
    events = events_of(6)
    run = new_run()
    through_when_read: list[int] = []

    class Watched(list[dict[str, Any]]):
        def __iter__(self):  # type: ignore[override]
            for e in list.__iter__(self):
                through_when_read.append(run.through)  # the last step taken so far
                yield e

    activation = asyncio.run(run.advance(Watched(events)))
    assert [c["seq"] for c in activation.commands] == [7]
    markers = [
        (e["event_id"], e["event_data"]["through"])
        for e in events
        if e["event_type"] == "WorkflowTaskCompleted"
    ]
    assert len(markers) == 6
    for (_, through), (next_marker, _) in itertools.pairwise(markers):
        # The event after the next marker is read once that marker took this step.
        assert through_when_read[next_marker] == through
    assert through_when_read[markers[0][0]] == 0  # nothing stepped before the first marker's group


def test_an_error_in_the_batch_wins_over_an_earlier_steps_error() -> None:
    """As when the batch was read whole before any step: a gap in event ids (or a marker
    without its `through`) is reported, not the non-determinism of a step before it."""
    events = events_of(6)
    with pytest.raises(
        NonDeterminismError,
        match=r"seq 1 \(event \d+ ActivityScheduled\): expected schedule_activity 'send_email'",
    ):
        asyncio.run(new_run(renamed_chain).advance(events_of(6)))
    gap = events[:10] + events[11:]
    with pytest.raises(HistoryMismatch, match="expected event 11, got 12"):
        asyncio.run(new_run(renamed_chain).advance(gap))
    broken = [dict(e) for e in events]
    broken[-3] = {**broken[-3], "event_data": {"worker_id": "w1"}}  # a marker without `through`
    assert broken[-3]["event_type"] == "WorkflowTaskCompleted"
    with pytest.raises(HistoryMismatch, match="KeyError: 'through'"):
        asyncio.run(new_run(renamed_chain).advance(broken))


def test_a_cached_runs_mismatch_is_raised_after_the_batch_is_read() -> None:
    """A cached run whose activation the batch does not confirm, and a gap later in the batch:
    the gap's HistoryMismatch, as before (both send a worker to a full replay)."""
    events = events_of(3)
    run = new_run()
    first = asyncio.run(run.advance(events[:1]))
    assert [c["seq"] for c in first.commands] == [1]
    rest = [dict(e) for e in events[1:]]
    rest[0] = {**rest[0], "event_data": {**rest[0]["event_data"], "through": 0}}  # not our activation
    with pytest.raises(HistoryMismatch, match="is not the activation this cached run produced"):
        asyncio.run(run.advance(rest))
    run = new_run()
    asyncio.run(run.advance(events[:1]))
    with pytest.raises(HistoryMismatch, match="expected event 6, got 7"):
        asyncio.run(run.advance(rest[:4] + rest[5:]))


def test_a_batch_that_ends_the_run_replays_nothing_whatever_its_steps_say() -> None:
    """A terminal event before the batch's end: the run is finished, as before, although the
    steps read before it (taken while reading) disagree with the code; it stays finished."""
    events = events_of(4)
    closed = [*events, event(len(events) + 1, "WorkflowTerminated", reason="ops")]
    closed.append(event(len(closed) + 1, "SignalReceived", name="late", payload=None))
    run = new_run(renamed_chain)
    activation = asyncio.run(run.advance(closed))
    assert activation.finished and activation.commands == [] and activation.through == len(closed)
    again = asyncio.run(run.advance([]))
    assert again.finished and again.commands == []


def test_a_step_whose_through_is_past_the_next_marker_waits_for_the_batch() -> None:
    """A marker whose `through` is not before the next marker (no engine writes one): its step
    is taken after the whole batch is read, and sees the resolution the base's step saw."""
    history = [
        event(1, "WorkflowStarted", workflow_name="chain", input=[3]),
        event(2, "WorkflowTaskCompleted", through=6, worker_id="w1"),
        event(3, "ActivityScheduled", seq=1, name="send_email", input=["to-0"]),
        event(4, "WorkflowTaskCompleted", through=3, worker_id="w1"),
        event(5, "ActivityCompleted", seq=1, result=None),
        event(6, "SignalReceived", name="s", payload=None),
    ]
    with pytest.raises(NonDeterminismError, match="event 5 ActivityCompleted resolves seq 1"):
        asyncio.run(new_run().advance(history))


def test_a_second_workflow_started_is_a_history_mismatch() -> None:
    """New (the base took the last one's input): the engine writes one, as event 1."""
    events = events_of(2)
    twice = [*events, event(len(events) + 1, "WorkflowStarted", workflow_name="chain", input=[1])]
    with pytest.raises(HistoryMismatch, match=f"event {len(twice)} is a second WorkflowStarted"):
        asyncio.run(new_run().advance(twice))
    run = new_run()
    asyncio.run(run.advance(events))
    with pytest.raises(HistoryMismatch, match="is a second WorkflowStarted"):
        asyncio.run(run.advance(twice[len(events) :]))


def test_the_callers_running_loop_is_back_after_a_replay() -> None:
    """The replay sets the run's loop as the running one once for all its steps; the caller's
    is back after it, whatever it raised, and the workflow saw the run's loop."""
    seen: list[asyncio.AbstractEventLoop] = []

    @workflow(name="chain")
    async def looks(ctx, n: int) -> int:
        for i in range(n):
            seen.append(asyncio.get_running_loop())
            await ctx.execute_activity(send_email, f"to-{i}")
        return n

    async def main() -> None:
        outer = asyncio.get_running_loop()
        run = new_run(looks)
        await run.advance(events_of(3))
        assert asyncio.get_running_loop() is outer
        assert seen and all(loop is run._loop for loop in seen)
        with pytest.raises(NonDeterminismError):
            await new_run(renamed_chain).advance(events_of(3))
        assert asyncio.get_running_loop() is outer
        with pytest.raises(HistoryMismatch):
            await new_run(renamed_chain).advance(events_of(3)[:4] + events_of(3)[5:])
        assert asyncio.get_running_loop() is outer
        new_run(looks).replay_history(events_of(3))
        assert asyncio.get_running_loop() is outer

    asyncio.run(main())


def test_an_issued_activitys_pending_is_the_dataclass_one() -> None:
    """An issued activity's Pending has every field set, with the dataclass' defaults, live and
    on replay."""
    run = new_run()
    asyncio.run(run.advance(events_of(2)[:1]))
    live = run._pending[1]
    assert live == Pending(1, "activity", "send_email", live.future)
    run = new_run()
    activation = asyncio.run(run.advance(events_of(3)[:-1]))  # seq 3 scheduled, not completed
    assert activation.commands == []
    replayed = run._pending[3]
    assert replayed == Pending(3, "activity", "send_email", replayed.future)
