"""The worker fleet: list with filters, one worker, the health roll-up, drain with a deadline
and the drain preview (functions/workers.sql; docs/http-api.md, "Workers"). Each worker row is
pinned to the shard it polls (``shard_id``)."""

from __future__ import annotations

from typing import Any

from harvest.core.errors import NotFound
from harvest.core.ids import MAX_SHARD
from harvest.shard.fanout import WORKER_LIMIT, WORKER_LIMIT_MAX, no_worker_anywhere
from harvest.web.routes import (
    BOOLEAN,
    DATETIME,
    FANOUT,
    ROWS,
    STRING,
    Call,
    Endpoint,
    Param,
    body,
    fanout_keys,
    invalid,
    merged,
    path,
    shape,
)

WORKER = path("worker_id", description="The worker's id.")


async def list_workers(call: Call, args: dict[str, Any], _: Any) -> Any:
    shard = args["shard_id"]
    if shard is not None and shard not in call.providers():
        raise invalid("shard_id", f"{shard} is not a shard of this deployment")
    limit = args["limit"] if args["limit"] is not None else WORKER_LIMIT
    found = await call.reads().list_workers(args["queue"], args["status"], args["health"], shard, limit)
    return merged(call, found, "workers")


async def worker_health(call: Call, args: dict[str, Any], _: Any) -> Any:
    return merged(call, await call.reads().get_worker_health(), None)


async def _found_or_none(sql: Any, worker_id: str) -> Any:
    try:
        return await sql.get_worker(worker_id)
    except NotFound:
        return None


async def get_worker(call: Call, args: dict[str, Any], _: Any) -> Any:
    worker_id = args["worker_id"]
    fan = await call.each_shard(lambda sql: _found_or_none(sql, worker_id))
    rows = [{**row, "shard_id": s} for s, row in fan.results.items() if row is not None]
    if not rows and not call.sharded:  # one database: its own error (as `harvest worker get`)
        await call.on_shard(None, lambda sql: sql.get_worker(worker_id))
    if not rows:
        raise no_worker_anywhere(worker_id, fan.unavailable_shards)
    # One row per shard the worker polls; the first is the answer, all are listed.
    return {
        **rows[0],
        "rows": rows,
        **fanout_keys(call, fan, status="read_status"),
    }


async def drain_worker(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    worker_id = args["worker_id"]
    operator = data.get("operator_id") or call.operator_id
    fan = await call.each_shard_write(
        lambda sql: sql.drain_worker(worker_id, data.get("deadline_at"), operator), "nothing was drained"
    )
    rows = [{**row, "shard_id": s} for s, row in fan.results.items()]
    found = [r for r in rows if r.get("outcome") != "not_found"] or rows
    answer = dict(found[0]) if found else {"worker_id": worker_id, "outcome": "not_found"}
    answer["shards"] = [r["shard_id"] for r in rows if r.get("outcome") != "not_found"]
    answer["rows"] = rows
    answer["unavailable_shards"] = fan.unavailable_shards
    # (No "status" here: the worker row's own status is the answer's.)
    answer["shard_errors"] = fan.shard_errors()
    answer["sharded"] = call.sharded
    return answer


async def drain_preview(call: Call, args: dict[str, Any], _: Any) -> Any:
    fan = await call.each_shard(lambda sql: sql.preview_drain(args["queue"], args["worker_id"]))
    rows = [{**row, "shard_id": s} for s, answer in sorted(fan.results.items()) for row in answer]
    # sharded: the CLI prints each row's shard, as over SQL with [shards] (`worker drain-preview`)
    return {
        "workers": rows,
        **fanout_keys(call, fan),
    }


ENDPOINTS = [
    Endpoint(
        "GET",
        "/workers",
        "read",
        list_workers,
        "The worker fleet over every shard, stale first within each status: the first limit, with "
        "the total matched (truncated when some were left out).",
        (
            Param("queue"),
            Param("shard_id", "integer", minimum=0, maximum=MAX_SHARD),
            Param("status", "enum", choices=("active", "draining", "stopped")),
            Param("health", "enum", choices=("healthy", "stale", "stopped")),
            Param(
                "limit",
                "integer",
                minimum=1,
                maximum=WORKER_LIMIT_MAX,
                description=f"Workers at most (default {WORKER_LIMIT}).",
            ),
        ),
        tag="workers",
        shape=shape(workers=ROWS, total={"type": "integer"}, truncated=BOOLEAN, **FANOUT),
    ),
    Endpoint("GET", "/workers/health", "read", worker_health, "The fleet health roll-up.", tag="workers"),
    Endpoint(
        "GET",
        "/workers/drain-preview",
        "read",
        drain_preview,
        "Who a drain would affect: in-flight work and the queues left uncovered.",
        (Param("queue"), Param("worker_id")),
        tag="workers",
    ),
    Endpoint(
        "GET",
        "/workers/{worker_id}",
        "read",
        get_worker,
        "One worker with the task ids it holds (a row per shard it polls).",
        (WORKER,),
        tag="workers",
    ),
    Endpoint(
        "POST",
        "/workers/{worker_id}/drain",
        "admin",
        drain_worker,
        "Ask a worker to stop claiming and finish its in-flight work (optionally by a deadline); audited.",
        (WORKER,),
        body({"deadline_at": DATETIME, "operator_id": STRING}),
        tag="workers",
    ),
]
