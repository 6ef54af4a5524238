"""The database side of the event stream (docs/event-streams.md): one LISTEN connection and
one reading connection per process, and the reader that turns them into batches of events in
global_id order, each event delivered once, none skipped.

``harvest_events`` (``channels.EVENTS``) wakes the reader; it is sent only while a process is
registered as listening (``harvest.heartbeat_event_stream``, refreshed here every 10 s), so an
engine nobody streams from pays no NOTIFY. The reader never polls the history: it reads after a
wake-up, and re-reads on a short timer only while a gap in the global ids is waiting to close.

Global ids are taken at insert, not at commit, so a reader can see id 101 committed while 100 is
still being written. It delivers in order and stops at such a gap until it fills or is final:
``harvest.get_event_horizon`` gives the last id handed out and the transaction horizon, and once
every transaction running at that moment has ended, every id up to it is final (a rolled-back
append, a retention delete). A gap still open after ``max_gap_wait`` seconds (a writer holding a
transaction open that long) is skipped with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import psycopg

from harvest.core.errors import DatabaseUnavailable
from harvest.db import channels
from harvest.db.connection import connect_async, is_permanent
from harvest.db.resend import connection_lost
from harvest.db.sqlapi import AsyncSqlApi
from harvest.db.steps import Steps, arun_steps

log = logging.getLogger("harvest.db.event_stream")
T = TypeVar("T")

HEARTBEAT_SECS = 10.0  # the SQL stops notifying 30 s after the last one
PAGE = 500
# A page of events ends once it holds this many bytes (list_events' sizes: the JSON text of each
# event's data), so a reader holds a few megabytes of large events at a time, not PAGE of them
# (500 events of up to 2 MiB were a gigabyte). A page of small events is bounded by PAGE first.
PAGE_BYTES = 4 * 1024 * 1024


def read_to_end(rows: list[dict[str, Any]]) -> bool:
    """Whether a page of ``rows`` (from events_after, by default) is the last one there is: cut
    by neither its count nor its bytes."""
    return len(rows) < PAGE and sum(row["bytes"] for row in rows) < PAGE_BYTES


@dataclass
class _Probe:
    last_global_id: int  # every id up to this was handed out ...
    xmax: int  # ... by a transaction below this xid: final once the horizon's xmin passes it


def source_unreachable(exc: BaseException) -> bool:
    """Whether ``exc``, raised by an :class:`EventSource`'s open or reads, is an outage that may
    pass (the server down or starting, the connection lost), so a reader tries again later; not
    an answer (a wrong password, an unknown database: ConnectionRejected) nor a statement's
    error (a timeout, a lock), which retrying would meet again."""
    if is_permanent(exc):
        return False
    if isinstance(exc, DatabaseUnavailable | OSError):
        return True
    return connection_lost(exc)


class EventSource:
    """One LISTEN connection (``LISTEN harvest_events``, nothing else) and one reading
    connection, shared by everything in the process that follows the stream."""

    def __init__(self, dsn: str, *, listener_id: str | None = None, max_gap_wait: float = 10.0):
        self.dsn = dsn
        self.listener_id = listener_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.max_gap_wait = max_gap_wait
        self._listen: psycopg.AsyncConnection[Any] = None  # type: ignore[assignment]  # set by open()
        self._read: psycopg.AsyncConnection[Any] | None = None
        self._api: AsyncSqlApi = None  # type: ignore[assignment]  # set by open(), used after it
        self._lock = asyncio.Lock()  # the reading connection runs one statement at a time
        self._last_heartbeat = 0.0

    async def open(self) -> None:
        self._read = await connect_async(self.dsn, autocommit=True)
        self._api = AsyncSqlApi.on_connection(self._read)
        await self.heartbeat()
        self._listen = await connect_async(self.dsn, autocommit=True)
        await self._listen.execute(channels.listen(channels.EVENTS))

    async def close(self) -> None:
        if self._read is not None and not self._read.closed:
            with contextlib.suppress(psycopg.Error):
                async with self._lock:
                    await self._api.stop_event_stream(self.listener_id)
        for conn in (self._listen, self._read):
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    await conn.close()

    async def _alone(self, statement: Callable[[], Awaitable[T]]) -> T:
        """``statement`` on the reading connection, alone on it, in a task of its own: a caller
        cancelled meanwhile (a stream whose client left) lets it finish instead of interrupting
        it. An interrupted statement's cancellation interrupted again (anyio cancels a request's
        task at each of its awaits) makes psycopg close the connection: every stream of the
        process would lose its database for a retry."""

        async def alone() -> T:
            async with self._lock:
                return await statement()

        task = asyncio.ensure_future(alone())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # (read, if left)
        return await asyncio.shield(task)

    async def heartbeat(self) -> None:
        async with self._lock:
            await self._api.heartbeat_event_stream(self.listener_id)
        self._last_heartbeat = time.monotonic()

    async def wait(self, timeout: float) -> bool:
        """Until a notification arrives (True) or ``timeout`` seconds pass (False); refreshes the
        listener's heartbeat when it is due."""
        woken = False
        remaining = max(0.0, min(timeout, self._last_heartbeat + HEARTBEAT_SECS - time.monotonic()))
        async for _ in self._listen.notifies(timeout=remaining, stop_after=1):
            woken = True
        if time.monotonic() - self._last_heartbeat >= HEARTBEAT_SECS:
            await self.heartbeat()
        return woken

    async def events_after(
        self, global_id: int, limit: int | None = None, max_bytes: int | None = None
    ) -> list[dict[str, Any]]:
        """The page of events after ``global_id``: at most ``limit`` (None: PAGE), and ending with
        the one that brings it to ``max_bytes`` (None: PAGE_BYTES; each row's ``bytes``);
        :func:`read_to_end` tells the last of the default pages."""
        limit = PAGE if limit is None else limit
        max_bytes = PAGE_BYTES if max_bytes is None else max_bytes
        rows = await self._alone(lambda: self._api.list_events(global_id, limit, max_bytes=max_bytes))
        return cast("list[dict[str, Any]]", rows)

    async def history_after(self, execution_id: str, event_id: int) -> list[dict[str, Any]]:
        """The page of one execution's history after ``event_id``: at most PAGE events, and ending
        with the one that brings it to PAGE_BYTES (:func:`read_to_end` cannot tell its last: an
        empty page does)."""
        rows = await self._alone(
            lambda: self._api.get_history(execution_id, event_id, PAGE, max_bytes=PAGE_BYTES)
        )
        return cast("list[dict[str, Any]]", rows)

    async def get_execution(self, execution_id: str) -> dict[str, Any]:
        """The execution (NotFound, HR002, when there is none)."""
        return cast("dict[str, Any]", await self._alone(lambda: self._api.get_execution(execution_id)))

    async def run(self, steps: Steps[T]) -> T:
        """``steps`` (harvest.db.steps: a payload store's reads, harvest.client.payloads.decoded)
        on the reading connection, between the stream's own statements."""
        return await self._alone(lambda: arun_steps(steps, self._api))

    async def horizon(self) -> dict[str, Any]:
        return cast("dict[str, Any]", await self._alone(self._api.get_event_horizon))

    async def start_position(self) -> int:
        """The last global id handed out now, once every id up to it is final (at most
        ``max_gap_wait`` seconds): a reader starting there misses nothing written later."""
        h = await self.horizon()
        deadline = time.monotonic() + self.max_gap_wait
        while (await self.horizon())["xmin"] < h["xmax"] and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return cast("int", h["last_global_id"])

    async def follow(self, after: int) -> AsyncIterator[list[dict[str, Any]]]:
        """Batches of events after global id ``after`` (a delivered id, or start_position()), in
        order, each once, for as long as it is iterated."""
        probe: _Probe | None = None
        final = after
        cursor = after
        gap_at: int | None = None
        gap_since = 0.0
        pause = 0.02
        while True:
            rows = await self.events_after(cursor)
            batch: list[dict[str, Any]] = []
            blocked = False
            for row in rows:
                gid = row["global_id"]
                if gid != cursor + 1 and gid > final:
                    # A gap: look at the horizon once, then deliver past it only if it is final.
                    h = await self.horizon()
                    if probe is not None and h["xmin"] >= probe.xmax:
                        final, probe = max(final, probe.last_global_id), None
                    if probe is None and h["last_global_id"] > final:
                        probe = _Probe(h["last_global_id"], h["xmax"])
                    if gid > final:
                        if gap_at != cursor + 1:
                            gap_at, gap_since = cursor + 1, time.monotonic()
                        if time.monotonic() - gap_since < self.max_gap_wait:
                            blocked = True
                            break
                        log.warning(
                            "event stream: global ids %d..%d stayed missing for %.0f s (a transaction "
                            "held open that long); skipping them",
                            cursor + 1,
                            gid - 1,
                            self.max_gap_wait,
                        )
                batch.append(row)
                cursor = gid
            if not blocked:
                gap_at, pause = None, 0.02
            if batch:
                yield batch
            if blocked:
                await asyncio.sleep(pause)  # a gap closes when its writer commits or ends
                pause = min(pause * 2, 0.5)
            elif read_to_end(rows):
                await self.wait(HEARTBEAT_SECS)
