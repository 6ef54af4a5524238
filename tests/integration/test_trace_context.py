"""W3C trace context captured at start and carried on (harvest/telemetry/tracing.py,
docs/observability.md), with the OpenTelemetry SDK's in-memory exporter and one in-process worker.

A start inside the caller's span puts the whole workflow (its tasks, activity, a child, a
continue-as-new successor and that one's child) in the caller's trace, under the start span; a
signal sent inside the sender's span is linked from the workflow task that reads it; a start
with no span around keeps the run's own trace (its execution id).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harvest import App, Client, RetryPolicy, activity, update, workflow
from harvest.telemetry import tracing


@activity
async def tc_act(ctx, x: int) -> int:
    return x + 1


@activity(retry=RetryPolicy.exponential(max_attempts=2, initial="0.2s"))
async def tc_flaky(ctx) -> int:
    if ctx.attempt() == 1:
        raise RuntimeError("refused by postgresql://svc:hunter2@db/prod")
    return ctx.attempt()


@workflow
async def tc_retrier(ctx) -> int:
    return await ctx.execute_activity(tc_flaky)


@workflow
async def tc_child(ctx, x: int) -> int:
    return await ctx.execute_activity(tc_act, x)


@workflow
async def tc_parent(ctx, x: int, rounds: int) -> int:
    y = await ctx.execute_activity(tc_act, x)
    z = await ctx.execute_child_workflow(tc_child, y)
    if rounds > 1:
        ctx.continue_as_new(z, rounds - 1)
    return z


@workflow
async def tc_waiter(ctx) -> str:
    return await ctx.wait_for_signal("go")


@workflow
async def tc_sender(ctx, target: str) -> None:
    await ctx.signal_external_workflow(target, "go", "from a workflow")


@workflow
async def tc_counter(ctx) -> int:
    ctx.state["n"] = 0
    await ctx.wait_for_signal("stop")
    return ctx.state["n"]


@update(workflow="tc_counter")
def tc_bump(ctx, by: int) -> int:
    ctx.state["n"] += by
    return ctx.state["n"]


APP = App(
    workflows=[tc_parent, tc_child, tc_waiter, tc_sender, tc_counter, tc_retrier],
    activities=[tc_act, tc_flaky],
    updates=[tc_bump],
)


@pytest.fixture
def spans() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    try:
        yield exporter, provider
    finally:
        tracing.disable()


def _by_name(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def test_a_start_inside_the_callers_span_continues_its_trace(spans, start_worker, client: Client) -> None:
    exporter, provider = spans
    worker = start_worker(APP, cache_size=0)  # every task replays: replay roots are linked, not in the trace
    caller_tracer = provider.get_tracer("the caller")
    with caller_tracer.start_as_current_span("caller") as caller:
        handle = client.start_workflow(tc_parent, 1, 2)
    assert handle.result(timeout=30) == 5
    worker.stop()  # its last spans end after the commit the result reads

    finished = exporter.get_finished_spans()
    trace_id = caller.get_span_context().trace_id
    (start,) = _by_name(finished, "harvest.workflow.start")
    assert start.context.trace_id == trace_id and start.parent.span_id == caller.get_span_context().span_id
    assert start.attributes["harvest.execution_id"] == str(handle.execution_id)
    # Every span of the workflow, across the continue-as-new and both generations of children,
    # is in the caller's trace: two runs of the parent, two children, four activities.
    workflow_spans = [s for s in finished if s.name != "caller" and s.name != "harvest.workflow.execute"]
    assert {s.context.trace_id for s in workflow_spans} == {trace_id}
    assert len(_by_name(finished, "harvest.activity.execute")) == 4
    assert len(_by_name(finished, "harvest.child.start")) == 2
    (cont,) = _by_name(finished, "harvest.workflow.continue_as_new")
    executions = {
        s.attributes.get("harvest.execution_id") for s in _by_name(finished, "harvest.workflow.task")
    }
    assert len(executions) == 4, "both runs of the parent and both children decided in the trace"
    span_ids = {s.context.span_id for s in finished}
    tasks = _by_name(finished, "harvest.workflow.task")
    # The first run's first task is the start span's child; the successor's first task is the
    # child of the decision's continue_as_new span; each child's first task of its child.start.
    assert any(t.parent.span_id == start.context.span_id for t in tasks)
    assert any(t.parent.span_id == cont.context.span_id for t in tasks)
    child_starts = {s.context.span_id for s in _by_name(finished, "harvest.child.start")}
    assert len({t.parent.span_id for t in tasks} & child_starts) == 2
    assert all(t.parent.span_id in span_ids for t in tasks), "no task hangs from a span nobody recorded"
    # Whole-history replays are new roots, linked to the run's trace (the caller's).
    replays = _by_name(finished, "harvest.workflow.execute")
    assert replays and all(r.parent is None and r.context.trace_id != trace_id for r in replays)
    assert all(link.context.trace_id == trace_id for r in replays for link in r.links)


def test_a_signal_is_linked_from_the_task_that_reads_it(spans, start_worker, client: Client) -> None:
    exporter, provider = spans
    worker = start_worker(APP)
    handle = client.start_workflow(tc_waiter)
    run_trace = int(str(handle.execution_id).replace("-", ""), 16)
    with provider.get_tracer("the sender").start_as_current_span("sender") as sender:
        handle.signal("go", "now")
    assert handle.result(timeout=30) == "now"
    worker.stop()

    finished = exporter.get_finished_spans()
    (start,) = _by_name(finished, "harvest.workflow.start")
    assert start.context.trace_id == run_trace and start.parent.span_id != 0, (
        "with no span around, the start is recorded in the run's own trace"
    )
    (sent,) = _by_name(finished, "harvest.workflow.signal")
    assert sent.context.trace_id == sender.get_span_context().trace_id
    assert sent.parent.span_id == sender.get_span_context().span_id
    readers = [
        t
        for t in _by_name(finished, "harvest.workflow.task")
        if any(link.context.span_id == sent.context.span_id for link in t.links)
    ]
    assert len(readers) == 1 and readers[0].context.trace_id == run_trace
    (link,) = [x for x in readers[0].links if x.context.span_id == sent.context.span_id]
    assert link.attributes["harvest.link"] == "signal" and link.attributes["harvest.signal"] == "go"


def test_signal_with_start_inside_the_callers_span_continues_its_trace(
    spans, start_worker, client: Client
) -> None:
    exporter, provider = spans
    worker = start_worker(APP)
    with provider.get_tracer("the caller").start_as_current_span("caller") as caller:
        handle = client.signal_with_start(tc_waiter, workflow_id="tc-sws", signal="go", signal_payload="hi")
    assert handle.result(timeout=30) == "hi"
    worker.stop()
    finished = exporter.get_finished_spans()
    (start,) = _by_name(finished, "harvest.workflow.start")
    assert start.parent.span_id == caller.get_span_context().span_id
    tasks = _by_name(finished, "harvest.workflow.task")
    assert tasks and {t.context.trace_id for t in tasks} == {caller.get_span_context().trace_id}
    assert any(link.context.span_id == start.context.span_id for t in tasks for link in t.links), (
        "the signal links to the span that sent it"
    )


def test_a_signal_from_another_workflow_is_linked_to_the_sending_task(
    spans, start_worker, client: Client
) -> None:
    exporter, _provider = spans
    worker = start_worker(APP)
    target = client.start_workflow(tc_waiter)
    sender = client.start_workflow(tc_sender, str(target.execution_id))
    assert target.result(timeout=30) == "from a workflow"
    sender.result(timeout=30)
    worker.stop()
    tasks = [s for s in exporter.get_finished_spans() if s.name == "harvest.workflow.task"]
    sending = {
        s.context.span_id for s in tasks if s.attributes["harvest.execution_id"] == str(sender.execution_id)
    }
    links = [
        link
        for s in tasks
        if s.attributes["harvest.execution_id"] == str(target.execution_id)
        for link in s.links
    ]
    assert [link.context.span_id in sending for link in links] == [True]
    assert links[0].context.trace_id == int(str(sender.execution_id).replace("-", ""), 16)


def test_an_update_is_linked_from_the_task_that_runs_its_handler(spans, start_worker, client: Client) -> None:
    exporter, provider = spans
    worker = start_worker(APP)
    handle = client.start_workflow(tc_counter)
    with provider.get_tracer("the caller").start_as_current_span("caller") as caller:
        assert handle.update("tc_bump", 2) == 2
    handle.signal("stop")
    assert handle.result(timeout=30) == 2
    worker.stop()
    finished = exporter.get_finished_spans()
    (sent,) = [s for s in finished if s.name == "harvest.workflow.update"]
    assert sent.parent.span_id == caller.get_span_context().span_id
    links = [
        link
        for s in finished
        if s.name == "harvest.workflow.task"
        for link in s.links
        if link.context.span_id == sent.context.span_id
    ]
    assert len(links) == 1 and links[0].attributes["harvest.link"] == "update"
    assert links[0].attributes["harvest.update"] == "tc_bump"


def test_a_decision_made_ahead_on_an_activity_result_stays_in_the_callers_trace(
    spans, start_worker, client: Client
) -> None:
    # The default cache: the activity's worker decides the run's next step on its result
    # (worker/decide_ahead.py), the child start and the continue-as-new among them.
    exporter, provider = spans
    worker = start_worker(APP)
    with provider.get_tracer("the caller").start_as_current_span("caller") as caller:
        handle = client.start_workflow(tc_parent, 1, 2)
    assert handle.result(timeout=30) == 5
    worker.stop()
    assert worker.worker.decided_ahead, "the decisions after the activities were made ahead"

    finished = exporter.get_finished_spans()
    trace_id = caller.get_span_context().trace_id
    workflow_spans = [s for s in finished if s.name != "caller" and s.name != "harvest.workflow.execute"]
    strays = [s.name for s in workflow_spans if s.context.trace_id != trace_id]
    assert not strays, f"spans outside the caller's trace: {strays}"
    assert len(_by_name(finished, "harvest.activity.execute")) == 4
    assert len(_by_name(finished, "harvest.child.start")) == 2, "a child started ahead has its span"
    assert len(_by_name(finished, "harvest.workflow.continue_as_new")) == 1
    span_ids = {s.context.span_id for s in finished}
    assert all(s.parent is None or s.parent.span_id in span_ids for s in workflow_spans), (
        "no span hangs from a span nobody recorded"
    )


def test_a_signal_is_linked_from_the_replay_of_a_run_another_worker_decided(
    spans, start_worker, client: Client
) -> None:
    # The claim of a run decided last by another worker carries no events (claim.sql,
    # _events_since_decision): the replaying worker reads what is new from the history, and
    # links its senders as the worker that decided the run would have.
    exporter, provider = spans
    first = start_worker(APP)
    handle = client.start_workflow(tc_waiter)
    for _ in range(300):  # its first task decided: it waits for the signal
        if any(e["event_type"] == "WorkflowTaskCompleted" for e in handle.history()):
            break
        time.sleep(0.05)
    first.stop()
    second = start_worker(APP)
    with provider.get_tracer("the sender").start_as_current_span("sender"):
        handle.signal("go", "later")
    assert handle.result(timeout=30) == "later"
    second.stop()

    finished = exporter.get_finished_spans()
    (sent,) = _by_name(finished, "harvest.workflow.signal")
    assert _by_name(finished, "harvest.workflow.execute"), "the second worker replayed the history"
    readers = [
        t
        for t in _by_name(finished, "harvest.workflow.task")
        if any(link.context.span_id == sent.context.span_id for link in t.links)
    ]
    assert len(readers) == 1 and readers[0].attributes.get("harvest.after_replay") is True


def test_a_failed_attempts_span_is_an_error_naming_its_type_not_its_message(
    spans, start_worker, client: Client
) -> None:
    exporter, _ = spans
    worker = start_worker(APP)
    assert client.start_workflow(tc_retrier).result(timeout=30) == 2
    worker.stop()

    attempts = sorted(
        _by_name(exporter.get_finished_spans(), "harvest.activity.execute"),
        key=lambda s: s.attributes["harvest.attempt"],
    )
    assert [a.status.status_code.name for a in attempts] == ["ERROR", "UNSET"]
    assert attempts[0].attributes["harvest.error_type"] == "RuntimeError"
    assert attempts[0].status.description == "RuntimeError"
    assert "harvest.error_type" not in attempts[1].attributes
    # The failure's message (which may quote data, here a password) is not exported.
    exported = repr([(dict(a.attributes), a.status.description, a.events) for a in attempts])
    assert "hunter2" not in exported


def test_a_workflow_task_that_failed_on_the_worker_is_an_error_span(
    spans, start_worker, client: Client
) -> None:
    exporter, _ = spans
    worker = start_worker(APP)
    handle = client.start_workflow("tc_nobody_declares_it", queue="default")
    for _ in range(300):  # the worker has no such workflow: its task fails (UnknownWorkflow)
        failed = [
            s
            for s in exporter.get_finished_spans()
            if s.attributes.get("harvest.execution_id") == str(handle.execution_id)
            and s.name in ("harvest.workflow.task", "harvest.workflow.execute")
        ]
        if failed:
            break
        time.sleep(0.05)
    worker.stop()
    assert failed and failed[0].status.status_code.name == "ERROR"
    assert failed[0].attributes["harvest.error_type"] == "UnknownWorkflow"
