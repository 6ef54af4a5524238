"""The management API continues a caller's W3C ``traceparent`` header (harvest/web/routes,
tracing.continue_incoming; docs/observability.md "Over HTTP"), with no ASGI tracing middleware:
through the ASGI app, one in-process worker and the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from web_helpers import api_client

from harvest import App, activity, update, workflow
from harvest.db.sqlapi import SqlApi
from harvest.declare.dags import Dag
from harvest.telemetry import tracing


@workflow
async def th_tally(ctx: Any) -> int:
    ctx.state["n"] = 0
    await ctx.wait_for_signal("stop")
    await ctx.drain_admitted_updates()
    return int(ctx.state["n"])


@update(workflow="th_tally")
def th_add(ctx: Any, by: int) -> int:
    ctx.state["n"] += by
    return int(ctx.state["n"])


@activity
async def th_noop(ctx: Any, conf: dict[str, Any]) -> None:
    return None


TH_DAG = Dag("th_dag")
TH_DAG.task("only", th_noop)
APP = App(workflows=[th_tally], updates=[th_add], activities=[th_noop], dags=[TH_DAG])

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def header(span_id: str) -> dict[str, str]:
    return {"traceparent": f"00-{CALLER_TRACE}-{span_id}-01", "tracestate": "vendor=1"}


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing.configure(provider)
    try:
        yield spans
    finally:
        tracing.disable()


def _named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


@pytest.mark.parametrize("cache_size", [1000, 0], ids=["cached", "replayed"])
def test_start_signal_and_update_over_http_continue_the_callers_trace(
    db: str, start_worker: Any, exporter: InMemorySpanExporter, cache_size: int
) -> None:
    """With cache_size 0 every task after the first replays the whole history (a new root
    span): the decision after it is still a harvest.workflow.task in the caller's trace, and it
    carries the links to the signal's and the update's senders, as a cached run's task does
    (under load a task can miss the cache, so the default case met this now and then)."""
    worker = start_worker(APP, cache_size=cache_size)
    with api_client(db, app=APP) as api:
        started = api.post("/workflows/th_tally/start", json={}, headers=header("00f067aa0ba902b7"))
        assert started.status_code == 201, started.text
        run = started.json()["execution_id"]
        updated = api.post(
            f"/workflows/{run}/update",
            json={"update_name": "th_add", "input": 2},
            headers=header("00f067aa0ba902b8"),
        )
        assert updated.status_code == 200 and updated.json()["result"] == 2, updated.text
        signalled = api.post(
            f"/workflows/{run}/signal", json={"signal_name": "stop"}, headers=header("00f067aa0ba902b9")
        )
        assert signalled.status_code == 200, signalled.text
        assert api.get(f"/workflows/{run}/result", params={"wait": "20s"}).json()["output"] == 2
    worker.stop()

    spans = exporter.get_finished_spans()
    caller = int(CALLER_TRACE, 16)
    (start,) = _named(spans, "harvest.workflow.start")
    assert start.context.trace_id == caller and start.parent is not None
    assert start.parent.span_id == 0x00F067AA0BA902B7 and start.parent.is_remote
    assert start.context.trace_state.get("vendor") == "1", "tracestate travels with it"
    assert start.attributes is not None and start.attributes["harvest.execution_id"] == run
    tasks = _named(spans, "harvest.workflow.task")
    assert tasks and {t.context.trace_id for t in tasks} == {caller}, "the run is in the caller's trace"
    assert any(t.parent is not None and t.parent.span_id == start.context.span_id for t in tasks)
    (sent,) = _named(spans, "harvest.workflow.signal")
    (asked,) = _named(spans, "harvest.workflow.update")
    assert sent.parent is not None and sent.parent.span_id == 0x00F067AA0BA902B9
    assert asked.parent is not None and asked.parent.span_id == 0x00F067AA0BA902B8
    linked = {link.context.span_id for t in tasks for link in t.links}
    assert {sent.context.span_id, asked.context.span_id} <= linked


def test_a_dag_trigger_over_http_continues_the_callers_trace(db: str, exporter: InMemorySpanExporter) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        SqlApi(conn).register_dags([TH_DAG.catalog()])
    with api_client(db, app=APP) as api:
        started = api.post("/dags/th_dag/trigger", json={}, headers=header("00f067aa0ba902c1"))
        assert started.status_code == 201, started.text
        run = started.json()["execution_id"]
    (start,) = _named(exporter.get_finished_spans(), "harvest.workflow.start")
    assert start.context.trace_id == int(CALLER_TRACE, 16) and start.parent is not None
    assert start.parent.span_id == 0x00F067AA0BA902C1
    assert start.attributes is not None and start.attributes["harvest.dag"] == "th_dag"
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "SELECT event_data ->> 'traceparent' FROM harvest.events "
            "WHERE execution_id = %s AND event_id = 1",
            (run,),
        ).fetchone()
    assert row is not None and row[0].startswith(f"00-{CALLER_TRACE}-{start.context.span_id:016x}-")


@pytest.mark.parametrize(
    "value",
    [
        "not a traceparent",
        f"00-{'0' * 32}-00f067aa0ba902b7-01",  # an all-zero trace id
        f"ff-{CALLER_TRACE}-00f067aa0ba902b7-01",  # version ff is invalid
        f"00-{CALLER_TRACE}-00f067aa0ba902b7",  # no flags
        "00-" + "z" * 32 + "-00f067aa0ba902b7-01",  # not hex
    ],
)
def test_a_malformed_traceparent_is_ignored(db: str, exporter: InMemorySpanExporter, value: str) -> None:
    with api_client(db, app=APP) as api:
        started = api.post("/workflows/th_tally/start", json={}, headers={"traceparent": value})
        assert started.status_code == 201, started.text
        run = started.json()["execution_id"]
    (start,) = _named(exporter.get_finished_spans(), "harvest.workflow.start")
    # Traced as a start with no span around: recorded into the run's own trace.
    assert start.context.trace_id == int(run.replace("-", ""), 16)


def test_without_tracing_the_header_changes_nothing(db: str) -> None:
    assert not tracing.ACTIVE
    with api_client(db, app=APP) as api:
        started = api.post("/workflows/th_tally/start", json={}, headers=header("00f067aa0ba902b7"))
        assert started.status_code == 201, started.text
