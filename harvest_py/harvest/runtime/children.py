"""Child workflows as the parent sees them: a handle on one ``start_child_workflow`` command.

The child's execution id comes from the recorded ``ChildWorkflowStarted`` event
(written in the same transaction as the command). The handle learns it when the
step that issued the command is confirmed by the history, before the next
batch is delivered, on a cached run and on a cold replay alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from harvest.core.errors import InvalidArgument
from harvest.core.ids import MAX_SHARD, is_shard_number

__all__ = ["ChildHandle", "ChildPlacement"]

ResultT = TypeVar("ResultT")


@dataclass(frozen=True)
class ChildPlacement:
    """Where a child workflow runs (docs/workflows.md, "Child placement"); per call, opt-in.

    * ``ChildPlacement.PARENT_SHARD`` (the default, and permanent): the parent's shard; the
      router is never consulted. A residency-bound tree keeps it.
    * ``ChildPlacement.DISTRIBUTED``: spread over the writable, unreserved shards by
      rendezvous on ``"{parent execution id}#{seq}"``, so a retried decision picks the same
      shard; with no writable shard (a full drain) the child stays on the parent's shard.
    * ``ChildPlacement.shard(n)``: shard ``n`` (writable).
    * ``ChildPlacement.residency_key(key)``: the shard the residency map names for ``key``.

    The worker resolves it once, when the command is first decided; the child's execution
    id, minted for that shard, is recorded in the parent's history and replay reuses it."""

    kind: str
    shard_id: int | None = None
    key: str | None = None

    PARENT_SHARD: ClassVar[ChildPlacement]
    DISTRIBUTED: ClassVar[ChildPlacement]
    KINDS: ClassVar[tuple[str, ...]] = ("parent_shard", "distributed", "shard", "residency_key")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise InvalidArgument(f"placement: {self.kind!r} is not one of {list(self.KINDS)}")
        if self.kind == "shard" and not is_shard_number(self.shard_id):
            raise InvalidArgument(f"placement: shard {self.shard_id!r} is not a shard number 0..{MAX_SHARD}")
        if self.kind == "residency_key" and (not isinstance(self.key, str) or not self.key.strip()):
            raise InvalidArgument(f"placement: residency key {self.key!r} must be a non-empty string")

    @classmethod
    def shard(cls, shard_id: int) -> ChildPlacement:
        return cls("shard", shard_id=shard_id)

    @classmethod
    def residency_key(cls, key: str) -> ChildPlacement:
        return cls("residency_key", key=key)

    def as_command(self) -> dict[str, Any] | None:
        """The command's ``placement`` field (None for the parent's shard: today's command)."""
        if self.kind == "parent_shard":
            return None
        if self.kind == "shard":
            return {"kind": "shard", "shard_id": self.shard_id}
        if self.kind == "residency_key":
            return {"kind": "residency_key", "key": self.key}
        return {"kind": "distributed"}


ChildPlacement.PARENT_SHARD = ChildPlacement("parent_shard")
ChildPlacement.DISTRIBUTED = ChildPlacement("distributed")


class ChildHandle(Generic[ResultT]):
    """A started child: ``await handle`` (or ``await handle.result()``), ``await
    handle.started()``. ``ResultT`` is the child workflow's return type (``ChildHandle[Any]``
    when it was started by name)."""

    def __init__(
        self,
        seq: int,
        workflow_name: str,
        workflow_id: str | None,
        result_future: asyncio.Future[Any],
        started_future: asyncio.Future[Any],
        decode: Callable[[Any], ResultT],
    ):
        self.seq = seq
        self.workflow_name = workflow_name
        self.workflow_id = workflow_id  # as requested; the minted one once started
        self.child_execution_id: str | None = None
        self.parent_close_policy: str | None = None
        self._result = result_future
        self._started = started_future
        self._decode = decode

    def _set_started(self, data: dict[str, Any]) -> None:
        self.child_execution_id = data.get("child_execution_id") or self.child_execution_id
        self.workflow_id = data.get("workflow_id") or self.workflow_id
        self.parent_close_policy = data.get("parent_close_policy") or self.parent_close_policy
        if not self._started.done():
            self._started.set_result(self)

    @property
    def is_started(self) -> bool:
        return self.child_execution_id is not None

    async def started(self) -> ChildHandle[ResultT]:
        """Wait until the history records the child's start (its execution id is then set)."""
        await asyncio.shield(self._started)
        return self

    async def result(self) -> ResultT:
        """The child's result (decoded by its return hint); ``ChildWorkflowError`` if it failed."""
        raw = await asyncio.shield(self._result)
        return self._decode(raw)

    def __await__(self) -> Generator[Any, None, ResultT]:
        """``await handle``: the child's result, as ``await handle.result()`` (Temporal's child
        handle is awaitable so); each await waits for it anew, and may be repeated."""
        return self.result().__await__()

    def __repr__(self) -> str:
        return (
            f"ChildHandle(seq={self.seq}, workflow={self.workflow_name!r}, "
            f"child_execution_id={self.child_execution_id!r})"
        )
