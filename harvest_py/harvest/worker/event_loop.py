"""The event loop ``harvest worker`` runs on: asyncio's own, or uvloop when it is installed.

Most of a worker's own CPU that is not Harvest's code is the event loop's: scheduling
callbacks, futures and the selector around every statement (docs/performance.md, "Cheaper
Python, sixth cut"). uvloop implements the same loop in C; the canonical drain's process CPU
per workflow fell by about a twentieth on it. It is an optional dependency
(``pip install 'harvest-workflows[uvloop]'``; it has no Windows build), so ``auto``, the
default, takes it when it can be imported and asyncio's loop otherwise, as uvicorn does.

Like the collector's tuning (harvest/worker/collector.py) this is the process' choice, so the
library never makes it for its host: ``harvest worker`` does, and the benchmarks' in-process
worker does the same so that the bench measures what ``harvest worker`` runs. Workflow code
never sees it: a workflow runs on Harvest's deterministic loop (harvest/runtime/loop.py)
whichever loop the worker runs on; async activities run on the worker's loop.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from harvest.core.errors import ConfigError

if TYPE_CHECKING:  # asyncio is imported by run(): the config reads EVENT_LOOPS without it
    import asyncio

EVENT_LOOPS = ("auto", "asyncio", "uvloop")
T = TypeVar("T")


@dataclass(frozen=True)
class EventLoopChoice:
    """The loop a process runs on: ``name`` for the log (``asyncio``, or ``uvloop`` and its
    version) and the factory ``asyncio.Runner`` takes (None: asyncio's own loop)."""

    name: str
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """``asyncio.run(main)`` on this loop, its end bounded: asyncio's own end cancels the
        tasks still running and waits for them, forever for one whose code ignores its
        cancellation (an async activity that catches CancelledError and goes on awaiting, left
        behind by the worker's stop: docs/failures.md). Here such a task is waited for up to
        LEFTOVER_WAIT_SECS, then the loop is closed without it and the process exits."""
        import asyncio

        runner = asyncio.Runner(loop_factory=self.loop_factory)
        try:
            return runner.run(main)
        finally:
            loop = runner.get_loop()
            if _ended_leftovers(loop):
                runner.close()
            else:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(loop.shutdown_asyncgens())
                asyncio.set_event_loop(None)
                loop.close()


# How long the tasks still running when a process' main coroutine returned are waited for.
LEFTOVER_WAIT_SECS = 5.0


def _ended_leftovers(loop: asyncio.AbstractEventLoop) -> bool:
    """Cancel the tasks ``loop`` still runs and wait for them, bounded: whether all ended. Those
    a worker's stop already left behind (and named) are not waited for again."""
    import asyncio

    from harvest.worker.stopping import leave_behind, left_behind

    running = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not running:
        return True
    tasks = [task for task in running if not left_behind(task)]
    for task in tasks:
        task.cancel()
    if tasks:
        _, pending = loop.run_until_complete(asyncio.wait(tasks, timeout=LEFTOVER_WAIT_SECS))
        if pending:
            logging.getLogger("harvest.worker").warning(
                "%d task(s) still running %.0fs after their cancellation: the process ends without them",
                len(pending),
                LEFTOVER_WAIT_SECS,
            )
    left = [task for task in running if not task.done()]
    leave_behind(left)  # kept: the loop closes without them, and they must not be destroyed pending
    return not left


def choose_event_loop(choice: str = "auto") -> EventLoopChoice:
    """The loop for ``worker.event_loop = choice``: ``auto`` takes uvloop when it can be
    imported and asyncio's loop otherwise; ``uvloop`` requires it (a ConfigError says how to
    install it); ``asyncio`` never looks for it."""
    if choice not in EVENT_LOOPS:
        raise ConfigError(f"worker.event_loop {choice!r} is unknown; use {', '.join(EVENT_LOOPS)}")
    if choice == "asyncio":
        return EventLoopChoice("asyncio", None)
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError as exc:
        if choice == "auto":
            return EventLoopChoice("asyncio", None)
        raise ConfigError(
            f"worker.event_loop is uvloop but uvloop cannot be imported ({exc}); install it "
            "(pip install 'harvest-workflows[uvloop]') or set worker.event_loop to auto or asyncio"
        ) from None
    return EventLoopChoice(f"uvloop {getattr(uvloop, '__version__', '')}".strip(), uvloop.new_event_loop)
