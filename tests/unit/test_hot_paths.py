"""The worker's hot paths cut for issue 20's worker efficiency (docs/performance.md, "Cheaper
Python, ninth cut"): each does what it did, in fewer Python calls.

- a group commit's item is queued at the call, and its caller awaits the future itself;
- the metrics' per-task updates go to the same children the families expose;
- a client start with tracing off gets the shared no-op trace, no generator of its own;
- a live step sets the running loop once (in Python 3.11 a getpid() system call per set).
"""

from __future__ import annotations

import asyncio

from tests.unit.test_completion_batcher import FakeSql, FakeWorker

from harvest.telemetry import tracing
from harvest.telemetry.metrics import Metrics
from harvest.worker.completions import CompletionBatcher, Recorded


def test_an_item_is_queued_at_the_call_and_its_answer_is_the_future_awaited() -> None:
    sql = FakeSql()

    async def main() -> tuple[bool, int, Recorded]:
        batcher = CompletionBatcher(FakeWorker(sql))
        answer = batcher.complete(1, 1, 5)
        queued = len(batcher._waiting)  # before any await: the item waits already
        return isinstance(answer, asyncio.Future), queued, await answer

    is_future, queued, recorded = asyncio.run(main())
    assert is_future and queued == 1
    assert recorded == Recorded()
    assert sql.batches == [[1]]


def test_the_hot_updates_reach_the_families_children() -> None:
    metrics = Metrics()
    for _ in range(3):
        metrics.dispatched("q", "activity", 0)
    metrics.dispatched("q", "workflow", 0)
    metrics.activity_finished("wf", "noop", 0.002)
    metrics.activity_finished("wf", "noop", 7.0)
    metrics.activity_finished("wf", "noop", 0.5, "Boom")
    assert metrics.queue_dispatched("q", "activity").value == 3
    assert metrics.queue_dispatched("q", "workflow").value == 1
    assert metrics.shard_dispatched(0).value == 4
    assert metrics.activity_completed("wf", "noop").value == 2
    assert metrics.activity_failed("wf", "noop", "Boom").value == 1
    duration = metrics.activity_duration("noop")
    assert sum(duration.counts) == 3 and duration.sum == 7.502
    text = metrics.render().decode()
    assert 'harvest_queue_dispatched_total{kind="activity",queue="q"} 3.0' in text
    assert 'harvest_shard_dispatched_total{shard="0"} 4.0' in text
    assert 'harvest_activity_completed_total{activity="noop",workflow_type="wf"} 2.0' in text
    assert 'harvest_activity_duration_seconds_count{activity="noop"} 3.0' in text


def test_a_start_with_tracing_off_gets_the_shared_no_op_trace() -> None:
    assert not tracing.ACTIVE
    with tracing.start_span("wf") as trace:
        assert trace is tracing.OFF
        assert trace.traceparent is None
        trace.started("00000000-0000-0000-0000-000000000001", {"harvest.workflow": "wf"})  # records nothing
    assert tracing.OFF.span is None and tracing.OFF.started_ns == 0


def test_a_live_step_sets_the_running_loop_once_and_restores_it(monkeypatch) -> None:
    """In Python 3.11 each set of the running loop is a getpid() system call: advance sets
    the run's loop once for its replay and its live step's first round, and restores it once."""
    from asyncio import events

    from harvest import App, activity, workflow
    from harvest.runtime import WorkflowRun
    from harvest.runtime import loop as loop_module
    from harvest.runtime import run as run_module

    @activity
    async def step(ctx, n: int) -> int:
        return n

    @workflow
    async def two(ctx) -> int:
        return await ctx.execute_activity(step, 1) + await ctx.execute_activity(step, 2)

    sets: list[object] = []

    def counted(loop: object) -> None:
        sets.append(loop)
        events._set_running_loop(loop)

    monkeypatch.setattr(run_module, "_set_running_loop", counted)
    monkeypatch.setattr(loop_module, "_set_running_loop", counted)
    app = App(workflows=[two], activities=[step])
    run = WorkflowRun(app, app.workflow("two"), "e1", "w1", "default")
    started = [
        {"event_id": 1, "event_type": "WorkflowStarted", "event_data": {"input": []}},
        {"event_id": 2, "event_type": "WorkflowTaskScheduled", "event_data": {}},
    ]

    async def main() -> tuple[list[dict], asyncio.AbstractEventLoop]:
        activation = await run.advance(started)
        assert run.recorded(run.last_event_id + 1 + len(activation.commands))
        result = {"seq": activation.commands[0]["seq"], "result": 1, "attempt": 1}
        event = {"event_id": run.last_event_id + 1, "event_type": "ActivityCompleted", "event_data": result}
        again = await run.advance([event], local_activities=False)
        return [activation.commands, again.commands], asyncio.get_running_loop()

    commands, outer = asyncio.run(main())
    assert [[c["name"] for c in step_commands] for step_commands in commands] == [["step"], ["step"]]
    assert sets == [run._loop, outer, run._loop, outer]  # two advances: one set and one restore each
    run.close()


def test_the_workers_running_loop_is_asyncios_outside_run() -> None:
    from harvest import App, Worker

    worker = Worker(App(), "postgresql://unused/db")
    assert worker.run_loop is None

    async def main() -> bool:
        return worker.running_loop() is asyncio.get_running_loop()

    assert asyncio.run(main())
