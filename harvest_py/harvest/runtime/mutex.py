"""The durable mutex in the workflow: ``async with ctx.mutex(key): ...``.

Entering issues ``record_marker {kind: "mutex_acquire", value: {key}}``; the
database queues the run for the key (FIFO) and, when the key is this run's,
appends the resolution event ``MutexAcquired {seq, key}`` (``seq`` = the acquire
marker's), which resolves the waiting future. Leaving the block, by any path,
issues ``record_marker {kind: "mutex_release", value: {key}}``. A run that ends
gives back every key it holds or waits for in the database (functions/flow_mutex.sql),
so a block the code never leaves (a crash, a termination) never holds a key forever.

If the wait is cancelled (``WorkflowCancelRequested``), the release marker is
issued too: the database then drops the queued request (or the grant, if it
landed in the same batch), and a late ``MutexAcquired`` resolves nothing.
Everything here is driven by the history, so a cached run and a cold replay
issue the same commands.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING, Self

from harvest.core.errors import InvalidArgument

if TYPE_CHECKING:
    from harvest.runtime.run import WorkflowRun

__all__ = ["MUTEX_ACQUIRE", "MUTEX_RELEASE", "WorkflowMutex"]

MUTEX_ACQUIRE = "mutex_acquire"
MUTEX_RELEASE = "mutex_release"


class WorkflowMutex:
    """One use of a durable named lock; an async context manager (not re-entrant)."""

    def __init__(self, run: WorkflowRun, key: str):
        if not isinstance(key, str) or not key:
            raise run.refuse_call("mutex", InvalidArgument(f"key must be a non-empty string, got {key!r}"))
        self._run = run
        self.key = key
        self.seq: int | None = None
        self.held = False

    def _keys(self) -> set[str]:
        return self._run._mutex_keys

    async def __aenter__(self) -> Self:
        if self.seq is not None:
            raise self._run.refuse_call(
                "mutex", InvalidArgument(f"mutex {self.key!r}: this ctx.mutex() object was already used")
            )
        keys = self._keys()
        if self.key in keys:
            raise self._run.refuse_call(
                "mutex",
                InvalidArgument(
                    f"mutex {self.key!r} is already held or awaited by this run; "
                    "ctx.mutex is not re-entrant (a second acquire would wait forever)"
                ),
            )
        self.seq = self._run.next_seq()
        future = self._run.issue(
            {"type": "record_marker", "seq": self.seq, "kind": MUTEX_ACQUIRE, "value": {"key": self.key}},
            "mutex",
            self.key,
        )
        keys.add(self.key)
        try:
            await future
        except asyncio.CancelledError:
            self._release()
            raise
        self.held = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._release()

    def _release(self) -> None:
        self.held = False
        self._keys().discard(self.key)
        self._run._record(
            {
                "type": "record_marker",
                "seq": self._run.next_seq(),
                "kind": MUTEX_RELEASE,
                "value": {"key": self.key},
            }
        )

    def __repr__(self) -> str:
        return f"WorkflowMutex({self.key!r}, seq={self.seq}, held={self.held})"
