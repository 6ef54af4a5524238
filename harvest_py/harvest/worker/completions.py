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

While work is waiting (the last claim came back full), a small activity batch
(Worker.result_claim_limit) also claims in its own transaction (``harvest.complete_activities_with_claim``):
one task for each result that completes without handing a task back, whose
handler runs it in the slot it frees, as it runs a handed task. That saves the
claim loop's round trip and commit per batch; the claim is claim_tasks itself.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from harvest.core.errors import HarvestError, InvalidArgument, PayloadError, PayloadTooLarge, StaleTask
from harvest.db.group_commit import MAX_BATCH, GroupCommit
from harvest.db.resend import RefusedOnResend
from harvest.telemetry.metrics import retry_reason

# Flushes of one batcher in flight at once (db/group_commit.py): while one batch commits, the
# results and decisions of the slots it does not hold go beside it on a second connection, so
# the server's two backends (and cores) work at once; with one, the worker's slots waited on
# one backend (docs/performance.md, "Two result flushes in flight").
FLUSHES = 2

# The most commands (activities scheduled, mostly) one flush of decisions carries, decisions whole
# (DecisionBatcher._take): about 60 ms of a backend's time for a slice of a fan-out burst.
DECISION_COMMANDS = 1000
# Where a decision's commands sit in its batcher item (DecisionBatcher.complete's _submit:
# task id, fencing token, through, commands, hand-off slots, owner epoch).
_COMMANDS = 3

if TYPE_CHECKING:
    from harvest.worker.lanes import ShardLane
    from harvest.worker.worker import Worker


