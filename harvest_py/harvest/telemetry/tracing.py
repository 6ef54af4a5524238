"""OpenTelemetry spans at each durable boundary, and nothing at all when tracing is off.

Nothing here imports OpenTelemetry until :func:`configure` is called (with the ``otel`` extra
installed); until then every hook is one check of a module global (``ACTIVE``).

Spans (attributes: ``harvest.execution_id``, ``harvest.workflow``, ``harvest.queue``, ...):

===============================  ====================================================
``harvest.workflow.start``       a client start (Client / AsyncClient)
``harvest.workflow.task``        a workflow task: replay of new events, decision, commit
``harvest.workflow.execute``     a workflow task that replayed the whole history (no warm
                                 cached run): a new root span, ``harvest.replay = true``,
                                 linked to the run's trace
``harvest.activity.execute``     one activity attempt
``harvest.workflow.signal``      a client signal
``harvest.workflow.update``      a client update (to its answer or acceptance)
``harvest.update.validate``      a worker validating an update (child of the client's update span)
``harvest.schedule.fire``        a scheduler tick of one schedule: a new trace's root, continued
                                 by the runs of the slots it fires (buffered ones too)
``harvest.child.start``          a decision that starts a child workflow
``harvest.timer.start``          a decision that starts a durable timer
``harvest.workflow.continue_as_new``  a decision that continues the run as new
===============================  ====================================================

One trace per workflow, across processes and shards. The trace is fixed where the run starts
and its context is captured there as a W3C ``traceparent`` kept on the run's ``WorkflowStarted``
(functions/start.sql):

* a client start inside the caller's active span: the start span is that span's child and the
  run's spans continue the caller's trace (the start span is their parent);
* a child: its parent's ``harvest.child.start`` span, carried on the decision's command (and, for
  a child placed on another shard, on its ``cross_shard_children`` row to that shard), so
  children and grandchildren on any shard are in the root's trace;
* a continue-as-new successor: the decision's ``harvest.workflow.continue_as_new`` span (or,
  from a worker with tracing off, its predecessor's starting context);
* an activity: the workflow task span that scheduled it (``traceparent`` in its options).

A deferred start (throttle, debounce, batch) keeps its caller's start span and the released run
continues it; a DAG trigger is a start like a client's. A request to the management API
continues the caller's ``traceparent`` header (:func:`continue_incoming`).

A run started with no span around (no caller span, a worker with tracing off)
has no stored context and needs none: its trace id is its execution id (a UUID is 128 bits, a
W3C trace id's size; a child's is its root run's, ``trace_root``) and the parent span id is
derived from it, so every process that touches the run puts its spans in the same trace with
no lookup; the client's start span is recorded into that trace once the id is known.

A signal is a message into a running run: the sender's span (the caller's child when one is
active) is kept on ``SignalReceived`` and the workflow task that reads the signal *links* to
it (OpenTelemetry's messaging convention: a consumer that may process several messages in one
operation links to each producer rather than taking one as its parent), so the run's trace
stays one tree and each signal leads back to the sender's trace.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from harvest.core.extras import missing_extra

__all__ = [
    "ACTIVE",
    "configure",
    "continue_incoming",
    "current_ids",
    "failed",
    "link_run",
    "link_signals",
    "run_context",
    "span",
    "start_span",
    "traceparent",
]

ACTIVE = False  # True once configure() has run
_tracer: Any = None
_otel: Any = None  # the opentelemetry.trace module, once configured


def configure(tracer_provider: Any = None) -> None:
    """Turn Harvest's spans on, through ``tracer_provider`` (default: the global provider)."""
    global ACTIVE, _tracer, _otel
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise missing_extra("harvest.telemetry.tracing.configure", "otel", exc) from exc

    _otel = trace
    _tracer = trace.get_tracer("harvest", tracer_provider=tracer_provider)
    ACTIVE = True


def disable() -> None:
    global ACTIVE, _tracer
    ACTIVE, _tracer = False, None


@contextlib.contextmanager
def continue_incoming(headers: Mapping[str, str]) -> Iterator[None]:
    """Continue an incoming request's W3C trace context (its ``traceparent`` and ``tracestate``
    headers) while the block runs: a start, signal or update made in it is the caller's span's
    child (the management API's routes, harvest/web/routes). Nothing changes when tracing is
    off, when a span is already current (an ASGI tracing middleware's server span is the better
    parent), or when the header is absent or malformed (it is ignored, as W3C asks)."""
    if not ACTIVE or "traceparent" not in headers or _otel.get_current_span().get_span_context().is_valid:
        yield
        return
    from opentelemetry import context as otel_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    try:
        incoming = TraceContextTextMapPropagator().extract(headers)
    except Exception:  # a header no parser expected: traced as a request with no caller
        incoming = None
    if incoming is None or not _otel.get_current_span(incoming).get_span_context().is_valid:
        yield
        return
    token = otel_context.attach(incoming)
    try:
        yield
    finally:
        otel_context.detach(token)


