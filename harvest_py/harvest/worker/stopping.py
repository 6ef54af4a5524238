"""Ending a worker's background tasks, and at its grace its in-flight ones, so that a stop
always ends.

``task.cancel()`` followed by ``gather`` waits forever for a task that lost its
cancellation: a driver call that turns the CancelledError into an ordinary error,
caught by a loop that retries, or user code (an async activity) that catches it and
goes on awaiting. The worker then never returns from ``run`` and its listeners keep
polling a database nobody serves any more. So each wait is bounded: a task still
running after ``STOP_WAIT_SECS`` is cancelled once more (a lost cancellation is a race
of one moment) and, if it still runs, named in the log and left behind rather than
holding the stop hostage."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("harvest.worker")

STOP_WAIT_SECS = 5.0

# How long a stop's own call to the database may go unanswered (the claim in flight at the stop,
# the drain's record, a cancelled task's release, the release of what is left and the stopped
# mark): a database that does not answer by then is down, and what the call would have done,
# the leases' expiry does. Each used to wait the pool's connect timeout (30 s) in turn.
STOP_CALL_SECS = 3.0

# The tasks left running: those a stop gave up on and named in its log (the process' end does
# not wait for them again: harvest/worker/event_loop.py), and those a closed loop was left
# with. Held until they end, so that none is destroyed while pending (and asyncio's "Task was
# destroyed but it is pending!" is not what ends the story).
_LEFT_BEHIND: set[asyncio.Task[Any]] = set()


def leave_behind(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Keep ``tasks``, left running, until each ends (see _LEFT_BEHIND)."""
    for task in tasks:
        if task not in _LEFT_BEHIND and not task.done():
            _LEFT_BEHIND.add(task)
            task.add_done_callback(_LEFT_BEHIND.discard)


def left_behind(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` was left running by a stop (or a closed loop)."""
    return task in _LEFT_BEHIND


async def cancel_and_wait(
    tasks: Iterable[asyncio.Task[Any]],
    what: str,
    describe: Callable[[asyncio.Task[Any]], str] = asyncio.Task.get_name,
    then: str = "left behind",
) -> set[asyncio.Task[Any]]:
    """Cancel ``tasks`` and wait for them, bounded (see the module's note): those left behind,
    each named by ``describe`` in the warning, which says ``then`` of them."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    for task in pending:
        task.cancel()
    for attempt in range(2):
        if not pending:
            break
        _, pending = await asyncio.wait(pending, timeout=STOP_WAIT_SECS)
        if pending and attempt == 0:
            for task in pending:
                task.cancel()  # the first one was lost: a second, once
    for task in tasks:
        if task.done() and not task.cancelled():
            with contextlib.suppress(BaseException):
                task.exception()  # retrieved, so asyncio does not report it at exit
    if pending:
        leave_behind(pending)
        log.warning(
            "%d %s task(s) did not stop within %.0fs of their cancellation; %s: %s",
            len(pending),
            what,
            2 * STOP_WAIT_SECS,
            then,
            ", ".join(sorted(describe(task) for task in pending)),
        )
    return pending
