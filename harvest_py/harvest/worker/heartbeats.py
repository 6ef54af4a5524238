"""What an ``async def`` activity's context sends without being awaited (docs/activities.md,
"The context in sync and async code"): ``ctx.heartbeat(details)``, as code ported from Temporal's
``activity.heartbeat`` calls it (:class:`Beats`), and ``ctx.record_llm_call(...)``
(:class:`Records`). One sender per attempt and kind, written once (:class:`Background`).

A call records what is to be sent and returns at once; the attempt's sender task sends it, one
send in flight at a time. Heartbeats are throttled and coalesced: sends are at least
``interval`` apart (half the ``heartbeat_timeout``, at most 30 s), calls in between keep only the
latest details (details None keep the ones before, as the SQL does), and the first call after
an idle gap sends at once. Ledger records are each sent, in order, as soon as the one before.

An error of a send (``StaleTask``: the attempt is no longer held; ``PayloadTooLarge``; another
database error) is kept and raised by the activity's next call of that kind (or its awaited
variant, ``await ctx.aheartbeat`` / ``await ctx.arecord_llm_call``); one it never saw is raised
when it returns, so the attempt fails with it instead of completing (``end``). The attempt's
end stops the sender before its outcome is reported: nothing is sent for it afterwards (and the
SQL refuses a stale fencing token anyway). What is still unsent goes first when the attempt
fails, hands its task token on or is handed back by the worker's stop (within STOP_FLUSH_SECS),
so the next attempt resumes from the latest heartbeat details; when it completes, unsent
heartbeat details are dropped (nothing resumes from them) and ledger records are sent (the
model calls were made and paid for).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from harvest.core.errors import ActivityFailure
from harvest.db.connection import failure_reason

log = logging.getLogger("harvest.worker")

# The longest gap between two sends of pending details; also the gap without a heartbeat_timeout.
MAX_INTERVAL = 30.0
# How long the worker's stop waits for an attempt's pending sends before it hands the task back
# (a database that does not answer must not hold the stop).
STOP_FLUSH_SECS = 2.0


def send_interval(heartbeat_timeout: float | None) -> float:
    """The least time between two heartbeats sent for ``ctx.heartbeat``: half the attempt's
    ``heartbeat_timeout`` (a send that waits for a busy pool still lands in time), at most 30 s."""
    if not heartbeat_timeout:
        return MAX_INTERVAL
    return min(float(heartbeat_timeout) / 2, MAX_INTERVAL)


class Background:
    """One attempt's calls of one kind made without awaiting, sent by one sender task (see the
    module's note). A subclass says what is pending (``_pending``) and sends it
    (``_send_pending``, under the lock)."""

    __slots__ = ("_closed", "_interval", "_lock", "_sender", "_sending", "error")

    # Whether what is unsent when the attempt returns is still sent (else dropped).
    SEND_ON_COMPLETION = False
    # The log lines' words: what the stop could not send, and one failed send.
    UNSENT = "calls"
    ONE = "a call"

    def __init__(self, interval: float):
        self._interval = interval
        self._lock = asyncio.Lock()  # one send in flight (the sender's or an awaited call's)
        self._sender: asyncio.Task[None] | None = None
        self._sending = False  # the sender is in a send (not waiting out the interval)
        self._closed = False
        self.error: Exception | None = None  # a send's error the activity has not seen yet

    def _pending(self) -> bool:
        raise NotImplementedError

    async def _send_pending(self) -> None:
        raise NotImplementedError

    def raise_unseen(self) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise error

    def _wake(self) -> None:
        """A call left something to send: start the sender unless it runs (or the attempt ended)."""
        if self._sender is None and not self._closed:
            self._sender = asyncio.get_running_loop().create_task(self._run())

    async def _send_due(self) -> None:
        async with self._lock:
            if not self._pending():
                return
            self._sending = True
            try:
                await self._send_pending()
            finally:
                self._sending = False

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending() and not self._closed:
                started = loop.time()
                await self._send_due()
                if self._closed:
                    return
                await asyncio.sleep(started + self._interval - loop.time())
        except Exception as exc:
            self.error = exc
        finally:
            self._sender = None

    async def end(self, raised: BaseException | None, what: str) -> None:
        """Stop sending before the attempt's outcome (``raised``: its exception, None: it
        returned) is reported. What is pending is sent first unless it returned (and
        SEND_ON_COMPLETION is false); an error it has not seen is raised if it returned, else
        logged (its own exception is the outcome)."""
        self._closed = True
        sender = self._sender
        if isinstance(raised, asyncio.CancelledError) and ActivityFailure.own_cancel(raised) is None:
            # The worker's stop: the task is handed back, and its next attempt resumes from the
            # stored details, so pending sends go first (the send in flight waited for), within
            # STOP_FLUSH_SECS; an error then is only logged.
            try:
                async with asyncio.timeout(STOP_FLUSH_SECS):
                    await self._stop_sender(sender)
                    await self._send_due()
            except (Exception, TimeoutError) as exc:
                reason = failure_reason(exc)
                log.warning("%s: its last %s were not sent before the stop: %s", what, self.UNSENT, reason)
            return
        await self._stop_sender(sender)
        if (raised is not None or self.SEND_ON_COMPLETION) and self._pending() and self.error is None:
            try:
                await self._send_due()
            except Exception as exc:
                self.error = exc
        if self.error is None:
            return
        if raised is None:
            self.raise_unseen()
        log.warning("%s: %s it sent without awaiting failed: %s", what, self.ONE, failure_reason(self.error))
        self.error = None

    async def _stop_sender(self, sender: asyncio.Task[None] | None) -> None:
        """Stop the sender task: cancelled while it waits (out the interval, or for the lock: no
        send to cut), waited for while it sends."""
        if sender is None:
            return
        if not self._sending:
            sender.cancel()
        await asyncio.wait([sender])


class Beats(Background):
    """One attempt's heartbeats (``ctx.heartbeat``): the latest details, throttled."""

    __slots__ = ("_details", "_due", "_send")

    UNSENT = "heartbeat details"
    ONE = "a heartbeat"

    def __init__(self, send: Callable[[Any], Awaitable[Any]], interval: float):
        super().__init__(interval)
        self._send = send  # sends encoded details (None: keep the stored ones) and reads the cancel flag
        self._details: Any = None  # the latest details not sent yet (None: none new)
        self._due = False  # a call waits for a send

    def beat(self, encoded: Any) -> None:
        """Record a call's details (encoded; None: no new ones) and see that they are sent."""
        self.raise_unseen()
        if encoded is not None:
            self._details = encoded
        self._due = True
        self._wake()

    async def send_now(self, encoded: Any) -> None:
        """``await ctx.aheartbeat(details)``: send these (or the pending) details now, after
        any send in flight."""
        self.raise_unseen()
        async with self._lock:
            details = self._details if encoded is None else encoded
            self._details, self._due = None, False
            await self._send(details)

    def _pending(self) -> bool:
        return self._due

    async def _send_pending(self) -> None:
        details, self._details, self._due = self._details, None, False
        await self._send(details)


class Records(Background):
    """One attempt's ledger records (``ctx.record_llm_call``): each sent, in order, and sent
    when the attempt completes too."""

    __slots__ = ("_queue", "_send")

    SEND_ON_COMPLETION = True
    UNSENT = "LLM call records"
    ONE = "an LLM call record"

    def __init__(self, send: Callable[..., Awaitable[Any]]):
        super().__init__(0.0)
        self._send = send  # records one call (its arguments as given)
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()

    def add(self, *call: Any) -> None:
        """Queue one call's arguments and see that they are sent."""
        self.raise_unseen()
        self._queue.append(call)
        self._wake()

    async def send_now(self, *call: Any) -> Any:
        """``await ctx.arecord_llm_call(...)``: raise an error not seen yet, then record this
        call, after the ones queued before it; its answer."""
        self.raise_unseen()
        async with self._lock:
            await self._send_pending()
            return await self._send(*call)

    def _pending(self) -> bool:
        return bool(self._queue)

    async def _send_pending(self) -> None:
        queue = self._queue
        while queue:
            await self._send(*queue.popleft())  # (a call that fails is not sent again: its error is)
