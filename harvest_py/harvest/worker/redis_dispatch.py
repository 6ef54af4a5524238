"""The worker's side of the optional Redis dispatch (docs/redis-dispatch.md).

Two loops beside the claim loop, on the worker's one database (single shard only):

* the **publisher**: after a batch of decisions or activity results commits, it reads the
  claimable tasks of those runs (``harvest.list_claimable_tasks``: the activities a decision
  scheduled and did not hand off, the workflow task a result woke) and adds a reference
  (task id, queue, due time) for each to its queue's stream. The publish follows the
  commit: a crash between the two loses the references, never the rows, which the Postgres
  claim path finds as it always did (there is no outbox to replay).
* the **consumer**: while the worker has free slots it waits on the streams of its queues,
  claims the rows the references name with ``harvest.claim_named_tasks`` (the whole claim
  predicate: queue, pending, due, the queue's order, owner mode, concurrency caps and rate
  limits; a row another worker holds, a paused run's, one not admitted are skipped), runs
  what it claimed, and acks every reference it read, claimed or not. A reference read and
  never acked (the worker died between read and ack) is taken over after
  ``RECLAIM_IDLE_MS`` by another consumer, which finds the row claimed or claims it.

The Postgres claim (LISTEN/NOTIFY and the fallback poll) keeps running unchanged, so Redis
is never the only way to a row: a process that loses Redis logs it once, keeps working on
the Postgres path and reconnects in the background. Only the boot is strict: a configured
Redis that cannot be reached at start fails it (RedisUnavailable).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from harvest.core.errors import ConfigError, RedisUnavailable
from harvest.db.connection import failure_reason
from harvest.db.pools import may_pass
from harvest.db.redis_channel import MAX_ENTRY_BYTES, RedisChannel, TaskRef

if TYPE_CHECKING:
    from harvest.worker.lanes import ShardLane
    from harvest.worker.worker import Worker

log = logging.getLogger("harvest.redis")

# How long one read waits on the streams before it looks at its slots again.
BLOCK_MS = 1000
# A reference read by a consumer that has not acked it for this long: its reader died.
RECLAIM_IDLE_MS = 30_000
RECLAIM_EVERY_SECS = 10.0
# Reconnecting to a lost Redis: the first wait, doubling up to the last.
RECONNECT_SECS = (0.5, 5.0)
# The most ids one harvest.claim_named_tasks takes (it refuses more: HR001). A worker with more
# free slots read more references than that (claim_batch per stream, a take-over as many as its
# free slots), and the whole batch was refused, taken over and refused again, for good.
NAMED_CLAIM_MAX = 1000
# A reference due within this much is claimed now (the clocks of publisher and worker differ).
DUE_SLACK = timedelta(milliseconds=50)


def refuse_sharded(shard_count: int) -> None:
    """Redis dispatch v1 serves one Harvest database: a worker on several shards is refused."""
    if shard_count > 1:
        raise ConfigError(
            f"redis.url is set and this worker polls {shard_count} shards: Redis dispatch supports a "
            "single-shard deployment only; unset redis.url (every shard keeps the Postgres claim path) "
            "or run one shard"
        )


class RedisDispatch:
    """One worker's publisher and consumer (see the module docstring)."""

    def __init__(self, worker: Worker, url: str) -> None:
        self.worker = worker
        self.url = url
        self.channel: RedisChannel | None = None
        self._lost_at: float | None = None
        self._refused: str | None = None  # the last reconnect's refusal, logged once
        # Runs whose commit may have made claimable tasks, by the kind to publish (None: any;
        # "workflow": an activity result's commit, which makes only a workflow task).
        self._runs: dict[str | None, dict[str, None]] = {None: {}, "workflow": {}}
        self._to_publish = asyncio.Event()
        self._slot_freed = asyncio.Event()
        # Counters (tests, the bench, logs).
        self.published = 0
        self.read = 0
        self.claimed = 0
        self.skipped = 0  # references whose row was not claimable by us (taken, finished, gated)
        self.oversized = 0  # entries past MAX_ENTRY_BYTES (counted in skipped too)
        self.losses = 0

    @property
    def lane(self) -> ShardLane:
        return self.worker.lanes[0]

    @property
    def connected(self) -> bool:
        return self.channel is not None

    async def open(self) -> None:
        """Connect at boot: RedisUnavailable (naming the endpoint) when Redis cannot be reached."""
        self.channel = await RedisChannel.connect(self.url, self.worker.queues)
        log.info("redis dispatch on %s for queue(s) %s", self.channel.endpoint, ", ".join(self.worker.queues))

    async def close(self) -> None:
        channel, self.channel = self.channel, None
        if channel is not None:
            with contextlib.suppress(Exception):
                await channel.delete_consumer(self.worker.worker_id, self.worker.queues)
            with contextlib.suppress(Exception):
                await channel.close()

    # -- losing and finding Redis ---------------------------------------------------------
    async def _lost(self, exc: BaseException, what: str, channel: RedisChannel) -> None:
        """``channel`` failed at ``what``. Only the current channel is given up: a call still in
        flight on a channel already given up (the publisher's, while the consumer reconnected
        after a Redis restart) fails on its own, and dropping the channel that replaced it would
        make a second loss and a second reconnect."""
        if channel is not self.channel:
            return  # (closed when it was given up)
        if self._lost_at is None:
            self.losses += 1
            self._lost_at = asyncio.get_running_loop().time()
            log.warning(
                "redis dispatch lost (%s: %s); the Postgres claim path carries the work, reconnecting",
                what,
                type(exc).__name__,
            )
        self.channel = None
        with contextlib.suppress(Exception):
            await channel.close()

    async def _reconnect(self) -> bool:
        try:
            self.channel = await RedisChannel.connect(self.url, self.worker.queues)
        except (RedisUnavailable, OSError):
            return False
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A Redis that came back as one the boot refuses (a Redis Cluster node): said, and
            # tried again like one still down. Raised, it ended the consumer's task silently.
            if self._refused != str(exc):
                self._refused = str(exc)
                log.warning("redis dispatch: reconnecting refused (%s); trying again", failure_reason(exc))
            return False
        self._refused = None
        if self._lost_at is not None:
            down = asyncio.get_running_loop().time() - self._lost_at
            log.info("redis dispatch back on %s after %.1fs", self.channel.endpoint, down)
            self._lost_at = None
        return True

    # -- publishing -----------------------------------------------------------------------
    def committed(self, execution_ids: list[str], kind: str | None = None) -> None:
        """A batch of decisions (``kind`` None) or activity results (``kind`` "workflow") of these
        runs committed: publish the claimable tasks of that kind they made."""
        runs = self._runs[kind]
        for execution_id in execution_ids:
            runs[str(execution_id)] = None
        if execution_ids:
            self._to_publish.set()

    async def publish_loop(self) -> None:
        while True:
            await self._to_publish.wait()
            self._to_publish.clear()
            batches = [(kind, list(runs)) for kind, runs in self._runs.items() if runs]
            self._runs = {None: {}, "workflow": {}}
            for kind, runs in batches:
                if self.channel is None or not self.lane.usable:
                    break  # lost: these rows are the Postgres claim's
                await self._publish(runs, kind)

    async def _publish(self, runs: list[str], kind: str | None) -> None:
        try:
            rows = await self.lane.sql.list_claimable_tasks(runs, kind)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("redis dispatch: reading claimable tasks failed: %s", failure_reason(exc))
            return
        channel = self.channel
        if not rows or channel is None:
            return
        try:
            self.published += await channel.publish(rows)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._lost(exc, "publishing", channel)

    # -- consuming ------------------------------------------------------------------------
    def slot_freed(self) -> None:
        self._slot_freed.set()

    async def consume_loop(self) -> None:
        loop = asyncio.get_running_loop()
        worker = self.worker
        delay = RECONNECT_SECS[0]
        next_reclaim = loop.time() + RECLAIM_EVERY_SECS
        while not worker.stopping:
            if self.channel is None:
                if not await self._reconnect():
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RECONNECT_SECS[1])
                    continue
                delay = RECONNECT_SECS[0]
            free = worker.free_slots()
            if free <= 0 or not self.lane.usable:
                self._slot_freed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._slot_freed.wait(), BLOCK_MS / 1000)
                continue
            channel = self.channel
            if channel is None:  # lost while this loop waited for a slot: reconnect first
                continue
            try:
                refs = await channel.read(
                    worker.worker_id, worker.queues, min(free, worker.claim_batch), BLOCK_MS
                )
                if loop.time() >= next_reclaim:
                    next_reclaim = loop.time() + RECLAIM_EVERY_SECS
                    refs += await channel.reclaim(worker.worker_id, worker.queues, RECLAIM_IDLE_MS, free)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._lost(exc, "reading", channel)
                continue
            if not refs:
                continue
            try:
                await self._claim(channel, refs)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Nothing here may end the consumer: its task died silently, and the worker ran
                # on without Redis dispatch. The references stay pending and are taken over.
                log.warning(
                    "redis dispatch: %d reference(s) not handled (%s); taken over in %.0fs",
                    len(refs),
                    failure_reason(exc),
                    RECLAIM_IDLE_MS / 1000,
                )

    async def _claim(self, channel: RedisChannel, refs: list[TaskRef]) -> None:
        """Claim the rows the references name (as many as there are free slots), run them, ack all."""
        worker = self.worker
        if worker.stopping:
            return  # not acked: the rows are the Postgres claim's (close() drops our pending entries)
        self.read += len(refs)
        oversized = [r for r in refs if r.oversized]
        if oversized:
            self.oversized += len(oversized)
            largest = max(oversized, key=lambda r: r.oversized)
            # (its size and id, never its content: anyone who can write to the Redis wrote it)
            log.warning(
                "redis dispatch: %d stream entr%s past %d bytes acked and skipped (the largest, %s on %s, "
                "has %d): no Harvest wrote them; keep the Redis as private as the database",
                len(oversized),
                "y" if len(oversized) == 1 else "ies",
                MAX_ENTRY_BYTES,
                largest.message_id,
                largest.stream,
                largest.oversized,
            )
        soon = datetime.now(UTC) + DUE_SLACK
        ids = list(
            dict.fromkeys(r.task_id for r in refs if r.task_id and (r.due_at is None or r.due_at <= soon))
        )
        free = worker.free_slots()
        ids = ids[: max(0, min(free, NAMED_CLAIM_MAX))]  # (the rest acked unclaimed: the Postgres claim's)
        claimed: list[dict[str, Any]] = []
        if ids:
            lane = self.lane
            try:
                with worker.holding_slots(len(ids)):  # the claim loop must not fill them meanwhile
                    claimed = await lane.sql.claim_named_tasks(
                        worker.worker_id, worker.queues, ids, worker.workflow_lease
                    )
            except Exception as exc:
                # Not acked: the references stay pending and are taken over later; the rows
                # meanwhile are the Postgres claim's.
                if not may_pass(exc) and not lane.note_failure(exc, "claiming named tasks"):
                    log.warning("redis dispatch: claiming named tasks failed: %s", failure_reason(exc))
                return
            for task in claimed:
                task["_lane"] = lane
                worker.run_claimed(task)
        self.claimed += len(claimed)
        self.skipped += len(refs) - len(claimed)
        try:
            await channel.ack(refs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._lost(exc, "acking", channel)
