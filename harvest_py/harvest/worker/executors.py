"""Where plain ``def`` activities run: the worker's thread pool (by default as many threads as
the worker has slots, ``WorkerOptions.activity_threads``), or, for ``@activity(executor=
"process")``, its process pool (``activity_processes``, the CPU count by default), started at the
first such task. docs/activities.md, "Which executor".

A process receives a copy of the activity's context (:class:`ProcessActivityContext`: identity,
attempt, idempotency key; no heartbeats), its function by reference and its arguments, all by
pickle; what cannot be pickled fails the attempt for good, naming what could not.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import multiprocessing
import os
import pickle
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from harvest.core.errors import ActivityFailure, ConfigError
from harvest.core.idempotency import IdempotencyKey
from harvest.core.threads import DaemonThreads
from harvest.declare.definitions import ActivityDefinition, App
from harvest.runtime.local import activity_logger

__all__ = ["ActivityExecutors", "ProcessActivityContext", "check_process_activities"]


@dataclass(frozen=True)
class ProcessActivityContext:
    """The ``ctx`` of an activity running in the process pool: a copy, with no connection back
    to the worker (so no heartbeats: give a long activity a ``start_to_close`` instead)."""

    execution_id: str
    workflow_id: str
    workflow_name: str
    activity_name: str
    queue: str
    heartbeat_details: Any
    _attempt: int
    _seq: int
    # No heartbeat carries a cancel request back to a process.
    cancel_requested = False

    def idempotency_key(self) -> IdempotencyKey:
        """Stable across retries, replays, restarts and duplicate dispatch of this invocation."""
        return IdempotencyKey.for_activity(self.execution_id, self._seq)

    def attempt(self) -> int:
        return self._attempt

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger whose lines carry the run, the activity and the attempt (in the child)."""
        return activity_logger(self)

    def heartbeat(self, details: Any = None) -> bool:
        raise self._refused("heartbeat", "to heartbeat, or rely on start_to_close")

    def record_llm_call(
        self,
        model: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd_micros: int | None = None,
        latency_ms: int | None = None,
    ) -> int | None:
        raise self._refused("record model calls in the agent cost ledger", "to record them")

    @property
    def task_token(self) -> str:
        raise self._refused("hand its task token on to be completed later", "for that")

    def complete_async(self) -> Exception:
        raise self._refused("hand its task token on to be completed later", "for that")

    def _refused(self, cannot: str, instead: str) -> RuntimeError:
        """What a call that needs the worker is told: a process has no way back to it."""
        return RuntimeError(
            f"activity {self.activity_name} runs in a process (executor='process'): it cannot "
            f"{cannot}; run it in a thread (the default) {instead}"
        )


def _call(fn: Any, ctx: ProcessActivityContext, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Runs in the child process."""
    return fn(ctx, *args, **kwargs)


def check_process_activities(app: App) -> None:
    """At worker start: every ``executor="process"`` activity's function must pickle (import
    by name), or the worker does not start (ConfigError naming them)."""
    bad = []
    for definition in app.activities.values():
        if definition.executor != "process":
            continue
        try:
            pickle.dumps(definition.fn)
        except Exception as exc:
            bad.append(f"{definition.name} ({type(exc).__name__}: {exc})")
    if bad:
        raise ConfigError(
            "activities with executor='process' must be functions a process can import by name "
            f"(defined at the top level of a module): {'; '.join(bad)}"
        )


class ActivityExecutors:
    """The worker's thread pool and (started on first use) process pool for ``def`` activities."""

    def __init__(self, threads: int, processes: int | None):
        self.thread_count = threads
        self.process_count = processes or os.cpu_count() or 1
        self.threads = DaemonThreads(threads, "harvest-activity")
        self._processes: ProcessPoolExecutor | None = None

    def _process_pool(self) -> Executor:
        if self._processes is None:
            # spawn: a fork of a threaded asyncio process may copy held locks.
            self._processes = ProcessPoolExecutor(
                max_workers=self.process_count, mp_context=multiprocessing.get_context("spawn")
            )
        return self._processes

    async def run(
        self, definition: ActivityDefinition, ctx: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run a plain ``def`` activity where its definition says; returns its result."""
        loop = asyncio.get_running_loop()
        if definition.executor != "process":
            call = functools.partial(contextvars.copy_context().run, definition.fn, ctx, *args, **kwargs)
            return await loop.run_in_executor(self.threads, call)
        copy = ProcessActivityContext(
            ctx.execution_id,
            ctx.workflow_id,
            ctx.workflow_name,
            ctx.activity_name,
            ctx.queue,
            ctx.heartbeat_details,
            ctx.attempt(),
            int(ctx._task["seq"]),
        )
        try:
            pickle.dumps((definition.fn, args, kwargs))
        except Exception as exc:
            raise ActivityFailure(
                "NotPicklable",
                f"activity {definition.name} runs in a process (executor='process'), and its function "
                f"or arguments cannot be pickled: {type(exc).__name__}: {exc}",
                non_retryable=True,
            ) from None
        try:
            return await loop.run_in_executor(self._process_pool(), _call, definition.fn, copy, args, kwargs)
        except BrokenProcessPool as exc:
            # A child died (killed, out of memory): start a new pool for the next attempt.
            self._processes = None
            raise ActivityFailure(
                "ProcessPoolBroken", f"the process running activity {definition.name} died: {exc}"
            ) from None
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            if "pickle" not in str(exc).lower():
                raise
            raise ActivityFailure(
                "NotPicklable",
                f"activity {definition.name} ran in a process, and its result cannot be pickled back: {exc}",
                non_retryable=True,
            ) from None

    def shutdown(self) -> None:
        """At the worker's stop, after its drain: what still runs here was released (another
        worker runs it again), so nothing waits for it. A thread runs on and ends with the
        process (:class:`DaemonThreads`); the processes are terminated, since the pool's exit
        would otherwise wait for the calls they run."""
        self.threads.shutdown(wait=False, cancel_futures=True)
        if self._processes is not None:
            pool, self._processes = self._processes, None
            # (shutdown forgets them; Python 3.14's terminate_workers would say it outright)
            processes = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()