def _root_span_id(trace_id: int) -> int:
    return (trace_id & 0xFFFF_FFFF_FFFF_FFFF) or 1


def run_context(execution_id: str, parent_id: str | None = None, started_by: str | None = None) -> Any:
    """The OpenTelemetry context a run's spans are children of: the span that started it
    (``started_by``, the traceparent on its WorkflowStarted) when it has one, else the derived
    root of its trace (its root run's, ``parent_id``, for a child)."""
    if started_by:
        context = _from_traceparent(started_by)
        if context is not None:
            return context
    trace_id = uuid.UUID(str(parent_id or execution_id)).int
    parent = _otel.SpanContext(
        trace_id=trace_id,
        span_id=_root_span_id(trace_id),
        is_remote=True,
        trace_flags=_otel.TraceFlags(_otel.TraceFlags.SAMPLED),
    )
    return _otel.set_span_in_context(_otel.NonRecordingSpan(parent))


def _span_context(value: str) -> Any:
    """The SpanContext of a W3C traceparent, or None when it is not one."""
    try:
        version, trace_id, span_id, flags = value.split("-")
        if version != "00" or len(trace_id) != 32 or len(span_id) != 16:
            return None
        context = _otel.SpanContext(
            trace_id=int(trace_id, 16),
            span_id=int(span_id, 16),
            is_remote=True,
            trace_flags=_otel.TraceFlags(int(flags, 16)),
        )
    except (ValueError, AttributeError):
        return None
    return context if context.is_valid else None


def _from_traceparent(value: str) -> Any:
    context = _span_context(value)
    if context is None:
        return None
    return _otel.set_span_in_context(_otel.NonRecordingSpan(context))


@contextlib.contextmanager
def span(
    name: str,
    *,
    execution_id: str | None = None,
    parent_id: str | None = None,
    started_by: str | None = None,
    traceparent_of: str | None = None,
    root: bool = False,
    link_current: bool = False,
    caller_first: bool = False,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Any]:
    """A span in the run's trace (``execution_id``, or its root's; under ``started_by``, the
    span that started the run, when known); under ``traceparent_of`` when given; a new root
    when ``root`` (a replay's: :func:`link_run` links it to the run's trace once the run's start
    is read; a schedule's firing);
    the child of the caller's active span instead, when there is one and ``caller_first``. A
    no-op when off."""
    if not ACTIVE:
        yield None
        return
    links = []
    context = None
    caller = _otel.get_current_span().get_span_context()
    if link_current and caller.is_valid:
        links.append(_otel.Link(caller))
    if caller_first and caller.is_valid:
        pass  # the caller's span is the parent (the current context)
    elif root:  # a new trace (a replay's: link_run links it to the run's trace once its start is read)
        context = _otel.set_span_in_context(_otel.INVALID_SPAN)
    elif execution_id is not None:
        context = (_from_traceparent(traceparent_of) if traceparent_of else None) or run_context(
            execution_id, parent_id, started_by
        )
    attrs = {"harvest.execution_id": execution_id} if execution_id else {}
    if attributes:
        attrs.update({k: v for k, v in attributes.items() if v is not None})
    with _tracer.start_as_current_span(name, context=context, links=links, attributes=attrs) as current:
        yield current


class StartTrace:
    """A client start's span (:func:`start_span`): ``traceparent`` goes to the database with the
    start; :meth:`started` names the run once the database answered."""

    def __init__(self, span: Any = None, started_ns: int = 0) -> None:
        self.span = span
        self.started_ns = started_ns
        self.traceparent: str | None = None
        if span is not None:
            context = span.get_span_context()
            self.traceparent = (
                f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
            )

    def started(self, execution_id: Any, attributes: Mapping[str, Any]) -> None:
        attrs = {k: v for k, v in attributes.items() if v is not None}
        if self.span is not None:
            if execution_id is not None:
                attrs["harvest.execution_id"] = str(execution_id)
            self.span.set_attributes(attrs)
        elif self.started_ns and execution_id is not None:  # a deferred start has no run (id) yet
            record_span("harvest.workflow.start", str(execution_id), self.started_ns, attrs)


# Tracing off: every start's trace, which records nothing (``traceparent`` None, ``started``
# a no-op), entered with no generator of its own.
OFF = StartTrace()
_OFF_SPAN = contextlib.nullcontext(OFF)


