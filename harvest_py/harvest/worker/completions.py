"""Group commit: many finished tasks, one transaction.

A handler that finished an activity (or decided a workflow task) hands its
outcome to a batcher and waits. One flush is in flight at a time; outcomes that
arrive while it runs wait for the next one, so an idle worker commits each at
once and a busy one commits them in batches (``harvest.complete_activities``,
``harvest.complete_workflow_tasks``), one WAL flush and one round trip for the
lot. Each item is accepted or refused on its own.

The activity batch also hands workflow tasks back: when this worker's cached
run decided a woken workflow last, the workflow task comes back leased to us
(claim.sql, "Hand-off") and the activity's handler runs it at once. A result
may also carry the decision the worker's cached run made on it
(worker/decide_ahead.py); the database applies it with the result when nothing
happened to the run meanwhile, and says so in ``decided``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, NamedTuple

from harvest.errors import HarvestError, InvalidArgument, StaleTask

if TYPE_CHECKING:
    from harvest.worker.worker import Worker

log = logging.getLogger("harvest.worker")

# The most items one transaction carries (a bound on its lock set and duration).
MAX_BATCH = 100


class Recorded(NamedTuple):
    """One result's answer: a workflow task handed to us, and what its decision wrote."""

    handed: dict[str, Any] | None = None
    decided: dict[str, Any] | None = None


class _GroupCommit:
    """One flush in flight; the items that arrive meanwhile go in the next one.

    An item is a tuple whose first element is its task id and whose last is the
    future its handler awaits.
    """

    what = "items"

    def __init__(self, worker: Worker, max_batch: int = MAX_BATCH):
        self._worker = worker
        self._max_batch = max_batch
        self._waiting: list[tuple] = []
        self._flusher: asyncio.Task | None = None
        self.batches = 0  # flushes sent (a measure of the batching, for benchmarks)
        self.items = 0

    async def _submit(self, *item: Any) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((*item, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_all())
        # Shielded: a cancelled handler must not cancel a flush other handlers wait on.
        return await asyncio.shield(future)

    async def _flush_all(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting[: self._max_batch], self._waiting[self._max_batch:]
            try:
                await self._flush(batch)
            except Exception as exc:  # noqa: BLE001 - every waiter hears of it
                for *_, future in batch:
                    if not future.done():
                        future.set_exception(exc)

    async def _flush(self, batch: list[tuple]) -> None:
        try:
            rows = await self._send([item[:-1] for item in batch])
        except Exception as exc:
            if not self._retry_alone(batch, exc):
                raise
            # A whole batch failed (a deadlock with another transaction, or an item the
            # database refused outright): commit the items one by one, so that one bad
            # item cannot sink the others.
            log.warning("a batch of %d %s failed (%s); committing them one by one",
                        len(batch), self.what, exc)
            for item in batch:
                try:
                    await self._flush([self._alone(item)])
                except Exception as item_exc:  # noqa: BLE001
                    if not item[-1].done():
                        item[-1].set_exception(item_exc)
            return
        self.batches += 1
        self.items += len(batch)
        by_id = {row["task_id"]: row for row in rows}
        for item in batch:
            task_id, future = item[0], item[-1]
            row = by_id.get(task_id)
            if future.done():
                continue
            if row is None:
                future.set_exception(HarvestError(f"task {task_id}: no outcome in the batch"))
            elif row["outcome"] == "completed":
                future.set_result(self._answer(row))
            elif row["outcome"] == "kind":
                future.set_exception(InvalidArgument(row["message"]))
            else:
                future.set_exception(StaleTask(row["message"]))

    async def _send(self, items: list[tuple]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _retry_alone(self, batch: list[tuple], exc: Exception) -> bool:
        """Whether a failed batch is worth committing item by item."""
        return len(batch) > 1

    def _alone(self, item: tuple) -> tuple:
        """The item as it is sent on its own after its batch failed."""
        return item

    def _answer(self, row: dict[str, Any]) -> Any:
        raise NotImplementedError


class CompletionBatcher(_GroupCommit):
    """Activity results (``harvest.complete_activities``)."""

    what = "activity results"

    async def complete(self, task_id: int, fencing_token: int, result: Any,
                       decision: dict[str, Any] | None = None) -> Recorded:
        """Record one activity result, with the decision made on it if any.

        Raises StaleTask when the task is no longer ours (its lease was lost).
        """
        return await self._submit(task_id, fencing_token, result, decision)

    async def _send(self, items: list[tuple]) -> list[dict[str, Any]]:
        worker = self._worker
        return await worker.sql.complete_activities(
            worker.worker_id, items, hand_off=worker.accepts_hand_off(),
            workflow_lease_secs=worker.workflow_lease,
            event_cap=worker.history_event_hard_cap, byte_cap=worker.history_byte_hard_cap)

    def _retry_alone(self, batch: list[tuple], exc: Exception) -> bool:
        # A decision the database refuses fails the call: retry without decisions, so
        # that no result is lost to it. Otherwise a refusal of the whole call (a
        # HarvestError) would be refused again item by item.
        if any(item[3] is not None for item in batch):
            return True
        return len(batch) > 1 and not isinstance(exc, HarvestError)

    def _alone(self, item: tuple) -> tuple:
        task_id, token, result, _decision, future = item
        return task_id, token, result, None, future

    def _answer(self, row: dict[str, Any]) -> Recorded:
        return Recorded(row["handed"], row.get("decided"))


class DecisionBatcher(_GroupCommit):
    """Workflow task decisions (``harvest.complete_workflow_tasks``)."""

    what = "decisions"

    async def complete(self, task_id: int, fencing_token: int, through: int,
                       commands: list[dict[str, Any]], hand_off_slots: int) -> dict[str, Any]:
        """Commit one decision; returns its row (last_event_id, execution_status, handed).

        Raises StaleTask when the task is no longer ours, InvalidArgument (or the
        database's error) when the decision is refused.
        """
        return await self._submit(task_id, fencing_token, through, commands, hand_off_slots)

    async def _send(self, items: list[tuple]) -> list[dict[str, Any]]:
        worker = self._worker
        return await worker.sql.complete_workflow_tasks(
            worker.worker_id, items, event_cap=worker.history_event_hard_cap,
            byte_cap=worker.history_byte_hard_cap)

    def _answer(self, row: dict[str, Any]) -> dict[str, Any]:
        return row
