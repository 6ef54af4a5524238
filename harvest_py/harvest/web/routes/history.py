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
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import StreamingResponse

from harvest.client.export_batch import (
    coverage,
    export_key,
    failure,
    head,
    newest,
    shard_candidates,
)
from harvest.client.history_export import (
    EXPORT_PAGE_SIZE,
    MAX_LIMIT,
    STATE_GROUPS,
    aexport_chunks,
    aresolved_in_batches,
)
from harvest.core.errors import HarvestError
from harvest.core.payload import redact
from harvest.db.steps import arun_steps
from harvest.web.errors import compact_json
from harvest.web.principal import Principal
from harvest.web.routes import ROWS, Call, Endpoint, Param, path, shape

# Pieces of an export read ahead of a slow client (each is one event's text).
_READ_AHEAD = 16

# Puts a piece of the answer's text on the way to the client (waits while it is _READ_AHEAD behind).
Put = Callable[[str], Awaitable[None]]


def streamed_json(produce: Callable[[Put], Awaitable[None]]) -> StreamingResponse:
    """The JSON answer ``produce`` writes piece by piece, sent as it is written: at most
    _READ_AHEAD pieces wait for a slow client, so a document of any size costs a page of
    memory. An error once the answer has begun ends it short (the client sees it broke off)."""
    pieces: asyncio.Queue[str | BaseException | None] = asyncio.Queue(_READ_AHEAD)

    async def body() -> AsyncIterator[bytes]:
        async def run() -> None:
            try:
                await produce(pieces.put)
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


async def history_events(
    principal: Principal, sql: Any, execution_id: str, full: bool
) -> AsyncIterator[dict[str, Any]]:
    """A run's events from a server-side cursor, EXPORT_PAGE_SIZE a round trip; under ``full``
    with their offloaded payloads read back in ``principal``'s role, one read of the store a
    batch of events (aresolved_in_batches), else as stored (the caller redacts). The API's
    exports and the dashboard's read them here."""
    events = sql.iter_history(execution_id, EXPORT_PAGE_SIZE)
    if full:
        events = aresolved_in_batches(events, lambda batch: principal.resolved(sql, batch), EXPORT_PAGE_SIZE)
    async for event in events:
        yield event


def _json(value: Any) -> str:
    return compact_json(value).decode()


async def export_history_batch(call: Call, args: dict[str, Any], _: Any) -> Any:
    """The batch document, streamed: every shard first names its newest matching runs (small
    rows), then the newest ``limit`` of them are exported one at a time, each history from a
    server-side cursor, so the answer never holds more than a page of events (it held every
    history of the batch, up to 10,000 of them). The bytes are those the document was answered
    with whole. ``status`` partial (200) when a shard could not be read, 503 when none could."""
    full, policy = args["payload_policy"] == "full", args["payload_policy"]
    pick = (args["workflow_name"], args["state_group"], args["updated_after"], args["limit"])
    fan = await call.each_shard(lambda sql: arun_steps(shard_candidates(*pick), sql))
    chosen = newest(fan.results, args["limit"])

    async def produce(put: Put) -> None:
        await put(_json(head(fan.status, policy))[:-1] + ',"exports":[')
        failures: list[dict[str, Any]] = []
        begun = 0  # exports whose first byte went out

        async def export(sql: Any, candidate: dict[str, Any]) -> None:
            nonlocal begun
            execution = await sql.get_execution(candidate["execution_id"])
            if full:
                execution = await call.principal.resolved(sql, execution)
            # Its fields as the document had them: {execution_id, shard_id, workflow_name,
            # execution, events, redacted}, payloads redacted unless full.
            opening = ("," if begun else "") + _json(export_key(candidate))[:-1] + ',"execution":'
            begun += 1
            await put(opening + _json(execution if full else redact(execution)) + ',"events":[')
            comma = ""
            async for event in history_events(call.principal, sql, candidate["execution_id"], full):
                await put(comma + _json(event if full else redact(event)))
                comma = ","
            await put('],"redacted":' + _json(not full) + "}")

        for candidate in chosen:
            before = begun
            try:
                await call.on_shard(
                    candidate["shard_id"] if call.sharded else None,
                    lambda sql, c=candidate: export(sql, c),  # type: ignore[misc]
                )
            except HarvestError as exc:
                if begun != before:  # it failed half written: the answer ends short
                    raise
                failures.append(failure(candidate, str(exc)))
        coverage_ = coverage(fan.results, fan.unavailable_shards)
        await put('],"failures":' + _json(failures) + ',"shard_coverage":' + _json(coverage_) + "}")

    return streamed_json(produce)


async def export_workflow_history(call: Call, args: dict[str, Any], _: Any) -> Any:
    """One execution's export, as `harvest history export` writes it (the same bytes), streamed
    from a server-side cursor as the events are read; under ``full`` offloaded payloads are
    resolved. An unknown or moved run is an error answer before any byte."""
    execution_id, full = args["execution_id"], args["payload_policy"] == "full"

    async def head_(sql: Any) -> tuple[dict[str, Any], int | None]:
        execution = call.resident(await sql.get_execution(execution_id))
        if full:
            execution = await call.principal.resolved(sql, execution)
        return execution, (await sql.get_shard_id() if call.sharded else None)

    execution, shard = await call.routed(execution_id, head_)

    async def produce(put: Put) -> None:
        async def read(sql: Any) -> None:
            events = history_events(call.principal, sql, execution_id, full)
            async for piece in aexport_chunks(execution, events, full):
                await put(piece)

        await call.on_shard(shard, read)

    return streamed_json(produce)


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
        payloads="redacts",  # (unless payload_policy=full, refused to a token that sees none)
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
        payloads="redacts",  # (unless payload_policy=full, refused to a token that sees none)
        shape=shape(execution={"type": "object"}, events=ROWS, redacted={"type": "boolean"}),
    ),
]
