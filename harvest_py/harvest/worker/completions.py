"""Group commit of activity results: many finished activities, one transaction.

A finished activity hands its result to :class:`CompletionBatcher` and waits.
One flush is in flight at a time; results that finish while it runs wait for
the next one, so an idle worker commits each result at once and a busy one
commits them in batches (``harvest.complete_activities``), one WAL flush and
one round trip for the lot. Each item is accepted or refused on its own.

The batch also hands workflow tasks back: when this worker's cached run
decided a woken workflow last, the workflow task comes back leased to us
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

# The most results one transaction carries (a bound on its lock set and duration).
MAX_BATCH = 100


class Recorded(NamedTuple):
    """One result's answer: a workflow task handed to us, and what its decision wrote."""

    handed: dict[str, Any] | None = None
    decided: dict[str, Any] | None = None


_Item = tuple[int, int, Any, "dict[str, Any] | None", asyncio.Future]


class CompletionBatcher:
    def __init__(self, worker: Worker, max_batch: int = MAX_BATCH):
        self._worker = worker
        self._max_batch = max_batch
        self._waiting: list[_Item] = []
        self._flusher: asyncio.Task | None = None
        self.batches = 0  # flushes sent (a measure of the batching, for benchmarks)
        self.items = 0

    async def complete(self, task_id: int, fencing_token: int, result: Any,
                       decision: dict[str, Any] | None = None) -> Recorded:
        """Record one activity result, with the decision made on it if any.

        Raises StaleTask when the task is no longer ours (its lease was lost).
        """
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((task_id, fencing_token, result, decision, future))
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

    async def _flush(self, batch: list[_Item]) -> None:
        worker = self._worker
        items = [(task_id, token, result, decision) for task_id, token, result, decision, _ in batch]
        try:
            rows = await worker.sql.complete_activities(
                worker.worker_id, items, hand_off=worker.accepts_hand_off(),
                workflow_lease_secs=worker.workflow_lease,
                event_cap=worker.history_event_hard_cap, byte_cap=worker.history_byte_hard_cap)
        except Exception as exc:
            with_decisions = any(item[3] is not None for item in batch)
            if not with_decisions and (isinstance(exc, HarvestError) or len(batch) == 1):
                raise
            # A whole batch failed (a deadlock with another transaction, or a decision
            # the database refused): commit the results one by one, without decisions,
            # so that one bad item cannot sink the others nor lose its own result.
            log.warning("a batch of %d activity results failed (%s); committing them one by one",
                        len(batch), exc)
            for task_id, token, result, _decision, future in batch:
                try:
                    await self._flush([(task_id, token, result, None, future)])
                except Exception as item_exc:  # noqa: BLE001
                    if not future.done():
                        future.set_exception(item_exc)
            return
        self.batches += 1
        self.items += len(batch)
        by_id = {row["task_id"]: row for row in rows}
        for task_id, _token, _result, _decision, future in batch:
            row = by_id.get(task_id)
            if future.done():
                continue
            if row is None:
                future.set_exception(HarvestError(f"task {task_id}: no outcome in the batch"))
            elif row["outcome"] == "completed":
                future.set_result(Recorded(row["handed"], row.get("decided")))
            elif row["outcome"] == "kind":
                future.set_exception(InvalidArgument(row["message"]))
            else:
                future.set_exception(StaleTask(row["message"]))
