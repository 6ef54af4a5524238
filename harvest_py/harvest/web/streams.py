"""Server-sent event streams of workflow history (docs/event-streams.md).

``GET /workflows/{execution_id}/events/stream``: one execution's events, each with ``id:`` its
event id. ``GET /stream``: every event of the database, each with ``id:`` its global id. Both
resume from ``Last-Event-ID`` (the id of the last event the client saw): what was written since
is read from the table, then the stream goes on live. A comment line (``: keepalive``) goes out
after 15 s without an event. Once open, neither ends when its database goes: each says so in a
comment, tries it again every 5 s and goes on after its last event sent when it is back
(``_followed``). Nor is it let be once authorized: the caller's token is checked again every
15 s while events flow and at each keepalive, and a stream whose token is refused (revoked,
expired) ends with a comment saying so (``_while_authorized``).

One ``EventHub`` per process holds one LISTEN connection and one reading connection
(``harvest.db.event_stream.EventSource``) and fans each batch out to every subscriber's bounded
queue without waiting. A subscriber whose queue is full (QUEUE_SIZE events, or QUEUE_BYTES of
them) is not waited for: its queue is emptied and it reads what it missed from the table by its
own cursor, in pages bounded in bytes too (event_stream.PAGE_BYTES), then goes on live.

On shards (:class:`ShardStreams`) there is one hub per shard: one execution's stream is its
shard's, and ``/stream`` merges every readable shard's events as they arrive, each with its
``shard_id``, its ``id:`` every shard's position (``0:812,1:77``) so a resumed stream goes on
from each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast, overload

from harvest.core.extras import missing_extra

try:  # the [web] extra
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route
except ImportError as exc:
    raise missing_extra("harvest.web.streams", "web", exc) from exc

from harvest.client import routing
from harvest.core.errors import HarvestError, InvalidArgument, NoShardReached, NotFound
from harvest.core.json_values import json_default
from harvest.core.payload import redact
from harvest.db.connection import failure_reason
from harvest.db.event_stream import EventSource
from harvest.db.pools import outage
from harvest.shard.event_merge import (
    ShardNote,
    back_note,
    format_positions,
    merge_streams,
    named,
    none_readable,
    parse_global_id,
    parse_positions,
    past_the_end_note,
    unavailable_note,
)
from harvest.shard.router import ShardRouter
from harvest.web.errors import error_response
from harvest.web.openapi import Mounted
from harvest.web.principal import Authorizer, refusal_status
from harvest.web.routes import Param, path, refuse_undeclared

log = logging.getLogger("harvest.web.streams")

KEEPALIVE_SECS = 15.0
# How often the streams waiting on a database (or a shard) that cannot be read try its listener again.
RETRY_SECS = 5.0
QUEUE_SIZE = 1000  # events a subscriber may fall behind by before it reads from the table instead
# ... or bytes (list_events' sizes of the events queued): a stalled client holds this much of the
# server's memory at most, not QUEUE_SIZE events of up to 2 MiB each (2 GB). Four pages of large
# events (PAGE_BYTES), eight of the largest: a client that reads a batch while the next comes is
# not sent to the table for it; a queue of small events reaches QUEUE_SIZE first.
QUEUE_BYTES = 16 * 1024 * 1024
# An open stream's caller is asked for again (one token lookup) at each keepalive and before the
# first write this long after the last ask: a revoked or expired token is served no longer.
RECHECK_SECS = 15.0
RECHECK_TIMEOUT_SECS = 5.0  # a check not answered by then is made again at the next chance
_KEEPALIVE = b": keepalive\n\n"  # said after KEEPALIVE_SECS of silence (_while_authorized reads it)
_RESYNC = object()  # in a subscriber's queue: it fell behind, read from the table


class _Flush:
    """From EventHub.events(flushes=True): nothing more is at hand, write what came."""


FLUSH = _Flush()


@dataclass(eq=False)
class Subscriber:
    execution_id: str | None  # None: every event
    start_cursor: int = 0  # the hub's cursor when it subscribed: live events follow it
    max_bytes: int = QUEUE_BYTES  # the queue's bound in bytes (beside QUEUE_SIZE events)
    queue: asyncio.Queue[Any] = field(default_factory=lambda: asyncio.Queue(QUEUE_SIZE))
    resyncs: int = 0
    held: int = 0  # bytes of the events queued (each event's ``bytes``, from list_events)

    def offer(self, event: dict[str, Any]) -> None:
        if self.execution_id is not None and str(event["execution_id"]) != self.execution_id:
            return
        size = event.get("bytes", 0)
        # An event larger than the bound still goes into an empty queue (it is sent whole).
        if self.queue.full() or (self.held and self.held + size > self.max_bytes):
            # Never wait for a slow reader: drop what it has queued and let it catch up from
            # the table by its own cursor (it dedups by id, so nothing arrives twice).
            self._drain()
            self.queue.put_nowait(_RESYNC)
            self.resyncs += 1
            return
        self.queue.put_nowait(event)
        self.held += size

    def took(self, item: Any) -> Any:
        """``item``, just taken from the queue: its bytes are no longer held."""
        if isinstance(item, dict):
            self.held -= item.get("bytes", 0)
        return item

    def _drain(self) -> None:
        while not self.queue.empty():
            self.queue.get_nowait()
        self.held = 0

    def end(self) -> None:
        self._drain()
        self.queue.put_nowait(None)


class EventHub:
    """The process's one listener: started by the first subscriber, stopped ``idle_secs`` after
    the last one leaves (so an engine nobody streams from stops paying for notifications)."""

    def __init__(
        self,
        dsn: str,
        *,
        max_gap_wait: float = 10.0,
        idle_secs: float = 60.0,
        queue_bytes: int | None = None,
    ):
        self.source = EventSource(dsn, max_gap_wait=max_gap_wait)
        self.idle_secs = idle_secs
        # Each subscriber's queue holds at most this many bytes (None: QUEUE_BYTES).
        self.queue_bytes = QUEUE_BYTES if queue_bytes is None else queue_bytes
        self.subscribers: set[Subscriber] = set()
        self._of_execution: dict[str, set[Subscriber]] = {}
        self._of_all: set[Subscriber] = set()
        self.cursor = 0  # every global id up to this is delivered to the subscribers (or final)
        self._task: asyncio.Task[Any] | None = None
        self._ready: asyncio.Future[Any] | None = None
        self._start_lock = asyncio.Lock()
        self._idle: asyncio.TimerHandle | None = None
        self._stopping = False  # the listener failed and is closing: a start waits and starts anew
        self.next_try = 0.0  # (monotonic) when a merged stream waiting on it may next start it

    @property
    def listening(self) -> bool:
        """Up, or starting: not stopped, nor failed and closing."""
        return self._task is not None and not self._task.done() and not self._stopping

    @property
    def up(self) -> bool:
        """Listening, its start done: a subscription now takes no wait."""
        ready = self._ready
        return (
            self.listening
            and ready is not None
            and ready.done()
            and not ready.cancelled()
            and (ready.exception() is None)
        )

    async def start(self) -> None:
        async with self._start_lock:
            if self._task is not None and (self._task.done() or self._task.cancelling() or self._stopping):
                await asyncio.wait([self._task])  # a stopping listener finishes closing first
                self._task = None
            if self._task is None:
                loop = asyncio.get_running_loop()
                if self._idle is not None:  # a start is interest: no idle stop while it runs
                    self._idle.cancel()
                    self._idle = None
                made: asyncio.Future[Any] = loop.create_future()
                # (Its outcome counts as read even when every starter has left.)
                made.add_done_callback(lambda f: f.cancelled() or f.exception())
                self._ready = made
                self._stopping = False
                self._task = loop.create_task(self._run())
        ready = self._ready
        assert ready is not None  # for the checkers: set with the task, above or before
        try:
            await asyncio.shield(ready)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if ready.cancelled() and task is not None and not task.cancelling():
                # The listener was stopped before it was up (closed, or stopped idle): an
                # outage to this caller, not its own cancellation.
                raise NoShardReached("the event stream's listener stopped before it was up") from None
            raise

    async def _run(self) -> None:
        assert self._ready is not None  # for the checkers: start() sets it before this task exists
        try:
            await self.source.open()
            self.cursor = await self.source.start_position()
            self._ready.set_result(None)
            if not self.subscribers:  # its starter left meanwhile: stopped if nobody comes
                self._stop_later()
            async for batch in self.source.follow(self.cursor):
                self._publish(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the database went: subscribers end, clients reconnect and resume
            # Before anything else: from here on it is not listening, and a start waits for it
            # to close and starts anew (a subscriber taken in now would never be ended).
            self._stopping = True
            if not self._ready.done():
                self._ready.set_exception(exc)  # (its starter reports it)
            else:
                log.warning("event stream listener stopped: %s", failure_reason(exc))
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
        starting = self._ready is not None and not self._ready.done()  # (stopped when up, if idle)
        if not self.subscribers and self._task is not None and not starting:
            self._task.cancel()

    def _stop_later(self) -> None:
        """Stop ``idle_secs`` from now unless a subscriber comes."""
        if self._idle is not None:
            self._idle.cancel()
        self._idle = asyncio.get_running_loop().call_later(self.idle_secs, self._stop_if_idle)

    @contextlib.asynccontextmanager
    async def subscribe(self, execution_id: str | None = None) -> AsyncIterator[Subscriber]:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        await self.start()
        sub = Subscriber(
            execution_id, self.cursor, self.queue_bytes
        )  # no await between: no batch falls between
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
                self._stop_later()

    async def events(
        self,
        sub: Subscriber,
        last_id: int | None,
        *,
        keepalive: float = KEEPALIVE_SECS,
        flushes: bool = False,
    ) -> AsyncIterator[dict[str, Any] | _Flush | None]:
        """The subscriber's events after ``last_id``, then live; None is a keepalive. For every
        event, ``last_id`` is a global id (None: from now on); for one execution, an event id
        (None: from its first event). ``flushes``: FLUSH before each wait for an event (what came
        so far can go out in one write: nothing more is at hand)."""
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
                # A queued item is taken at once; only an empty queue waits (a task per wait).
                if not sub.queue.empty():
                    item = sub.took(sub.queue.get_nowait())
                else:
                    if flushes:
                        yield FLUSH
                    item = sub.took(await asyncio.wait_for(sub.queue.get(), keepalive))
            except TimeoutError:
                yield None
                continue
            if item is _RESYNC:
                catch_up = True
            elif item is None:  # the listener stopped: the client reconnects with Last-Event-ID
                if flushes:
                    yield FLUSH  # (what was gathered goes out first)
                return
            elif item[key] > last:
                last = item[key]
                yield item

    async def _backlog(self, sub: Subscriber, after: int) -> AsyncIterator[dict[str, Any]]:
        if sub.execution_id is not None:
            while True:  # in pages: a long history is not read whole
                rows = await self.source.history_after(sub.execution_id, after)
                if not rows:
                    return
                for row in rows:
                    yield {"execution_id": sub.execution_id, **row}
                after = rows[-1]["event_id"]
        upto = self.cursor  # later events come through the queue
        while after < upto:
            rows = await self.source.events_after(after)
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


def _data(event: dict[str, Any], fields: tuple[str, ...], hidden: bool) -> dict[str, Any]:
    """An event's fields as a stream sends them; ``hidden`` (a token that sees no payloads,
    docs/security.md): its payloads redacted (harvest.core.payload.redact, the API's filter) and
    marked ``"redacted": true``."""
    data = {f: event.get(f) for f in fields}
    return {**redact(data), "redacted": True} if hidden else data


def _sse(event: dict[str, Any] | None, key: str, hidden: bool = False) -> bytes:
    if event is None:
        return _KEEPALIVE
    # One event goes to every subscriber as the same dict: it is encoded once per stream kind
    # (and once redacted, for the tokens that see no payloads).
    cache = f"{key}:hidden" if hidden else key
    cached: bytes | None = event.get(_ENCODED, {}).get(cache)
    if cached is not None:
        return cached
    fields = _ALL_FIELDS if key == "global_id" else _FIELDS
    data = json.dumps(_data(event, fields, hidden), default=json_default, separators=(",", ":"))
    encoded = f"id: {event[key]}\ndata: {data}\n\n".encode()
    event.setdefault(_ENCODED, {})[cache] = encoded
    return encoded


_ENCODED = "\x00sse"  # where _sse keeps an event's encodings (no field of a row has this name)


def _resume_from(request: Request) -> tuple[str, str] | None:
    """Where a stream resumes, as given: (the header or parameter that said it, its text)."""
    for name, raw in (
        ("Last-Event-ID", request.headers.get("last-event-id")),
        ("last_event_id", request.query_params.get("last_event_id")),
    ):
        if raw is not None and raw.strip() != "":
            return name, raw
    return None


def _parsed_resume(request: Request, parse: Callable[[str, str], Any]) -> Any:
    """``parse`` of the resume position ``request`` gives (None: none given); a bad one is a 400
    naming the header or parameter it came in (its ``field``, as every 400 names one, and in
    its message)."""
    given = _resume_from(request)
    if given is None:
        return None
    try:
        return parse(given[1], given[0])
    except InvalidArgument as exc:
        exc.field = given[0]  # type: ignore[attr-defined]
        raise


def _last_event_id(request: Request) -> int | None:
    return cast("int | None", _parsed_resume(request, parse_global_id))


_RESUME = (
    Param(
        "Last-Event-ID",
        "integer",
        minimum=0,
        where="header",
        description="The id: of the last event seen: the stream resumes after it.",
    ),
    Param("last_event_id", "integer", minimum=0, description="The same as the Last-Event-ID header."),
)
_ANSWERS = {
    200: "text/event-stream: id:/data: events, : comments (keepalives; a database gone, back)",
    400: "A bad Last-Event-ID",
    503: "The database (on shards, every shard) cannot be reached: retry after a pause",
}
# The stream routes as /openapi.json shows them (stream_routes builds its routes from these).
STREAMS = (
    Mounted(
        "GET",
        "/workflows/{execution_id}/events/stream",
        "workflow_event_stream",
        "One execution's events as server-sent events (id: the event id), from Last-Event-ID, then live.",
        "read",
        "text/event-stream",
        (path("execution_id", "uuid", "The execution id (a UUID)."), *_RESUME),
        {**_ANSWERS, 404: "No such execution"},
        "streams",
    ),
    Mounted(
        "GET",
        "/stream",
        "event_stream",
        "Every event as server-sent events (id: the global id), from Last-Event-ID, then live.",
        "read",
        "text/event-stream",
        _RESUME,
        _ANSWERS,
        "streams",
    ),
    Mounted(
        "GET",
        "/stream/durable",
        "durable_event_stream",
        "The spec's name of the resumable stream of every event: the same as /stream.",
        "read",
        "text/event-stream",
        _RESUME,
        _ANSWERS,
        "streams",
    ),
)


class ShardStreams:
    """The event streams of a sharded deployment: one :class:`EventHub` per shard (its own LISTEN
    and reading connection, opened by the first subscriber of that shard). One execution's
    stream is read on the shard its id routes to; ``/stream`` merges every readable shard's.

    ``topology()`` answers the router and the DSN of each shard (the management app opens its
    pools first)."""

    sharded = True

    def __init__(
        self,
        topology: Callable[[], Awaitable[tuple[ShardRouter, Callable[[int], str]]]],
        **hub_options: Any,
    ):
        self._topology, self._options = topology, hub_options
        self.hubs: dict[int, EventHub] = {}

    async def _hub(self, shard: int, dsn_of: Callable[[int], str]) -> EventHub:
        hub = self.hubs.get(shard)
        if hub is None:
            hub = self.hubs[shard] = EventHub(dsn_of(shard), **self._options)
        return hub

    async def of_execution(self, execution_id: str) -> EventHub:
        router, dsn_of = await self._topology()
        return await self._hub(routing.route_id(router, execution_id), dsn_of)

    async def every(self) -> dict[int, EventHub]:
        router, dsn_of = await self._topology()
        return {shard: await self._hub(shard, dsn_of) for shard in sorted(router.readable)}

    async def aclose(self) -> None:
        for hub in list(self.hubs.values()):
            await hub.aclose()
        self.hubs.clear()


class _OneDatabase:
    """The streams of one database: its one hub."""

    sharded = False

    def __init__(self, hub: EventHub):
        self.hub = hub

    async def of_execution(self, execution_id: str) -> EventHub:
        return self.hub

    async def every(self) -> dict[int, EventHub]:
        return {0: self.hub}

    async def aclose(self) -> None:
        await self.hub.aclose()


def _positions(request: Request) -> dict[int, int]:
    """The merged stream's Last-Event-ID: ``shard:global_id`` for each shard, comma-separated
    (the ``id:`` of its last event seen)."""
    return cast("dict[int, int]", _parsed_resume(request, parse_positions) or {})


def _merged_sse(event: dict[str, Any], shard: int, position: str, hidden: bool = False) -> bytes:
    """An event of the merged stream: its fields and shard_id, and as its id every shard's
    position (a resumed stream goes on from each of them); ``hidden``: as :func:`_data`."""
    cache = "merged:hidden" if hidden else "merged"
    data: bytes | None = event.get(_ENCODED, {}).get(cache)
    if data is None:
        fields = _data(event, _ALL_FIELDS, hidden)
        data = json.dumps({**fields, "shard_id": shard}, default=json_default, separators=(",", ":")).encode()
        event.setdefault(_ENCODED, {})[cache] = data
    return b"id: " + position.encode() + b"\ndata: " + data + b"\n\n"


async def _listener_up(hub: EventHub, until: float, not_before: float = 0.0) -> bool:
    """Whether ``hub``'s listener is up again by ``until`` (monotonic), for a stream waiting on its
    database, not tried before ``not_before``: every stream waiting on one database shares one
    try per RETRY_SECS (and joins one in progress), sees a listener another stream or request
    started within a fifth of that, and never waits past ``until`` (its stream's next
    keepalive), however long a connect takes."""
    while True:
        now = time.monotonic()
        if now >= until:  # (no time left: a try now would be cut at once, using the slot)
            return hub.up and now >= not_before
        if now >= not_before:
            if hub.up:
                return True
            if hub.listening or now >= hub.next_try:  # a start to join, or this one's try
                if not hub.listening:
                    hub.next_try = now + RETRY_SECS
                try:  # (a wait cut short leaves the start going on for the others)
                    await asyncio.wait_for(hub.start(), until - now)
                    return True
                except TimeoutError:
                    return False
                except Exception:  # (down: each try is not logged)
                    pass
        await asyncio.sleep(max(0.0, min(RETRY_SECS / 5, until - time.monotonic())))


async def _resumed_after(
    hub: EventHub, position: int, *, read: bool = False, execution_id: str | None = None
) -> int:
    """Where a stream resumed after ``position`` goes on: there, unless the database now hands
    out no id that high (a failover to a replica that had not received the last events, whose
    next ones are numbered again from its last): then after the hub's cursor, the last id
    delivered, every one before it final, or those events would be passed over. Decided by the
    database's last id handed out, not the cursor: a client may bring a position from another
    server's hub that is a little ahead of this one's, and ids of transactions still open lie
    between the two. A position the hub has delivered is kept without a read, unless ``read``
    (a read that proves the database answers).

    With ``execution_id``, ``position`` is that execution's event id, and a position past its
    last event goes on after that last: its events are numbered under its row's lock, in the
    transaction that writes the row's ``last_event_id``, so every id up to it is committed and
    none above. Always read (NotFound when there is no such execution)."""
    if execution_id is not None:
        return min(position, cast(int, (await hub.source.get_execution(execution_id))["last_event_id"]))
    if position <= hub.cursor and not read:
        return position
    last = (await hub.source.horizon())["last_global_id"]
    return position if cast(int, last) >= position else min(position, hub.cursor)


@overload
def _followed(
    hub: EventHub,
    shard: int | None,
    position: int | None,
    up: bool,
    *,
    keepalive: float = ...,
    writes: None = None,
    execution_id: str | None = None,
) -> AsyncGenerator[dict[str, Any] | ShardNote | None, None]: ...


@overload
def _followed(
    hub: EventHub,
    shard: int | None,
    position: int | None,
    up: bool,
    *,
    keepalive: float = ...,
    writes: _Writes,
    execution_id: str | None = None,
) -> AsyncGenerator[bytes, None]: ...


async def _followed(
    hub: EventHub,
    shard: int | None,
    position: int | None,
    up: bool,
    *,
    keepalive: float = 3600.0,
    writes: _Writes | None = None,
    execution_id: str | None = None,
) -> AsyncGenerator[Any, None]:
    """The events of one database (``shard`` None: the only one; else that shard's, for a merged
    stream) after ``position`` (None: from when it is first read), for as long as the response
    is open, and None when ``keepalive`` seconds pass without anything, up or down. With
    ``writes``: what its stream writes instead (bytes), events gathered as _Writes gathers them
    (so a one-database stream pays no generator more per event). One that cannot be read
    (``up`` False: down when the stream opened; or lost since: its listener stopped, a read
    failed) is named in a note, tried again every RETRY_SECS (_listener_up), and named when it
    is back, its events going on after the last one sent (_resumed_after); a position past its
    last event is said and left too. Each note carries the position it names, for the ids.

    With ``execution_id``: that execution's events only, ``position`` its event id (0: from its
    first), already where it starts (its route read it); one that no longer exists when its
    database is back (deleted by retention, or lost with a failover), or at a keepalive (deleted
    by retention while followed), is said and ends it."""
    key, whose = ("global_id", "its") if execution_id is None else ("event_id", "the execution's")
    retry_at = 0.0
    quiet_until = time.monotonic() + keepalive  # (the next keepalive, unless something goes out)
    said: Callable[[Any], Any] = (lambda item: item) if writes is None else writes.of
    flushes = writes is not None  # (what it gathers goes out when the hub has nothing more)
    while True:
        if not up:
            while not await _listener_up(hub, quiet_until, retry_at):
                yield said(None)
                quiet_until = time.monotonic() + keepalive
        try:
            async with hub.subscribe(execution_id) as sub:
                if position is None:
                    after = sub.start_cursor
                elif up and execution_id is not None:
                    after = position
                else:  # (back: a read first, so a source is back only once it answers one)
                    after = await _resumed_after(hub, position, read=not up, execution_id=execution_id)
                if not up:
                    yield said(ShardNote(shard, back_note(shard, after, whose), after))
                    up = True
                elif after != position:
                    note = past_the_end_note(shard, after, cast(int, position))
                    yield said(ShardNote(shard, note, after))
                position = after
                async for event in hub.events(sub, after, keepalive=keepalive, flushes=flushes):
                    if isinstance(event, dict):  # (while up, the hub's keepalives come in here)
                        position = event[key]
                    elif event is None and execution_id is not None:
                        # A run retention deletes sends no event: read at each keepalive that
                        # it is still there (NotFound below ends the stream).
                        await hub.source.get_execution(execution_id)
                    if writes is None:
                        yield event
                    elif (written := writes.of(event)) is not None:
                        yield written
        except NotFound:
            if execution_id is None:
                raise
            gone = f"execution {execution_id} no longer exists: the stream ends"
            yield said(ShardNote(shard, gone, position))
            return
        except Exception as exc:  # its database went during a read (or as it came back)
            if up:  # (once per loss and stream; the tries while it is down are not logged)
                log.warning("event stream: %s cannot be read: %s", named(shard), failure_reason(exc))
        if up:  # its listener stopped, or a read failed: the database went
            yield said(ShardNote(shard, unavailable_note(shard, position, whose), position))
            quiet_until = time.monotonic() + keepalive
            up = False
        # Never at once: a read that fails while the listener stays up would be made again in a
        # loop (a statement timeout, a privilege revoked).
        retry_at = time.monotonic() + RETRY_SECS


def _merged_body(
    hubs: dict[int, EventHub],
    unavailable: list[int],
    positions: dict[int, int],
    said: bytes,
    keepalive: float,
    hidden: bool = False,
) -> AsyncGenerator[bytes, None]:
    """Every shard's events as they arrive (in order within a shard), tagged with shard_id, from
    ``positions`` (each readable shard's start; an unavailable one's if given), after the
    opening's comments ``said``. A shard that cannot be read when the stream opens, or that goes
    later, is named in a comment and followed again when it is back (_followed); the response
    goes on meanwhile."""

    async def body() -> AsyncGenerator[bytes, None]:
        streams = {
            s: _followed(hub, s, positions.get(s), s not in unavailable) for s, hub in sorted(hubs.items())
        }
        # The opening carries every shard's start as its id: a client that loses the stream
        # before the first event resumes from there, missing nothing.
        yield f": stream open\nid: {format_positions(positions)}\n\n".encode() + said
        try:
            async with contextlib.aclosing(merge_streams(streams, positions, keepalive=keepalive)) as merged:
                async for item in merged:
                    if item is None:
                        yield _KEEPALIVE
                    elif isinstance(item, ShardNote):  # with every shard's position after it
                        yield _note(item.text, item.positions)
                    else:
                        yield _merged_sse(item.event, item.shard, item.position, hidden)
        finally:
            for stream in streams.values():  # (their subscriptions end now, not when collected)
                await stream.aclose()

    return body()


async def _while_authorized(
    body: AsyncGenerator[bytes, None], request: Request, authorizer: Authorizer, recheck: float
) -> AsyncIterator[bytes]:
    """``body`` for as long as the authorizer still lets the caller read. It is asked again at
    each keepalive and before the first write ``recheck`` seconds after its last answer (one
    token lookup then, none per event); refused (the token revoked or expired), the stream ends
    with a comment saying why. A check that cannot be made (the tokens' database down) is made
    again at the next chance, the stream going on, as it rides out its own database's outage."""
    due = time.monotonic() + recheck
    async with contextlib.aclosing(body) as chunks:  # (its subscriptions end with it)
        async for chunk in chunks:
            if chunk.endswith(_KEEPALIVE) or time.monotonic() >= due:
                refused = await _refused(request, authorizer)
                if refused is not None:
                    yield _comment(f"the stream ends: {refused}")
                    return
                due = time.monotonic() + recheck
            yield chunk


async def _refused(request: Request, authorizer: Authorizer) -> str | None:
    """Why the authorizer no longer lets ``request``'s caller read (its first line), or None."""
    try:
        await asyncio.wait_for(authorizer.authorize(request, "read"), RECHECK_TIMEOUT_SECS)
    except Exception as exc:
        if refusal_status(exc) in (401, 403):
            return (str(getattr(exc, "detail", None) or exc).strip().splitlines() or ["refused"])[0]
        log.warning("event stream: the caller's token could not be checked again: %s", failure_reason(exc))
    return None


def _comment(text: str) -> bytes:
    """A comment a stream says (a client's EventSource dispatches nothing for it)."""
    return f": {text}\n\n".encode()


def _note(text: str, position: object) -> bytes:
    """A comment a stream says, with the position it names as its id."""
    return f": {text}\nid: {position}\n\n".encode()


class _Writes:
    """What a stream writes for each of its items: its events (``id:`` the ``key`` of each)
    gathered into one write until FLUSH (nothing more at hand) or 256 of them; a keepalive or a
    note at once, after the events before it. (A plain object, not one more generator per
    event on the stream's path.)"""

    __slots__ = ("chunk", "hidden", "key")

    def __init__(self, key: str, hidden: bool = False):
        self.key, self.hidden, self.chunk = key, hidden, list[bytes]()

    def of(self, item: dict[str, Any] | ShardNote | _Flush | None) -> bytes | None:
        chunk = self.chunk
        if isinstance(item, dict):
            chunk.append(_sse(item, self.key, self.hidden))
            if len(chunk) < 256:
                return None
        elif isinstance(item, ShardNote):  # the database gone, back, or ending before
            chunk.append(_note(item.text, item.position))
        elif item is None:
            chunk.append(_sse(None, self.key))
        if not chunk:
            return None
        written = b"".join(chunk)
        chunk.clear()
        return written


def stream_routes(
    hub: EventHub | ShardStreams,
    authorizer: Authorizer,
    *,
    keepalive: float = KEEPALIVE_SECS,
    recheck: float = RECHECK_SECS,
) -> list[Route]:
    """The stream routes (scope read), to mount beside the management API's: one execution's,
    and every event's (``/stream``, also at ``/stream/durable``). ``hub``: one database's
    :class:`EventHub`, or a :class:`ShardStreams`. ``recheck``: how long a stream serves its
    caller before asking the authorizer again (:func:`_while_authorized`)."""
    streams = hub if isinstance(hub, ShardStreams) else _OneDatabase(hub)

    async def respond(request: Request, execution_id: str | None) -> StreamingResponse:
        # A token that sees no payloads (docs/security.md) is sent every event redacted.
        hidden = not (await authorizer.authorize(request, "read")).payloads
        refuse_undeclared(request, _RESUME)  # (a misspelt last_event_id would stream from now)
        if execution_id is None and streams.sharded:
            return await respond_merged(request, hidden)
        last_id = _last_event_id(request)
        if execution_id is not None:
            hub, key, whose = await streams.of_execution(execution_id), "event_id", "the execution's"
        else:
            hub, key, whose = (await streams.every())[0], "global_id", None
        await hub.start()  # a database that cannot be reached is an error answer, not an empty stream
        # Where the stream starts, read here (a failed read is an error answer, not a broken
        # stream): a position past the last event goes on after that last, said right after the
        # opening. /stream's opening carries its start as its id (no event: browsers only keep
        # it as the id to resume after), so a client that loses the stream before its first
        # event resumes from there, missing nothing.
        given: int | None = last_id
        if execution_id is not None:  # from its first event unless resumed; this read is also
            given = last_id or 0  # its NotFound (404) for an unknown id
            start = await _resumed_after(hub, given, execution_id=execution_id)
            opening = b": stream open\n\n"
        else:
            start = hub.cursor if last_id is None else await _resumed_after(hub, last_id)
            opening = f": stream open\nid: {start}\n\n".encode()
        said = b""
        if given is not None and start != given:
            said = _note(past_the_end_note(None, start, given, whose), start)

        async def body() -> AsyncGenerator[bytes, None]:
            yield opening + said
            events = _followed(
                hub,
                None,
                start,
                True,
                keepalive=keepalive,
                writes=_Writes(key, hidden),
                execution_id=execution_id,
            )
            try:
                async for written in events:
                    yield written
            finally:
                await events.aclose()  # (its subscription ends now, not when collected)

        return StreamingResponse(
            _while_authorized(body(), request, authorizer, recheck),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def respond_merged(request: Request, hidden: bool) -> StreamingResponse:
        given = _positions(request)
        hubs = await streams.every()
        unavailable: list[int] = []
        # Each readable shard's start: its hub's cursor (its events are read from there, so none
        # written before the subscription is missed), or the given position, after the shard's
        # last event if that is past it (said in a comment after the opening).
        positions, said = dict(given), b""
        for shard, shard_hub in hubs.items():
            try:
                await shard_hub.start()
                start = (
                    shard_hub.cursor if shard not in given else await _resumed_after(shard_hub, given[shard])
                )
            except Exception as exc:  # a shard down: the others stream, it is followed when back
                log.warning("event stream: shard %s unavailable: %s", shard, failure_reason(exc))
                shard_hub.next_try = time.monotonic() + RETRY_SECS
                unavailable.append(shard)
                said += _comment(unavailable_note(shard, given.get(shard)))
                continue
            if shard in given and start != given[shard]:
                said += _comment(past_the_end_note(shard, start, given[shard]))
            positions[shard] = start
        if len(unavailable) == len(hubs):
            raise none_readable(unavailable)
        return StreamingResponse(
            _while_authorized(
                _merged_body(hubs, unavailable, positions, said, keepalive, hidden),
                request,
                authorizer,
                recheck,
            ),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def answered(request: Request, execution_id: str | None) -> Response:
        # The routes answer their own refusals (401, 400, 404, 503) as the API's JSON errors, so
        # they need no exception handler of the app they are mounted in (docs: "Mounting").
        try:
            return await respond(request, execution_id)
        except Exception as exc:  # (an outage, a driver's too: its 503 says no connect's detail)
            if not isinstance(exc, (HarvestError, HTTPException)) and not outage(exc):
                raise
            return error_response(exc, request=request)

    async def workflow_stream(request: Request) -> Response:
        return await answered(request, str(request.path_params["execution_id"]))

    async def all_stream(request: Request) -> Response:
        return await answered(request, None)

    one, every, durable = STREAMS
    # /stream/durable is the spec's name for the resumable stream of every event: /stream is it.
    return [one.route(workflow_stream), every.route(all_stream), durable.route(all_stream)]
