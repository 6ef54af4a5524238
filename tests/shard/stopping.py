"""Test workers run on their own event loop in a thread; a test must leave none behind.

A worker that outlives its test keeps polling (and logging against) a database the
fixture dropped, which fails some later test for no reason of its own. So a stop that
does not end the thread fails the test that owns it, with the stack of every task
still running on its loop: the await a shutdown is stuck on."""

from __future__ import annotations

import asyncio
import io
import threading


def assert_thread_stopped(
    thread: threading.Thread, loop: asyncio.AbstractEventLoop | None, what: str
) -> None:
    if not thread.is_alive():
        return
    stacks = io.StringIO()
    if loop is not None:
        # Read from another thread while the loop runs: good enough for a diagnosis.
        for task in list(asyncio.all_tasks(loop)):
            task.print_stack(limit=12, file=stacks)
    raise AssertionError(f"{what} did not stop; tasks still running:\n{stacks.getvalue()}")
