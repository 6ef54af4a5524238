"""What the pages show, made from what the SQL API answers: pure functions and template filters
(no request, no database), so the shapes are testable alone."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import jinja2

from harvest.core.codecs import describe_tree
from harvest.core.errors import failure_line, stored_traceback
from harvest.core.json_values import json_default
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
            return cast(str, moment)
    return cast(str, moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ"))


def pretty(value: Any) -> str:
    """A JSON value, indented, for a <pre> (text in any script as written, not \\u escapes); what
    JSON has no type for as the API writes it (json_default: a time in ISO 8601 and UTC, not in
    the session's zone as str() wrote it)."""
    return json.dumps(value, indent=2, default=json_default, sort_keys=True, ensure_ascii=False)


def payload_shown(value: Any, full: bool) -> Any:
    """A payload the page shows outside a history (a DAG run's conf, a schedule's input): as it
    is stored, said as the run's page says it (encrypted, offloaded), or, not ``full``, its size
    only, as a run's input is shown to a principal who may not see payloads."""
    return describe_tree(value if full else redact({"input": value})["input"])


def dead_letter_page(row: dict[str, Any], full: bool) -> dict[str, Any]:
    """A dead letter as its page shows it: its input and its failure's details (payloads) as
    stored and described (encrypted, offloaded) when ``full``, else their size only, as a run's
    page shows its payloads; the failure's stack (its ``traceback``: stored_traceback) apart,
    shown only with them."""
    show: Callable[[Any], Any] = describe_tree if full else (lambda v: describe_tree(redact(v)))
    stored = row.get("failure")
    failure: dict[str, Any] = stored if isinstance(stored, dict) else {"message": stored}
    details = failure.get("details")
    return {
        **row,
        "input": show({"input": row.get("input")})["input"],
        "failure": {**failure, "details": show({"details": details})["details"]},
        "stack": stored_traceback(failure) if full else None,
    }


LINE = 120  # the characters of a JSON value shown on its line; a longer one opens to the rest


def one_line(value: Any, width: int = LINE) -> tuple[str, str | None]:
    """A JSON value on one line, cut at ``width`` characters, and, where it was cut, the whole
    of it indented (``json_value`` in _macros.html opens to it), else None: serialised once
    for the line, once more only for a value too long for it."""
    text = json.dumps(value, default=json_default, separators=(",", ":"), ensure_ascii=False)
    if len(text) <= width:
        return text, None
    return _cut(text, width), pretty(value)


def text_line(value: Any, width: int = LINE) -> tuple[str, str | None]:
    """A text (an error's message, a traceback of many KB) on one line: its first line, cut at
    ``width`` characters, and, where anything was left out, the whole of it as written
    (``text_value`` in _macros.html opens to it), else None."""
    text = "" if value is None else str(value)
    first = text.split("\n", 1)[0].rstrip("\r")
    if first == text and len(text) <= width:
        return text, None
    return (_cut(first, width) if len(first) > width else first + " …"), text


def _cut(text: str, width: int) -> str:
    return text[: width - 1] + "…"


def with_query(query: Any, **changes: Any) -> str:
    """The current query string with ``changes`` (None removes a key), for links that keep filters.
    An action's message (``msg``) is never kept: it was said on this page, about what was done."""
    items = [(k, v) for k, v in query.multi_items() if k not in changes and k not in ("msg", "msg_sig")]
    for k, v in changes.items():
        if v is None:
            continue
        for one in v if isinstance(v, list | tuple) else [v]:
            items.append((k, str(one)))
    return "?" + urllib.parse.urlencode(items) if items else "?"


def segment(name: Any) -> str:
    """A name (a schedule's, a DAG's, a worker's) as one segment of a page's address: every "/"
    quoted too (the server decodes it before routing), so a name with ".." segments cannot make
    a browser resolve its link or its form's action to another page (``../../dags/etl``)."""
    return urllib.parse.quote(str(name), safe="")


def install(env: jinja2.Environment) -> None:
    env.filters.update(
        ago=ago,
        when=when,
        pretty=pretty,
        one_line=one_line,
        text_line=text_line,
        duration=duration,
        segment=segment,
    )
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
            # A time in event data keeps the offset of the session that wrote it: in UTC, as
            # every time on the page.
            value = when(data[key]) if key == "fire_at" else data[key]
            parts.append(f"{key}={value}")
    failure = data.get("failure")
    if isinstance(failure, dict):
        parts.append(failure_line(failure))
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


class HistoryPage:
    """One page of a run's history and what the run page shows beside it, from the rows of
    ``harvest.get_history_page`` (``read``): the page's events (the first ``size`` from event
    ``after`` on, or the last ``size`` before event ``before``; neither: the run's last
    ``size``; keyset pages, so walking them shows each event once), the last ``size`` signals,
    the updates accepted and not completed, the last ``size`` reset points, and the counts.
    The database sends no more rows than the page shows, and only what is shown is redacted:
    before, the page read the whole history (a stream of 100,000 events for a long run) and
    redacted every signal's payload to keep the last few."""

    def __init__(self, size: int, *, after: int | None = None, before: int | None = None, full: bool):
        # In full, an encoded payload says what it is ("<encrypted (key k1)>"), as `harvest
        # workflow history --full` prints it: the dashboard holds no codec key. An offloaded one
        # was read back before (Principal.resolved); one the store no longer holds says
        # "<offloaded (n bytes, ref ...)>": a reference's JSON is not the payload.
        # Redacted, an erased payload says "<erased>" as well: it has no size.
        self.show: Callable[[Any], Any] = describe_tree if full else (lambda v: describe_tree(redact(v)))
        self.size, self.after, self.before = size, after, before
        self.events: list[dict[str, Any]] = []
        self.signals: list[dict[str, Any]] = []
        self.resettable: list[int] = []
        self.accepted: dict[str, dict[str, Any]] = {}
        self.total_events = self.total_signals = 0
        self.last_event_id = 0

    async def fetch(self, api: Any, execution_id: str) -> list[dict[str, Any]]:
        """The page's rows from ``api`` (one call, harvest.get_history_page), for :meth:`add_rows`
        (a full page's offloaded payloads read back in between)."""
        return cast(
            "list[dict[str, Any]]",
            await api.get_history_page(execution_id, self.after, self.before, self.size),
        )

    def add_rows(self, rows: list[dict[str, Any]]) -> None:
        by_part: dict[str, list[dict[str, Any]]] = {}
        for row in sorted(rows, key=lambda r: r["event_id"]):
            by_part.setdefault(row["part"], []).append(row)
        for event in by_part.get("event", ()):
            data = event["event_data"] or {}
            kind = event["event_type"]
            self.events.append(
                {
                    "event_id": event["event_id"],
                    "event_type": kind,
                    "created_at": event["created_at"],
                    "kind": KIND.get(kind, "step"),
                    "summary": _summary(kind, data),
                    "data": self.show(data),
                }
            )
        for event in by_part.get("signal", ()):
            data = event["event_data"] or {}
            self.signals.append(
                {
                    "event_id": event["event_id"],
                    "name": data.get("name"),
                    "created_at": event["created_at"],
                    "payload": self.show({"payload": data.get("payload")})["payload"],
                    "sender": data.get("sender_execution_id"),
                }
            )
        for event in by_part.get("update", ()):
            data = event["event_data"] or {}
            self.accepted[str(data.get("update_id"))] = {
                "event_id": event["event_id"],
                "update_id": data.get("update_id"),
                "name": data.get("name"),
                "created_at": event["created_at"],
                "input": self.show({"input": data.get("input")})["input"],
            }
        # A reset point: the last event before the workflow task (the end of a batch the run
        # had seen); the database checks the boundary is a completed one.
        self.resettable.extend(event["event_id"] - 1 for event in by_part.get("reset", ()))
        for count in by_part.get("count", ()):
            self.last_event_id = count["event_id"]
            self.total_events = int(count["event_data"]["events"])
            self.total_signals = int(count["event_data"]["signals"])

    def links(self) -> dict[str, int | None]:
        """Where the older page ends (history_before) and the newer one starts (history_from);
        None when there is no such page."""
        if not self.events:
            return {"older": None, "newer": None}
        first, last = self.events[0]["event_id"], self.events[-1]["event_id"]
        return {
            "older": first if first > 1 else None,
            "newer": last + 1 if last < self.last_event_id else None,
        }


def execution_page(
    execution: dict[str, Any],
    stack: dict[str, Any],
    history: HistoryPage,
    *,
    full: bool,
    requested: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The parts of the execution page: the run (payloads redacted unless ``full``), what it
    waits on, the page of its timeline (``history``, read by the caller), its last signals, the
    updates accepted but not completed and those requested and not yet accepted (``requested``,
    list_update_requests)."""
    run = dict(execution)
    failure = run.get("failure")
    # (its details and traceback are payloads, as in the timeline; the traceback shown apart)
    failure_stack = stored_traceback(failure) if full else None
    if failure_stack is not None and isinstance(failure, dict) and "traceback" in failure:
        failure = {k: v for k, v in failure.items() if k != "traceback"}
    run["failure"] = history.show(failure)
    payloads = {k: history.show({k: run.get(k)})[k] for k in ("input", "output")}
    # The stack's payloads (each activity's last heartbeat details and last failure, the
    # workflow task's last failure: its details and traceback) shown as the timeline's are,
    # redacted unless full: what GET /workflows/{id}/stack shows a token without payloads.
    stack = history.show(stack)
    return {
        "execution": run,
        "payloads": payloads,
        "stack": stack,
        "failure_stack": failure_stack,
        "events": list(history.events),
        "signals": list(history.signals),
        "pending_updates": list(history.accepted.values()),
        "requested_updates": list(requested or []),
        "resettable": list(history.resettable),
        "history_links": history.links(),
        "total_events": history.total_events,
        "total_signals": history.total_signals,
    }


def cut_tree(node: dict[str, Any], depth: int, level: int = 0) -> dict[str, Any]:
    """``node``'s tree (``list_tree``) drawn ``depth`` levels deep: a node at the last level
    keeps no children but says whether it has some (``deeper``), so the page links to them
    instead of drawing a leaf."""
    children = node.get("children") or []
    if level == depth:
        return {**node, "children": [], "deeper": bool(children)}
    return {**node, "children": [cut_tree(c, depth, level + 1) for c in children], "deeper": False}


# -- schedules -----------------------------------------------------------------------------------
def upcoming(row: dict[str, Any], count: int = 5) -> list[datetime]:
    """The next ``count`` fire times of a schedule row (none while paused); a row the dashboard
    cannot compute (a cron this version does not parse) shows its stored next slot only."""
    from harvest.core.errors import InvalidArgument
    from harvest.declare.schedules import upcoming_slots

    try:
        return upcoming_slots(row, count)
    except InvalidArgument:
        nxt = row.get("next_fire_at")
        return [nxt] if nxt is not None and not row.get("paused") else []


# -- DAGs ----------------------------------------------------------------------------------------
def merge_dags(per_shard: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per DAG over the shards that registered it: paused on any shard is paused (the
    shards named), running runs summed, the newest last run."""
    merged: dict[str, dict[str, Any]] = {}
    for shard, rows in sorted(per_shard.items()):
        for row in rows:
            name = row["dag_name"]
            one = merged.get(name)
            if one is None:
                one = merged[name] = {**row, "shards": [], "paused_shards": [], "running_runs": 0}
            one["shards"].append(shard)
            if row.get("paused"):
                one["paused_shards"].append(shard)
            one["running_runs"] += row.get("running_runs") or 0
            last = row.get("last_run_at")
            if last and (not one.get("last_run_at") or last > one["last_run_at"]):
                one["last_run_at"], one["last_run_status"] = last, row.get("last_run_status")
    for one in merged.values():
        one["paused"] = bool(one["paused_shards"])
    return [merged[name] for name in sorted(merged)]


NODE_W, NODE_H, GAP_X, GAP_Y, PAD, LANE = 190, 62, 70, 22, 12, 14


def dag_graph(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """A DAG run's tasks laid out by topological level for an inline SVG: a task's level is one
    more than its deepest upstream task's (0 without any), levels are columns left to right, a
    column keeps the tasks' declared order. Edges run from an upstream task's right side to its
    downstream task's left side; one that skips a column runs along a lane of its own under
    the boxes, so it never crosses one. An upstream name the run does not list is ignored."""
    names = [t["task"] for t in tasks]
    upstream = {t["task"]: [u for u in (t.get("upstream") or []) if u in names] for t in tasks}
    level: dict[str, int] = {}

    def depth(name: str, seen: tuple[str, ...] = ()) -> int:
        if name not in level:
            ups = [u for u in upstream[name] if u not in seen]  # a cycle cannot be declared; be safe
            level[name] = 1 + max((depth(u, (*seen, name)) for u in ups), default=-1)
        return level[name]

    columns: dict[int, list[str]] = {}
    for name in names:
        columns.setdefault(depth(name), []).append(name)
    at: dict[str, tuple[int, int]] = {}
    nodes = []
    by_name = {t["task"]: t for t in tasks}
    for col, members in sorted(columns.items()):
        for row, name in enumerate(members):
            x, y = PAD + col * (NODE_W + GAP_X), PAD + row * (NODE_H + GAP_Y)
            at[name] = (x, y)
            nodes.append({**by_name[name], "x": x, "y": y, "level": col})
    tallest = max((len(m) for m in columns.values()), default=1)
    bottom = PAD + tallest * NODE_H + (tallest - 1) * GAP_Y  # the lowest box's bottom edge
    edges, lanes = [], 0
    for name in names:
        x2, y2 = at[name]
        for up in upstream[name]:
            x1, y1 = at[up]
            sx, sy, ex, ey = x1 + NODE_W, y1 + NODE_H / 2, x2, y2 + NODE_H / 2
            if level[name] - level[up] == 1:  # the next column: one curve across the gap
                mid = (sx + ex) / 2
                d = f"M{sx},{sy} C{mid},{sy} {mid},{ey} {ex},{ey}"
            else:  # past other columns: down in the gap, along a lane under every box, and up
                lanes += 1
                lane, bend = bottom + LANE * lanes, GAP_X / 2
                d = (
                    f"M{sx},{sy} C{sx + bend},{sy} {sx + bend},{lane} {sx + GAP_X},{lane}"
                    f" L{ex - GAP_X},{lane} C{ex - bend},{lane} {ex - bend},{ey} {ex},{ey}"
                )
            edges.append({"from": up, "to": name, "state": by_name[up].get("state"), "d": d})
    width = PAD * 2 + (max(columns, default=0) + 1) * NODE_W + max(columns, default=0) * GAP_X
    height = bottom + LANE * lanes + PAD
    return {"nodes": nodes, "edges": edges, "width": width, "height": height, "w": NODE_W, "h": NODE_H}


def duration(seconds: Any) -> str:
    """Seconds as "850ms", "12.3s", "4m 05s", "2h 03m" (or "-")."""
    if seconds is None:
        return "-"
    s = float(seconds)
    if s < 1:
        return f"{int(s * 1000)}ms"
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m {int(s % 60):02d}s"
    return f"{int(s // 3600)}h {int(s % 3600 // 60):02d}m"
