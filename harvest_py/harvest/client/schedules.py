"""Schedule operations the faces share (`harvest schedule`, the HTTP API's ``/admin/schedules``,
the dashboard's schedule pages), each written once for a synchronous and an asyncio SQL API as a
flow (:mod:`harvest.core.stepper`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from harvest.core.errors import HarvestError, NotFound, ScheduleAlreadyExists, UnknownWorkflow
from harvest.core.stepper import Do, Flow, adriven, driven
from harvest.declare.schedules import backfill_slots


def backfill_flow(
    sql: Any,
    name: str,
    start: dt.datetime,
    end: dt.datetime,
    overlap: str,
    operator_id: str | None,
    *,
    slots_of: Callable[[dict[str, Any], dt.datetime, dt.datetime], list[dt.datetime]] = backfill_slots,
    on_slots: Callable[[int], None] | None = None,
) -> Flow[dict[str, Any]]:
    """Backfill schedule ``name`` on ``sql`` (its home shard's SqlApi or AsyncSqlApi): its slots
    in [start, end] (:func:`~harvest.declare.schedules.backfill_slots`: the range checked, at
    most BACKFILL_MAX_SLOTS, else InvalidArgument before anything is written), fired by
    ``backfill_schedule`` under ``overlap``. Answers ``{name, slots, **counts}``: how many slots,
    and backfill_schedule's counts by outcome; with ``failed`` slots, ``failures`` too: each
    one's ``slot_at`` and the ``reason`` its firing recorded (backfill_schedule answers them).
    ``slots_of``: backfill_slots, or a face's wrapper of it that names the face's field in its
    errors (the dashboard's). ``on_slots``: told how many slots before they are fired (the CLI's
    progress line for a long backfill)."""
    row = yield Do(lambda: sql.get_schedule(name, 1))
    slots = slots_of(row, start, end)
    if on_slots is not None:
        on_slots(len(slots))
    counts = yield Do(lambda: sql.backfill_schedule(name, slots, overlap, operator_id))
    return {"name": name, "slots": len(slots), **counts}


def firing_failures(answer: dict[str, Any]) -> list[str]:
    """Why a trigger's firing (its answer) or a backfill's slots (its answer's ``failures``)
    failed, one line each, as recorded; none when nothing failed. The CLI prints them and exits 1."""
    if "failures" in answer or "failed" in answer:
        return [f"slot {_iso(r['slot_at'])}: {r['reason']}" for r in answer.get("failures") or []]
    if answer.get("status") == "failed":
        return [f"slot {_iso(answer['slot_at'])}: {answer.get('reason')}"]
    return []


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, dt.datetime) else str(value)


backfill = driven(backfill_flow)
abackfill = adriven(backfill_flow)


# The hint each face gives for a schedule's refusal (what to do), where the SQL's hint names the
# SQL's or the CLI's way: a name taken (create_schedule's HR014), a schedule missing (HR002), a workflow
# or DAG not registered (HR010: functions/schedules.sql _check_schedule_target, whose hint says
# the SQL's override).
SCHEDULE_REFUSAL_HINTS: dict[str, dict[str, str]] = {
    "sql": {"override": "pass p_allow_unregistered => true"},
    "cli": {
        "taken": "update it (harvest schedule update), or delete it first",
        "missing": "harvest schedule list shows the schedules of this database",
        "override": "pass --allow-unregistered",
    },
    "http": {
        "taken": "PATCH {route} to change it, or DELETE {route} first",
        "missing": "GET /admin/schedules lists them",
        "override": 'send "allow_unregistered": true',
    },
    # (the New schedule and Edit forms, harvest/web/ui/templates/_schedule_form.html)
    "dashboard": {
        "taken": "edit it on its page, or delete it first",
        "missing": "the Schedules page lists them",
        "override": 'tick "Allow a workflow no worker registered yet"',
    },
}


def schedule_refusal_for(exc: HarvestError, name: str, face: str) -> HarvestError:
    """``exc``, a refusal of a call on schedule ``name``, saying what to do in ``face``'s words
    (:data:`SCHEDULE_REFUSAL_HINTS`: "cli", "http", "dashboard"): another error, as it is. The
    CLI over HTTP reads the server's."""
    hints = SCHEDULE_REFUSAL_HINTS[face]
    if isinstance(exc, UnknownWorkflow):
        message = str(exc)
        for other, other_hints in SCHEDULE_REFUSAL_HINTS.items():
            if other != face:
                message = message.replace(other_hints["override"], hints["override"])
        return UnknownWorkflow(message, exc.workflow_name, exc.queue, exc.registered)
    if isinstance(exc, ScheduleAlreadyExists):
        taken = hints["taken"].format(route=f"/admin/schedules/{quote(name, safe='')}")
        return ScheduleAlreadyExists(f"schedule {name} already exists: {taken}")
    if isinstance(exc, NotFound) and str(exc).startswith("schedule "):
        return NotFound(f"schedule {name!r} does not exist: {hints['missing']}")
    return exc
