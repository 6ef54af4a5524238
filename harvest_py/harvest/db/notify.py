"""One LISTEN connection per database, fanned out to every waiter of a process.

A server holding many waits at once (the HTTP API's ``result?wait=`` long-polls) must not open a
connection per wait. A :class:`NotificationHub` LISTENs on one channel over one connection of its
own and wakes the waiters registered for a payload (an execution id on ``harvest_done``). A wait
registers before it reads the database (``waiting``), so a NOTIFY that comes between its read and
its sleep is not lost. When the connection drops, every waiter is woken (it re-reads what it waits
for) and the hub reconnects in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from harvest.db import channels
from harvest.db.connection import DatabaseError, connect_async

log = logging.getLogger("harvest.db.notify")

# How long the hub waits before it connects again after losing its connection.
RECONNECT_SECS = 1.0


class NotificationHub:
    """LISTEN on ``channel`` (one of :mod:`harvest.db.channels`) over one connection to ``dsn``."""

    def __init__(self, dsn: str, channel: str = channels.DONE):
        channels.listen(channel)  # an unknown channel fails here
        self.dsn, self.channel = dsn, channel
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    @property
    def waiters(self) -> int:
        """How many waits are registered now."""
        return sum(len(events) for events in self._waiters.values())

    async def start(self, timeout: float = 10.0) -> None:
        """Start listening; returns once the LISTEN is in place (or ``timeout`` passed: the hub
        goes on trying in the background, and waiters then rely on their re-reads)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"harvest-listen-{self.channel}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._wake_all()

    @contextlib.asynccontextmanager
    async def waiting(self, payload: str) -> AsyncIterator[asyncio.Event]:
        """An event set when a NOTIFY with ``payload`` arrives (or the connection drops) while
        the block runs. Register first, then read, then wait on the event."""
        event = asyncio.Event()
        self._waiters.setdefault(payload, set()).add(event)
        try:
            yield event
        finally:
            events = self._waiters.get(payload)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiters[payload]

    def _wake(self, payload: str) -> None:
        for event in self._waiters.get(payload, ()):
            event.set()

    def _wake_all(self) -> None:
        for events in self._waiters.values():
            for event in events:
                event.set()

    async def _run(self) -> None:
        while True:
            try:
                conn = await connect_async(self.dsn, autocommit=True)
                async with conn:
                    await conn.execute(channels.listen(self.channel))
                    self._ready.set()
                    self._wake_all()  # a notification may have been missed while reconnecting
                    async for note in conn.notifies():
                        self._wake(note.payload)
            except asyncio.CancelledError:
                raise
            except (DatabaseError, OSError, Exception) as exc:
                log.warning("harvest: LISTEN %s lost its connection (%s); reconnecting", self.channel, exc)
            self._ready.clear()
            self._wake_all()
            await asyncio.sleep(RECONNECT_SECS)