def result_batch_size(concurrency: int) -> int:
    """The most activity results one batch carries for a worker of ``concurrency`` slots:
    MAX_BATCH, or half the slots above 200. At most FLUSHES batches are in flight at a time and a
    slot is held until its result commits, so at a high concurrency the results that pile up
    behind them go in one commit, not several of MAX_BATCH: fewer commits, and more of a run's
    results in one append and one wake-up (fewer decisions of a fan-in). docs/performance.md,
    "Fan-out row, fifth cut"."""
    return max(MAX_BATCH, concurrency // 2)


class Recorded(NamedTuple):
    """One result's answer: a workflow task handed to us, and what its decision wrote."""

    handed: dict[str, Any] | None = None
    decided: dict[str, Any] | None = None
    # Tasks claimed with the batch, for the slots its results free: this handler runs them
    # as it ends (the batch's last completed result's; worker/completions.py).
    claimed: list[dict[str, Any]] | None = None


def frees_slot(row: dict[str, Any]) -> bool:
    """Whether a completed result's handler ends with nothing handed back (its slot frees):
    the rule complete_activities_with_claim counts by (functions/claim.sql)."""
    if row["outcome"] != "completed" or row["handed"] is not None:
        return False
    decided = row.get("decided")
    return decided is None or not decided["handed"]


def refusal(row: dict[str, Any]) -> HarvestError:
    """The exception for an item the batch did not complete (its ``outcome`` is not
    ``completed``)."""
    if row["outcome"] == "kind":
        return InvalidArgument(row["message"])
    if row["outcome"] == "too_large":  # the server's payload limit (HR008's message)
        return PayloadTooLarge(row["message"])
    if row["outcome"] == "too_deep":  # nested past the server's 200 levels (_check_depth)
        return PayloadError(row["message"])
    return StaleTask(row["message"])


class _TaskGroupCommit(GroupCommit):
    """A worker's batch of finished tasks: one row per task id, accepted or refused."""

    site = "batch"  # harvest_db_transaction_retry_total{site}

    def __init__(self, worker: Worker, max_batch: int = MAX_BATCH, *, lane: ShardLane | None = None):
        super().__init__(max_batch, FLUSHES)
        self._worker = worker
        # The shard the batch commits to: its lane's database (the worker's own without one).
        self._on = lane or worker
        self._lane = lane

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

    # A batch whose connection failed is sent again until the database answers (db/resend.py):
    # each item's fencing token makes a repeat of a committed send a refusal, not a second commit.
    resends_lost = True
    # A lone decision or result that lost a deadlock is sent again (db/group_commit.py), not
    # left to its lease.
    resends_conflicts = True

    def _settle(self, batch: list[tuple[Any, ...]], rows: list[dict[str, Any]], resent: bool = False) -> None:
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
            else:
                refused = refusal(row)
                if resent and type(refused) is StaleTask:
                    # The first send may have committed it: done, not a lost lease.
                    refused = RefusedOnResend.of(refused)
                future.set_exception(refused)

    def _answer(self, row: dict[str, Any]) -> Any:
        raise NotImplementedError


class CompletionBatcher(_TaskGroupCommit):
    """Activity results (``harvest.complete_activities``)."""

    what = "activity results"
    site = "activity_completion"
    publishes = "workflow"  # a result wakes its run's workflow task, nothing else

    claimed = 0  # tasks claimed with result batches (complete_activities_with_claim)
    largest = 0  # the most results one batch carried (for tests and benchmarks)

    def complete(
        self, task_id: int, fencing_token: int, result: Any, decision: dict[str, Any] | None = None
    ) -> asyncio.Future[Recorded]:
        """Record one activity result, with the decision made on it if any: the future of
        its answer (queued at the call; await it).

        Raises StaleTask when the task is no longer ours (its lease was lost).
        """
        return self._submit(task_id, fencing_token, result, decision)

    async def _send(self, items: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        worker = self._worker
        options = {
            "hand_off": worker.accepts_hand_off(),
            "workflow_lease_secs": worker.workflow_lease,
            "event_cap": worker.history_event_hard_cap,
            "byte_cap": worker.history_byte_hard_cap,
        }
        lane = self._lane
        self.largest = max(self.largest, len(items))
        limit = 0 if lane is None else worker.result_claim_limit(lane, len(items))
        if lane is not None and limit:
            rows = await self._on.sql.complete_activities_with_claim(
                worker.worker_id, worker.queues, limit, items, **options
            )
            self._claimed_with(lane, rows, limit)
        else:
            rows = await self._on.sql.complete_activities(worker.worker_id, items, **options)
        self._committed(items)
        return cast("list[dict[str, Any]]", rows)

    @staticmethod
    def _claimed_with(lane: ShardLane, rows: list[dict[str, Any]], limit: int) -> None:
        """Note on the lane whether the batch's claim came back full (the backlog stands)."""
        claimed = sum(1 for row in rows if row["outcome"] == "claimed")
        freed = sum(1 for row in rows if row["outcome"] != "claimed" and frees_slot(row))
        lane.backlog = claimed == min(limit, freed)
        for row in rows:
            if row["outcome"] == "claimed":
                row["handed"]["_lane"] = lane

    def _committed(self, items: list[tuple[Any, ...]]) -> None:
        """Redis dispatch: publish the workflow tasks the results woke, and, for a result that
        carried a decision made ahead (worker/decide_ahead.py), every task that decision left
        claimable, the activities it did not hand back among them, as a workflow task's
        decision does (DecisionBatcher)."""
        worker = self._worker
        if worker.redis is None or self._on is worker:
            return
        lane = cast("ShardLane", self._on)
        worker.after_commit(lane, [item[0] for item in items if item[3] is None], self.publishes)
        worker.after_commit(lane, [item[0] for item in items if item[3] is not None], None)

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

    def _settle(self, batch: list[tuple[Any, ...]], rows: list[dict[str, Any]], resent: bool = False) -> None:
        claimed = [row["handed"] for row in rows if row["outcome"] == "claimed"]
        if claimed:
            self.claimed += len(claimed)
            # (A claimed task's id may be a refused item's: its lease expired and this
            # claim took the task again.) The tasks go to the last completed item's
            # handler: handlers resume in the batch's order, so it runs them once the
            # others have ended (freeing their slots) and settled their runs.
            rows = [row for row in rows if row["outcome"] != "claimed"]
            futures = {item[0]: item[-1] for item in batch}
            last = next(
                (
                    row
                    for row in reversed(rows)
                    if row["outcome"] == "completed" and not futures[row["task_id"]].done()
                ),
                None,
            )
            if last is None:  # (never: a claim needs a completed result)
                for task in claimed:
                    self._worker.run_claimed(task)
            else:
                last["claimed"] = claimed
        super()._settle(batch, rows, resent)

    def _answer(self, row: dict[str, Any]) -> Recorded:
        return Recorded(row["handed"], row.get("decided"), row.get("claimed"))


class DecisionBatcher(_TaskGroupCommit):
    """Workflow task decisions (``harvest.complete_workflow_tasks``)."""

    what = "decisions"
    site = "workflow_task"

    def _take(self, take: int) -> int:
        # A flush carries decisions up to DECISION_COMMANDS commands (at least one decision):
        # the activities a burst of fan-outs schedules commit in slices the claims see one
        # after another, not all in one long transaction the worker's slots wait on.
        waiting, commands = self._waiting, 0
        for i in range(min(take, len(waiting))):
            commands += len(waiting[i][_COMMANDS])
            if commands >= DECISION_COMMANDS:
                return i + 1
        return take

    def complete(
        self,
        task_id: int,
        fencing_token: int,
        through: int,
        commands: list[dict[str, Any]],
        hand_off_slots: int,
        owner_epoch: int | None = None,
    ) -> asyncio.Future[dict[str, Any]]:
        """Commit one decision: the future of its row (last_event_id, execution_status,
        handed), queued at the call (await it).

        Raises StaleTask when the task is no longer ours (or, in owner mode, its
        partition is no longer held at ``owner_epoch``: outcome ``not_owner``),
        InvalidArgument (or the database's error) when the decision is refused.
        """
        return self._submit(task_id, fencing_token, through, commands, hand_off_slots, owner_epoch)

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
