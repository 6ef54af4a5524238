"""Schedules: list (both kinds), get, create, update, delete, pause, resume, trigger, backfill
(docs/schedules.md; the spec's ``/admin/schedules``). Thin over the SQL calls `harvest schedule`
makes.

A schedule is addressed by its name. On shards it lives on its home shard
(``ShardRouter.schedule_home``, where a declared one lives too): every route by name goes there
(``shard_id`` names another, as ``--shard-id`` does), and the list reads every shard. The SQL
functions that change a schedule are granted to ``harvest_operator`` (functions/security.sql),
so those routes need the operate scope; reads need read.
"""

from __future__ import annotations

from typing import Any

from harvest.client.schedules import abackfill, schedule_refusal_for
from harvest.core.errors import NotFound, ScheduleAlreadyExists, UnknownWorkflow
from harvest.core.ids import MAX_SHARD
from harvest.declare.schedules import (
    describe_row,
    listed_schedule,
    schedule_view,
)
from harvest.shard.fanout import MAX_PAGE, SCHEDULE_PAGE
from harvest.web.routes import (
    BOOLEAN,
    DATETIME,
    FANOUT,
    ROWS,
    STRING,
    Call,
    Endpoint,
    Param,
    Reply,
    body,
    declared_queue,
    invalid,
    merged,
    path,
    shape,
)
from harvest.web.schedule_spec import (
    ARGUMENT_CHANGES,
    CREATE,
    OVERLAP,
    UPDATE,
    arguments_field,
    check_app_changes,
    check_app_input,
    cleared_queue,
    create_arguments,
    update_changes,
)

NAME = path("name", description="The schedule's name (a / in it sent as %2F).", slash=True)
SHARD = Param(
    "shard_id",
    "integer",
    minimum=0,
    maximum=MAX_SHARD,
    description="The shard that holds it (default: its home).",
)


async def _on_home(call: Call, name: str, shard: int | None, fn: Any) -> Any:
    """``fn(sql)`` on the shard that holds schedule ``name``: its home, or ``shard``. The SQL's
    refusals that say what to do name the CLI's commands; over HTTP they name the routes."""
    if shard is None and call.sharded:
        shard = call.state.router.schedule_home(name)
    try:
        return await call.on_shard(shard, fn)
    except (UnknownWorkflow, ScheduleAlreadyExists, NotFound) as exc:
        said = schedule_refusal_for(exc, name, "http")
        if said is exc:
            raise
        raise said from None


def _view(row: dict[str, Any]) -> dict[str, Any]:
    return {**schedule_view(row), "when": describe_row(row)}


async def list_schedules(call: Call, args: dict[str, Any], _: Any) -> Any:
    """A page of every shard's schedules by name (harvest.shard.fanout.list_schedules)."""
    limit = args["limit"] if args["limit"] is not None else SCHEDULE_PAGE
    found = await call.reads().list_schedules(args["kind"], limit, args["cursor"], args["paused"])
    found.value = [{**listed_schedule(row), "when": describe_row(row)} for row in found.value]
    # sharded: the CLI shows each row's shard then, as over SQL with [shards] (`schedule list`)
    return merged(call, found, "schedules")


async def get_schedule(call: Call, args: dict[str, Any], _: Any) -> Any:
    name = args["name"]
    row = await _on_home(call, name, args["shard_id"], lambda sql: sql.get_schedule(name, args["limit"]))
    return _view(row)


