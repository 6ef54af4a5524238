"""Lifecycle: pause and resume a run, finish an activity by its task token, and the start
throttle's pacing override (docs/lifecycle.md). Thin over the SQL calls `harvest workflow
pause|resume`, `harvest activity complete|fail|heartbeat` and `harvest throttle` make.

By token: the server stores the result (or the heartbeat's details) it is given, as JSON. A
client's payload codecs (compression, encryption, docs/payloads.md) are the client's: they do
not run here, so a worker whose App decodes with a codec chain reads what was sent as it is
(plain JSON passes through a chain unchanged).
"""

from __future__ import annotations

from typing import Any

from harvest.core import payload
from harvest.core.errors import MAX_DURATION_SECS, ActivityFailure, InvalidArgument, retry_delay_secs
from harvest.core.task_token import TaskToken
from harvest.web.routes import (
    ANY,
    BOOLEAN,
    STRING,
    Call,
    Endpoint,
    body,
    invalid,
    path,
    shape,
)
from harvest.web.routes.admin import CLEARED_BY, PACING_OVERRIDE, every_shard_read, every_shard_write

EXECUTION = path("execution_id", "uuid", "The execution id (a UUID).")
WORKFLOW = path("workflow_name", description="The workflow type whose start throttle it is.")


async def _pause_or_resume(call: Call, args: dict[str, Any], data: dict[str, Any], pause: bool) -> Any:
    handle = call.handle(args["execution_id"])
    operator = data.get("operator_id") or call.operator_id
    if pause:
        changed = await handle.pause(data.get("reason"), operator_id=operator)
    else:
        changed = await handle.resume(data.get("reason"), operator_id=operator)
    return {
        "execution_id": args["execution_id"],
        "status": "PAUSED" if pause else "RUNNING",
        "changed": changed,
    }


