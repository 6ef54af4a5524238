"""Local activities: run inline by the workflow task, recorded as a marker.

A local activity skips the task queue: the worker runs it right after the
workflow blocks, retries it in place with a short backoff, and records the
outcome as a ``local_activity`` marker so replays read it back instead of
running it again.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from harvest.core.errors import ActivityFailure, PayloadError
from harvest.core.idempotency import IdempotencyKey
from harvest.core.payload import encode, encode_details
from harvest.core.threads import DaemonThreads
from harvest.declare.definitions import ActivityDefinition

__all__ = ["LOCAL_MAX_BACKOFF", "LocalActivityContext", "run_local_activity"]

log = logging.getLogger("harvest.runtime")

# Inline retries hold the workflow task's lease, so their backoff stays short.
LOCAL_MAX_BACKOFF = 10.0


class LocalActivityContext:
    """The ``ctx`` a local activity receives (heartbeats are accepted and ignored)."""

    is_local = True

    def __init__(self, execution_id: str, seq: int, attempt: int, name: str):
        self.execution_id = execution_id
        self.seq = seq
        self.activity_name = name
        self._attempt = attempt

    def idempotency_key(self) -> IdempotencyKey:
        """Stable across inline retries and replays: derived from (execution_id, seq)."""
        return IdempotencyKey.for_activity(self.execution_id, self.seq)

    def attempt(self) -> int:
        return self._attempt

    def heartbeat(self, details: Any = None) -> None:
        """Local activities run inside the workflow task's lease; nothing to report."""

    def __repr__(self) -> str:
        return (
            f"LocalActivityContext(execution_id={self.execution_id!r}, seq={self.seq}, "
            f"activity={self.activity_name!r}, attempt={self._attempt})"
        )


ContextFactory = Callable[[str, int, int, str], Any]
Sleep = Callable[[float], Awaitable[Any]]


async def run_local_activity(
    defn: ActivityDefinition,
    args: tuple[Any, ...],
    execution_id: str,
    seq: int,
    context_factory: ContextFactory,
    sleep: Sleep = asyncio.sleep,
) -> dict[str, Any]:
    """Run ``defn`` with retries; return the marker value ``{name, result}`` or ``{name, failure}``."""
    attempt = 1
    while True:
        ctx = context_factory(execution_id, seq, attempt, defn.name)
        try:
            result = await _call(defn, ctx, args)
            try:
                return {"name": defn.name, "result": encode(result, "result")}
            except PayloadError as exc:
                failure = ActivityFailure(type(exc).__name__, str(exc), non_retryable=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = ActivityFailure.from_exception(exc)
        if not defn.retry.should_retry(failure, attempt):
            report = failure.to_json()
            report["details"] = encode_details(report["details"])
            return {"name": defn.name, "failure": report}
        delay = min(defn.retry.delay(attempt), LOCAL_MAX_BACKOFF)
        log.info(
            "local activity %s (seq %s) attempt %s failed: %s; retrying in %.3fs",
            defn.name,
            seq,
            attempt,
            failure,
            delay,
        )
        await sleep(delay)
        attempt += 1


# A local ``def`` activity's thread: as many as the loop's default executor would have, in a
# pool whose threads do not hold the process at its exit (a worker stopped during a blocked
# local activity goes at its grace; harvest.core.threads).
_threads: DaemonThreads | None = None


def _in_thread(fn: Any, ctx: Any, args: tuple[Any, ...]) -> Any:
    global _threads
    if _threads is None:
        _threads = DaemonThreads(min(32, (os.cpu_count() or 1) + 4), "harvest-local-activity")
    call = functools.partial(contextvars.copy_context().run, fn, ctx, *args)
    return asyncio.get_running_loop().run_in_executor(_threads, call)


async def _call(defn: ActivityDefinition, ctx: Any, args: tuple[Any, ...]) -> Any:
    coro = defn.fn(ctx, *args) if defn.is_async else _in_thread(defn.fn, ctx, args)
    timer = asyncio.timeout(defn.start_to_close or None)
    try:
        async with timer:
            return await coro
    except TimeoutError:
        if not timer.expired():  # the activity's own TimeoutError: typed as it was raised
            raise
        raise ActivityFailure(
            "TimeoutError", f"local activity {defn.name!r} exceeded start_to_close of {defn.start_to_close}s"
        ) from None
