"""Signals: buffered per name in arrival (``event_id``) order, handed to waiters FIFO.

``SignalReceived`` events are delivered by the run in ``event_id`` order inside
their batch, before the workflow code runs, so which waiter gets which payload
and what stays buffered is decided by the history alone: a replay sees the same.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

__all__ = ["SignalBuffer"]


class SignalBuffer:
    def __init__(self) -> None:
        # Per name, (arrival number, payload): the number keeps the global order for
        # pending(), which a continue-as-new hands to the next run.
        self._buffers: dict[str, deque[tuple[int, Any]]] = {}
        self._waiters: dict[str, deque[asyncio.Future[Any]]] = {}
        self._arrivals = 0
        # Each wait's [name, timer seq or None, since: the event id of the marker of the step
        # that began it, None while that step is not recorded yet]: what a decision reports
        # (awaiting()). Empty for a run that never waits on a signal: nothing is reported then,
        # and the run's steps test only that it is empty (WorkflowRun).
        self.waits: dict[asyncio.Future[Any], list[Any]] = {}

    def deliver(self, name: str, payload: Any) -> None:
        """Hand ``payload`` to the oldest live waiter of ``name``, or buffer it."""
        waiters = self._waiters.get(name)
        while waiters:
            future = waiters.popleft()
            if not future.done():  # a waiter that timed out or was cancelled is skipped
                future.set_result(payload)
                return
        self._arrivals += 1
        self._buffers.setdefault(name, deque()).append((self._arrivals, payload))

    def take(self, name: str) -> tuple[bool, Any]:
        """The oldest buffered payload of ``name``: ``(True, payload)`` or ``(False, None)``."""
        buffer = self._buffers.get(name)
        if not buffer:
            return False, None
        return True, buffer.popleft()[1]

    def put_back(self, name: str, payload: Any) -> None:
        """Return a payload its waiter never saw (it was cancelled) to the front of the line."""
        buffer = self._buffers.setdefault(name, deque())
        buffer.appendleft((buffer[0][0] - 1 if buffer else 0, payload))

    def wait(self, name: str, future: asyncio.Future[Any], since: int | None = None) -> list[Any]:
        """Queue ``future`` for the next signal of ``name``; its record for awaiting(), whose
        timer seq (index 1) the caller sets when the wait has a timeout."""
        self._waiters.setdefault(name, deque()).append(future)
        record = self.waits[future] = [name, None, since]
        return record

    def awaiting(self) -> list[dict[str, Any]] | None:
        """The waits still pending, oldest first, as a decision reports them (the
        ``await_signals`` directive: functions/decide.sql); None when there are none."""
        waits = self.waits
        if not waits:
            return None
        for future in [f for f in waits if f.done()]:
            del waits[future]
        if not waits:
            return None
        return [
            {"name": name, "timer_seq": seq}
            if since is None
            else {"name": name, "timer_seq": seq, "since": since}
            for name, seq, since in waits.values()
        ]

    def stamp(self, marker_id: int) -> None:
        """The step whose waits have no ``since`` yet is recorded under marker ``marker_id``."""
        for record in self.waits.values():
            if record[2] is None:
                record[2] = marker_id

    def awaited(self) -> list[str]:
        """The names a wait of the workflow's is blocked on (the test kit's stuck report)."""
        return sorted(
            name for name, waiters in list(self._waiters.items()) if any(not f.done() for f in waiters)
        )

    def count(self, name: str | None = None) -> int:
        if name is not None:
            return len(self._buffers.get(name) or ())
        return sum(len(b) for b in self._buffers.values())

    def unread(self, but: str) -> dict[str, int]:
        """How many signals of each name other than ``but`` are buffered (a timed-out wait's hint)."""
        return {name: len(buffer) for name, buffer in self._buffers.items() if buffer and name != but}

    def pending(self) -> list[dict[str, Any]]:
        """Every buffered signal, oldest first: what a continue-as-new carries over."""
        entries = [(n, name, payload) for name, buffer in self._buffers.items() for n, payload in buffer]
        return [
            {"name": name, "payload": payload} for _, name, payload in sorted(entries, key=lambda e: e[0])
        ]
