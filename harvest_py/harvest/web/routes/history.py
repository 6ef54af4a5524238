"""History export batches (docs/http-api.md "History export batches"): the document
`harvest history export-batch` writes, over HTTP, built by the same steps
(harvest.client.export_batch) on every shard's pool.

There is no route for ``WorkflowReplayer.replay_with_reset``: it replays a history against the
workflow code of whoever calls it (the build a release gate is about to deploy), which is not
the code a web replica runs, and a replay runs workflow code, which an API process does not.
Fetch the history here (or ``GET /workflows/{id}/history/export?payload_policy=full``, the whole
history; ``/history`` answers a page) and replay it where the new code is;
``POST /workflows/{id}/reset`` with ``dry_run`` checks the reset point on the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse

from harvest.client.export_batch import MAX_LIMIT, STATE_GROUPS, assemble, resolved, shard_batch
from harvest.client.history_export import EXPORT_PAGE_SIZE, aexport_chunks
from harvest.db.steps import arun_steps
from harvest.web.routes import ROWS, Call, Endpoint, Param, path, shape

# Pieces of an export read ahead of a slow client (each is one event's text).
_READ_AHEAD = 16


async def export_history_batch(call: Call, args: dict[str, Any], _: Any) -> Any:
    """The batch document; ``status`` partial (200) when a shard could not be read, 503 when none
    could."""
    full = args["payload_policy"] == "full"
    steps = (args["workflow_name"], args["state_group"], args["updated_after"], args["limit"], full)
    fan = await call.each_shard(lambda sql: arun_steps(shard_batch(*steps), sql))
    return assemble(fan.results, fan.unavailable_shards, fan.status, args["payload_policy"], args["limit"])


async def export_workflow_history(call: Call, args: dict[str, Any], _: Any) -> Any:
    """One execution's export, as `harvest history export` writes it (the same bytes), streamed
    from a server-side cursor as the events are read; under ``full`` offloaded payloads are
    resolved. An unknown or moved run is an error answer before any byte."""
    execution_id, full = args["execution_id"], args["payload_policy"] == "full"

    async def head(sql: Any) -> tuple[dict[str, Any], int | None]:
        execution = call.resident(await sql.get_execution(execution_id))
        if full:
            execution = await arun_steps(resolved(execution), sql)
        return execution, (await sql.get_shard_id() if call.sharded else None)

    execution, shard = await call.routed(execution_id, head)
    pieces: asyncio.Queue[str | BaseException | None] = asyncio.Queue(_READ_AHEAD)

    async def produce(sql: Any) -> None:
        async def events() -> AsyncIterator[dict[str, Any]]:
            async for event in sql.iter_history(execution_id, EXPORT_PAGE_SIZE):
                yield await arun_steps(resolved(event), sql) if full else event

        async for piece in aexport_chunks(execution, events(), full):
            await pieces.put(piece)

    async def body() -> AsyncIterator[bytes]:
        async def run() -> None:
            try:
                await call.on_shard(shard, produce)
                await pieces.put(None)
            except Exception as exc:  # the stream ends short: the client sees it broke off
                await pieces.put(exc)

        task = asyncio.create_task(run())
        try:
            while (piece := await pieces.get()) is not None:
                if isinstance(piece, BaseException):
                    raise piece
                yield piece.encode()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    return StreamingResponse(body(), media_type="application/json")


ENDPOINTS = [
    Endpoint(
        "GET",
        "/history/export-batch",
        "read",
        export_history_batch,
        "A bounded batch of recent histories over every shard, for a release gate's replay "
        "(as harvest history export-batch).",
        (
            Param("workflow_name", description="Only runs of this workflow."),
            Param("state_group", "enum", default="terminal", choices=tuple(sorted(STATE_GROUPS))),
            Param(
                "updated_after",
                "datetime",
                description="Only runs that ended (or, running, started) after this instant (RFC 3339).",
            ),
            Param("limit", "integer", default=100, minimum=1, maximum=MAX_LIMIT),
            Param("payload_policy", "enum", default="redacted", choices=("redacted", "full")),
        ),
        responses={200: "The batch (status complete or partial)", 503: "No shard could be read"},
        tag="workflows",
        shape=shape(
            schema={"type": "string"},
            version={"type": "integer"},
            status={"type": "string", "enum": ["complete", "partial"]},
            payload_policy={"type": "string"},
            exports=ROWS,
            failures=ROWS,
            shard_coverage={"type": "object"},
        ),
    ),
    Endpoint(
        "GET",
        "/workflows/{execution_id}/history/export",
        "read",
        export_workflow_history,
        "One execution and its history as one JSON document (as harvest history export writes it), "
        "payload values redacted unless payload_policy=full (then offloaded payloads resolved).",
        (
            path("execution_id", "uuid", "The execution id (a UUID)."),
            Param("payload_policy", "enum", default="redacted", choices=("redacted", "full")),
        ),
        responses={200: "The export, streamed", 404: "No such execution"},
        tag="workflows",
        shape=shape(execution={"type": "object"}, events=ROWS, redacted={"type": "boolean"}),
    ),
]
