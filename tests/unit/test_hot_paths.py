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


def test_payload_size_of_ints_and_lists_of_ints_skips_the_stored_text_walk(monkeypatch) -> None:
    from harvest.core import jsonb, payload

    values = [0, -7, 2**63, [], [2], [1, -2, 30], [True], [1, 2.5], [1, [2]], None, "x", {"b": 1, "a": 2}]
    expected = [len(jsonb.stored_text(v)) for v in values]
    assert [payload.payload_size(v) for v in values] == expected
    # An int past the interpreter's digit limit: refused for another reason, counted 0 as before.
    huge = 10**5000
    assert payload.payload_size(huge) == 0 and payload.payload_size([1, huge]) == 0

    def walked(value: object) -> str:
        raise AssertionError(f"stored_text walked {value!r}")

    monkeypatch.setattr(payload, "stored_text", walked)
    assert [payload.payload_size(v) for v in (5, [2], [1, -2, 30], [])] == [1, 3, 11, 2]


def test_checked_text_is_check_size_answering_the_text_it_measured() -> None:
    import pytest

    from harvest.core import jsonb, payload
    from harvest.core.errors import PayloadError, PayloadTooLarge

    value = {"zz": 1, "a": 1e20}
    assert payload.checked_text(value, "it", 1000) == jsonb.stored_text(value)
    assert payload.checked_text(value, "it", None) is None  # no limit: nothing measured
    # A value the database refuses for another reason (U+0000) is refused alike by both.
    with pytest.raises(PayloadError, match=r"U\+0000") as unstorable:
        payload.checked_text("a\x00b", "it", 1000)
    with pytest.raises(PayloadError) as unstorable_checked:
        payload.check_size("a\x00b", "it", 1000)
    assert str(unstorable.value) == str(unstorable_checked.value)
    with pytest.raises(PayloadTooLarge) as over:
        payload.checked_text(value, "the result", 5)
    with pytest.raises(PayloadTooLarge) as checked:
        payload.check_size(value, "the result", 5)
    assert str(over.value) == str(checked.value) and over.value.bytes == checked.value.bytes


def test_runs_share_one_system_random() -> None:
    from harvest import workflow
    from harvest.runtime.run import WorkflowRun

    @workflow
    async def draws(ctx) -> float:
        return ctx.random()

    first, second = WorkflowRun(draws, execution_id="a"), WorkflowRun(draws, execution_id="b")
    assert first.rng is second.rng
    assert type(first.rng).__name__ == "SystemRandom"
