"""Traces of the starts no client makes, and the update validation span (docs/observability.md):
a schedule's firing is the root of its run's trace (harvest/worker/scheduler.py, fire_schedule's
p_traceparent); a deferred (debounced) start's run continues its caller's span when released
(functions/flow_throttle.sql); a worker's validation of an update is the child of the client's
update span (harvest/worker/queries.py). The OpenTelemetry SDK's in-memory exporter, one
in-process worker; the schedule runs on the shared test clock (no sleeping for a slot)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from psycopg.types.json import Jsonb

from harvest import App, Client, Debounce, update, workflow
from harvest.core.errors import UpdateRejected
from harvest.db import testkit
from harvest.telemetry import tracing


@workflow
async def ts_job(ctx: Any) -> str:
    return "done"


@workflow(debounce=Debounce(quiet="0.3s", key="input.doc"))
async def ts_reindex(ctx: Any, change: dict[str, Any]) -> dict[str, Any]:
    return change


@workflow
async def ts_counter(ctx: Any) -> int:
    ctx.state["n"] = 0
    await ctx.wait_for_signal("stop")
    return int(ctx.state["n"])


def ts_positive(ctx: Any, by: int) -> None:
    if by < 0:
        raise ValueError("by must be positive")


@update(workflow="ts_counter", validator=ts_positive)
def ts_add(ctx: Any, by: int) -> int:
    ctx.state["n"] += by
    return int(ctx.state["n"])


APP = App(workflows=[ts_job, ts_reindex, ts_counter], updates=[ts_add])


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


def _named(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def _wait_for(predicate: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)
    return value


def _one(db: str, sql: str, *args: Any) -> Any:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(sql, args).fetchone()
        return None if row is None else row[0]


def test_a_schedule_firing_is_the_root_of_its_runs_trace(
    spans: tuple[InMemorySpanExporter, TracerProvider], db: str, start_worker: Any
) -> None:
    exporter, _ = spans
    _one(db, "SELECT harvest.create_schedule('ts_every', 'ts_job', p_interval_secs => 60) ->> 'name'")
    clock = testkit.SharedClock(db)
    try:
        worker = start_worker(APP, dsn=testkit.shared_clock_dsn(db), scan_interval=0.1)
        slot = _wait_for(
            lambda: _one(db, "SELECT next_fire_at FROM harvest.schedules WHERE name = 'ts_every'")
        )
        # (the worker's heartbeat stamped at the new time: a jump past its lost_after would
        # otherwise let a scan take back the firing's workflow task as WorkerLost)
        jump = clock.offset() + (slot - clock.now()) + dt.timedelta(seconds=1)
        clock.set_offset(jump, heartbeat=[worker.worker.worker_id])
        run = _wait_for(
            lambda: _one(
                db,
                "SELECT e.id::text FROM harvest.schedule_firings AS f JOIN harvest.executions AS e "
                "ON e.id = f.execution_id WHERE e.status = 'COMPLETED'",
            )
        )
        worker.stop()
    finally:
        clock.close()

    finished = exporter.get_finished_spans()
    fires = _named(finished, "harvest.schedule.fire")
    # (the tick that set the new schedule's first slot fired nothing: it made no trace)
    assert len(fires) == 1, "one tick fired the slot"
    (fire,) = fires
    assert fire.parent is None, "the firing is a new trace's root"
    assert fire.attributes["harvest.schedule"] == "ts_every"
    assert fire.attributes["harvest.schedule.outcome"] == "fired"
    tasks = [
        t for t in _named(finished, "harvest.workflow.task") if t.attributes["harvest.execution_id"] == run
    ]
    assert tasks and {t.context.trace_id for t in tasks} == {fire.context.trace_id}
    assert tasks[0].parent is not None and tasks[0].parent.span_id == fire.context.span_id
    stored = _one(
        db,
        "SELECT event_data ->> 'traceparent' FROM harvest.events WHERE execution_id = %s AND event_id = 1",
        run,
    )
    assert stored.startswith(f"00-{fire.context.trace_id:032x}-{fire.context.span_id:016x}-")


def test_a_released_deferred_start_continues_its_callers_trace(
    spans: tuple[InMemorySpanExporter, TracerProvider], db: str, start_worker: Any, client: Client
) -> None:
    exporter, provider = spans
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
    with provider.get_tracer("the caller").start_as_current_span("caller") as caller:
        first = client.start_workflow(ts_reindex, {"doc": "a", "v": 1})
    # A second start of the burst with no span around: deferred too (nothing to record yet),
    # and it does not take the first caller's span off the burst.
    second = client.start_workflow(ts_reindex, {"doc": "a", "v": 2})
    assert first.deferred and second.deferred and second.execution_id is None
    start_worker(APP)
    run = _wait_for(
        lambda: _one(
            db,
            "SELECT id::text FROM harvest.executions "
            "WHERE workflow_name = 'ts_reindex' AND status = 'COMPLETED'",
        )
    )
    finished = exporter.get_finished_spans()
    (start,) = _named(finished, "harvest.workflow.start")
    assert start.parent is not None and start.parent.span_id == caller.get_span_context().span_id
    assert start.attributes is not None and "harvest.execution_id" not in start.attributes  # no run yet
    tasks = _wait_for(
        lambda: [
            t
            for t in _named(exporter.get_finished_spans(), "harvest.workflow.task")
            if t.attributes["harvest.execution_id"] == run
        ]
    )
    assert {t.context.trace_id for t in tasks} == {caller.get_span_context().trace_id}
    assert tasks[0].parent is not None and tasks[0].parent.span_id == start.context.span_id


def test_an_updates_validation_is_the_child_of_the_clients_update_span(
    spans: tuple[InMemorySpanExporter, TracerProvider], start_worker: Any, client: Client
) -> None:
    exporter, provider = spans
    worker = start_worker(APP)
    handle = client.start_workflow(ts_counter)
    with provider.get_tracer("the caller").start_as_current_span("caller"):
        assert handle.update("ts_add", 2) == 2
        with pytest.raises(UpdateRejected):
            handle.update("ts_add", -1)
    handle.signal("stop")
    assert handle.result(timeout=20) == 2
    worker.stop()

    finished = exporter.get_finished_spans()
    asked = {s.context.span_id: s for s in _named(finished, "harvest.workflow.update")}
    validations = _named(finished, "harvest.update.validate")
    # An update asked right after the start may find no completed workflow task: its request
    # waits for one (a span of outcome "waiting", or none when the task completed meanwhile and
    # the request went back to the queue at once; the child of the same update span) and its
    # validation runs later, in a span of its own (CI 65c, 65f).
    ran = ("accepted", "rejected")
    waited = [v for v in validations if v.attributes.get("harvest.update.outcome") not in ran]
    assert all(v.parent is not None and v.parent.span_id in asked for v in waited), waited
    validations = [v for v in validations if v not in waited]
    assert len(validations) == 2 and len(asked) == 2
    outcomes = set()
    for validation in validations:
        assert validation.parent is not None and validation.parent.span_id in asked
        assert validation.context.trace_id == asked[validation.parent.span_id].context.trace_id
        assert validation.attributes["harvest.update"] == "ts_add"
        outcomes.add(validation.attributes["harvest.update.outcome"])
    assert outcomes == {"accepted", "rejected"}
