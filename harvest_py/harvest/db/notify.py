"""One LISTEN connection per database, fanned out to every waiter of a process.

A server holding many waits at once (the HTTP API's ``result?wait=`` long-polls) must not open a
connection per wait. A :class:`NotificationHub` LISTENs on one channel over one connection of its
own and wakes the waiters registered for a payload (an execution id on ``harvest_done``). A wait
registers before it reads the database (``waiting``), so a NOTIFY that comes between its read and
its sleep is not lost. When the connection drops, every waiter is woken (it re-reads what it waits
for), and again once the hub, reconnecting in the background, listens again; connects that fail
meanwhile wake nobody (each waiter's own re-reads go on) and are warned of once a minute.

:class:`ThreadNotificationHub` is the same for threads (the synchronous ``Client``): its one
connection is read by a daemon thread, and a wait blocks on a :class:`threading.Event`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import selectors
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Generic, Protocol, TypeVar

from harvest.db import channels
from harvest.db.connection import DatabaseError, connect, connect_async, redact

log = logging.getLogger("harvest.db.notify")


class _Settable(Protocol):
    """An asyncio or a threading event."""

    def set(self) -> None: ...
    def clear(self) -> None: ...
    def is_set(self) -> bool: ...


E = TypeVar("E", bound=_Settable)

# How long the hub waits before it connects again after losing its connection.
RECONNECT_SECS = 1.0
# While it cannot connect again: one warning when it goes, then one this often.
STILL_DOWN_WARN_SECS = 60.0
# How many notifications no wait was registered for a hub keeps (_Waiters._unclaimed).
UNCLAIMED_KEPT = 1024


class _Waiters(Generic[E]):
    """payload -> the events of the waits registered for it, for both hubs. Thread-safe: the
    thread hub's reader wakes waiters from its own thread (the asyncio hub's lock is never
    contended)."""

    def __init__(self) -> None:
        self._by_payload: dict[str, set[E]] = {}
        self._lock = threading.Lock()
        # Payloads notified while no wait was registered for them, oldest first (at most
        # UNCLAIMED_KEPT): a wait that registers later is woken at once (a run started with its
        # waiter marked, whose close came before the wait registered: Client.execute_workflow).
        self._unclaimed: dict[str, None] = {}
        # Counts the times every waiter was woken (the connection came up, dropped or closed): a
        # notification may have been missed across one.
        self.epoch = 0

    def __len__(self) -> int:
        with self._lock:
            return sum(len(events) for events in self._by_payload.values())

    def add(self, payload: str, event: E) -> None:
        with self._lock:
            self._by_payload.setdefault(payload, set()).add(event)
            missed = self._unclaimed.pop(payload, False) is None
        if missed:
            event.set()

    def discard(self, payload: str, event: E) -> None:
        with self._lock:
            events = self._by_payload.get(payload)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._by_payload[payload]

    def wake(self, payload: str) -> None:
        with self._lock:
            events = list(self._by_payload.get(payload, ()))
            if not events:
                self._unclaimed[payload] = None
                if len(self._unclaimed) > UNCLAIMED_KEPT:
                    del self._unclaimed[next(iter(self._unclaimed))]
        for event in events:
            event.set()

    def wake_all(self) -> None:
        with self._lock:
            self.epoch += 1
            events = [event for waiting in self._by_payload.values() for event in waiting]
        for event in events:
            event.set()


class Reconnects:
    """What is logged of a connection made again each time it fails (a LISTEN): a warning when
    it goes, or when its first connect fails; then at most one a minute while it stays down,
    also across a connection that keeps coming back and being ended (an idle-session killer);
    and one line when it is back after a loss that was warned of. Not one a failed connect:
    an outage of an hour would log thousands."""

    def __init__(self, logger: logging.Logger, what: str):
        self.log, self.what = logger, what
        self.down_since: float | None = None  # since when it cannot connect (time.monotonic())
        self._warned_at: float | None = None  # the last warning
        self._warned_down = False  # this time down was warned of: say when it is back

    def failed(self, reason: str, was_up: bool, every: float) -> None:
        """The connection failed (``was_up``), or a connect to make it again did; ``reason``:
        the error's text, its password already taken out; tried again ``every`` seconds."""
        now = time.monotonic()
        went = self.down_since is None
        since = self.down_since = now if self.down_since is None else self.down_since
        if self._warned_at is not None and now - self._warned_at < STILL_DOWN_WARN_SECS:
            return
        if went:
            text = "lost its connection" if was_up else "cannot connect"
        else:
            text = f"still cannot connect after {now - since:.0f}s"
        self.log.warning("%s %s (%s); trying again every %gs", self.what, text, reason, every)
        self._warned_at, self._warned_down = now, True

    def up(self) -> None:
        if self.down_since is not None:
            if self._warned_down:
                down_for = time.monotonic() - self.down_since
                self.log.info("%s is back after %.1fs", self.what, down_for)
            self.down_since, self._warned_down = None, False