async def create_schedule(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    kwargs = create_arguments(data, lambda workflow, given: declared_queue(call, workflow, given))
    name, workflow_name = kwargs.pop("name"), kwargs.pop("workflow_name")
    check_app_input(
        call.state.app, name, kwargs["kind"], workflow_name, kwargs.get("input"), arguments_field(data)
    )
    row = await _on_home(
        call,
        name,
        data.get("shard_id"),
        lambda sql: sql.create_schedule(name, workflow_name, operator_id=call.operator_id, **kwargs),
    )
    return Reply(_view(row), 201)


async def update_schedule(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    name = args["name"]
    changes = update_changes(data)
    if not changes:
        raise invalid("body", "nothing to change: give at least one field")

    async def update(sql: Any) -> Any:
        app = call.state.app
        if app is not None and any(k in changes for k in ARGUMENT_CHANGES):
            check_app_changes(app, name, await sql.get_schedule(name, 1), changes, arguments_field(data))
        # (a cleared queue: the served App's, as a create without one takes it)
        return await sql.update_schedule(
            name,
            await cleared_queue(sql, name, changes, app),
            call.operator_id,
            bool(data.get("allow_unregistered")),
        )

    row = await _on_home(call, name, args["shard_id"], update)
    return _view(row)


async def delete_schedule(call: Call, args: dict[str, Any], _: Any) -> Any:
    name = args["name"]
    deleted = await _on_home(
        call, name, args["shard_id"], lambda sql: sql.delete_schedule(name, call.operator_id)
    )
    if not deleted:
        raise NotFound(f"schedule {name!r} does not exist: GET /admin/schedules lists them")
    return {"name": name, "deleted": True}


async def pause_schedule(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    name = args["name"]
    row = await _on_home(
        call, name, args["shard_id"], lambda sql: sql.pause_schedule(name, data.get("note"), call.operator_id)
    )
    return _view(row)


async def resume_schedule(call: Call, args: dict[str, Any], _: Any) -> Any:
    name = args["name"]
    row = await _on_home(
        call, name, args["shard_id"], lambda sql: sql.resume_schedule(name, call.operator_id)
    )
    return _view(row)


async def trigger_schedule(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    name = args["name"]
    return await _on_home(
        call,
        name,
        args["shard_id"],
        lambda sql: sql.trigger_schedule(name, data.get("overlap"), call.operator_id),
    )


async def backfill_schedule(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    name, overlap = args["name"], data.get("overlap") or "buffer_all"
    return await _on_home(
        call,
        name,
        args["shard_id"],
        lambda sql: abackfill(sql, name, data["from"], data["to"], overlap, call.operator_id),
    )


SCHEDULE = shape(name=STRING, when=STRING, next_fire_times={"type": "array"})
ENDPOINTS = [
    Endpoint(
        "GET",
        "/admin/schedules",
        "read",
        list_schedules,
        "The schedules, workflow and DAG kinds together, over every shard, by name: a page of at most "
        "limit, the rest by next_cursor (kind= for one kind, paused= for paused or running ones). Each "
        "row's next_fire says what its next_fire_at is: the scheduler's stored slot (scheduled, or "
        "overdue once its due time, the slot plus its jitter, is past), computed as GET "
        "/admin/schedules/{name} computes it (computed: no scheduler has ticked since it was created, "
        "resumed or re-timed), or null while paused.",
        (
            Param("kind", "enum", choices=("workflow", "dag")),
            Param("paused", "boolean", description="Only paused (true) or running (false) schedules."),
            Param(
                "limit",
                "integer",
                minimum=1,
                maximum=MAX_PAGE,
                description=f"Schedules at most (default {SCHEDULE_PAGE}).",
            ),
            Param("cursor", description="next_cursor of the previous page, with the same filters."),
        ),
        tag="schedules",
        shape=shape(schedules=ROWS, next_cursor={"type": ["string", "null"]}, **FANOUT),
    ),
    Endpoint(
        "POST",
        "/admin/schedules/workflow",
        "operate",
        create_schedule,
        "Create a schedule (cron with tz, or every); on shards, on its home shard.",
        body=CREATE,
        responses={201: "Created", 409: "A schedule of that name exists"},
        tag="schedules",
        shape=SCHEDULE,
    ),
    Endpoint(
        "GET",
        "/admin/schedules/{name}",
        "read",
        get_schedule,
        "One schedule: next fire times, last firings with their runs, misses.",
        (NAME, Param("limit", "integer", default=20, minimum=1, maximum=1000), SHARD),
        responses={200: "OK", 404: "No such schedule"},
        tag="schedules",
        shape=SCHEDULE,
    ),
    Endpoint(
        "PATCH",
        "/admin/schedules/{name}",
        "operate",
        update_schedule,
        "Change fields of a schedule (a new cron, interval, zone or jitter counts from now); args, "
        "queue or max_active_runs given as null is cleared, to what a create without it takes (input "
        "given as null is one null argument).",
        (NAME, SHARD),
        UPDATE,
        responses={200: "OK", 404: "No such schedule"},
        tag="schedules",
        shape=SCHEDULE,
    ),
    Endpoint(
        "DELETE",
        "/admin/schedules/{name}",
        "operate",
        delete_schedule,
        "Delete a schedule and its firing history (its runs go on).",
        (NAME, SHARD),
        responses={200: "Deleted", 404: "No such schedule"},
        tag="schedules",
        shape=shape(name=STRING, deleted=BOOLEAN),
    ),
    Endpoint(
        "POST",
        "/admin/schedules/{name}/pause",
        "operate",
        pause_schedule,
        "Pause a schedule (a restart keeps the pause).",
        (NAME, SHARD),
        body({"note": STRING}),
        responses={200: "OK", 404: "No such schedule"},
        tag="schedules",
        shape=SCHEDULE,
    ),
    Endpoint(
        "POST",
        "/admin/schedules/{name}/resume",
        "operate",
        resume_schedule,
        "Resume a paused schedule from now (what it skipped while paused is not fired).",
        (NAME, SHARD),
        responses={200: "OK", 404: "No such schedule"},
        tag="schedules",
        shape=SCHEDULE,
    ),
    Endpoint(
        "POST",
        "/admin/schedules/{name}/trigger",
        "operate",
        trigger_schedule,
        "Fire a schedule now (overlap: instead of its policy).",
        (NAME, SHARD),
        body({"overlap": OVERLAP}),
        responses={200: "OK", 404: "No such schedule"},
        tag="schedules",
    ),
    Endpoint(
        "POST",
        "/admin/schedules/{name}/backfill",
        "operate",
        backfill_schedule,
        "Fire the slots in [from, to] that never fired (at most 10000).",
        (NAME, SHARD),
        body({"from": DATETIME, "to": DATETIME, "overlap": OVERLAP}, ("from", "to")),
        responses={200: "OK", 404: "No such schedule"},
        tag="schedules",
        shape=shape(name=STRING, slots={"type": "integer"}),
    ),
]