def start_span(workflow_name: str) -> contextlib.AbstractContextManager[StartTrace]:
    """A client start. Inside the caller's active span: ``harvest.workflow.start`` is its child
    and its traceparent is captured for the run (the run's spans continue the caller's trace).
    With no span around: the start span is recorded in the run's own trace once its id is known.
    Off: nothing (:data:`OFF`: ``traceparent`` None)."""
    if not ACTIVE:
        return _OFF_SPAN
    return _start_span(workflow_name)


@contextlib.contextmanager
def _start_span(workflow_name: str) -> Iterator[StartTrace]:
    if not _otel.get_current_span().get_span_context().is_valid:
        yield StartTrace(started_ns=time.time_ns())
        return
    with _tracer.start_as_current_span(
        "harvest.workflow.start", attributes={"harvest.workflow": workflow_name}
    ) as current:
        yield StartTrace(current)


def link_run(execution_id: str, parent_id: str | None = None, started_by: str | None = None) -> None:
    """Link the current span (a replay's new root) to the run's trace: the span that started
    the run, or the derived root of its trace."""
    if not ACTIVE:
        return
    run = run_context(execution_id, parent_id, started_by)
    _otel.get_current_span().add_link(_otel.get_current_span(run).get_span_context(), {"harvest.link": "run"})


_MESSAGES = {"SignalReceived": "signal", "UpdateAccepted": "update"}


def link_signals(events: Iterable[Mapping[str, Any]]) -> None:
    """Link the current span (the workflow task reading them) to the senders of the signals and
    updates among ``events`` (a ``SignalReceived`` or ``UpdateAccepted`` carrying the sender's
    traceparent)."""
    if not ACTIVE:
        return
    current = _otel.get_current_span()
    for event in events:
        kind = _MESSAGES.get(event.get("event_type", ""))
        if kind is None:
            continue
        sender = (event.get("event_data") or {}).get("traceparent")
        context = _span_context(sender) if isinstance(sender, str) else None
        if context is not None:
            name = event["event_data"].get("name")
            current.add_link(context, {"harvest.link": kind, f"harvest.{kind}": name})


def traceparent() -> str | None:
    """The W3C traceparent of the current span (None when off or outside a span)."""
    if not ACTIVE:
        return None
    context = _otel.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current span, as hex, for log lines; None when off."""
    if not ACTIVE:
        return None
    context = _otel.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def failed(error_type: str) -> None:
    """Mark the current span (an activity attempt, a workflow task) failed: status ERROR and
    ``harvest.error_type``, the failure's type only (its message may quote the data it was
    about, and a span is exported to another system)."""
    if not ACTIVE:
        return
    current = _otel.get_current_span()
    current.set_attribute("harvest.error_type", error_type)
    current.set_status(_otel.Status(_otel.StatusCode.ERROR, error_type))


def decision_spans(commands: list[dict[str, Any]], execution_id: str) -> list[dict[str, Any]]:
    """Short spans, under the current workflow task span, for the decision's durable steps;
    returns the commands, a child's start and a continue-as-new carrying their span's
    traceparent (the child, the successor, continue it: one trace for the whole workflow)."""
    if not ACTIVE:
        return commands
    traced = []
    for command in commands:
        kind = command["type"]
        if kind == "start_child_workflow":
            name, attrs = "harvest.child.start", {"harvest.child.workflow": command.get("workflow_name")}
        elif kind == "start_timer":
            name, attrs = "harvest.timer.start", {"harvest.timer.duration_secs": command.get("duration")}
        elif kind == "continue_as_new":
            name, attrs = "harvest.workflow.continue_as_new", {}
        else:
            traced.append(command)
            continue
        attrs["harvest.seq"] = command.get("seq")
        with _tracer.start_as_current_span(
            name, attributes={k: v for k, v in attrs.items() if v is not None}
        ):
            if kind != "start_timer":
                command = {**command, "traceparent": traceparent()}
        traced.append(command)
    return traced


def record_span(
    name: str, execution_id: str, start_ns: int, attributes: Mapping[str, Any] | None = None
) -> None:
    """A span that began at ``start_ns`` and ends now, in the run's trace, linked to the
    caller's current span (a client's start: the run's id is known only once it returns)."""
    if not ACTIVE:
        return
    links = []
    current = _otel.get_current_span().get_span_context()
    if current.is_valid:
        links.append(_otel.Link(current, {"harvest.link": "caller"}))
    attrs = {
        "harvest.execution_id": execution_id,
        **{k: v for k, v in (attributes or {}).items() if v is not None},
    }
    started = _tracer.start_span(
        name, context=run_context(execution_id), links=links, attributes=attrs, start_time=start_ns
    )
    started.end()