async def pause_workflow(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    return await _pause_or_resume(call, args, data, True)


async def resume_workflow(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    return await _pause_or_resume(call, args, data, False)


def _token(data: dict[str, Any]) -> TaskToken:
    try:
        return TaskToken.parse(data["task_token"])
    except Exception as exc:
        raise invalid("task_token", str(exc)) from None


async def _by_token(call: Call, data: dict[str, Any], fn: Any) -> Any:
    """``fn(sql, token)`` on the shard the token's run lives on."""
    token = _token(data)
    return await call.routed(token.execution_id, lambda sql: fn(sql, str(token)))


def _stored(call: Call, value: Any, what: str) -> Any:
    encoded = payload.encode(value, what)
    payload.check_size(encoded, what, call.state.max_payload_bytes)
    return encoded


async def complete_activity(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    result = _stored(call, data.get("result"), "the activity result")
    outcome = await _by_token(call, data, lambda sql, t: sql.complete_activity_by_token(t, result))
    return {"task_token": data["task_token"], "outcome": outcome}


async def fail_activity(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    failure = ActivityFailure(
        data.get("error_type") or "ExternalFailure",
        data.get("message") or "",
        non_retryable=bool(data.get("non_retryable")),
        details=_stored(call, data.get("details"), "the failure details"),
    )
    try:
        failure.next_retry_delay = retry_delay_secs(data.get("next_retry_delay"))
    except InvalidArgument as exc:  # (the body's range passed: a value nearer 0 than 1e-300)
        raise invalid("next_retry_delay", str(exc)) from None
    report = failure.to_json()
    outcome = await _by_token(call, data, lambda sql, t: sql.fail_activity_by_token(t, report))
    return {"task_token": data["task_token"], "outcome": outcome}


async def heartbeat_activity(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    details = data.get("details")
    encoded = None if details is None else _stored(call, details, "the heartbeat details")
    cancel = await _by_token(call, data, lambda sql, t: sql.heartbeat_activity_by_token(t, encoded))
    return {"task_token": data["task_token"], "cancel_requested": cancel}


async def get_start_throttle(call: Call, args: dict[str, Any], _: Any) -> Any:
    name = args["workflow_name"]
    return {"workflow_name": name, **await every_shard_read(call, lambda sql: sql.get_start_throttle(name))}


async def set_start_throttle_override(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    name = args["workflow_name"]
    operator = data.get("operator_id") or call.operator_id
    out = await every_shard_write(
        call,
        lambda sql: sql.set_start_throttle_override(
            name, data["rps"], data.get("burst"), data.get("ttl_secs") or 3600, operator
        ),
        ("start_throttle.override", name, operator),
    )
    return {"workflow_name": name, **out}


async def clear_start_throttle_override(call: Call, args: dict[str, Any], _: Any) -> Any:
    name = args["workflow_name"]
    operator = args["operator_id"] or call.operator_id
    out = await every_shard_write(
        call,
        lambda sql: sql.clear_start_throttle_override(name, operator),
        ("start_throttle.clear_override", name, operator),
    )
    return {"workflow_name": name, **out}


CHANGE = body({"reason": STRING, "operator_id": STRING})
# The spec's spelling of the override's path (singular; ours is plural, as /admin/rate-limits):
# served too, by the same route.
SPEC_OVERRIDE = "/admin/start-throttle/{workflow_name}/override"
TOKEN = {"task_token": STRING}
ACTIVITY_OUTCOME = shape(task_token=STRING, outcome=STRING)
ENDPOINTS = [
    Endpoint(
        "POST",
        "/workflows/{execution_id}/pause",
        "operate",
        pause_workflow,
        "Pause a running execution: none of its work starts until it is resumed (changed: false if it was).",
        (EXECUTION,),
        CHANGE,
        responses={200: "Paused", 404: "No such execution", 409: "The run ended"},
        tag="workflows",
        shape=shape(execution_id=STRING, status=STRING, changed=BOOLEAN),
    ),
    Endpoint(
        "POST",
        "/workflows/{execution_id}/resume",
        "operate",
        resume_workflow,
        "Resume a paused execution: overdue timers fire once, kept signals arrive in order.",
        (EXECUTION,),
        CHANGE,
        responses={200: "Running", 404: "No such execution", 409: "The run ended"},
        tag="workflows",
        shape=shape(execution_id=STRING, status=STRING, changed=BOOLEAN),
    ),
    Endpoint(
        "POST",
        "/activities/complete",
        "operate",
        complete_activity,
        "Complete an activity left to be completed elsewhere, by its task token (result stored as given).",
        body=body({**TOKEN, "result": ANY}, ("task_token",)),
        responses={200: "completed or already_completed", 409: "The attempt is no longer current (HR004)"},
        tag="activities",
        shape=ACTIVITY_OUTCOME,
    ),
    Endpoint(
        "POST",
        "/activities/fail",
        "operate",
        fail_activity,
        "Fail that attempt by its task token: retried, dead-lettered or failed per its retry policy.",
        body=body(
            {
                **TOKEN,
                "error_type": STRING,
                "message": STRING,
                "non_retryable": BOOLEAN,
                "details": ANY,
                # Seconds before the retry, in place of the policy's backoff (a Retry-After).
                "next_retry_delay": {"type": "number", "minimum": 0, "maximum": MAX_DURATION_SECS},
            },
            ("task_token",),
        ),
        responses={200: "What became of the attempt", 409: "The attempt is no longer current (HR004)"},
        tag="activities",
        shape=ACTIVITY_OUTCOME,
    ),
    Endpoint(
        "POST",
        "/activities/heartbeat",
        "operate",
        heartbeat_activity,
        "Heartbeat an activity by its task token; says whether its run was asked to cancel.",
        body=body({**TOKEN, "details": ANY}, ("task_token",)),
        responses={200: "OK", 409: "The attempt is no longer current (HR004)"},
        tag="activities",
        shape=shape(task_token=STRING, cancel_requested=BOOLEAN),
    ),
    Endpoint(
        "GET",
        "/admin/start-throttles/{workflow_name}",
        "admin",
        get_start_throttle,
        "A workflow's start throttle and its live override, per shard.",
        (WORKFLOW,),
        tag="admin",
    ),
    Endpoint(
        "POST",
        "/admin/start-throttles/{workflow_name}/override",
        "admin",
        set_start_throttle_override,
        "A temporary, self-expiring start rate on every shard (audited; shard_errors names a miss).",
        (WORKFLOW,),
        body(PACING_OVERRIDE, ("rps",)),
        responses={200: "OK", 404: "No start throttle declared", 409: "A keyed throttle (HR007)"},
        tag="admin",
        aliases=(SPEC_OVERRIDE,),
    ),
    Endpoint(
        "DELETE",
        "/admin/start-throttles/{workflow_name}/override",
        "admin",
        clear_start_throttle_override,
        "Remove a workflow's start-throttle override on every shard (audited; each shard says was_live).",
        (WORKFLOW, CLEARED_BY),
        tag="admin",
        aliases=(SPEC_OVERRIDE,),
    ),
]
