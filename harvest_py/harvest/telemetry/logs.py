"""Structured logs: ``--log-format json`` and the fields of the code that logged.

Every line logged while workflow or activity code runs carries where it came from: the
worker sets :data:`LOG_FIELDS` (a context variable, so each task and the thread a plain ``def``
activity runs in see their own) to the execution id, workflow, activity and attempt, and
:class:`JsonFormatter` writes them, with the trace and span ids of the current OpenTelemetry
span when tracing is on, beside the time, level, logger and message. The fields also reach
text logs as record attributes (``%(execution_id)s`` in a format).

``ctx.logger`` in a workflow (harvest/runtime/context.py) is replay-aware: it drops the lines
of a step that is being replayed, so each line is written once per run, not once per replay.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from harvest.core.json_values import json_default
from harvest.core.text import escape_controls

__all__ = ["FIELDS", "LOG_FIELDS", "JsonFormatter", "TextFormatter", "configure_logging", "log_fields"]

# The fields of the workflow or activity code running in this context (None: engine code).
LOG_FIELDS: ContextVar[dict[str, Any] | None] = ContextVar("harvest_log_fields", default=None)

# The context fields a line may carry, in the order a JSON line writes them.
FIELDS = ("execution_id", "workflow_id", "workflow", "activity", "attempt", "trace_id", "span_id")

# (and uvicorn's color_message: its message again, with terminal escape sequences)
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "color_message"}


def log_fields(**fields: Any) -> Any:
    """Bind ``fields`` for the code this context runs next; returns the token to reset with."""
    # (The keywords' dict is the call's own: kept as it is unless a field is None, so the
    # usual call, one per activity, builds no second dict.)
    if None in fields.values():
        fields = {k: v for k, v in fields.items() if v is not None}
    return LOG_FIELDS.set(fields)


class _ContextFilter(logging.Filter):
    """Copies the context's fields (and the trace ids) onto each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = LOG_FIELDS.get()
        if fields:
            for key, value in fields.items():
                if not hasattr(record, key):
                    setattr(record, key, value)
        if not hasattr(record, "trace_id"):
            from harvest.telemetry import tracing

            ids = tracing.current_ids()
            if ids is not None:
                record.trace_id, record.span_id = ids
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, the context fields, the extras."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                line[key] = value
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            # (exc_text: set by harvest.db.connection.DatabaseTextFilter, as Formatter reads it)
            line["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(line, default=json_default)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class TextFormatter(logging.Formatter):
    """The classic line, safe to read: a message is often data a user or a caller chose (a
    workflow id, a failure's message, a signal's name), so a newline in it must not start what
    looks like another record (the lines after the first are indented, as a traceback's are),
    and a carriage return or a terminal escape sequence must not rewrite what an operator's
    terminal shows (they are printed escaped, ``\\r``, ``\\x1b``). The traceback a record carries
    is printed as it is."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = escape_controls(super().formatMessage(record))
        return line.replace("\n", "\n    ") if "\n" in line else line


# Filters the process' handler carries, registered by the layers above without telemetry
# importing them (the database layer's: a chained database error printed by its first line,
# harvest.db.connection.DatabaseTextFilter), whichever of the two comes first.
_HANDLER_FILTERS: list[logging.Filter] = []
_handler: logging.Handler | None = None


def add_handler_filter(extra: logging.Filter) -> None:
    """Have :func:`configure_logging`'s handler (the one set up, and any set up later) run
    ``extra`` on every record."""
    if extra not in _HANDLER_FILTERS:
        _HANDLER_FILTERS.append(extra)
        if _handler is not None:
            _handler.addFilter(extra)


def configure_logging(level: str | int = "INFO", fmt: str = "text", stream: Any = None) -> logging.Handler:
    """Set up the root logger for a Harvest process (``harvest worker``, ``dev``, ``serve``):
    ``fmt`` is ``text`` (the classic line) or ``json`` (:class:`JsonFormatter`). Returns the handler."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format {fmt!r}: use text or json")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    handler.addFilter(_ContextFilter())
    for extra in _HANDLER_FILTERS:
        handler.addFilter(extra)
    global _handler
    _handler = handler
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler
