"""One assigned shard of a worker: its SQL API, its batchers, its sleep mark and its outages.

A worker polls every shard in ``WorkerOptions.shard_assignments`` (docs/sharding.md, "Workers
and shard assignments"); each is a :class:`ShardLane`. Everything a task does after its claim
goes to the lane it was claimed from (its completion, heartbeats, failure, release), since a
task row lives on one shard only. The worker's registry row, heartbeat, scanners, query
responder and notification listener run once per lane, on that lane's database.

A lane whose database stops answering is *down*: the claim loop skips it, the failure is
logged once (not once per call), and a probe retries it with a growing backoff; when it
answers again the lane is set up if it never was (schema check, registration), logged once
more, and claimed from again. The other lanes never wait for it. With one database (no
``[shards]`` configuration) there is one lane and no outage handling: a failure is logged
and retried as it always was.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harvest.db import channels
from harvest.db.connection import connect_async, failure_reason
from harvest.db.notify import RECONNECT_SECS, Reconnects
from harvest.db.pools import outage
from harvest.worker.completions import CompletionBatcher, DecisionBatcher, result_batch_size
from harvest.worker.owners import Owners

if TYPE_CHECKING:
    from harvest.db.sqlapi import AsyncSqlApi
    from harvest.worker.worker import Worker

log = logging.getLogger("harvest.worker")


# A down lane's probe: the first retry after this many seconds, doubling up to the cap.
PROBE_FIRST_SECS = 0.25
PROBE_MAX_SECS = 5.0


class ShardLane:
    """One shard a worker polls (see the module docstring)."""

    def __init__(self, worker: Worker, shard: int, dsn: str, *, handles_outages: bool):
        self.worker = worker
        self.shard = shard
        self.dsn = dsn
        # None until the lane connects (typed as set: every use is after it, serving checks it)
        self.sql: AsyncSqlApi = None  # type: ignore[assignment]
        self.completions = CompletionBatcher(worker, result_batch_size(worker.concurrency), lane=self)
        self.decisions = DecisionBatcher(worker, lane=self)
        # Owner mode (worker/owners.py): the decision partitions this worker holds on this shard.
        self.owners = Owners()
        # Our mark in harvest.workers.sleeping on this shard, as last written (None: unknown).
        self.sleeping: bool | None = False
        self.ready = False  # schema checked, registered (if the worker claims), policies declared
        self.down = False
        self.outages = 0  # times this lane went down (for tests and logs)
        # The scanner's last tick met an outage (logged once; one database: the lane is not down).
        self.scan_failing = False
        # Since when (monotonic()) this shard's scans have answered without a break (None: the
        # last one failed, or none ran yet). The scanner sweeps lost workers only once that is
        # the worker's lost_after: after an outage every worker's heartbeats stopped with its
        # own, and the first pass back would take the work of a fleet still reconnecting.
        self.scans_since: float | None = None
        # When (monotonic()) this worker's row here was last written alive (registered or
        # heartbeated; None: not yet): a claim after a longer silence heartbeats first
        # (Worker._beat_if_silent).
        self.beat_at: float | None = None
        # Tasks run from this shard, claimed or handed (the guide's harvest.shard.dispatched{shard}).
        self.dispatched = 0
        # Whether this shard's last claim came back full (work was waiting): only then does a
        # batch of activity results claim for the slots it frees (worker/completions.py).
        self.backlog = False
        self.handles_outages = handles_outages
        self._probe: asyncio.Task[Any] | None = None

    @property
    def usable(self) -> bool:
        """Set up, and not known to be down: the claim loop and the scanners may call it."""
        return self.ready and not self.down and self.sql is not None

    def note_failure(self, exc: BaseException, what: str) -> bool:
        """Whether ``exc`` is an outage of this shard that the lane now handles (it marks itself
        down, logs once, and probes until it is back). False with one database (the caller logs
        and retries as before) and for any error that is not an outage."""
        if not self.handles_outages or not outage(exc):
            return False
        if not self.down:
            self.down = True
            self.outages += 1
            log.warning(
                "shard %d is unavailable (%s: %s): worker %s skips it and retries with backoff; "
                "the other shards are served meanwhile",
                self.shard,
                what,
                failure_reason(exc, self.dsn),
                self.worker.worker_id,
            )
            self._start_probe()
        return True

    async def listen(self, channel: str, wake: Callable[[], object], what: str) -> None:
        """Call ``wake`` when one of the worker's queues is notified on ``channel`` (and once on
        each connect: what came while it was not listening); reconnect on loss, warned of as
        ``what`` (``Reconnects``), and an outage of the shard marks the lane down.

        One loop for the claim loop's listener and the query responder's: their reconnects,
        warnings and stop handling are one thing, fixed once."""
        reconnects = Reconnects(log, what)
        while True:
            listening = False
            try:
                conn = await connect_async(self.dsn, autocommit=True)
                async with conn:
                    await conn.execute(channels.listen(channel))
                    listening = True
                    reconnects.up()
                    wake()
                    async for note in conn.notifies():
                        if note.payload in self.worker.queues:
                            wake()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.worker.stopping:
                    return  # a cancellation a driver turned into an error (see worker/stopping.py)
                if not self.note_failure(exc, what):
                    reconnects.failed(failure_reason(exc, self.dsn), listening, RECONNECT_SECS)
                await asyncio.sleep(RECONNECT_SECS)

    def _start_probe(self) -> None:
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._probe_until_up())

    async def _probe_until_up(self) -> None:
        delay = PROBE_FIRST_SECS
        refused = None
        while not self.worker.stopping:
            await asyncio.sleep(delay)
            try:
                await self.worker.bring_up(self)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                message = failure_reason(exc, self.dsn)
                if outage(exc) or message == refused:
                    log.debug("shard %d still unavailable: %s", self.shard, message)
                else:  # it answers, and refuses (another shard's database, an old schema): say so once
                    refused = message
                    log.error("shard %d answers but cannot be served: %s", self.shard, message)
                delay = min(delay * 2, PROBE_MAX_SECS)
                continue
            self.down = False
            self.sleeping = None  # rewrite the mark: the row may say anything now
            log.info("shard %d is back: worker %s claims from it again", self.shard, self.worker.worker_id)
            self.worker.wake()
            return

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(BaseException):
                await self._probe

    def __repr__(self) -> str:
        state = "down" if self.down else "ready" if self.ready else "new"
        return f"ShardLane(shard={self.shard}, {state})"


def lane_of(task: dict[str, Any]) -> ShardLane:
    """The lane a task was claimed from (or handed by): where everything about it is written."""
    lane: ShardLane = task["_lane"]  # (not typing.cast: a call per look-up, 16 a canonical workflow)
    return lane
