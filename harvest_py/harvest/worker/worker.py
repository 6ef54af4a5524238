"""The worker: claims tasks in batches, runs them, and keeps the engine's clocks turning.

It holds no state a crash could lose: every claim is a lease in Postgres, and a
killed worker's leases expire into another worker's hands. Three loops run:

* the claim loop wakes on LISTEN/NOTIFY (a slow fallback poll covers a lost
  notification, and it sleeps no longer than the next due timer or backoff),
  claims as many tasks as it has free slots and runs each in its own asyncio task;
* the scanner calls ``harvest.scan`` (crash recovery, timeouts, relays, mutex grants,
  deferred starts) in one round trip;
* the registry heartbeat keeps the worker row fresh and notices a remote drain.

SIGTERM or SIGINT (or :meth:`Worker.request_stop`) stops claiming, records the worker
``draining`` in the registry (the status a remote drain sets), lets in-flight work
finish within ``shutdown_grace`` seconds while the heartbeat keeps the row fresh,
releases what is left so another worker takes it at once instead of after a lease
expiry, and ends ``stopped``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import uuid
from datetime import UTC, datetime
from typing import Any, NamedTuple

from harvest.core.errors import DatabaseUnavailable, InvalidArgument, NotFound, PermissionDenied
from harvest.db import channels
from harvest.db.connection import connect_async, is_permanent, redact, resolve_dsn
from harvest.db.migrate import check_schema_async
from harvest.db.pools import TRANSIENT, AsyncConnectionPool, open_async_pool
from harvest.db.sqlapi import AsyncSqlApi
from harvest.declare.definitions import App
from harvest.shard.relay_pump import RelayPump
from harvest.worker.activities import run_activity_task
from harvest.worker.completions import CompletionBatcher, DecisionBatcher
from harvest.worker.options import WorkerOptions
from harvest.worker.queries import serve_queries
from harvest.worker.workflows import StickyCache, run_workflow_task

log = logging.getLogger("harvest.worker")


class SlotGrant(NamedTuple):
    """Slots promised to a commit's hand-offs (Worker.reserve_slots)."""

    slots: int  # how many
    from_free: int  # of them, taken from the free slots (the first is the caller's own)


# How long a slot may pass from task to task by hand-off before it goes back to the
# claim loop, which takes the oldest pending work (Worker.reserve_slots).
HAND_OFF_CHAIN_SECS = 0.5


# How long a starting worker waits for an unreachable database (an outage, not a refusal).
CONNECT_WAIT_SECS = 30.0


# How long a worker with tasks in flight waits for one of them to wake it before it
# asks producers for a notification (see Worker._idle).
BUSY_WAKE_SECS = 0.05


