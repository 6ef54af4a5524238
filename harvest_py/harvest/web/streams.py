"""Server-sent event streams of workflow history (docs/event-streams.md).

``GET /workflows/{execution_id}/events/stream``: one execution's events, each with ``id:`` its
event id. ``GET /stream``: every event of the database, each with ``id:`` its global id. Both
resume from ``Last-Event-ID`` (the id of the last event the client saw): what was written since
is read from the table, then the stream goes on live. A comment line (``: keepalive``) goes out
after 15 s without an event.

One ``EventHub`` per process holds one LISTEN connection and one reading connection
(``harvest.db.event_stream.EventSource``) and fans each batch out to every subscriber's bounded
queue without waiting. A subscriber whose queue is full is not waited for: its queue is
emptied and it reads what it missed from the table by its own cursor, then goes on live.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from harvest.core.errors import InvalidArgument
from harvest.db.event_stream import PAGE, EventSource
from harvest.web.principal import Authorizer

log = logging.getLogger("harvest.web.streams")

KEEPALIVE_SECS = 15.0
QUEUE_SIZE = 1000  # events a subscriber may fall behind by before it reads from the table instead
_RESYNC = object()  # in a subscriber's queue: it fell behind, read from the table


@dataclass(eq=False)
class Subscriber:
    execution_id: str | None  # None: every event
    start_cursor: int = 0  # the hub's cursor when it subscribed: live events follow it
    queue: asyncio.Queue[Any] = field(default_factory=lambda: asyncio.Queue(QUEUE_SIZE))
    resyncs: int = 0

    def offer(self, event: dict[str, Any]) -> None:
        if self.execution_id is not None and str(event["execution_id"]) != self.execution_id:
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            # Never wait for a slow reader: drop what it has queued and let it catch up from
            # the table by its own cursor (it dedups by id, so nothing arrives twice).
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(_RESYNC)
            self.resyncs += 1

    def end(self) -> None:
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)


class EventHub:
    """The process's one listener: started by the first subscriber, stopped ``idle_secs`` after
    the last one leaves (so an engine nobody streams from stops paying for notifications)."""

    def __init__(self, dsn: str, *, max_gap_wait: float = 10.0, idle_secs: float = 60.0):
        self.source = EventSource(dsn, max_gap_wait=max_gap_wait)
        self.idle_secs = idle_secs
        self.subscribers: set[Subscriber] = set()
        self._of_execution: dict[str, set[Subscriber]] = {}
        self._of_all: set[Subscriber] = set()
        self.cursor = 0  # every global id up to this is delivered to the subscribers (or final)
        self._task: asyncio.Task[Any] | None = None
        self._ready: asyncio.Future[Any] | None = None
        self._start_lock = asyncio.Lock()
        self._idle: asyncio.TimerHandle | None = None

    @property
    def listening(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        async with self._start_lock:
            if self._task is not None and (self._task.done() or self._task.cancelling()):
                with contextlib.suppress(BaseException):
                    await self._task  # a stopping listener finishes closing first
                self._task = None
            if self._task is None:
                loop = asyncio.get_running_loop()
                self._ready = loop.create_future()
                self._task = loop.create_task(self._run())
        await asyncio.shield(self._ready)

    async def _run(self) -> None:
        try:
            await self.source.open()
            self.cursor = await self.source.start_position()
            self._ready.set_result(None)
            async for batch in self.source.follow(self.cursor):
                self._publish(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the database went: subscribers end, clients reconnect and resume
            if not self._ready.done():
                self._ready.set_exception(exc)
            log.warning("event stream listener stopped: %s", exc)
            for sub in list(self.subscribers):
                sub.end()
        finally:
            if not self._ready.done():
                self._ready.cancel()
            await self.source.close()

    def _publish(self, batch: list[dict[str, Any]]) -> None:
        for event in batch:
            for sub in self._of_all:
                sub.offer(event)
            for sub in self._of_execution.get(str(event["execution_id"]), ()):
                sub.offer(event)
        self.cursor = batch[-1]["global_id"]

    async def aclose(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None

    def _stop_if_idle(self) -> None:
        if not self.subscribers and self._task is not None:
            self._task.cancel()

    @contextlib.asynccontextmanager
    async def subscribe(self, execution_id: str | None = None) -> AsyncIterator[Subscriber]:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        await self.start()
        sub = Subscriber(execution_id, self.cursor)  # no await between: no batch falls between
        self.subscribers.add(sub)
        group = self._of_all if execution_id is None else self._of_execution.setdefault(execution_id, set())
        group.add(sub)
        try:
            yield sub
        finally:
            self.subscribers.discard(sub)
            group.discard(sub)
            if execution_id is not None and not group:
                self._of_execution.pop(execution_id, None)
            if not self.subscribers:
                self._idle = asyncio.get_running_loop().call_later(self.idle_secs, self._stop_if_idle)

    async def events(
        self, sub: Subscriber, last_id: int | None, *, keepalive: float = KEEPALIVE_SECS
    ) -> AsyncIterator[dict[str, Any] | None]:
        """The subscriber's events after ``last_id``, then live; None is a keepalive. For every
        event, ``last_id`` is a global id (None: from now on); for one execution, an event id
        (None: from its first event)."""
        if sub.execution_id is None:
            key, last, catch_up = (
                "global_id",
                sub.start_cursor if last_id is None else last_id,
                last_id is not None,
            )
        else:
            key, last, catch_up = "event_id", last_id or 0, True
        while True:
            if catch_up:
                catch_up = False
                async for event in self._backlog(sub, last):
                    if event[key] > last:
                        last = event[key]
                        yield event
            try:
                item = await asyncio.wait_for(sub.queue.get(), keepalive)
            except TimeoutError:
                yield None
                continue
            if item is _RESYNC:
                catch_up = True
            elif item is None:
                return  # the listener stopped: the client reconnects with Last-Event-ID
            elif item[key] > last:
                last = item[key]
                yield item

    async def _backlog(self, sub: Subscriber, after: int) -> AsyncIterator[dict[str, Any]]:
        if sub.execution_id is not None:
            for row in await self.source.history_after(sub.execution_id, after):
                yield {"execution_id": sub.execution_id, **row}
            return
        upto = self.cursor  # later events come through the queue
        while after < upto:
            rows = await self.source.events_after(after, PAGE)
            rows = [r for r in rows if r["global_id"] <= upto]
            if not rows:
                return
            for row in rows:
                yield row
            after = rows[-1]["global_id"]


# One execution's stream carries the history's fields; the stream of every event adds where
# each event belongs.
_FIELDS = ("execution_id", "event_id", "event_type", "event_data", "created_at")
_ALL_FIELDS = ("global_id", *_FIELDS, "workflow_name", "workflow_id")


def _sse(event: dict[str, Any] | None, key: str) -> bytes:
    if event is None:
        return b": keepalive\n\n"
    fields = _ALL_FIELDS if key == "global_id" else _FIELDS
    data = json.dumps({f: event.get(f) for f in fields}, default=str, separators=(",", ":"))
    return f"id: {event[key]}\ndata: {data}\n\n".encode()


def _last_event_id(request: Request) -> int | None:
    raw = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(
            f"Last-Event-ID {raw!r} is not an event id: pass the id: of the last event seen"
        ) from None
    if value < 0:
        raise InvalidArgument(f"Last-Event-ID {value} is negative: pass the id: of the last event seen")
    return value


def stream_routes(hub: EventHub, authorizer: Authorizer, *, keepalive: float = KEEPALIVE_SECS) -> list[Route]:
    """The stream routes (scope read), to mount beside the management API's: one execution's,
    and every event's (``/stream``, also at ``/stream/durable``)."""

    async def respond(request: Request, execution_id: str | None) -> StreamingResponse:
        await authorizer.authorize(request, "read")
        last_id = _last_event_id(request)
        key = "global_id" if execution_id is None else "event_id"
        await hub.start()  # a database that cannot be reached is an error answer, not an empty stream
        if execution_id is not None:
            await hub.source.get_execution(execution_id)  # NotFound (404) for an unknown id

        async def body() -> AsyncIterator[bytes]:
            async with hub.subscribe(execution_id) as sub:
                yield b": stream open\n\n"
                async for event in hub.events(sub, last_id, keepalive=keepalive):
                    yield _sse(event, key)

        return StreamingResponse(
            body(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def workflow_stream(request: Request) -> StreamingResponse:
        return await respond(request, str(request.path_params["execution_id"]))

    async def all_stream(request: Request) -> StreamingResponse:
        return await respond(request, None)

    return [
        Route("/workflows/{execution_id:uuid}/events/stream", workflow_stream, methods=["GET"]),
        Route("/stream", all_stream, methods=["GET"]),
        # The spec's name for the resumable stream of every event: /stream is resumable already.
        Route("/stream/durable", all_stream, methods=["GET"]),
    ]
