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
``harvest.child.start``          a decision that starts a child workflow
``harvest.timer.start``          a decision that starts a durable timer
``harvest.workflow.continue_as_new``  a decision that continues the run as new
===============================  ====================================================

One trace per run, across processes, with no stored context: a run's trace id is its execution
id (a UUID is 128 bits, a W3C trace id's size), and its root span id is derived from it, so every
process that touches the run (the client that started it, each worker deciding it, each worker
running one of its activities) puts its spans in the same trace with no lookup. A child's trace
is its parent's (the parent id is in the child's ``WorkflowStarted``). An activity's span is the
child of the workflow task span that scheduled it (its W3C ``traceparent`` travels in the
activity's options). The caller's own span at a start is linked from the start span.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["ACTIVE", "configure", "current_ids", "run_context", "span", "traceparent"]

ACTIVE = False  # True once configure() has run
_tracer: Any = None
_otel: Any = None  # the opentelemetry.trace module, once configured


def configure(tracer_provider: Any = None) -> None:
    """Turn Harvest's spans on, through ``tracer_provider`` (default: the global provider)."""
    global ACTIVE, _tracer, _otel
    from opentelemetry import trace

    _otel = trace
    _tracer = trace.get_tracer("harvest", tracer_provider=tracer_provider)
    ACTIVE = True


def disable() -> None:
    global ACTIVE, _tracer
    ACTIVE, _tracer = False, None


def _root_span_id(trace_id: int) -> int:
    return (trace_id & 0xFFFF_FFFF_FFFF_FFFF) or 1


def run_context(execution_id: str, parent_id: str | None = None) -> Any:
    """The OpenTelemetry context of a run's trace (its parent's, for a child)."""
    trace_id = uuid.UUID(str(parent_id or execution_id)).int
    parent = _otel.SpanContext(
        trace_id=trace_id,
        span_id=_root_span_id(trace_id),
        is_remote=True,
        trace_flags=_otel.TraceFlags(_otel.TraceFlags.SAMPLED),
    )
    return _otel.set_span_in_context(_otel.NonRecordingSpan(parent))


def _from_traceparent(value: str) -> Any:
    try:
        _, trace_id, span_id, flags = value.split("-")
        parent = _otel.SpanContext(
            trace_id=int(trace_id, 16),
            span_id=int(span_id, 16),
            is_remote=True,
            trace_flags=_otel.TraceFlags(int(flags, 16)),
        )
    except ValueError:
        return None
    return _otel.set_span_in_context(_otel.NonRecordingSpan(parent))


@contextlib.contextmanager
def span(
    name: str,
    *,
    execution_id: str | None = None,
    parent_id: str | None = None,
    traceparent_of: str | None = None,
    root: bool = False,
    link_current: bool = False,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Any]:
    """A span in the run's trace (``execution_id``, or its parent's); under ``traceparent_of``
    when given; a new root linked to the run's trace when ``root``. A no-op when off."""
    if not ACTIVE:
        yield None
        return
    links = []
    context = None
    if link_current:
        current = _otel.get_current_span().get_span_context()
        if current.is_valid:
            links.append(_otel.Link(current))
    if execution_id is not None:
        run = run_context(execution_id, parent_id)
        if root:
            links.append(_otel.Link(_otel.get_current_span(run).get_span_context(), {"harvest.link": "run"}))
            context = _otel.set_span_in_context(_otel.INVALID_SPAN)
        else:
            context = (_from_traceparent(traceparent_of) if traceparent_of else None) or run
    attrs = {"harvest.execution_id": execution_id} if execution_id else {}
    if attributes:
        attrs.update({k: v for k, v in attributes.items() if v is not None})
    with _tracer.start_as_current_span(name, context=context, links=links, attributes=attrs) as current:
        yield current


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


def decision_spans(commands: list[dict[str, Any]], execution_id: str) -> None:
    """Short spans, under the current workflow task span, for the decision's durable steps."""
    if not ACTIVE:
        return
    for command in commands:
        kind = command["type"]
        if kind == "start_child_workflow":
            name, attrs = "harvest.child.start", {"harvest.child.workflow": command.get("workflow_name")}
        elif kind == "start_timer":
            name, attrs = "harvest.timer.start", {"harvest.timer.duration_secs": command.get("duration")}
        elif kind == "continue_as_new":
            name, attrs = "harvest.workflow.continue_as_new", {}
        else:
            continue
        attrs["harvest.seq"] = command.get("seq")
        with _tracer.start_as_current_span(
            name, attributes={k: v for k, v in attrs.items() if v is not None}
        ):
            pass


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
