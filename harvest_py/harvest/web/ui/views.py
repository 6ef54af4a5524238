"""What the pages show, made from what the SQL API answers: pure functions and template filters
(no request, no database), so the shapes are testable alone."""

from __future__ import annotations

import json
import urllib.parse
from datetime import UTC, datetime
from typing import Any

import jinja2

from harvest.core.payload import redact
from harvest.shard.fanout import COMPLETE, UNAVAILABLE


# -- template filters ----------------------------------------------------------------------------
def ago(moment: Any, now: datetime | None = None) -> str:
    """A relative time: "just now", "3s ago", "4m ago", "2h ago", "5d ago" (or "in 3m")."""
    if moment is None:
        return "never"
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    seconds = ((now or datetime.now(UTC)) - moment).total_seconds()
    future, seconds = seconds < 0, abs(seconds)
    if seconds < 2:
        return "just now"
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            text = f"{int(seconds // size)}{unit}"
            return f"in {text}" if future else f"{text} ago"
    return "just now"  # unreachable: seconds >= 2 here


def when(moment: Any) -> str:
    """A time as UTC ISO 8601 to the second (the CLI's form), or "-"."""
    if moment is None:
        return "-"
    if isinstance(moment, str):  # a time inside a JSON answer (the stack's fire_at, due_at)
        try:
            moment = datetime.fromisoformat(moment)
        except ValueError:
            return moment
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def pretty(value: Any) -> str:
    """A JSON value, indented, for a <pre>."""
    return json.dumps(value, indent=2, default=str, sort_keys=True)


def compact(value: Any, width: int = 120) -> str:
    """A JSON value on one line, cut at ``width`` characters."""
    text = json.dumps(value, default=str, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def with_query(query: Any, **changes: Any) -> str:
    """The current query string with ``changes`` (None removes a key), for links that keep filters."""
    items = [(k, v) for k, v in query.multi_items() if k not in changes]
    for k, v in changes.items():
        if v is None:
            continue
        for one in v if isinstance(v, list | tuple) else [v]:
            items.append((k, str(one)))
    return "?" + urllib.parse.urlencode(items) if items else "?"


def install(env: jinja2.Environment) -> None:
    env.filters.update(ago=ago, when=when, pretty=pretty, compact=compact)
    env.globals.update(with_query=with_query, COMPLETE=COMPLETE)


# -- the workers banner --------------------------------------------------------------------------
def fleet_banner(health: dict[str, Any], status: str) -> dict[str, Any]:
    """Healthy / Degraded / Unhealthy with the counts (total, active, draining, stopped, stale).

    Unhealthy: no shard answered, or no worker is active and fresh (nothing claims work).
    Degraded: a shard could not be read, or a worker is stale. Healthy otherwise."""
    total = health.get("total") or 0
    draining, stopped = health.get("draining") or 0, health.get("stopped") or 0
    counts = {
        "total": total,
        "active": total - draining - stopped,
        "draining": draining,
        "stopped": stopped,
        "stale": health.get("stale") or 0,
    }
    if status == UNAVAILABLE or not health.get("healthy"):
        level = "Unhealthy"
    elif status != COMPLETE or counts["stale"]:
        level = "Degraded"
    else:
        level = "Healthy"
    return {"level": level, **counts}


# -- one execution -------------------------------------------------------------------------------
def _summary(event_type: str, data: dict[str, Any]) -> str:
    parts = []
    for key in ("seq", "name", "workflow_name", "signal_name", "update_id", "fire_at", "reason", "attempt"):
        if data.get(key) is not None:
            parts.append(f"{key}={data[key]}")
    failure = data.get("failure")
    if isinstance(failure, dict):
        parts.append(f"{failure.get('error_type')}: {failure.get('message')}")
    return " ".join(str(p) for p in parts)


KIND = {
    "WorkflowStarted": "start",
    "WorkflowCompleted": "ok",
    "WorkflowFailed": "bad",
    "WorkflowTimedOut": "bad",
    "WorkflowTerminated": "bad",
    "WorkflowCancelled": "warn",
    "ActivityFailed": "bad",
    "ChildWorkflowFailed": "bad",
    "SignalReceived": "signal",
    "UpdateAccepted": "signal",
    "UpdateCompleted": "signal",
    "WorkflowTaskCompleted": "quiet",
}


def execution_page(
    execution: dict[str, Any], stack: dict[str, Any], history: list[dict[str, Any]], *, full: bool
) -> dict[str, Any]:
    """The parts of the execution page: the run (payloads redacted unless ``full``), what it
    waits on, the timeline, its signals and the updates accepted but not completed."""
    show = (lambda v: v) if full else redact
    events = []
    signals = []
    accepted: dict[str, dict[str, Any]] = {}
    for event in history:
        data = event["event_data"] or {}
        kind = event["event_type"]
        shown = show(data)
        events.append(
            {
                "event_id": event["event_id"],
                "event_type": kind,
                "created_at": event["created_at"],
                "kind": KIND.get(kind, "step"),
                "summary": _summary(kind, data),
                "data": shown,
            }
        )
        if kind == "SignalReceived":
            signals.append(
                {
                    "event_id": event["event_id"],
                    "name": data.get("name"),
                    "created_at": event["created_at"],
                    "payload": shown.get("payload"),
                    "sender": data.get("sender_execution_id"),
                }
            )
        elif kind == "UpdateAccepted":
            accepted[str(data.get("update_id"))] = {
                "event_id": event["event_id"],
                "update_id": data.get("update_id"),
                "name": data.get("name"),
                "created_at": event["created_at"],
                "input": shown.get("input"),
            }
        elif kind == "UpdateCompleted":
            accepted.pop(str(data.get("update_id")), None)
    run = dict(execution)
    payloads = {k: show({k: run.get(k)})[k] for k in ("input", "output")}
    return {
        "execution": run,
        "payloads": payloads,
        "stack": stack,
        "events": events,
        "signals": signals,
        "pending_updates": list(accepted.values()),
        # Reset points to offer: the last event before each workflow task (the end of a batch
        # the run had seen); the database checks the boundary is a completed one.
        "resettable": [e["event_id"] - 1 for e in events if e["event_type"] == "WorkflowTaskCompleted"],
    }
