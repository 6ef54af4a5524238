"""A decision's own events are not carried back to the worker that made them
(docs/performance.md, "Fan-out row, twelfth cut").

When every command of a decision is one its worker's run records itself (WorkflowRun.recorded:
schedule_activity, start_timer, record_marker, cancel_timer), the append moves the run's
``decided_through`` past the decision's marker and its commands' events; the run's next claim by
that worker then carries only what came after them. A 100-activity gather's close used to carry
its 100 ``ActivityScheduled`` events (the largest of its history) beside the 100 results, for the
worker to skip. On the base the carried events start at the first decision's marker.
"""

from __future__ import annotations

import asyncio
from typing import Any

import harvest.worker.workflows as workflows
from harvest import App, Client, activity, workflow
from harvest.testing import WorkflowReplayer


@activity
async def noop(ctx: Any, i: int) -> int:
    return i


@workflow
async def gathers(ctx: Any, n: int) -> int:
    return sum(await asyncio.gather(*(ctx.execute_activity(noop, i) for i in range(n))))


@workflow
async def sleeps_then_gathers(ctx: Any, n: int) -> int:
    await ctx.sleep(0.2)
    return sum(await asyncio.gather(*(ctx.execute_activity(noop, i) for i in range(n))))


APP = App(workflows=[gathers, sleeps_then_gathers], activities=[noop])


def test_the_close_of_a_gather_carries_its_results_only(db, start_worker, monkeypatch):
    carried: list[tuple[int, list[str], bool]] = []
    real = workflows._carried_after

    def spy(task: dict[str, Any], last_event_id: int) -> list[dict[str, Any]] | None:
        got = real(task, last_event_id)
        events = task.get("new_events") or []
        carried.append((task.get("new_events_after"), [e["event_type"] for e in events], got is not None))
        return got

    monkeypatch.setattr(workflows, "_carried_after", spy)
    worker = start_worker(APP, concurrency=10)
    with Client(db) as client:
        plain = client.start_workflow(gathers, 30, workflow_id="own-gathers")
        assert plain.result(timeout=60) == 435
        timed = client.start_workflow(sleeps_then_gathers, 20, workflow_id="own-timer")
        assert timed.result(timeout=60) == 190
        histories = [plain.history(), timed.history()]
    worker.stop()
    # Each run's first decision comes from a claim of a run nobody decided (the whole history,
    # not through _carried_after); every later one from its own worker's cached run.
    # gathers: start 1, marker 2, 30 ActivityScheduled 3-32, so the close's claim starts at 33.
    # sleeps_then_gathers: marker 2, TimerStarted 3; TimerFired 4, marker 5, 20 scheduled 6-25.
    assert carried == [
        (32, ["ActivityCompleted"] * 30, True),
        (3, ["TimerFired"], True),
        (25, ["ActivityCompleted"] * 20, True),
    ]
    for history in histories:
        WorkflowReplayer(APP).replay_or_raise(history)