class _Hub(Generic[E]):
    """What both hubs share: the channel, the waiters by payload, and whether the LISTEN is up
    (``_ready``, an event of the same kind as the waiters')."""

    _ready: E
    _tried: E  # set once a connect was tried (up, or failed): a start waits no longer

    def __init__(self, dsn: str, channel: str):
        channels.listen(channel)  # an unknown channel fails here
        self.dsn, self.channel = dsn, channel
        self._waiters: _Waiters[E] = _Waiters()
        self._reconnects = Reconnects(log, f"harvest: LISTEN {channel}")

    @property
    def waiters(self) -> int:
        """How many waits are registered now."""
        return len(self._waiters)

    def listening_since(self) -> int | None:
        """A token that stays the same while the LISTEN stays up (None while it is not): a wait
        registered after a start, with the same token as before it, has missed no notification
        since (those no wait was registered for are kept: ``waiting`` sees them)."""
        return self._waiters.epoch if self._ready.is_set() else None

    @contextlib.contextmanager
    def _registered(self, payload: str, event: E) -> Iterator[E]:
        """``event``, registered for ``payload`` while the block runs (each hub's ``waiting``)."""
        self._waiters.add(payload, event)
        try:
            yield event
        finally:
            self._waiters.discard(payload, event)

    def _up(self) -> None:
        """The LISTEN is in place: every waiter reads again (a notification may have been missed
        while it was not), and a line when it was down and warned of."""
        self._waiters.wake_all()  # (the new epoch first: a token taken once ready is this one's)
        self._ready.set()
        self._tried.set()
        self._reconnects.up()

    def _failed(self, exc: BaseException) -> None:
        """The connection failed, or a connect to make it again did (its DSN's password never
        shown): logged as ``Reconnects`` says."""
        self._tried.set()  # a start waits no longer: its waits read without the LISTEN meanwhile
        self._reconnects.failed(redact(str(exc), self.dsn), self._ready.is_set(), RECONNECT_SECS)

    def _down(self) -> None:
        """Not listening: every waiter reads again when it was (it may miss a notification now);
        a connect that failed while already down changes nothing a waiter could read."""
        if self._ready.is_set():
            self._ready.clear()
            self._waiters.wake_all()


class NotificationHub(_Hub[asyncio.Event]):
    """LISTEN on ``channel`` (one of :mod:`harvest.db.channels`) over one connection to ``dsn``."""

    def __init__(self, dsn: str, channel: str = channels.DONE):
        super().__init__(dsn, channel)
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._tried = asyncio.Event()

    async def start(self, timeout: float = 10.0) -> None:
        """Start listening; returns once the LISTEN is in place, or once a connect has failed,
        or ``timeout`` passed (the hub goes on trying in the background, and waiters then rely
        on their re-reads)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"harvest-listen-{self.channel}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._tried.wait(), timeout)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._ready.clear()  # listening no more: no token says it is
        self._waiters.wake_all()

    @contextlib.asynccontextmanager
    async def waiting(self, payload: str) -> AsyncIterator[asyncio.Event]:
        """An event set when a NOTIFY with ``payload`` arrives (or the connection drops) while
        the block runs. Register first, then read, then wait on the event."""
        with self._registered(payload, asyncio.Event()) as event:
            yield event

    async def _run(self) -> None:
        while True:
            try:
                conn = await connect_async(self.dsn, autocommit=True)
                async with conn:
                    await conn.execute(channels.listen(self.channel))
                    self._up()
                    async for note in conn.notifies():
                        self._waiters.wake(note.payload)
            except asyncio.CancelledError:
                raise
            except (DatabaseError, OSError, Exception) as exc:
                self._failed(exc)
            self._down()
            await asyncio.sleep(RECONNECT_SECS)


class ThreadNotificationHub(_Hub[threading.Event]):
    """:class:`NotificationHub` for threads: LISTEN on ``channel`` over one connection to ``dsn``,
    read by a daemon thread that wakes the :class:`threading.Event` of each waiter registered for
    a notification's payload (and every waiter when the connection drops)."""

    def __init__(self, dsn: str, channel: str = channels.DONE):
        super().__init__(dsn, channel)
        self._lock = threading.Lock()  # guards _thread
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._tried = threading.Event()
        self._stop = threading.Event()
        self._stop_r, self._stop_w = -1, -1  # a pipe: close() writes to it to end the thread's select

    def start(self, timeout: float = 10.0) -> None:
        """Start listening; returns once the LISTEN is in place, or once a connect has failed, or
        ``timeout`` passed (the thread goes on trying, and waiters then rely on their re-reads).
        A closed hub stays closed, and starting it returns at once: nothing would ever make it
        ready."""
        with self._lock:
            if self._stop.is_set():
                return
            if self._thread is None:
                self._stop_r, self._stop_w = os.pipe()
                self._thread = threading.Thread(
                    target=self._run, name=f"harvest-listen-{self.channel}", daemon=True
                )
                self._thread.start()
        self._tried.wait(timeout)

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None:
            with contextlib.suppress(OSError):
                os.write(self._stop_w, b"x")
            thread.join()
            os.close(self._stop_r)
            os.close(self._stop_w)
        self._waiters.wake_all()

    def waiting(self, payload: str) -> contextlib.AbstractContextManager[threading.Event]:
        """An event set when a NOTIFY with ``payload`` arrives (or the connection drops) while
        the block runs. Register first, then read, then wait on the event."""
        return self._registered(payload, threading.Event())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with connect(self.dsn, autocommit=True) as conn:
                    conn.execute(channels.listen(self.channel))
                    self._up()
                    self._read(conn.pgconn)
            except Exception as exc:
                if not self._stop.is_set():
                    self._failed(exc)
            self._down()
            self._stop.wait(RECONNECT_SECS)

    def _read(self, pgconn: Any) -> None:
        """Wake the waiters of each notification that arrives, until close() or a lost connection
        (which raises)."""
        with selectors.DefaultSelector() as selector:
            selector.register(pgconn.socket, selectors.EVENT_READ)
            selector.register(self._stop_r, selectors.EVENT_READ)
            while not self._stop.is_set():
                pgconn.consume_input()  # raises once the connection is lost
                while (note := pgconn.notifies()) is not None:
                    self._waiters.wake(note.extra.decode())
                selector.select()
