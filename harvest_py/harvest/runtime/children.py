"""Child workflows as the parent sees them: a handle on one ``start_child_workflow`` command.

The child's execution id comes from the recorded ``ChildWorkflowStarted`` event
(written in the same transaction as the command). The handle learns it when the
step that issued the command is confirmed by the history, before the next
batch is delivered, on a cached run and on a cold replay alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["ChildHandle"]


class ChildHandle:
    """A started child: ``await handle.result()``, ``await handle.started()``."""

    def __init__(
        self,
        seq: int,
        workflow_name: str,
        workflow_id: str | None,
        result_future: asyncio.Future,
        started_future: asyncio.Future,
        decode: Callable[[Any], Any],
    ):
        self.seq = seq
        self.workflow_name = workflow_name
        self.workflow_id = workflow_id  # as requested; the minted one once started
        self.child_execution_id: str | None = None
        self.parent_close_policy: str | None = None
        self._result = result_future
        self._started = started_future
        self._decode = decode

    def _set_started(self, data: dict) -> None:
        self.child_execution_id = data.get("child_execution_id") or self.child_execution_id
        self.workflow_id = data.get("workflow_id") or self.workflow_id
        self.parent_close_policy = data.get("parent_close_policy") or self.parent_close_policy
        if not self._started.done():
            self._started.set_result(self)

    @property
    def is_started(self) -> bool:
        return self.child_execution_id is not None

    async def started(self) -> ChildHandle:
        """Wait until the history records the child's start (its execution id is then set)."""
        await asyncio.shield(self._started)
        return self

    async def result(self) -> Any:
        """The child's result (decoded by its return hint); ``ChildWorkflowError`` if it failed."""
        raw = await asyncio.shield(self._result)
        return self._decode(raw)

    def __repr__(self) -> str:
        return (
            f"ChildHandle(seq={self.seq}, workflow={self.workflow_name!r}, "
            f"child_execution_id={self.child_execution_id!r})"
        )
