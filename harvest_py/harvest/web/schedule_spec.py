"""A workflow schedule's fields as the management API and the dashboard take them, checked once.

``POST /admin/schedules/workflow`` and ``PATCH /admin/schedules/{name}`` (harvest.web.routes.
schedules) and the dashboard's New schedule and Edit forms (harvest.web.ui.app) check a body
against :data:`CREATE` or :data:`UPDATE` (``check_body``: each field typed, or a 400 naming it),
then make the SQL call's arguments with :func:`create_arguments` or :func:`update_changes`: the
timing, catch-up and jitter by the rules the CLI and a declaration share (harvest.declare.
schedules: ``timing``, ``catchup_options``, ``jitter_secs``), every refusal an ``InvalidArgument``
naming its field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from harvest.core.errors import InvalidArgument
from harvest.declare import schedules
from harvest.declare.schedules import MAX_ACTIVE_RUNS as MOST_RUNS
from harvest.declare.schedules import OVERLAP_POLICIES
from harvest.web.routes import ANY, BOOLEAN, SHARD_ID, STRING, app_queue, body, check_body, invalid

T = TypeVar("T")
KIND = {"type": "string", "enum": ["workflow", "dag"]}
OVERLAP = {"type": "string", "enum": list(OVERLAP_POLICIES)}
MAX_ACTIVE_RUNS = {"type": "integer", "minimum": 1, "maximum": MOST_RUNS}
TIMING = {"cron": STRING, "tz": STRING, "every": STRING}
# A schedule's answer (GET, and every write's) spells four fields as the SQL does; a write takes
# those names too, each for the field it names (write_names), so what a client read it can send
# back as it read it.
READ_NAMES = {
    "timezone": "tz",
    "interval_secs": "every",
    "catchup_window_secs": "catchup_window",
    "jitter_secs": "jitter",
}
SECONDS = {"type": "integer", "minimum": 1}
FIELDS = {
    **TIMING,
    "workflow_name": STRING,
    "input": {**ANY, "description": "the run's one argument, any JSON value (null too: one null argument)"},
    "args": {
        "type": "array",
        "description": "the run's arguments, as an answer spells them (not beside input; [] none)",
    },
    "queue": STRING,
    "max_active_runs": MAX_ACTIVE_RUNS,
    "overlap": OVERLAP,
    "catchup": BOOLEAN,
    "catchup_window": STRING,
    "jitter": STRING,
    "timezone": {**STRING, "description": "tz, as an answer spells it"},
    "interval_secs": {**SECONDS, "description": "every in seconds, as an answer spells it"},
    "catchup_window_secs": {**SECONDS, "description": "catchup_window in seconds, as an answer spells it"},
    "jitter_secs": {
        "type": "number",
        "minimum": 0,
        "description": "jitter in seconds, as an answer spells it",
    },
}
# Keep a schedule whose workflow (or DAG) no worker registered (create_schedule's HR010).
ALLOW_UNREGISTERED = {**BOOLEAN, "description": "keep it though its workflow (its DAG) is not registered"}
CREATE = body(
    {
        "name": STRING,
        **FIELDS,
        "kind": KIND,
        "paused": BOOLEAN,
        "shard_id": SHARD_ID,
        "allow_unregistered": ALLOW_UNREGISTERED,
    },
    ("name",),
)
# The fields an update clears when given as null: each goes back to what a create without it
# takes (no arguments; the queue a create's default picks; one active run). Another field given
# as null is as absent (a schedule cannot be without its timing, workflow or policy), but input:
# a JSON null given is the run's one argument, as --input-json null is.
CLEARABLE = ("args", "queue", "max_active_runs")
UPDATE = body(
    {
        **FIELDS,
        "allow_unregistered": ALLOW_UNREGISTERED,
        **{k: {**FIELDS[k], "description": "null clears it (as a create without it)"} for k in CLEARABLE},
    }
)


def write_names(data: dict[str, Any]) -> dict[str, Any]:
    """A checked body with the answer's names (:data:`READ_NAMES`) as a write spells them: one
    field given both ways is a 400 naming it. An interval schedule's answer has a ``timezone``
    that says nothing (an interval is in UTC): beside an interval and no cron it is dropped, where
    ``tz`` is refused."""
    out = dict(data)
    for read, written in READ_NAMES.items():
        if out.get(read) is None:
            out.pop(read, None)
            continue
        if out.get(written) is not None:
            raise invalid(read, f"give {written} or {read}, not both (the same field)")
        value = out.pop(read)
        if (
            read == "timezone"
            and out.get("cron") is None
            and (data.get("interval_secs") or data.get("every"))
        ):
            continue
        out[written] = value
    return out


def _named(check: Callable[..., T], *args: Any) -> T:
    """A shared rule's answer, or its refusal as a 400 naming the field (once: a duration's
    message begins with its name already)."""
    try:
        return check(*args)
    except InvalidArgument as exc:
        field = exc.field  # type: ignore[attr-defined]
        raise invalid(field, str(exc).removeprefix(f"{field}: ")) from None


def timing(data: dict[str, Any]) -> dict[str, Any]:
    """cron (+ tz) or every, checked as a declaration is (harvest.declare.schedules.timing)."""
    return _named(schedules.timing, data.get("cron"), data.get("every"), data.get("tz"))


def arguments(data: dict[str, Any]) -> list[Any] | None:
    """The run's arguments a body gives, as create_schedule / update_schedule take them (their
    ``input``): ``input``, the one argument (a null given is one: [None], as `schedule
    create-workflow --input-json null` stores), or ``args``, the list an answer reads back; None
    when neither is given (or args is null). Both: a 400 naming args."""
    if "input" in data and "args" in data:
        raise invalid("args", "give input (the run's one argument) or args (its arguments), not both")
    if "input" in data:
        return [data["input"]]
    return data.get("args")


def options(data: dict[str, Any]) -> dict[str, Any]:
    """The fields other than the timing, as create_schedule / update_schedule take them."""
    out: dict[str, Any] = {}
    given = arguments(data)
    if given is not None:
        out["input"] = given
    for key in ("workflow_name", "queue", "max_active_runs", "overlap"):
        if data.get(key) is not None:
            out[key] = data[key]
    out.update(_named(schedules.catchup_options, data.get("catchup"), data.get("catchup_window")))
    if data.get("jitter") is not None:
        out["jitter_secs"] = _named(schedules.jitter_secs, data["jitter"])
    return out


def create_arguments(
    data: dict[str, Any], queue_of: Callable[[str, str | None], str | None]
) -> dict[str, Any]:
    """``create_schedule``'s keyword arguments (name and workflow_name among them) from a body
    checked against :data:`CREATE`. ``queue_of(workflow_name, given)``: the queue of its runs
    (``declared_queue``: the served App's, when none is given)."""
    checked = write_names(check_body(CREATE, data))
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
    allow = {"allow_unregistered": True} if checked.get("allow_unregistered") else {}
    return {
        "name": checked["name"],
        "kind": kind,
        "paused": bool(checked.get("paused")),
        **found,
        **kwargs,
        **allow,
    }


def check_app_input(
    app: Any, name: str, kind: str, workflow_name: str, args: list[Any] | None, field: str = "input"
) -> None:
    """A workflow schedule's run arguments bound to its workflow's parameters, when ``app`` (the
    served App) declares the workflow: a schedule of a workflow that needs an argument, made
    without one, failed every firing. A 400 naming ``field`` (the body's ``input`` or ``args``);
    nothing to check otherwise."""
    said = "input is the run's one argument" if field == "input" else "args are the run's arguments"
    definition = app.workflows.get(workflow_name) if app is not None and kind == "workflow" else None
    if definition is None:
        return
    try:
        schedules.check_arguments(name, list(args or []), definition, f"workflow {workflow_name!r}")
    except TypeError as exc:
        if type(exc) is not TypeError:
            raise
        raise invalid(field, f"{exc} ({said})") from None


def arguments_field(data: dict[str, Any]) -> str:
    """The field of a body (a form's) that gave the run's arguments: args, else input."""
    return "args" if "args" in data else "input"


# The changes of an update that move what a run's arguments are checked against.
ARGUMENT_CHANGES = ("input", "workflow_name", "kind")


def check_app_changes(app: Any, name: str, row: dict[str, Any], changes: dict[str, Any], field: str) -> None:
    """:func:`check_app_input` of the schedule ``row`` as ``changes`` (update_schedule's) leave
    it, when they change its arguments, workflow or kind: PATCH and the dashboard's Edit alike."""
    moved = {k: v for k, v in changes.items() if k in ARGUMENT_CHANGES}
    if app is None or not moved:
        return
    now = {**row, **moved}
    check_app_input(app, name, now["kind"], now["workflow_name"], now["input"], field)


def update_changes(data: dict[str, Any]) -> dict[str, Any]:
    """``update_schedule``'s changes from a body checked against :data:`UPDATE` (possibly
    empty: the caller says there is nothing to change). A :data:`CLEARABLE` field given as null
    is a change to None, which ``update_schedule`` takes as that field's default (the SQL's: no
    arguments, the workflow's registered queue, one active run); the caller resolves a cleared
    queue to the served App's first (:func:`cleared_queue`), as a create does."""
    checked = write_names(check_body(UPDATE, data))
    # (a cron alone: the expression, in the zone the schedule has)
    timing_of = _named(schedules.timing_changes, checked.get("cron"), checked.get("every"), checked.get("tz"))
    # (args cleared: update_schedule's input, the arguments, back to none)
    cleared = {"input" if k == "args" else k: None for k in CLEARABLE if k in checked and checked[k] is None}
    return {**timing_of, **options(checked), **cleared}


async def cleared_queue(
    sql: Any, name: str, changes: dict[str, Any], app: Any, row: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``changes`` with a cleared queue (``"queue": None``) made the served ``app``'s declared
    queue of the schedule's workflow (the one changed to, else ``row``'s or the stored
    schedule's, read on ``sql``), as a create without a queue takes it (:func:`app_queue`); no
    App, or one that does not declare the workflow: left None, the SQL's default."""
    if app is None or "queue" not in changes or changes["queue"] is not None:
        return changes
    workflow = changes.get("workflow_name") or (row or await sql.get_schedule(name, 1))["workflow_name"]
    return {**changes, "queue": app_queue(app, workflow, None)}
