"""A worker's group commit (harvest/db/group_commit.py) of finished tasks.

A handler that finished an activity (or decided a workflow task) hands its
outcome to a batcher and waits; busy handlers share a transaction
(``harvest.complete_activities``, ``harvest.complete_workflow_tasks``). Each
item is accepted or refused on its own.

The activity batch also hands workflow tasks back: when this worker's cached
run decided a woken workflow last, the workflow task comes back leased to us
(claim.sql, "Hand-off") and the activity's handler runs it at once. A result
may also carry the decision the worker's cached run made on it
(worker/decide_ahead.py); the database applies it with the result when nothing
happened to the run meanwhile, and says so in ``decided``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, cast

from harvest.core.errors import HarvestError, InvalidArgument, PayloadTooLarge, StaleTask
from harvest.db.group_commit import MAX_BATCH, GroupCommit
from harvest.telemetry.metrics import retry_reason

if TYPE_CHECKING:
    from harvest.worker.lanes import ShardLane
    from harvest.worker.worker import Worker


class Recorded(NamedTuple):
    """One result's answer: a workflow task handed to us, and what its decision wrote."""

    handed: dict[str, Any] | None = None
    decided: dict[str, Any] | None = None


class _TaskGroupCommit(GroupCommit):
    """A worker's batch of finished tasks: one row per task id, accepted or refused."""

    site = "batch"  # harvest_db_transaction_retry_total{site}

    def __init__(self, worker: Worker, max_batch: int = MAX_BATCH, *, lane: ShardLane | None = None):
        super().__init__(max_batch)
        self._worker = worker
        # The shard the batch commits to: its lane's database (the worker's own without one).
        self._on = lane or worker

    def _retried(self, exc: Exception) -> None:
        self._worker.metrics.transaction_retry(self.site, retry_reason(exc))

    # What a commit of this batch makes claimable, for Redis dispatch (None: any kind).
    publishes: str | None = None

    def _committed(self, items: list[tuple[Any, ...]]) -> None:
        """Redis dispatch: publish what the commit made claimable (worker/redis_dispatch.py)."""
        if self._worker.redis is not None and self._on is not self._worker:
            self._worker.after_commit(
                cast("ShardLane", self._on), [item[0] for item in items], self.publishes
            )

    def _settle(self, batch: list[tuple[Any, ...]], rows: list[dict[str, Any]]) -> None:
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
            elif row["outcome"] == "too_large":  # the server's payload limit (HR008's message)
                future.set_exception(PayloadTooLarge(row["message"]))
            else:
                future.set_exception(StaleTask(row["message"]))

    def _answer(self, row: dict[str, Any]) -> Any:
        raise NotImplementedError


class CompletionBatcher(_TaskGroupCommit):
    """Activity results (``harvest.complete_activities``)."""

    what = "activity results"
    site = "activity_completion"
    publishes = "workflow"  # a result wakes its run's workflow task, nothing else

    async def complete(
        self, task_id: int, fencing_token: int, result: Any, decision: dict[str, Any] | None = None
    ) -> Recorded:
        """Record one activity result, with the decision made on it if any.

        Raises StaleTask when the task is no longer ours (its lease was lost).
        """
        return cast("Recorded", await self._submit(task_id, fencing_token, result, decision))

    async def _send(self, items: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        worker = self._worker
        rows = cast(
            "list[dict[str, Any]]",
            await self._on.sql.complete_activities(
                worker.worker_id,
                items,
                hand_off=worker.accepts_hand_off(),
                workflow_lease_secs=worker.workflow_lease,
                event_cap=worker.history_event_hard_cap,
                byte_cap=worker.history_byte_hard_cap,
            ),
        )
        self._committed(items)
        return rows

    def _retry_alone(self, batch: list[tuple[Any, ...]], exc: Exception) -> bool:
        # A decision the database refuses fails the call: retry without decisions, so
        # that no result is lost to it. Otherwise a refusal of the whole call (a
        # HarvestError) would be refused again item by item.
        if any(item[3] is not None for item in batch):
            return True
        return len(batch) > 1 and not isinstance(exc, HarvestError)

    def _alone(self, item: tuple[Any, ...]) -> tuple[Any, ...]:
        task_id, token, result, _decision, future = item
        return task_id, token, result, None, future

    def _answer(self, row: dict[str, Any]) -> Recorded:
        return Recorded(row["handed"], row.get("decided"))


class DecisionBatcher(_TaskGroupCommit):
    """Workflow task decisions (``harvest.complete_workflow_tasks``)."""

    what = "decisions"
    site = "workflow_task"

    async def complete(
        self,
        task_id: int,
        fencing_token: int,
        through: int,
        commands: list[dict[str, Any]],
        hand_off_slots: int,
        owner_epoch: int | None = None,
    ) -> dict[str, Any]:
        """Commit one decision; returns its row (last_event_id, execution_status, handed).

        Raises StaleTask when the task is no longer ours (or, in owner mode, its
        partition is no longer held at ``owner_epoch``: outcome ``not_owner``),
        InvalidArgument (or the database's error) when the decision is refused.
        """
        return cast(
            "dict[str, Any]",
            await self._submit(task_id, fencing_token, through, commands, hand_off_slots, owner_epoch),
        )

    async def _send(self, items: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        worker = self._worker
        rows = cast(
            "list[dict[str, Any]]",
            await self._on.sql.complete_workflow_tasks(
                worker.worker_id,
                items,
                event_cap=worker.history_event_hard_cap,
                byte_cap=worker.history_byte_hard_cap,
            ),
        )
        self._committed(items)
        return rows

    def _answer(self, row: dict[str, Any]) -> dict[str, Any]:
        return row