class Worker:
    def __init__(
        self,
        app: App,
        dsn: str | None = None,
        *,
        options: WorkerOptions | None = None,
        relay_pump: RelayPump | None = None,
        **overrides: Any,
    ):
        """``options`` holds every tunable (worker/options.py: names, defaults, bounds); keyword
        arguments of the same names (``Worker(app, dsn, concurrency=4)``) override it.
        ``relay_pump`` (sharded deployments only, harvest/shard/relay_pump.py) is ticked by the
        scanner and places cross-shard children; None on a single database."""
        options = (options or WorkerOptions()).replace(**overrides)
        self.options = options
        queues, concurrency, claim_batch = options.queues, options.concurrency, options.claim_batch
        history_event_hard_cap = options.history_event_hard_cap
        continue_as_new_threshold = options.continue_as_new_threshold
        # Results, failures and heartbeat details larger than this fail the activity here,
        # typed and final (PayloadTooLarge); None: the server's limit, read at start.
        self.max_payload_bytes = options.max_payload_bytes
        self.app = app
        self.dsn = resolve_dsn(dsn)
        self.queues = sorted(queues or app.queues or {"default"})
        self.concurrency = concurrency
        self.claim_batch = max(1, min(claim_batch, concurrency))
        self.poll_interval = options.poll_interval
        self.scan_interval = options.scan_interval
        self.heartbeat_interval = options.heartbeat_interval
        self.workflow_lease = options.workflow_lease
        self.shutdown_grace = options.shutdown_grace
        self.worker_id = options.worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.cache = StickyCache(options.cache_size)
        # History guardrails (docs/workflows.md): the soft threshold feeds
        # ctx.should_continue_as_new(); a run past a hard cap fails (None: unlimited).
        self.continue_as_new_threshold = continue_as_new_threshold
        self.history_event_hard_cap = history_event_hard_cap
        self.history_byte_hard_cap = options.history_byte_hard_cap
        self.history_bloat_warn_at = (
            None
            if history_event_hard_cap is None
            else int(history_event_hard_cap * options.history_bloat_warn_fraction)
        )
        if self.history_bloat_warn_at is not None and self.history_bloat_warn_at <= continue_as_new_threshold:
            log.warning(
                "the history-bloat warning (%d events) is at or below the continue-as-new "
                "threshold (%d): healthy runs will warn before they are advised to rotate",
                self.history_bloat_warn_at,
                continue_as_new_threshold,
            )
        self._bloat_warned: dict[str, None] = {}  # insertion-ordered set of warned runs
        self.sql: AsyncSqlApi | None = None
        self._pool: AsyncConnectionPool | None = None
        self._wake = asyncio.Event()
        self._sleeping = False  # our mark in harvest.workers.sleeping, as last written
        self._stopping = asyncio.Event()
        # Keyed by (task id, fencing token): a task row keeps its id across claims, and this
        # worker may hold a newer claim of a task whose older handler is still winding down.
        self._inflight: dict[tuple[int, int], asyncio.Task] = {}
        # Slots promised to hand-offs a commit in flight may return (see reserve_slots).
        self._reserved = 0
        # When the slot of each task in flight was last claimed: a hand-off passes the
        # slot on, and its chain of hand-offs is bounded (see reserve_slots).
        self._slot_claimed_at: dict[tuple[int, int], float] = {}
        self.hand_off = options.hand_off
        self.handed_tasks = 0  # tasks run by hand-off rather than claimed
        self.decided_ahead = 0  # decisions committed with the result they decided on
        self.completions = CompletionBatcher(self)
        self.decisions = DecisionBatcher(self)
        self.completed_tasks = 0
        # Process roles (harvest.config): which runtimes this process runs. run_worker is the
        # claim loop (with its registry row, notifications, queries); run_scanner the
        # scheduler-side loops (timeout scanner, relays, mutex grants); run_retention the janitor.
        self.run_worker = options.run_worker
        self.run_scanner = options.run_scanner
        self.run_retention = options.run_retention
        self.retention_interval = options.retention_interval
        self.relay_pump = relay_pump
        self._drain_deadline_at: float | None = None  # loop time at which a remote drain must end

    # -- lifecycle -----------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stop claiming; :meth:`run` then drains and returns."""
        self._stopping.set()
        self._wake.set()

    async def run(self, install_signal_handlers: bool = False) -> None:
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
        await self._first_connection()
        self._pool = await open_async_pool(
            self.dsn, min_size=2, max_size=self.concurrency + 4, timeout=CONNECT_WAIT_SECS
        )
        self.sql = AsyncSqlApi(self._pool)
        try:
            await self._check_schema()
            if self.max_payload_bytes is None:
                self.max_payload_bytes = await self.sql.payload_limit()
            if self.run_worker:
                await self._register()
            # Flow-control policies of this App (docs/flow-control.md), read by start_workflow.
            await self.sql.declare_flow_policies(self.app.flow_policies())
            background = []
            heartbeat = None
            if self.run_worker:
                log.info("worker %s polling %s", self.worker_id, ", ".join(self.queues))
                heartbeat = asyncio.create_task(self._heartbeat())
                background += [
                    asyncio.create_task(self._listen()),
                    asyncio.create_task(serve_queries(self)),
                ]  # queries and updates
            if self.run_scanner:
                background.append(asyncio.create_task(self._scan()))
            if self.run_retention:
                background.append(asyncio.create_task(self._retention()))
            try:
                if self.run_worker:
                    await self._claim_loop()
                else:
                    await self._stopping.wait()
            finally:
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
                try:
                    if self.run_worker:
                        await self._drain()
                finally:
                    # The heartbeat outlives the drain: a draining worker is not stale.
                    if heartbeat is not None:
                        heartbeat.cancel()
                        await asyncio.gather(heartbeat, return_exceptions=True)
        finally:
            await self._pool.close()

    async def _register(self) -> None:
        await self.sql.register_worker(
            self.worker_id,
            self.queues,
            socket.gethostname(),
            os.getpid(),
            self.heartbeat_interval,
            {"concurrency": self.concurrency},
        )
        # The names this worker can run on each queue it polls: a start of a name no
        # worker registered on its queue is refused up front (functions/start.sql).
        if self.app.workflows:
            await self.sql.register_workflows(self.queues, sorted(self.app.workflows))

    async def _first_connection(self) -> None:
        """Connect once before opening the pool, which would retry any error for
        CONNECT_WAIT_SECS: an answer (a wrong password, an unknown database, a bad DSN) ends
        the start at once; only an outage (the server not up yet) is waited for."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONNECT_WAIT_SECS
        delay = 0.25
        while True:
            try:
                conn = await connect_async(self.dsn, autocommit=True)
            except DatabaseUnavailable as exc:
                left = deadline - loop.time()
                if is_permanent(exc) or left <= delay or self._stopping.is_set():
                    raise
                log.warning("%s; retrying for up to %.0fs more", exc, left)
                await self._sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            await conn.close()
            return

    async def _check_schema(self) -> None:
        await check_schema_async(self.sql, "this worker")

    async def _drain(self) -> None:
        # First say so: the fleet (worker list, health, coverage) sees this worker take no
        # new work while it finishes what it holds (a remote drain has already said it).
        try:
            await self.sql.begin_worker_drain(self.worker_id)
        except Exception as exc:
            log.warning("worker %s could not record that it is draining: %s", self.worker_id, exc)
        if self._inflight:
            grace = self.shutdown_grace
            if self._drain_deadline_at is not None:  # a remote drain's deadline ends it sooner
                grace = max(0.0, min(grace, self._drain_deadline_at - asyncio.get_running_loop().time()))
            log.info(
                "worker %s finishing %d in-flight task(s) (up to %.0fs)",
                self.worker_id,
                len(self._inflight),
                grace,
            )
            deadline = asyncio.get_running_loop().time() + grace
            pending: set[asyncio.Task] = set()
            # Handed-off tasks may join while others finish: wait until none is left.
            while self._inflight:
                remaining = deadline - asyncio.get_running_loop().time()
                _, pending = await asyncio.wait(list(self._inflight.values()), timeout=max(0.0, remaining))
                if pending and asyncio.get_running_loop().time() >= deadline:
                    break
            if pending:
                log.info(
                    "worker %s stopping with %d task(s) still in flight: releasing them",
                    self.worker_id,
                    len(pending),
                )
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        try:
            released = await self.sql.stop_worker(self.worker_id)
        except NotFound:  # our row was pruned since the last heartbeat: register to stop it
            await self._register()
            released = await self.sql.stop_worker(self.worker_id)
        if released:
            log.info("worker %s released %d unfinished task(s)", self.worker_id, released)

    # -- claiming ------------------------------------------------------------------------
    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            _, full = await self._claim()
            if full:
                continue  # more may be waiting: claim again at once
            await self._idle()

    async def _claim(self) -> tuple[list[dict[str, Any]], bool]:
        """Claim up to the free slots; ``full`` when the batch came back full (or no slot is free)."""
        free = self.concurrency - len(self._inflight) - self._reserved
        if free <= 0:
            await self._set_sleeping(False)  # no room: wake-ups would be wasted
            return [], False
        want = min(free, self.claim_batch)
        try:
            claimed = await self.sql.claim_tasks(self.worker_id, self.queues, want, self.workflow_lease)
        except TRANSIENT as exc:
            log.warning("claim failed (%s); retrying", redact(str(exc), self.dsn))
            await self._sleep(self.poll_interval)
            return [], False
        for task in claimed:
            self._spawn(task)
        if len(claimed) == want:
            await self._set_sleeping(False)  # saturated with work: producers need not notify
        return claimed, len(claimed) == want

    async def _set_sleeping(self, sleeping: bool) -> None:
        """Tell producers whether to notify us (see _notify_queue); writes only on a change."""
        if self._sleeping is sleeping:
            return
        try:
            await self.sql.set_worker_sleeping(self.worker_id, sleeping)
            self._sleeping = sleeping
        except Exception as exc:
            log.warning("could not update the sleep mark: %s", exc)

    # -- hand-off (claim.sql): tasks leased to us by the commit that created them -----------
    def accepts_hand_off(self) -> bool:
        """Whether a commit may hand us new work (not while stopping, nor when turned off)."""
        return self.hand_off and not self._stopping.is_set()

    def reserve_slots(self, wanted: int, caller: dict[str, Any]) -> SlotGrant:
        """Promise up to ``wanted`` slots to a commit that may hand tasks back.

        Called from the handler of the running task ``caller``, whose own slot frees
        when it returns: the first slot is that one, and only the others come out of
        the free ones (so that many handlers finishing together can each hand on one
        task). A slot passed on by hand-off for HAND_OFF_CHAIN_SECS goes back to the
        claim loop instead: a worker kept full by long runs handing every step on
        would otherwise never claim a new run, a signalled run or a due timer. Give
        the grant back with :meth:`release_slots` once the commit has answered.
        """
        if wanted <= 0 or not self.accepts_hand_off():
            return SlotGrant(0, 0)
        claimed_at = self._slot_claimed_at.get((caller["task_id"], caller["fencing_token"]))
        if claimed_at is not None and self._now() - claimed_at > HAND_OFF_CHAIN_SECS:
            return SlotGrant(0, 0)
        free = max(0, self.concurrency - len(self._inflight) - self._reserved)
        granted = min(wanted, 1 + free)
        grant = SlotGrant(granted, granted - 1)
        self._reserved += grant.from_free
        return grant

    def release_slots(self, grant: SlotGrant) -> None:
        self._reserved -= grant.from_free

    def run_handed(self, task: dict[str, Any], caller: dict[str, Any]) -> None:
        """Run a task a commit handed to this worker, as if the claim loop had claimed it.

        ``caller`` is the task whose handler made the commit: the handed task takes
        over its slot, claimed when the caller's was.
        """
        self.handed_tasks += 1
        self._spawn(task, self._slot_claimed_at.get((caller["task_id"], caller["fencing_token"])))

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _spawn(self, task: dict[str, Any], slot_claimed_at: float | None = None) -> None:
        runner = run_workflow_task if task["kind"] == "workflow" else run_activity_task
        key = (task["task_id"], task["fencing_token"])
        self._slot_claimed_at[key] = self._now() if slot_claimed_at is None else slot_claimed_at
        handle = asyncio.create_task(self._guard(runner, task))
        self._inflight[key] = handle

    async def _guard(self, runner, task: dict[str, Any]) -> None:
        try:
            await runner(self, task)
        except asyncio.CancelledError:
            # Shutting down before it finished: hand the task back at once.
            with contextlib.suppress(Exception):
                await asyncio.shield(self.sql.release_task(task["task_id"], task["fencing_token"]))
            raise
        except Exception:
            log.exception(
                "task %s (%s) crashed the handler; its lease will expire", task["task_id"], task["kind"]
            )
        finally:
            self._inflight.pop((task["task_id"], task["fencing_token"]), None)
            self._slot_claimed_at.pop((task["task_id"], task["fencing_token"]), None)
            self.completed_tasks += 1
            self._wake.set()

    async def _idle(self) -> None:
        if len(self._inflight) < self.concurrency and not self._sleeping:
            # A busy worker's own finishing tasks wake this loop (and it claims again),
            # so it asks producers to notify only after BUSY_WAKE_SECS without one:
            # each NOTIFY serialises its producer's commit with every other notifier's.
            if self._inflight and await self._sleep(BUSY_WAKE_SECS):
                return
            # Mark ourselves asleep, then look once more: work committed before the
            # mark was visible to its producer came with no notification.
            await self._set_sleeping(True)
            claimed, _ = await self._claim()
            if claimed:
                return
        timeout = self.poll_interval
        if len(self._inflight) < self.concurrency:
            with contextlib.suppress(Exception):
                due = await self.sql.next_due_at(self.queues)
                if due is not None:
                    until = (due - datetime.now(UTC)).total_seconds()
                    timeout = max(0.0, min(timeout, until + 0.005))
        await self._sleep(timeout)

    async def _sleep(self, timeout: float) -> bool:
        """Wait for a wake-up or the timeout; True when woken."""
        if timeout <= 0:
            return False
        woken = False
        with contextlib.suppress(asyncio.TimeoutError):
            woken = await asyncio.wait_for(self._wake.wait(), timeout)
        self._wake.clear()
        return woken

    # -- background loops ----------------------------------------------------------------
    async def _listen(self) -> None:
        """Wake the claim loop when one of our queues gains work; reconnect on loss."""
        while True:
            try:
                conn = await connect_async(self.dsn, autocommit=True)
                async with conn:
                    await conn.execute(channels.listen(channels.TASKS))
                    self._wake.set()  # anything that arrived while we were not listening
                    async for note in conn.notifies():
                        if note.payload in self.queues:
                            self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("notification listener lost (%s); reconnecting", redact(str(exc), self.dsn))
                await asyncio.sleep(1.0)

    async def _scan(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval)
            try:
                # Timeouts, workflow deadlines, relays, mutex grants, deferred starts: one call.
                moved = await self.sql.scan(100)
                if moved["expired_tasks"]:
                    log.info(
                        "timeout scanner: %s",
                        ", ".join(
                            f"{r['kind']} {r['task_id']} {r['outcome']}" for r in moved["expired_tasks"]
                        ),
                    )
                if moved["timed_out_workflows"]:
                    log.info("timeout scanner: %d workflow run(s) timed out", moved["timed_out_workflows"])
                if (
                    moved["expired_tasks"]
                    or moved["relays_delivered"]
                    or moved["mutex_grants"]
                    or moved["starts_released"]
                ):
                    self._wake.set()
                # Shards only (relay_pump is None on a single database): the cross-shard pump.
                if self.relay_pump is not None and (await self.relay_pump.tick()).moved:
                    self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("timeout scan failed: %s", exc)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                status = await self.sql.heartbeat_worker(self.worker_id)
                if status != "active" and not self._stopping.is_set():
                    if status == "draining":
                        await self._note_drain_deadline()
                    log.info("worker %s is %s: stopping", self.worker_id, status)
                    self.request_stop()
            except asyncio.CancelledError:
                raise
            except NotFound:
                # Our row is gone: worker retention deleted it while we were silent past
                # worker_max_age (a partition, a frozen VM). Register again and carry on.
                log.warning(
                    "worker %s is no longer in the registry (deleted by worker retention "
                    "after a long silence?): registering it again",
                    self.worker_id,
                )
                try:
                    await self._register()
                    if self._stopping.is_set():  # still finishing in-flight work: say so again
                        await self.sql.begin_worker_drain(self.worker_id)
                except Exception as exc:
                    log.warning("worker %s could not register again: %s", self.worker_id, exc)
            except Exception as exc:
                log.warning("worker heartbeat failed: %s", exc)

    async def _note_drain_deadline(self) -> None:
        """Remember when a remote drain must be done; _drain releases what is left then."""
        row = await self.sql.get_worker_drain_deadline(self.worker_id)
        if row and row["remaining_secs"] is not None:
            self._drain_deadline_at = asyncio.get_running_loop().time() + max(0.0, row["remaining_secs"])
            log.info(
                "worker %s drains until %s (%.1fs)",
                self.worker_id,
                row["drain_deadline"],
                max(0.0, row["remaining_secs"]),
            )

    async def _retention(self) -> None:
        """The retention janitor: one bounded batch per call, batch after batch while rows remain;
        and the worker registry rule (stopped and long-stale worker rows), whether or not
        execution retention is configured."""
        while True:
            try:
                pruned = await self.sql.prune_workers()
                if pruned["deleted"]:
                    log.info(
                        "retention: deleted %d stopped or stale worker row(s) last seen before %s",
                        pruned["deleted"],
                        pruned["cutoff"],
                    )
                result = await self.sql.run_retention()
                if result["deleted"]:
                    log.info(
                        "retention: deleted %d execution(s), %d remaining",
                        result["deleted"],
                        result["remaining"],
                    )
                if result["deleted"] and result["remaining"]:
                    continue
            except asyncio.CancelledError:
                raise
            except InvalidArgument as exc:  # not configured (yet): nothing to do
                log.debug("retention: %s", exc)
            except PermissionDenied as exc:
                log.warning(
                    "retention janitor stopped: %s (connect this process as a login with "
                    "harvest_admin, or set HARVEST_RETENTION__ENABLED=false)",
                    exc,
                )
                return
            except Exception as exc:
                log.warning("retention run failed: %s", exc)
            await asyncio.sleep(self.retention_interval)
