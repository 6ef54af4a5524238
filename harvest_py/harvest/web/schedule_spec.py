"""A workflow schedule's fields as the management API and the dashboard take them, checked once.

``POST /admin/schedules/workflow`` and ``PATCH /admin/schedules/{name}`` (harvest.web.routes.
schedules) and the dashboard's New schedule and Edit forms (harvest.web.ui.app) check a body
against :data:`CREATE` or :data:`UPDATE` (``check_body``: each field typed, or a 400 naming it),
then make the SQL call's arguments with :func:`create_arguments` or :func:`update_changes`: the
timing checked as a declaration is (``Schedule.cron`` / ``Schedule.every``), durations parsed,
every refusal an ``InvalidArgument`` naming its field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harvest.core.durations import parse_duration
from harvest.core.errors import InvalidArgument
from harvest.declare.schedules import OVERLAP_POLICIES, Schedule
from harvest.web.routes import ANY, BOOLEAN, SHARD_ID, STRING, body, check_body, invalid

KIND = {"type": "string", "enum": ["workflow", "dag"]}
OVERLAP = {"type": "string", "enum": list(OVERLAP_POLICIES)}
MAX_ACTIVE_RUNS = {"type": "integer", "minimum": 1, "maximum": 1_000_000}
TIMING = {"cron": STRING, "tz": STRING, "every": STRING}
FIELDS = {
    **TIMING,
    "workflow_name": STRING,
    "input": ANY,
    "queue": STRING,
    "max_active_runs": MAX_ACTIVE_RUNS,
    "overlap": OVERLAP,
    "catchup": BOOLEAN,
    "catchup_window": STRING,
    "jitter": STRING,
}
CREATE = body(
    {"name": STRING, **FIELDS, "kind": KIND, "paused": BOOLEAN, "shard_id": SHARD_ID},
    ("name",),
)
UPDATE = body(FIELDS)


def _duration(name: str, raw: Any, *, positive: bool = False) -> float:
    try:
        return parse_duration(raw, name, positive=positive)
    except InvalidArgument as exc:
        raise invalid(name, str(exc)) from None


def timing(data: dict[str, Any]) -> dict[str, Any]:
    """cron (+ tz) or every, checked as a declaration is."""
    cron, every, tz = data.get("cron"), data.get("every"), data.get("tz")
    if cron is not None and every is not None:
        raise invalid("every", "give cron or every, not both")
    if cron is not None and tz:
        try:  # the zone alone first, so an unknown one is refused naming tz, not cron
            Schedule.cron("@daily", tz=tz)
        except InvalidArgument as exc:
            raise invalid("tz", str(exc)) from None
    try:
        if cron is not None:
            spec = Schedule.cron(cron, tz=tz or "UTC")
            return {"cron": spec.expression, "timezone": spec.timezone}
        if every is not None:
            if tz is not None:
                raise invalid("tz", "tz goes with cron (an interval is in UTC)")
            return {"interval_secs": Schedule.every(every).interval_secs}
    except InvalidArgument as exc:
        if getattr(exc, "field", None):
            raise
        raise invalid("cron" if cron is not None else "every", str(exc)) from None
    if tz is not None:
        raise invalid("tz", "tz goes with cron")
    return {}


def options(data: dict[str, Any]) -> dict[str, Any]:
    """The fields other than the timing, as create_schedule / update_schedule take them."""
    out: dict[str, Any] = {}
    if "input" in data and data["input"] is not None:
        out["input"] = [data["input"]]  # the run's one argument, as --input-json
    for key in ("workflow_name", "queue", "max_active_runs", "overlap", "catchup"):
        if data.get(key) is not None:
            out[key] = data[key]
    if data.get("catchup_window") is not None:
        if data.get("catchup") is False:  # (as the CLI's --no-catchup with --catchup-window)
            raise invalid("catchup_window", "a window turns catch-up on: give catchup false or a window")
        out["catchup"] = True
        secs = _duration("catchup_window", data["catchup_window"], positive=True)
        out["catchup_window_secs"] = max(1, int(secs))
    if data.get("jitter") is not None:
        out["jitter_secs"] = _duration("jitter", data["jitter"])
    return out


def create_arguments(
    data: dict[str, Any], queue_of: Callable[[str, str | None], str | None]
) -> dict[str, Any]:
    """``create_schedule``'s keyword arguments (name and workflow_name among them) from a body
    checked against :data:`CREATE`. ``queue_of(workflow_name, given)``: the queue of its runs
    (``declared_queue``: the served App's, when none is given)."""
    checked = check_body(CREATE, data)
    found = timing(checked)
    if not found:
        raise invalid("cron", "give cron or every")
    kwargs = options(checked)
    kwargs.setdefault("workflow_name", checked["name"])
    kind = checked.get("kind") or "workflow"
    if kind == "workflow":
        # With no queue, its runs go where the served App declares the workflow, as a start's.
        queue = queue_of(kwargs["workflow_name"], kwargs.get("queue"))
        if queue is not None:
            kwargs["queue"] = queue
    return {"name": checked["name"], "kind": kind, "paused": bool(checked.get("paused")), **found, **kwargs}


def update_changes(data: dict[str, Any]) -> dict[str, Any]:
    """``update_schedule``'s changes from a body checked against :data:`UPDATE` (possibly
    empty: the caller says there is nothing to change)."""
    checked = check_body(UPDATE, data)
    if checked.get("tz") is not None and checked.get("cron") is None:
        raise invalid("tz", "tz goes with cron")
    changes = {**timing(checked), **options(checked)}
    if checked.get("tz") is None:
        changes.pop("timezone", None)  # cron alone: the expression, in the zone the schedule has
    return changes
