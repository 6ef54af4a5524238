"""One attempt in flight, its outcome shared (:class:`SharedAttempt`): what opens a pool on the
first request (the management API's own pool, harvest.web.app; the token authorizer's,
harvest.web.auth)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

__all__ = ["SharedAttempt"]

T = TypeVar("T")


class SharedAttempt(Generic[T]):
    """``await shared.run(attempt)``: the callers that arrive while an attempt runs wait for that
    one and share its outcome (its value, or its error); the first caller after it ends starts
    another. Under a plain lock each waiter would make its own attempt in turn, so with the
    database down the n-th of a burst waited n timeouts; here it waits one. A caller cancelled
    leaves the attempt to the others (it runs on to its end)."""

    def __init__(self) -> None:
        self._running: asyncio.Future[T] | None = None

    async def run(self, attempt: Callable[[], Awaitable[T]]) -> T:
        running = self._running
        if running is None:
            running = self._running = asyncio.ensure_future(attempt())
            running.add_done_callback(self._ended)
        return await asyncio.shield(running)

    def _ended(self, done: asyncio.Future[Any]) -> None:
        if self._running is done:
            self._running = None
        if not done.cancelled():
            done.exception()  # (read: every waiter may have left; not "never retrieved")
