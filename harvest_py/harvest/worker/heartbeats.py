"""The heartbeats of an ``async def`` activity that calls ``ctx.heartbeat(details)`` without
awaiting it (as code ported from Temporal's ``activity.heartbeat`` does; docs/activities.md,
"Heartbeats").

A call records the latest details and returns at once; one sender task per attempt sends them.
At most one heartbeat of the attempt is in flight, and sends are at least ``interval`` apart
(half the ``heartbeat_timeout``, at most 30 s): calls in between coalesce to the latest details
(details None keep the ones before, as the SQL does), and the first call after an idle gap sends
at once. An error of a send (``StaleTask``: the attempt is no longer held; ``PayloadTooLarge``;
another database error) is kept and raised by the activity's next ``ctx.heartbeat`` or
``await ctx.aheartbeat``; one it never saw is raised when it returns, so the attempt fails with
it instead of completing (``end``). The attempt's end stops the sender before its outcome is
reported: nothing is sent for it afterwards (and ``heartbeat_activity`` refuses a stale fencing
token anyway); unsent details are sent first when the attempt fails, hands its task token on or
is handed back by the worker's stop (within STOP_FLUSH_SECS), so the next attempt resumes from
them, and dropped when it completes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from harvest.core.errors import ActivityFailure
from harvest.db.connection import failure_reason

log = logging.getLogger("harvest.worker")

# The longest gap between two sends of pending details; also the gap without a heartbeat_timeout.
MAX_INTERVAL = 30.0
# How long the worker's stop waits for an attempt's pending details to be sent before it hands
# the task back (a database that does not answer must not hold the stop).
STOP_FLUSH_SECS = 2.0


def send_interval(heartbeat_timeout: float | None) -> float:
    """The least time between two heartbeats sent for ``ctx.heartbeat``: half the attempt's
    ``heartbeat_timeout`` (a send that waits for a busy pool still lands in time), at most 30 s."""
    if not heartbeat_timeout:
        return MAX_INTERVAL
    return min(float(heartbeat_timeout) / 2, MAX_INTERVAL)


class Beats:
    """One attempt's heartbeats sent in the background (see the module's note)."""

    __slots__ = ("_closed", "_details", "_due", "_interval", "_lock", "_send", "_sender", "_sending", "error")

    def __init__(self, send: Callable[[Any], Awaitable[Any]], interval: float):
        self._send = send  # sends encoded details (None: keep the stored ones) and reads the cancel flag
        self._interval = interval
        self._details: Any = None  # the latest details not sent yet (None: none new)
        self._due = False  # a call waits for a send
        self._lock = asyncio.Lock()  # one send in flight (the sender's or an aheartbeat's)
        self._sender: asyncio.Task[None] | None = None
        self._sending = False  # the sender is in a send (not waiting out the interval)
        self._closed = False
        self.error: Exception | None = None  # a send's error the activity has not seen yet

    def raise_unseen(self) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise error

    def beat(self, encoded: Any) -> None:
        """Record a call's details (encoded; None: no new ones) and see that they are sent."""
        self.raise_unseen()
        if encoded is not None:
            self._details = encoded
        self._due = True
        if self._sender is None and not self._closed:
            self._sender = asyncio.get_running_loop().create_task(self._run())

    async def send_now(self, encoded: Any) -> None:
        """``await ctx.aheartbeat(details)``: send these (or the pending) details now, after
        any send in flight."""
        self.raise_unseen()
        async with self._lock:
            details = self._details if encoded is None else encoded
            self._details, self._due = None, False
            await self._send(details)

    async def _send_due(self) -> None:
        async with self._lock:
            if not self._due:
                return
            details, self._details, self._due = self._details, None, False
            self._sending = True
            try:
                await self._send(details)
            finally:
                self._sending = False

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._due and not self._closed:
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
        returned) is reported. Pending details are sent first unless it returned; an error it
        has not seen is raised if it returned, else logged (its own exception is the outcome)."""
        self._closed = True
        sender = self._sender
        if isinstance(raised, asyncio.CancelledError) and ActivityFailure.own_cancel(raised) is None:
            # The worker's stop: the task is handed back, and its next attempt resumes from the
            # stored details, so pending ones are sent first (the send in flight waited for),
            # within STOP_FLUSH_SECS; an error then is only logged.
            try:
                async with asyncio.timeout(STOP_FLUSH_SECS):
                    await self._stop_sender(sender)
                    await self._send_due()
            except (Exception, TimeoutError) as exc:
                reason = failure_reason(exc)
                log.warning("%s: its last heartbeat details were not sent before the stop: %s", what, reason)
            return
        await self._stop_sender(sender)
        if raised is not None and self._due and self.error is None:
            try:
                await self._send_due()
            except Exception as exc:
                self.error = exc
        if self.error is None:
            return
        if raised is None:
            self.raise_unseen()
        log.warning("%s: a heartbeat it sent without awaiting failed: %s", what, failure_reason(self.error))
        self.error = None

    async def _stop_sender(self, sender: asyncio.Task[None] | None) -> None:
        """Stop the sender task: cancelled while it waits (out the interval, or for the lock: no
        send to cut), waited for while it sends."""
        if sender is None:
            return
        if not self._sending:
            sender.cancel()
        await asyncio.wait([sender])
