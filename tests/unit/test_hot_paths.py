"""The worker's hot paths cut for issue 20's worker efficiency (docs/performance.md, "Cheaper
Python, ninth cut"): each does what it did, in fewer Python calls.

- a group commit's item is queued at the call, and its caller awaits the future itself;
- the metrics' per-task updates go to the same children the families expose;
- a client start with tracing off gets the shared no-op trace, no generator of its own.
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
