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
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

from harvest.core.errors import ActivityFailure, PayloadError
from harvest.core.idempotency import IdempotencyKey
from harvest.core.payload import encode, encode_details
from harvest.core.threads import DaemonThreads
from harvest.declare.definitions import ActivityDefinition

__all__ = [
    "LOCAL_MAX_BACKOFF",
    "UNAWAITED_HEARTBEAT",
    "UNAWAITED_LLM_CALL",
    "LocalActivityContext",
    "MustAwait",
    "activity_logger",
    "run_local_activity",
]

log = logging.getLogger("harvest.runtime")

T = TypeVar("T")

# Inline retries hold the workflow task's lease, so their backoff stays short.
LOCAL_MAX_BACKOFF = 10.0


class LocalActivityContext:
    """The ``ctx`` a local activity receives (heartbeats are accepted and ignored; docs/activities.md,
    "The context in sync and async code", has what each of a context's methods does where)."""

    is_local = True
    # As a queued attempt's context has them: nothing can cancel an inline attempt but its
    # workflow task, and inline retries resume from no details.
    cancel_requested: bool = False
    heartbeat_details: Any = None

    def __init__(
        self,
        execution_id: str,
        seq: int,
        attempt: int,
        name: str,
        *,
        workflow_id: str | None = None,
        workflow_name: str | None = None,
        queue: str | None = None,
    ):
        self.execution_id = execution_id
        self.seq = seq
        self.activity_name = name
        self._attempt = attempt
        # The run's, as a queued attempt's context has them (queue: the workflow's, where it runs).
        self.workflow_id = workflow_id
        self.workflow_name = workflow_name
        self.queue = queue

    def idempotency_key(self) -> IdempotencyKey:
        """Stable across inline retries and replays: derived from (execution_id, seq)."""
        return IdempotencyKey.for_activity(self.execution_id, self.seq)

    def attempt(self) -> int:
        return self._attempt

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger whose lines carry the run, the activity and the attempt."""
        return activity_logger(self)

    def heartbeat(self, details: Any = None) -> bool:
        """Local activities run inside the workflow task's lease; nothing to report (False: no
        cancel request reaches an inline attempt this way)."""
        return False

    def aheartbeat(self, details: Any = None) -> Coroutine[Any, Any, bool]:
        """As ``heartbeat``: accepted and ignored, so an ``async def`` activity that awaits its
        heartbeats runs local too (not awaited: the warning a queued attempt's gives)."""
        return MustAwait(_ignored(), self, UNAWAITED_HEARTBEAT)

    def record_llm_call(
        self,
        model: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd_micros: int | None = None,
        latency_ms: int | None = None,
    ) -> int | None:
        """Refused (RuntimeError naming the way): the ledger records against an activity task."""
        raise RuntimeError(_NO_LEDGER.format(name=self.activity_name))

    def arecord_llm_call(
        self,
        model: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd_micros: int | None = None,
        latency_ms: int | None = None,
    ) -> Coroutine[Any, Any, int]:
        """Refused when awaited, as ``record_llm_call`` (not awaited: the queued attempt's warning)."""
        return MustAwait(self._refuse_ledger(), self, UNAWAITED_LLM_CALL)

    async def _refuse_ledger(self) -> int:
        raise RuntimeError(_NO_LEDGER.format(name=self.activity_name))

    @property
    def task_token(self) -> str:
        """Refused (RuntimeError naming the way): an inline attempt has no task to complete later."""
        raise RuntimeError(_NO_TOKEN.format(name=self.activity_name))

    def complete_async(self) -> Exception:
        """Refused, as ``task_token``."""
        raise RuntimeError(_NO_TOKEN.format(name=self.activity_name))

    def __repr__(self) -> str:
        return (
            f"LocalActivityContext(execution_id={self.execution_id!r}, seq={self.seq}, "
            f"activity={self.activity_name!r}, attempt={self._attempt})"
        )


_NO_LEDGER = (
    "local activity {name} cannot record model calls: the agent cost ledger records them against "
    "an activity task's attempt, and a local activity has none; run it as a regular activity "
    "(without local=True, or with ctx.execute_activity) to record them"
)


async def _ignored() -> bool:
    return False


def activity_logger(ctx: Any) -> logging.LoggerAdapter[logging.Logger]:
    """``ctx.logger`` of every activity context (queued, local, in a process): the
    ``harvest.activity`` logger, its lines carrying the run, the activity and the attempt."""
    fields = {
        "execution_id": ctx.execution_id,
        "workflow_id": ctx.workflow_id,
        "workflow": ctx.workflow_name,
        "activity": ctx.activity_name,
        "attempt": ctx.attempt(),
    }
    return logging.LoggerAdapter(logging.getLogger("harvest.activity"), fields)


class MustAwait(Coroutine[Any, Any, T]):
    """What ``ctx.aheartbeat()`` and ``ctx.arecord_llm_call()`` return, the coroutine that makes
    the call: one dropped without being awaited warns naming the call, the activity and what to
    do (``unawaited``, formatted with ``name``; Python's own warning says only "was never
    awaited"). One small object on a call that awaits a database round trip; ``ctx.heartbeat``,
    the hot loop's call, makes none."""

    __slots__ = ("_coro", "_ctx", "_unawaited", "_used")

    def __init__(self, coro: Coroutine[Any, Any, T], ctx: Any, unawaited: str) -> None:
        self._coro, self._ctx, self._unawaited, self._used = coro, ctx, unawaited, False

    def __await__(self) -> Generator[Any, None, T]:
        self._used = True
        return self._coro.__await__()

    def send(self, value: Any) -> Any:  # (a Task of it: asyncio.create_task, gather, wait_for)
        self._used = True
        return self._coro.send(value)

    def throw(self, *exc: Any) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
        self._used = True
        return self._coro.throw(*exc)

    def close(self) -> None:
        self._used = True
        self._coro.close()

    def __del__(self) -> None:
        if not self._used:
            self._coro.close()  # (closed before it started: Python adds no warning of its own)
            warnings.warn(self._unawaited.format(name=self._ctx.activity_name), RuntimeWarning, stacklevel=1)


UNAWAITED_HEARTBEAT = (
    "activity {name} called ctx.aheartbeat() without await: no heartbeat was sent and the lease was"
    " not extended; await it (await ctx.aheartbeat(details)), or call ctx.heartbeat(details), which"
    " records the details without await"
)
UNAWAITED_LLM_CALL = (
    "activity {name} called ctx.arecord_llm_call() without await: the call was not recorded in the"
    " agent cost ledger; await it (await ctx.arecord_llm_call(model, ...)), or call"
    " ctx.record_llm_call(model, ...), which queues it without await"
)

_NO_TOKEN = (
    "local activity {name} has no task token to complete it by later: its outcome is recorded in "
    "its workflow task; run it as a regular activity (without local=True) to complete it asynchronously"
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
    """Run ``defn`` with retries; return the marker value ``{name, result}`` or ``{name, failure}``.

    A ``schedule_to_close`` bounds the whole invocation as a queued activity's does
    (functions/activities.sql, _fail_activity_attempt): an attempt is cut at the deadline, and a
    retry that would come due at or past it is not made; either way the failure is final,
    ``ScheduleToCloseTimeout``."""
    loop = asyncio.get_running_loop()
    deadline = None if defn.schedule_to_close is None else loop.time() + defn.schedule_to_close
    attempt = 1
    while True:
        ctx = context_factory(execution_id, seq, attempt, defn.name)
        try:
            result = await _call(defn, ctx, args, deadline)
            try:
                return {"name": defn.name, "result": encode(result, "result")}
            except PayloadError as exc:
                failure = ActivityFailure(type(exc).__name__, str(exc), non_retryable=True)
        except asyncio.CancelledError as exc:
            # The workflow task's own cancel (the worker's stop) goes through; a CancelledError
            # the activity's code raised by itself fails the attempt, as a queued activity's
            # does (it propagated into the workflow, and the run was stuck).
            own = ActivityFailure.own_cancel(exc)
            if own is None:
                raise
            failure = own
        except (Exception, SystemExit) as exc:  # (sys.exit() fails the attempt, not the task)
            failure = ActivityFailure.from_exception(exc)
        if not defn.retry.should_retry(failure, attempt):
            report = failure.to_json()
            report["details"] = encode_details(report["details"])
            return {"name": defn.name, "failure": report}
        delay = min(defn.retry.delay(attempt, failure), LOCAL_MAX_BACKOFF)
        if deadline is not None and loop.time() + delay >= deadline:
            # Retries remained, but the next one would start past schedule_to_close.
            return {
                "name": defn.name,
                "failure": ActivityFailure(
                    "ScheduleToCloseTimeout",
                    f"activity {defn.name} ran out of its schedule_to_close of "
                    f"{_secs(defn.schedule_to_close)}s after attempt {attempt}",
                    non_retryable=True,
                    details={"last_failure": failure.to_json()},
                ).to_json(),
            }
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


def _secs(seconds: float | None) -> str:
    """Seconds as the options JSON writes them (``5``, not ``5.0``), for a failure's message."""
    return str(int(seconds) if seconds is not None and float(seconds).is_integer() else seconds)


async def _call(
    defn: ActivityDefinition, ctx: Any, args: tuple[Any, ...], deadline: float | None = None
) -> Any:
    """One attempt, bounded by its start_to_close and by the invocation's ``deadline`` (the
    loop's clock: schedule_to_close), whichever comes first."""
    coro = defn.fn(ctx, *args) if defn.is_async else _in_thread(defn.fn, ctx, args)
    loop = asyncio.get_running_loop()
    ends = None if not defn.start_to_close else loop.time() + defn.start_to_close
    cut = deadline is not None and (ends is None or deadline < ends)
    timer = asyncio.timeout_at(deadline if cut else ends)
    try:
        async with timer:
            return await coro
    except TimeoutError:
        if not timer.expired():  # the activity's own TimeoutError: typed as it was raised
            raise
        if cut:
            raise ActivityFailure(
                "ScheduleToCloseTimeout",
                f"activity {defn.name} did not finish within its schedule_to_close of "
                f"{_secs(defn.schedule_to_close)}s",
                non_retryable=True,
            ) from None
        raise ActivityFailure(
            "TimeoutError", f"local activity {defn.name!r} exceeded start_to_close of {defn.start_to_close}s"
        ) from None
