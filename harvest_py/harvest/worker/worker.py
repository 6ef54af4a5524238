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
finish within ``shutdown_grace`` seconds while the heartbeat keeps the row fresh and the
query responder answers, only then stops the background loops, releases what is left so
another worker takes it at once instead of after a lease expiry, and ends ``stopped``
(Worker._stop).

With several shards (``shards=``, ``WorkerOptions.shard_assignments``) the worker polls each
assigned shard through its own lane (worker/lanes.py): one pool, registry row, heartbeat,
listener, query responder and scanner per shard; claims go round the shards in turn, every
task is finished on the shard it came from, and a shard that stops answering is skipped
until it is back. One database is one lane, as it always was.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from time import monotonic, perf_counter
from typing import Any, NamedTuple

from harvest.core.codecs import Payloads
from harvest.core.errors import (
    ConfigError,
    DatabaseUnavailable,
    HarvestError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from harvest.db import channels, pooler
from harvest.db.connection import (
    QUERY_CANCELED,
    connect_async,
    error_line,
    failure_reason,
    invalid_input,
    is_permanent,
    redact,
    resolve_dsn,
)
from harvest.db.migrate import check_schema_async, warn_function_drift_async
from harvest.db.pools import (
    OUTAGE_LINES,
    may_pass,
    met_full_server,
    open_async_pool,
    outage,
    unless_unreachable,
)
from harvest.db.redis_channel import check_url
from harvest.db.sqlapi import AsyncSqlApi, OpenClaim, claim_tasks_open
from harvest.declare.definitions import App, require_app
from harvest.declare.flow_control import refuse_keys_under_codecs
from harvest.declare.schedules import describe_row, schedule_specs
from harvest.shard.rebalance import ResumeScanner
from harvest.shard.relay_pump import RelayPump
from harvest.shard.router import ShardRouter, rendezvous
from harvest.telemetry.metrics import NULL_METRICS, process_metrics, retry_reason
from harvest.telemetry.metrics import available as metrics_available
from harvest.worker import scheduler, stopping
from harvest.worker.activities import run_activity_task
from harvest.worker.completions import CompletionBatcher, DecisionBatcher
from harvest.worker.executors import ActivityExecutors, check_process_activities
from harvest.worker.janitor_batch import JanitorBatch
from harvest.worker.lanes import ShardLane, lane_of
from harvest.worker.options import (
    WorkerOptions,
    refuse_auto_with_cells,
    resolve_shard_assignments,
    retention_placed,
)
from harvest.worker.owners import RECENT_HEARTBEATS
from harvest.worker.plain_runs import PlainRuns
from harvest.worker.queries import serve_queries
from harvest.worker.redis_dispatch import RedisDispatch, refuse_sharded
from harvest.worker.seals import collect_seals
from harvest.worker.stopping import STOP_CALL_SECS, cancel_and_wait
from harvest.worker.workflows import StickyCache, run_workflow_task

log = logging.getLogger("harvest.worker")


class SlotGrant(NamedTuple):
    """Slots promised to a commit's hand-offs (Worker.reserve_slots)."""

    slots: int  # how many
    from_free: int  # of them, taken from the free slots (the first is the caller's own)


_NO_GRANT = SlotGrant(0, 0)
_GRANTS: dict[int, SlotGrant] = {}  # the grants of n slots given so far, by n (reserve_slots)


# How long a slot may pass from task to task by hand-off before it goes back to the
# claim loop, which takes the oldest pending work (Worker.reserve_slots).
HAND_OFF_CHAIN_SECS = 0.5


# The largest batch of activity results that also claims for the slots it frees
# (Worker.result_claim_limit; docs/performance.md, "Fan-out row, fourth cut").
RESULT_CLAIM_MAX_BATCH = 64


# How long a starting worker waits for an unreachable database (an outage, not a refusal).
CONNECT_WAIT_SECS = 30.0


# How long a worker with tasks in flight waits for one of them to wake it before it
# asks producers for a notification (see Worker._idle).
BUSY_WAKE_SECS = 0.05
# A worker that has just marked itself asleep while a producer that could not see the mark
# was still committing (harvest.set_worker_sleeping's answer) asks again after these waits,
# doubling, and looks for work once it has committed (Worker._idle).
SETTLE_FIRST_SECS = 0.001
SETTLE_MAX_SECS = 0.05
# A claim that decides (Worker._claim_deciding): the longest its transaction stays open for the
# decision of the workflow task it claimed; past it the claim commits alone and the decision
# goes the ordinary way (a local activity, a long replay, a busy core).
CLAIM_DECIDES_WINDOW_SECS = 0.02
# After a claim that decided was rolled back (its decision refused, or its commit failed),
# claims commit alone for this long: the task goes again the ordinary way, with its retries.
CLAIM_DECIDES_PAUSE_SECS = 5.0


class _StoppedAtBoot(Exception):
    """A stop (SIGTERM, request_stop) heard while the boot waited for an unreachable database."""


def _retrieved(call: asyncio.Future[Any]) -> None:
    """A background call's outcome, read (its failure is not asyncio's to report at exit)."""
    if not call.cancelled():
        call.exception()


def _cut_off(task: dict[str, Any], exc: BaseException) -> None:
    """A task's handler ended by an outage of its shard (a server shutdown ends every session with
    AdminShutdown: each task in flight). Not Harvest's bug, so no traceback, and one WARNING an
    outage with the count, not an ERROR a task (OUTAGE_LINES: as the pools' connect failures)."""
    shard = lane_of(task).shard
    unlogged = OUTAGE_LINES.task_cut_off(shard)
    if unlogged is None:
        return
    log.warning(
        "task %s (%s) was cut off by an outage of shard %d; its lease will expire: %s (%s)",
        task["task_id"],
        task["kind"],
        shard,
        failure_reason(exc),
        "the tasks it cuts off are counted: logged again once a minute while more are"
        if unlogged < 0
        else f"{unlogged} more tasks cut off since the last line",
    )


def _key(task: dict[str, Any]) -> tuple[int, int, int]:
    """A task in flight: its shard, id and fencing token (ids are per shard; a task row keeps
    its id across claims, and this worker may hold a newer claim of a task whose older
    handler is still winding down)."""
    return (task["_lane"].shard, task["task_id"], task["fencing_token"])


def scanned_secs(scans_since: float | None, now: float) -> float:
    """How long (seconds) this worker's scans of a shard have answered without a break at
    ``now`` (monotonic()): harvest.scan takes back the tasks only of lost workers whose
    lost_after is no longer (harvest.expire_lost_workers). A database outage stops every
    worker's heartbeats with this one's scans; the first passes after it would otherwise find
    the whole fleet lost and fail every attempt in flight, while each worker heartbeats again
    within its interval, a third of its lost_after at most. A worker cut off alone is still
    lost to the others, whose scans never broke."""
    return 0.0 if scans_since is None else max(0.0, now - scans_since)


def log_expired(expired: list[dict[str, Any]]) -> None:
    """One line per task the scanner expired (harvest.expire_tasks), with its run's fields (a
    JSON line's execution_id, workflow, activity, attempt): an attempt whose worker died or went
    silent is found by its run, as the line of an attempt its handler failed is."""
    for row in expired:
        fields = {"execution_id": row.get("execution_id"), "workflow": row.get("workflow_type")}
        if row["kind"] == "activity":
            fields |= {"activity": row.get("activity"), "attempt": row.get("attempt")}
            log.log(
                logging.WARNING if row["outcome"] == "dead_lettered" else logging.INFO,
                "timeout scanner: activity %s attempt %s of %s (%s) failed (%s): %s (task %s)",
                row.get("activity"),
                row.get("attempt"),
                row.get("execution_id"),
                row.get("workflow_type"),
                row["outcome"],
                row.get("error_type"),
                row["task_id"],
                extra=fields,
            )
        else:
            log.info(
                "timeout scanner: %s task of %s (%s) %s: %s (task %s)",
                row["kind"],
                row.get("execution_id"),
                row.get("workflow_type"),
                row["outcome"],
                "its worker was lost (WorkerLost)"
                if row.get("error_type") == "WorkerLost"
                else "its lease ran out",
                row["task_id"],
                extra=fields,
            )


class Worker:
    """Runs an App's workflows and activities: polls every queue the App uses (or ``queues=``)
    of the database ``dsn`` names (default ``HARVEST_DATABASE_URL``) and runs up to
    ``concurrency`` tasks at once (20). ``await worker.run()`` runs until
    :meth:`request_stop`; ``harvest worker module:app`` is the same from the command line.
    The options: :class:`harvest.worker.options.WorkerOptions`, docs/operations.md."""

    def __init__(
        self,
        app: App,
        dsn: str | None = None,
        *,
        options: WorkerOptions | None = None,
        shards: Mapping[int, str] | None = None,
        router: ShardRouter | None = None,
        relay_pump: RelayPump | None = None,
        codecs: Any = None,
        redis_url: str | None = None,
        session_urls: Mapping[int, str] | None = None,
        **overrides: Any,
    ):
        """``options`` holds every tunable (worker/options.py: names, defaults, bounds); keyword
        arguments of the same names (``Worker(app, dsn, concurrency=4)``) override it.

        ``shards`` maps each shard with a pool in this process to its database URL
        (``harvest.config.shard_urls``); the worker polls ``options.shard_assignments`` of them
        (``"auto"``: all). Without it the worker polls the one database ``dsn`` names. An
        assigned shard with no URL is a ConfigError naming the key. ``router``, when given,
        names the writable shards this worker is warned it does not cover, and a router that
        reserves shards (tenant cells) refuses ``"auto"``: a ConfigError naming
        worker.shard_assignments (the guide's rule; a process with ``run_worker`` off passes).

        ``relay_pump`` (sharded deployments only, harvest/shard/relay_pump.py) is ticked by the
        scanner and places cross-shard children; None on a single database.

        ``codecs`` (a list of codecs or a ``harvest.core.codecs.Payloads``) overrides the App's
        payload policy for this worker (docs/payloads.md).

        ``redis_url`` (``[redis] url``) turns on the optional Redis dispatch beside the Postgres
        claim (worker/redis_dispatch.py, docs/redis-dispatch.md): single shard only (a
        ConfigError otherwise), and :meth:`run` fails with RedisUnavailable when it cannot
        reach that Redis at start.

        ``session_urls`` maps a shard to its *session URL* when its URL (in ``shards``, or ``dsn``
        for shard 0 of one database) goes through a connection pooler in transaction mode: the
        database's direct or session-mode URL, where the worker's LISTEN and the metrics
        sampler's lock go (``[shards.session_urls]``, ``HARVEST_SESSION_URL`` for one database;
        docs/operations.md, "Behind a connection pooler"). A shard with no URL here is a
        ConfigError."""
        require_app(app, "Worker")
        if options is not None and not isinstance(options, WorkerOptions):
            raise TypeError(
                f"Worker(options=...) takes a WorkerOptions, got {type(options).__name__}: "
                "WorkerOptions(concurrency=4), or the options as keywords, Worker(app, dsn, concurrency=4)"
            )
        options = (options or WorkerOptions()).replace(**overrides)
        self.options = options
        queues, concurrency, claim_batch = options.queues, options.concurrency, options.claim_batch
        history_event_hard_cap = options.history_event_hard_cap
        continue_as_new_threshold = options.continue_as_new_threshold
        # Results, failures and heartbeat details larger than this fail the activity here,
        # typed and final (PayloadTooLarge); None: the server's limit, read at start.
        self.max_payload_bytes = options.max_payload_bytes
        self.app = app
        # Where plain `def` activities run (worker/executors.py): a thread per slot by default.
        check_process_activities(app)
        self.executors = ActivityExecutors(
            options.activity_threads or concurrency, options.activity_processes
        )
        # The one payload policy of this worker: codecs and offload (docs/payloads.md).
        self.payloads = Payloads.of(codecs) if codecs is not None else app.payloads
        if codecs is not None:
            refuse_keys_under_codecs(app, self.payloads, "Worker(codecs=...)")
        # One database (today's deployment) or a pool per shard (docs/sharding.md).
        self._sharded = shards is not None
        dsns = dict(shards) if shards is not None else {0: resolve_dsn(dsn)}
        if session_urls is not None:
            pooler.declare_shards(dsns, session_urls, "Worker(session_urls=...)")
        if router is not None and options.run_worker:  # a process that runs no worker passes
            refuse_auto_with_cells(options.shard_assignments, router.reserved)
        self.shard_assignments = resolve_shard_assignments(options.shard_assignments, dsns)
        self.router = router
        # Declared schedules this worker upserted on their router home, by name: only those may
        # have their copies on its other shards deleted (_delete_moved_schedules).
        self._declared_homes: dict[str, int] = {}
        self.queues = sorted(queues or app.queues or {"default"})
        self.concurrency = concurrency
        self.claim_batch = max(1, min(claim_batch, concurrency))
        self.poll_interval = options.poll_interval
        self.scan_interval = options.scan_interval
        self.heartbeat_interval = options.heartbeat_interval
        self.lost_after = options.lost_after
        self.workflow_lease = options.workflow_lease
        self.shutdown_grace = options.shutdown_grace
        self.worker_id = options.worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        # This process's own id under worker_id (a pod restarted under its StatefulSet name
        # reuses the name, the hostname and often the pid): its register takes back what a
        # previous process of the id held, and that one's heartbeat learns it was superseded
        # (functions/workers.sql register_worker).
        self.incarnation = uuid.uuid4().hex
        self.cache = StickyCache(options.cache_size, options.cache_max_bytes)
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
        self.lanes = [
            ShardLane(self, shard, dsns[shard], handles_outages=self._sharded)
            for shard in self.shard_assignments
        ]
        # The optional Redis dispatch (worker/redis_dispatch.py): None unless redis_url is set.
        self.redis: RedisDispatch | None = None
        if redis_url:
            check_url(redis_url)
            refuse_sharded(len(dsns) if router is None else len(set(dsns) | set(router.writable)))
            self.redis = RedisDispatch(self, redis_url)
        # The run of each task in flight, by (shard, task id): what a commit's publish reads.
        self._run_of: dict[tuple[int, int], str] = {}
        self.dsn = self.lanes[0].dsn
        self._next_lane = 0  # where the next claim round starts (round-robin)
        self._close_pools: Any = None
        self._pools: Any = None  # AsyncShardPools, with shards=
        # The retention janitor's place in each shard's seals (harvest/worker/seals.py).
        self._seal_cursors: dict[int, Any] = {}
        self._wake = asyncio.Event()
        # Set when the only wake-ups since the loop last slept are finished tasks that need no
        # claim (see _finished): the loop then reads the next due time again and sleeps on.
        self._due_only = False
        # The next due time each shard last answered (next_due_at), and the shards whose answer
        # still stands: no task of ours has ended since it was read and no claim there came back
        # empty. Only claims that found work followed it, and their tasks' ends read it again
        # (see _idle), so the loop sleeps on it instead of reading it after every claim.
        self._due_at: dict[int, datetime | None] = {}
        self._due_current: set[int] = set()
        self._ends = 0  # tasks ended so far: a read that an end overtook does not stand
        # An App with flow-control policies (a workflow's concurrency, an activity's cap or
        # rate) claims after every finished task, as it always did: a run's close or a task's
        # end frees room for gated work that no notification announces.
        policies = app.flow_policies()
        self._claims_on_every_finish = any(policies.get("workflows", {}).values()) or bool(
            policies.get("activities")
        )
        self._stopping = asyncio.Event()
        self.claim_loop: asyncio.Task[None] | None = None  # (set by the run: _claims)
        # Set once run() has booted (Redis, the databases, their schema, the registration) and
        # started its loops: what a server running the worker beside it waits for before it
        # serves (config.process.WorkerBeside.started).
        self.booted = asyncio.Event()
        # When (monotonic()) a heartbeat last reached a database, or the boot registered:
        # the readiness probe's "database unreachable" (harvest/worker/probes.py).
        self.heartbeat_ok_at = monotonic()
        # Set once the drain is over: the scanner and the janitor end after the pass they are
        # in (_passes_end), rather than being cancelled mid-call (see _stop).
        self._passes_ending = asyncio.Event()
        # Keyed by _key: (shard, task id, fencing token).
        self._inflight: dict[tuple[int, int, int], asyncio.Task[Any]] = {}
        # The task each of those runs (what a stop that leaves one behind names).
        self._held: dict[tuple[int, int, int], dict[str, Any]] = {}
        # Slots promised to hand-offs a commit in flight may return (see reserve_slots).
        self._reserved = 0
        # When the slot of each task in flight was last claimed: a hand-off passes the
        # slot on, and its chain of hand-offs is bounded (see reserve_slots).
        self._slot_claimed_at: dict[tuple[int, int, int], float] = {}
        self.hand_off = options.hand_off
        # A claim woken on an idle worker keeps its transaction open for the decision of the one
        # workflow task it claimed (_claim_deciding): one commit for both.
        self.claim_decides = True
        self.claims_decided = 0  # workflow tasks whose decision committed with their claim
        self.claims_rolled_back = 0  # claims rolled back with their decision (a refusal, a lock wait)
        self._woken_claim = False  # the next claim follows a wake-up on an idle worker
        # Shards where a producer that checked for sleeping workers before our mark was visible
        # may still be committing: its task came with no notification (Worker._idle).
        self._unsettled: set[int] = set()
        self._claim_decides_after = 0.0  # (loop time) see CLAIM_DECIDES_PAUSE_SECS
        self._claim_window_ends: set[asyncio.Future[Any]] = set()
        self.handed_tasks = 0  # tasks run by hand-off rather than claimed
        self.eager_tasks = 0  # workflow tasks an eager signal's transaction leased to us
        self._loop: asyncio.AbstractEventLoop | None = None  # the event loop run() runs on
        self.decided_ahead = 0  # decisions committed with the result they decided on
        self.refused_ahead = 0  # decisions ahead the database refused (the result recorded alone)
        # Runs whose results go the plain way for now, after a refused decision ahead
        # (worker/plain_runs.py), and the results that went so instead of deciding ahead.
        self.plain_runs = PlainRuns()
        self.plain_by_rule = 0
        self.completed_tasks = 0
        # Process roles (harvest.config): which runtimes this process runs. run_worker is the
        # claim loop (with its registry row, notifications, queries); run_scanner the
        # scheduler-side loops (timeout scanner, relays, mutex grants); run_retention the janitor.
        self.run_worker = options.run_worker
        self.run_scanner = options.run_scanner
        self.run_retention = retention_placed(options)
        if options.run_retention is None and not options.run_scanner:
            log.warning(
                "this worker runs no scheduler (run_scanner=False), so it runs no retention janitor "
                "either (it follows the scheduler): retention runs only where another process runs "
                "the scheduler; pass run_retention=True to run it here, or run_retention=False to "
                "silence this warning"
            )
        self.retention_interval = options.retention_interval
        self.audit_max_age = options.audit_max_age
        self._audit_age_refused = False  # (a refused age is warned about once)
        self._janitor_batches: dict[int, JanitorBatch] = {}  # each shard's (janitor_batch.py)
        self.relay_pump = relay_pump
        # Settles the moves a killed rebalancer left past their cutover (shards only).
        self.rebalance_resume = ResumeScanner(
            enabled=options.rebalance_resume_enabled,
            interval=options.rebalance_resume_interval,
            stall_after=options.rebalance_stall_after,
        )
        # Prometheus counters of this process (harvest/telemetry/metrics.py); NullMetrics when off.
        self.metrics = process_metrics() if options.metrics else NULL_METRICS
        # The placed sampler of the database gauges (harvest/worker/sampler.py): with the scanner.
        self.sampler = None
        if self.run_scanner and options.metrics and options.metrics_interval and metrics_available():
            from harvest.worker.sampler import MetricsSampler

            self.sampler = MetricsSampler(self.metrics, interval=options.metrics_interval)
        self._drain_deadline_at: float | None = None  # loop time at which a remote drain must end
        self._giving_back: set[asyncio.Task[Any]] = set()  # releases of tasks claimed too late
        # What ctx.now() reads in workflows (None: the wall clock; the test kit's time
        # skipping sets its shared test clock here, harvest.testing.WorkflowEnvironment).
        self.clock: Any = None

    # -- the first shard's lane (the only one with one database) ---------------------------
    @property
    def sql(self) -> AsyncSqlApi:
        """The SQL API of the first assigned shard (None until :meth:`run` has connected)."""
        return self.lanes[0].sql

    @property
    def completions(self) -> CompletionBatcher:
        """The first assigned shard's batch of activity results."""
        return self.lanes[0].completions

    @property
    def decisions(self) -> DecisionBatcher:
        """The first assigned shard's batch of decisions."""
        return self.lanes[0].decisions

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def in_flight(self) -> int:
        """The tasks this worker runs now (what a stop waits for, within ``shutdown_grace``)."""
        return len(self._inflight)

    def wake(self) -> None:
        """Wake the claim loop (work may be waiting)."""
        self._due_only = False
        self._wake.set()

    # -- lifecycle -----------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stop claiming; :meth:`run` then drains and returns."""
        self._stopping.set()
        self.wake()

    async def run(self, install_signal_handlers: bool = False) -> None:
        """Claim and run tasks (and, unless ``run_scanner=False``, the scanner and the schedules)
        until :meth:`request_stop`, or SIGTERM/SIGINT with ``install_signal_handlers``; then
        drain: stop claiming, let the tasks in flight finish within ``shutdown_grace`` seconds,
        hand back the rest, and return."""
        loop = asyncio.get_running_loop()
        self._loop = loop  # eager signals run their handed task here only (see eager_slot)
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
        try:
            if self.redis is not None:
                await self.redis.open()  # a configured Redis that cannot be reached fails the boot
            try:
                await self._open_lanes()
            except _StoppedAtBoot:
                log.info("worker %s: stopped while it waited for its database", self.worker_id)
                return  # (a stop asked for is no failure: `harvest worker` exits 0)
            if self.max_payload_bytes is None:
                self.max_payload_bytes = await self._first_usable().sql.payload_limit()
            background = []
            passes = []  # the scanner and the janitor: they end between passes (see _stop)
            heartbeats = []
            if self.run_worker:
                shards = (
                    "" if not self._sharded else f" on shard(s) {', '.join(map(str, self.shard_assignments))}"
                )
                log.info("worker %s polling %s%s", self.worker_id, ", ".join(self.queues), shards)
                self._warn_uncovered()
            for lane in self.lanes:
                shard = lane.shard  # each task is named, so a stop that hangs names it (worker/stopping.py)
                if self.run_worker:
                    heartbeats.append(asyncio.create_task(self._heartbeat(lane), name=f"heartbeat-{shard}"))
                    background += [
                        asyncio.create_task(
                            lane.listen(channels.TASKS, self.wake, "notification listener"),
                            name=f"task-listener-{shard}",
                        ),
                        asyncio.create_task(serve_queries(self, lane), name=f"queries-{shard}"),
                    ]  # queries and updates
                if self.run_scanner:
                    passes.append(asyncio.create_task(self._scan(lane), name=f"scanner-{shard}"))
                if self.run_retention:
                    passes.append(asyncio.create_task(self._retention(lane), name=f"retention-{shard}"))
                if self.sampler is not None:
                    sampler = self.sampler.run(lane.dsn, shard)
                    background.append(asyncio.create_task(sampler, name=f"sampler-{shard}"))
            intake = []  # what claims work besides the claim loop: stopped before the drain begins
            if self.redis is not None and self.run_worker:
                intake.append(asyncio.create_task(self.redis.consume_loop(), name="redis-consumer"))
                # (the publisher runs through the drain: what in-flight work commits is published)
                background.append(asyncio.create_task(self.redis.publish_loop(), name="redis-publisher"))
            self.heartbeat_ok_at = monotonic()
            self.booted.set()
            try:
                if self.run_worker:
                    await self._claims()
                else:
                    await self._stopping.wait()
            finally:
                await self._stop(intake, passes, background, heartbeats)
        finally:
            self.executors.shutdown()
            if self.redis is not None:
                await self.redis.close()
            for lane in self.lanes:
                await lane.close()
            if self._close_pools is not None:
                await self._close_pools()

    async def _claims(self) -> None:
        """The claim loop, until it ends or the stop begins. A claim still in flight then (one
        waiting for a connection to a database that went down) has STOP_CALL_SECS to return,
        and is then cancelled: a claim the database had committed left its tasks leased to this
        worker, which the stop's release gives back (or, the database down, their leases
        expire), as it does a killed worker's."""
        claims = asyncio.create_task(self._claim_loop(), name="claim-loop")
        self.claim_loop = claims  # (done: no claim of this worker is in flight any more)
        stop = asyncio.create_task(self._stopping.wait(), name="stop-requested")
        try:
            await asyncio.wait({claims, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not claims.done():
                await asyncio.wait({claims}, timeout=STOP_CALL_SECS)
            if not claims.done():
                log.warning(
                    "worker %s: the claim in flight at the stop got no answer within %.0fs; cancelling it",
                    self.worker_id,
                    STOP_CALL_SECS,
                )
                await cancel_and_wait([claims], "claim")
            elif not claims.cancelled():
                claims.result()  # (the loop's own failure ends run, as before)
        finally:
            stop.cancel()
            if not claims.done():  # run itself was cancelled
                await cancel_and_wait([claims], "claim")

    def _first_usable(self) -> ShardLane:
        return next(lane for lane in self.lanes if lane.usable)

    def _warn_uncovered(self) -> None:
        """The guide's boot warning: a writable shard of the router that this worker does not poll."""
        if self.router is None:
            return
        uncovered = [s for s in self.router.writable if s not in self.shard_assignments]
        if uncovered:
            log.warning(
                "worker %s does not poll writable shard(s) %s (worker.shard_assignments = %s): "
                "another worker must, or work started there waits",
                self.worker_id,
                ", ".join(map(str, uncovered)),
                ", ".join(map(str, self.shard_assignments)),
            )

    async def _open_lanes(self) -> None:
        """Connect to every assigned shard, open its pool, check its schema and identity and
        register there. One database: as it always was (an unreachable one is waited for up to
        CONNECT_WAIT_SECS, then the start fails). Several: a shard that stays unreachable while
        another answers starts down (skipped, probed until it is back); none reachable, a
        refusal, a wrong identity or a wrong schema fails the start."""
        reachable, unreachable = await self._first_connections()
        if not self._sharded:
            lane = self.lanes[0]
            pool = await open_async_pool(
                lane.dsn, min_size=2, max_size=self.concurrency + 4, timeout=CONNECT_WAIT_SECS
            )
            self._close_pools = pool.close
            lane.sql = AsyncSqlApi(pool)
            await self._set_up(lane)
            return
        from harvest.shard.pools import AsyncShardPools

        pools = AsyncShardPools(
            self.router
            or ShardRouter(list(self.shard_assignments), list(self.shard_assignments), self.lanes[0].shard),
            {lane.shard: lane.dsn for lane in self.lanes},
            min_size=2,
            max_size=self.concurrency + 4,
            acquire_timeout=CONNECT_WAIT_SECS,
        )
        self._pools = pools
        self._close_pools = pools.close
        up = []
        for lane in reachable:
            try:
                await self.bring_up(lane)  # a ConfigError (another shard's database) ends the start
            except Exception as exc:
                if not outage(exc):
                    raise  # an error the database answered with ends the start, as a ConfigError
                unreachable.append((lane, exc))
            else:
                up.append(lane)
        if not up:
            raise unreachable[0][1]
        for lane, failure in unreachable:
            lane.note_failure(failure, "connecting at start")

    async def bring_up(self, lane: ShardLane) -> None:
        """Open (or check) a shard's pool and set the lane up if it never was: identity,
        schema, registration. Raises what the shard answered (an outage, or a refusal)."""
        if lane.sql is None:
            lane.sql = await self._pools.sql(lane.shard)  # verifies the database's shard id
        else:
            # Back? Drop the connections the outage broke first, so the first claim after it
            # does not meet one and count a second outage.
            await lane.sql.pool.check()
            await lane.sql.get_shard_id()
        if not lane.ready:
            await self._set_up(lane)

    async def _set_up(self, lane: ShardLane) -> None:
        await check_schema_async(lane.sql, "this worker" if not self._sharded else f"shard {lane.shard}")
        await warn_function_drift_async(
            lane.sql, "the database" if not self._sharded else f"shard {lane.shard}"
        )
        specs = schedule_specs(self.app)
        if specs and not self._sharded:
            await self._refuse_one_shard_of_several(lane, len(specs))
        if self.run_worker:
            await self._register(lane)
        # Flow-control policies of this App (docs/flow-control.md), read by start_workflow.
        await lane.sql.declare_flow_policies(self.app.flow_policies())
        # The App's schedules homed on this shard (docs/schedules.md): upserted, a pause kept.
        homes = {spec["name"]: self._schedule_home(spec["name"]) for spec in specs}
        homed = [spec for spec in specs if homes[spec["name"]] == lane.shard]
        if homed:
            declared = await lane.sql.declare_schedules(homed)
            where = f" on shard {lane.shard}" if self._sharded else ""
            log.info("declared %d schedule(s) (%d changed)%s", len(homed), declared["changed"], where)
            for kept in declared["kept"]:
                # A spec a later change replaced: an older deploy's, or one this deploy means to go
                # back to, which only the operator can tell apart (docs/schedules.md).
                log.warning(
                    "schedule %r%s: this App declares a spec a later change replaced, so the current "
                    "one stays (%s); if this deploy means to go back to it, run `harvest schedule "
                    "update %s` with it",
                    kept["name"],
                    where,
                    f"{describe_row(kept['current'])} -> {kept['current']['workflow_name']}",
                    kept["name"],
                )
        if self.router is not None:
            # A copy a reshard left on a shard that is no longer the home would fire beside the
            # new home's. Deleted only once this worker has the home's row: the copies on the
            # shards already up now, this shard's of those declared elsewhere before it.
            # (Without a router a worker knows its own shards only: nothing is deleted.)
            moved = {spec["name"]: lane.shard for spec in homed}
            self._declared_homes.update(moved)
            for other in self.lanes:
                if other is not lane and other.ready and moved:
                    await self._delete_moved_schedules(other, moved)
            elsewhere = {name: home for name, home in self._declared_homes.items() if home != lane.shard}
            await self._delete_moved_schedules(lane, elsewhere)
        lane.ready = True

    async def _refuse_one_shard_of_several(self, lane: ShardLane, schedules: int) -> None:
        """A worker without [shards] declares every schedule of its App on its one database. On
        one shard of several (sharded workers registered there name other shards), the schedules
        whose home is another shard would fire on both, two runs a slot: refused, before this
        worker registers or declares anything (docs/sharding.md, "Adding a shard")."""
        known = sorted(await lane.sql.get_deployment_shards() or [])
        if len(known) < 2:
            return  # a one-database deployment (or none of its workers ever had [shards])
        own = await lane.sql.get_shard_id()
        raise ConfigError(
            f"this database is shard {own} of a sharded deployment (shards {', '.join(map(str, known))}: "
            "its registered workers poll them), and this worker has no [shards] configuration: it "
            f"would declare its App's {schedules} schedule(s) here, and each one whose home is another "
            "shard would fire on both. Give it the deployment's [shards] section (shards.urls.N and "
            "shards.readable, or HARVEST_SHARDS__URLS__N and HARVEST_SHARDS__READABLE), as the other "
            'workers have (docs/sharding.md, "Adding a shard")'
        )

    async def _delete_moved_schedules(self, lane: ShardLane, homes: dict[str, int]) -> None:
        if not homes:
            return
        try:
            removed = await lane.sql.delete_moved_schedules(homes)
        except Exception as exc:  # a cleanup (a shard down, ...): the lane's next set-up tries again
            log.warning(
                "could not remove moved schedules from shard %d: %s",
                lane.shard,
                failure_reason(exc, lane.dsn),
            )
            return
        if removed:
            log.warning(
                "removed %d declared schedule(s) from shard %d: their home is now another shard",
                removed,
                lane.shard,
            )

    def _schedule_home(self, name: str) -> int:
        """The shard a declared schedule lives and fires on: this database, or on shards the
        router's choice from its name (every process with the same configuration agrees)."""
        if not self._sharded:
            return self.lanes[0].shard
        if self.router is not None:
            return self.router.schedule_home(name)
        return rendezvous(f"schedule:{name}", sorted(self.shard_assignments))

    async def _register(self, lane: ShardLane) -> None:
        metadata: dict[str, Any] = {"concurrency": self.concurrency}
        # Whether this process runs the retention janitor, and its round (seconds): preflight
        # reads it to tell a janitor that stopped (its login lacks harvest_admin) from one placed
        # nowhere, and both from one that sweeps (config/preflight.py _janitor).
        metadata["janitor"] = self.retention_interval if self.run_retention else False
        if self._sharded:
            metadata["shard_assignments"] = list(self.shard_assignments)
        if self.router is not None:
            # Every shard of the deployment knows it is one of several (harvest.get_deployment_shards),
            # so a worker without [shards] refuses to declare schedules on it.
            metadata["readable_shards"] = sorted(self.router.readable)
        taken = await lane.sql.register_worker(
            self.worker_id,
            self.queues,
            socket.gethostname(),
            os.getpid(),
            self.heartbeat_interval,
            metadata,
            self.lost_after,
            self.incarnation,
        )
        lane.beat_at = monotonic()
        if taken:
            log.warning(
                "worker %s: another process registered this worker id before (a restart under a "
                "fixed id); the %d task(s) it held are taken back (WorkerLost)",
                self.worker_id,
                len(taken),
            )
            self.metrics.attempts_expired(taken)
            log_expired(taken)
        # The names this worker can run on each queue it polls: a start of a name no
        # worker registered on its queue is refused up front (functions/start.sql).
        if self.app.workflows:
            await lane.sql.register_workflows(self.queues, sorted(self.app.workflows))
        # The App's DAGs (declare/dags.py): harvest dag list, trigger and the run view read them.
        if self.app.dags:
            await lane.sql.register_dags([dag.catalog() for dag in self.app.dags.values()])

    async def _first_connections(self) -> tuple[list[ShardLane], list[tuple[ShardLane, BaseException]]]:
        """Connect once to each shard before opening its pool, which would retry any error for
        CONNECT_WAIT_SECS: an answer (a wrong password, an unknown database, a bad DSN) ends
        the start at once; only an outage (the server not up yet) is waited for, and only
        while no shard answers. Returns (reachable, [(unreachable, its error)])."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONNECT_WAIT_SECS
        delay = 0.25
        while True:
            answers = await asyncio.gather(
                *(connect_async(lane.dsn, autocommit=True) for lane in self.lanes), return_exceptions=True
            )
            reachable, unreachable = [], []
            for lane, answer in zip(self.lanes, answers, strict=True):
                if isinstance(answer, BaseException):
                    unreachable.append((lane, answer))
                else:
                    await answer.close()
                    reachable.append(lane)
            for lane, answer in unreachable:
                if not isinstance(answer, DatabaseUnavailable) or is_permanent(answer):
                    if self._sharded and isinstance(answer, HarvestError):
                        # Which shard refused: its host and database alone do not say (a login
                        # made on one shard's server only is refused by the others).
                        answer.args = (f"shard {lane.shard}: {answer}", *answer.args[1:])
                    raise answer
            if reachable:
                return reachable, unreachable
            exc = unreachable[0][1]
            left = deadline - loop.time()
            if self._stopping.is_set():
                raise _StoppedAtBoot
            if left <= delay:
                raise exc
            log.warning("%s; retrying for up to %.0fs more", exc, left)
            await self._sleep(delay)
            if self._stopping.is_set():  # (woken by the stop: not one more try)
                raise _StoppedAtBoot
            delay = min(delay * 2, 5.0)

    async def _stop(
        self,
        intake: list[asyncio.Task[Any]],
        passes: list[asyncio.Task[Any]],
        background: list[asyncio.Task[Any]],
        heartbeats: list[asyncio.Task[Any]],
    ) -> None:
        """The stop, in this order (docs/failures.md, "Graceful shutdown"):

        1. take no new work: the claim loop has returned, the Redis consumer is stopped, and
           hand-offs, eager signals and claims with results are refused from here on;
        2. the drain (:meth:`_drain`): say so and record it on every shard, then finish the
           tasks in flight within the grace, while every background service still runs: the
           query responders (a run in flight is still queried and updated), the heartbeats
           (the row stays fresh; a remote drain's deadline is read), the scanner, retention,
           the sampler, the Redis publisher;
        3. cancel the background services and wait for them (bounded: worker/stopping.py),
           but the scanner and the janitor, which end after the pass they are in;
        4. release what is left and mark the worker ``stopped`` on every shard
           (:meth:`_release`), while they do (up to STOP_CALL_SECS, then they are cancelled);
           the heartbeats end last.

        The background services used to be cancelled first: the queries of runs in flight went
        unanswered through the whole drain, and a service slow to take its cancellation held
        the drain back, so work in flight at the stop could end before the drain was recorded
        or said what it was finishing. The scanner and the janitor used to be cancelled mid-call
        too: a call that failed as its cancellation reached the server (the janitor's "retention
        is not configured", every pass) made the driver log a warning and close the connection,
        in the output of every Ctrl-C that came at that moment."""
        self._stopping.set()  # (already, unless the claim loop failed)
        loop = asyncio.get_running_loop()
        passes_end_by = loop.time() + STOP_CALL_SECS  # (reset when the passes are told to end)
        try:
            try:
                await cancel_and_wait(intake, "claim")
                if self.run_worker:
                    await self._drain()
            finally:
                # The scanner and the janitor end after the pass they are in, beside the
                # release (a database that does not answer adds no wait of its own to the stop).
                self._passes_ending.set()
                passes_end_by = loop.time() + STOP_CALL_SECS
                await cancel_and_wait([*intake, *background], "background")
            if self.run_worker:
                await self._release()
        finally:
            try:
                running = [task for task in passes if not task.done()]
                if running and passes_end_by > loop.time():
                    await asyncio.wait(running, timeout=passes_end_by - loop.time())
                await cancel_and_wait(passes, "background")
            finally:
                # The heartbeat outlives the drain: a draining worker is not stale.
                await cancel_and_wait(heartbeats, "heartbeat")

    async def _drain(self) -> None:
        """Say and record on every shard that this worker drains (the fleet's worker list,
        health and coverage see it take no new work while it finishes what it holds; a remote
        drain has already recorded it on its shard), then wait for the tasks in flight within
        the grace (a remote drain's deadline ends it sooner) and cancel those still running."""
        loop = asyncio.get_running_loop()
        grace = self.shutdown_grace
        if self._drain_deadline_at is not None:  # a remote drain's deadline ends it sooner
            grace = max(0.0, min(grace, self._drain_deadline_at - loop.time()))
        deadline = loop.time() + grace
        if self._inflight:
            log.info(
                "worker %s finishing %d in-flight task(s) (up to %.0fs)",
                self.worker_id,
                len(self._inflight),
                grace,
            )
        # Recorded while the work in flight goes on: a database that does not answer holds
        # neither the work nor the stop past the grace (or STOP_CALL_SECS, when that is longer).
        records = [
            asyncio.create_task(self._record_drain(lane, deadline), name=f"record-drain-{lane.shard}")
            for lane in self.lanes
            if lane.usable
        ]
        if self._inflight:
            pending: set[asyncio.Task[Any]] = set()
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
            # Each handler hands its task back as it takes the cancellation (_guard). One whose
            # code ignores it (an async activity, or a workflow's local activity, that catches
            # CancelledError and goes on awaiting) is left running after a bounded wait, and
            # _release releases its task as the others' (docs/failures.md).
            await cancel_and_wait(
                pending,
                "in-flight",
                describe=self._describe_in_flight,
                then="their code ignores asyncio.CancelledError; left running, their tasks released",
            )
        if self._giving_back:  # (bounded: _release gives back whatever these did not)
            await asyncio.wait(list(self._giving_back), timeout=stopping.STOP_WAIT_SECS)
        if records:
            await asyncio.wait(records)  # (each bounded: _record_drain)

    async def _record_drain(self, lane: ShardLane, deadline: float) -> None:
        """harvest.begin_worker_drain on one shard, waited for until the drain's deadline (at
        least STOP_CALL_SECS)."""
        wait = max(STOP_CALL_SECS, deadline - asyncio.get_running_loop().time())
        try:
            await asyncio.wait_for(lane.sql.begin_worker_drain(self.worker_id, self.incarnation), wait)
        except Exception as exc:
            reason = f"no answer within {wait:.0f}s" if isinstance(exc, TimeoutError) else error_line(exc)
            log.warning("worker %s could not record that it is draining: %s", self.worker_id, reason)

    async def _stop_on(self, lane: ShardLane) -> int:
        """harvest.stop_worker on one shard: the tasks released."""
        try:
            return int(await lane.sql.stop_worker(self.worker_id, self.incarnation))
        except NotFound:  # our row was pruned since the last heartbeat: register to stop it
            await self._register(lane)
            return int(await lane.sql.stop_worker(self.worker_id, self.incarnation))

    async def _release(self) -> None:
        """The stop's end on every shard: release the tasks this worker still holds (another
        worker takes them at once, no attempt counted) and mark it ``stopped``."""
        for lane in self.lanes:
            if not lane.usable:
                # Down now: its row goes stale and its leases expire into other hands.
                continue
            try:
                released = await asyncio.wait_for(self._stop_on(lane), STOP_CALL_SECS)
            except Exception as exc:
                if lane.note_failure(exc, "stopping"):
                    continue
                if not (may_pass(exc) or isinstance(exc, (DatabaseUnavailable, TimeoutError))):
                    raise
                # One database, down: the stop cannot say so, and need not wait for it.
                log.warning(
                    "worker %s could not release what it holds or record its stop (%s): its row "
                    "goes stale and its leases expire into other workers' hands",
                    self.worker_id,
                    f"no answer within {STOP_CALL_SECS:.0f}s"
                    if isinstance(exc, TimeoutError)
                    else redact(error_line(exc), lane.dsn),
                )
                continue
            if released:
                log.info("worker %s released %d unfinished task(s)", self.worker_id, released)

    def _describe_in_flight(self, handle: asyncio.Task[Any]) -> str:
        """The activity or workflow an in-flight task runs, for a stop that leaves it behind."""
        key = next((k for k, h in self._inflight.items() if h is handle), None)
        task = self._held.get(key) if key is not None else None
        if task is None:
            return handle.get_name()
        if task["kind"] == "workflow":
            return f"workflow {task['workflow_name']} (task {task['task_id']}, run {task['execution_id']})"
        return (
            f"activity {task['activity_name']} (task {task['task_id']}, "
            f"workflow {task['workflow_name']} run {task['execution_id']})"
        )

    # -- claiming ------------------------------------------------------------------------
    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            _, full = await self._claim()
            if full:
                continue  # more may be waiting: claim again at once
            await self._idle()

    async def _claim(self) -> tuple[list[dict[str, Any]], bool]:
        """Claim up to the free slots, one claim per usable shard, starting at the next shard in
        turn (a backlog on one cannot starve another); ``full`` when a batch came back full
        (or no slot is free). None once the stop has begun."""
        if self._stopping.is_set():
            return [], False
        free = self.concurrency - len(self._inflight) - self._reserved
        if free <= 0:
            await self._set_sleeping(False)  # no room: wake-ups would be wasted
            return [], False
        want = min(free, self.claim_batch)
        if not self._sharded:  # one database: one claim, as it always was
            lane = self.lanes[0]
            await self._beat_if_silent(lane)
            if self._stopping.is_set():  # (its answer: drained, stopped or superseded)
                return [], False
            started = perf_counter()
            deciding = self._claim_may_decide()
            try:
                with self.holding_slots(want):
                    if deciding:
                        claimed = await self._claim_deciding(lane, want)
                    else:
                        claimed = await lane.sql.claim_tasks(
                            self.worker_id, self.queues, want, self.workflow_lease
                        )
            except Exception as exc:
                if not may_pass(exc):
                    raise
                self.metrics.transaction_retry("claim", retry_reason(exc))
                log.warning("claim failed (%s); retrying", failure_reason(exc, lane.dsn))
                await self._sleep(self.poll_interval)
                return [], False
            return claimed, await self._took(lane, claimed, want, started)
        return await self._claim_round(free)

    async def _took(self, lane: ShardLane, claimed: list[dict[str, Any]], want: int, started: float) -> bool:
        """A claim's answer on its lane (one database's or a shard's in the round): timed, its
        tasks run; True when it came back full, work waiting there: the lane's backlog stands
        (see result_claim_limit) and its producers need not notify."""
        self.metrics.claimed(lane.shard, perf_counter() - started)
        if not claimed:
            self._due_current.discard(lane.shard)
        for task in claimed:
            task["_lane"] = lane
            self.run_claimed(task)  # (given back instead when the stop began meanwhile)
        full = lane.backlog = len(claimed) == want
        if full:
            await self._set_lane_sleeping(lane, False)  # saturated with work: producers need not notify
        return full

    def _claim_may_decide(self) -> bool:
        """Whether the next claim may keep its transaction open for its workflow task's
        decision: one database, no Redis dispatch, a claim woken on an idle worker (nothing in
        flight or promised), no flow-control policies (a gate's admission would stay locked
        meanwhile), not stopping, and no claim that decided rolled back lately."""
        woken, self._woken_claim = self._woken_claim, False
        return (
            woken
            and self.claim_decides
            and self.redis is None
            and not self._inflight
            and not self._reserved
            and not self._claims_on_every_finish
            and not self._stopping.is_set()
            and self._now() >= self._claim_decides_after
        )

    async def _claim_deciding(self, lane: ShardLane, want: int) -> list[dict[str, Any]]:
        """Claim with the transaction left open (db/sqlapi.py, OpenClaim). When it claimed one
        workflow task (no owner mode), the task carries the open claim and its decision commits
        in it (worker/workflows.py): one commit and one round trip fewer on the run's path. Any
        other claim (none, an activity, several tasks) commits at once, before a task runs.
        The claim commits alone after CLAIM_DECIDES_WINDOW_SECS if no decision came."""
        claimed, claim = await claim_tasks_open(
            lane.sql, self.worker_id, self.queues, want, self.workflow_lease
        )
        if self._stopping.is_set():  # the stop began while it was in flight: undone, nothing spent
            await claim.rollback()
            return []
        if len(claimed) == 1 and claimed[0]["kind"] == "workflow" and claimed[0]["owner_epoch"] is None:
            claimed[0]["_open_claim"] = claim
            # (a strong reference: the loop keeps only a weak one to a task)
            claimed[0]["_window"] = asyncio.get_running_loop().call_later(
                CLAIM_DECIDES_WINDOW_SECS, self._end_claim_window, claim
            )
            return claimed
        await claim.commit()
        return claimed

    def _end_claim_window(self, claim: OpenClaim) -> None:
        if claim.open:
            self._claim_window_ends.add(asyncio.ensure_future(claim.commit()))
            for future in list(self._claim_window_ends):
                if future.done():
                    self._claim_window_ends.discard(future)

    def claim_decision_rolled_back(self) -> None:
        """A claim that decided was rolled back: its task is pending again. Claim it again at
        once, the ordinary way (CLAIM_DECIDES_PAUSE_SECS)."""
        self.claims_rolled_back += 1
        self._claim_decides_after = self._now() + CLAIM_DECIDES_PAUSE_SECS
        self.wake()

    @contextlib.contextmanager
    def holding_slots(self, n: int) -> Iterator[None]:
        """Promise ``n`` free slots to a claim until it answers (the claim loop's, or the Redis
        consumer's by name): another claim or a commit handing tasks back meanwhile
        (reserve_slots) must not be promised them too, or both would fill them and run more
        tasks than the concurrency."""
        self._reserved += n
        try:
            yield
        finally:
            self._reserved -= n

    async def _claim_round(self, free: int) -> tuple[list[dict[str, Any]], bool]:
        lanes = self.lanes
        count = len(lanes)
        start = self._next_lane
        if count > 1:
            self._next_lane = (start + 1) % count
        claimed_all: list[dict[str, Any]] = []
        full = False
        for i in range(count):
            lane = lanes[(start + i) % count]
            if self._stopping.is_set():  # a drain heard during the round: no shard is claimed after it
                break
            if not lane.usable:
                continue
            want = min(free, self.claim_batch)
            if want <= 0:
                full = True
                break
            await self._beat_if_silent(lane)
            if self._stopping.is_set():
                break
            started = perf_counter()
            try:
                with self.holding_slots(want):
                    claimed = await lane.sql.claim_tasks(
                        self.worker_id, self.queues, want, self.workflow_lease
                    )
            except Exception as exc:
                if lane.note_failure(exc, "claiming"):
                    continue
                if not may_pass(exc):
                    raise
                # The shard answered (a lock not available, a statement timeout): not down; its
                # claim is made again at the next poll, as one database's is.
                self.metrics.transaction_retry("claim", retry_reason(exc))
                log.warning(
                    "claim on shard %d failed (%s); retrying", lane.shard, failure_reason(exc, lane.dsn)
                )
                continue
            free -= len(claimed)
            if await self._took(lane, claimed, want, started):
                full = True
            claimed_all += claimed
        return claimed_all, full

    async def _set_sleeping(self, sleeping: bool) -> None:
        """Tell producers on every shard whether to notify us (see _notify_queue)."""
        for lane in self.lanes:
            if lane.usable:
                await self._set_lane_sleeping(lane, sleeping)

    async def _set_lane_sleeping(self, lane: ShardLane, sleeping: bool) -> None:
        """Tell one shard's producers whether to notify us; writes only on a change."""
        if lane.sleeping is sleeping:
            return
        try:
            settled = await lane.sql.set_worker_sleeping(self.worker_id, sleeping)
            lane.sleeping = sleeping
            # Asleep: a producer that checked before the mark was visible and is still
            # committing sends no notification, and the look that follows would miss its
            # task (Worker._idle waits for it). Awake: no one to wait for.
            if sleeping and settled is False:
                self._unsettled.add(lane.shard)
            else:
                self._unsettled.discard(lane.shard)
        except Exception as exc:
            if not lane.note_failure(exc, "updating the sleep mark"):
                log.warning("could not update the sleep mark: %s", failure_reason(exc, lane.dsn))

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
        # (accepts_hand_off, _key and _now inline: one call per finished task each)
        if wanted <= 0 or not self.hand_off or self._stopping.is_set():
            return _NO_GRANT
        key = (caller["_lane"].shard, caller["task_id"], caller["fencing_token"])
        claimed_at = self._slot_claimed_at.get(key)
        if claimed_at is not None and self._now() - claimed_at > HAND_OFF_CHAIN_SECS:
            return _NO_GRANT
        free = max(0, self.concurrency - len(self._inflight) - self._reserved)
        granted = min(wanted, 1 + free)
        grant = _GRANTS.get(granted)  # (a grant is a value: one per size, not one per commit)
        if grant is None:
            grant = _GRANTS[granted] = SlotGrant(granted, granted - 1)
        self._reserved += granted - 1
        return grant

    def result_claim_limit(self, lane: ShardLane, results: int) -> int:
        """How many tasks a batch of ``results`` activity results on ``lane`` may claim in its
        own transaction, for the slots its results free (worker/completions.py): the claim
        batch while the lane's last claim came back full, none otherwise, and none for a batch
        over RESULT_CLAIM_MAX_BATCH (a large claim inside the batch delays its answer, the
        woken runs' decisions with it, more than the separate claim costs). One database
        only (a sharded worker's claims go round its shards), and it rides on hand-off: not
        while stopping, nor with ``hand_off`` off, nor with Redis dispatch (its consumer
        claims for the free slots)."""
        if (
            results > RESULT_CLAIM_MAX_BATCH
            or self._sharded
            or self.redis is not None
            or not lane.backlog
            or not self.accepts_hand_off()
        ):
            return 0
        return self.claim_batch

    def release_slots(self, grant: SlotGrant) -> None:
        self._reserved -= grant.from_free

    def run_handed(self, task: dict[str, Any], caller: dict[str, Any]) -> None:
        """Run a task a commit handed to this worker, as if the claim loop had claimed it.

        ``caller`` is the task whose handler made the commit: the handed task takes
        over its slot, claimed when the caller's was, and lives on the caller's shard.
        """
        self.handed_tasks += 1
        task["_lane"] = caller["_lane"]
        self._spawn(task, self._slot_claimed_at.get(_key(caller)))

    # -- eager signals (client.AsyncClient(eager_worker=), functions/signals.sql) ------------
    def eager_slot(self) -> tuple[str, float] | None:
        """Promise a free slot to a signal an ``AsyncClient`` of this process is sending, whose
        transaction may lease the run's woken workflow task to us (signal_workflow_eager):
        (worker id, workflow lease), or None when we would not run it now: several shards, not
        running the claim loop, not set up yet, stopping, hand-off off, no free slot, or a
        caller on another event loop than ours (a worker run in a thread of its own). Each
        promise is settled by :meth:`run_eager`."""
        lane = self.lanes[0]
        try:
            caller_loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            caller_loop = None
        if (
            caller_loop is None
            or caller_loop is not self._loop
            or self._sharded
            or not self.run_worker
            or not lane.usable
            or not self.accepts_hand_off()
            or self.free_slots() <= 0
        ):
            return None
        self._reserved += 1
        return self.worker_id, self.workflow_lease

    def run_eager(self, task: dict[str, Any] | None) -> None:
        """Run the workflow task a signal's transaction leased to us, as if the claim loop had
        claimed it (None: it was not handed), and give back the slot :meth:`eager_slot`
        promised."""
        self._reserved -= 1
        if task is not None:
            self.eager_tasks += 1
            task["_lane"] = self.lanes[0]
            self._spawn(task)

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    # -- Redis dispatch (worker/redis_dispatch.py) -------------------------------------------
    def free_slots(self) -> int:
        """Slots neither running a task nor promised to one."""
        return self.concurrency - len(self._inflight) - self._reserved

    def run_claimed(self, task: dict[str, Any]) -> None:
        """Run a task claimed by the claim loop, by name (the Redis consumer) or with a batch of
        activity results (worker/completions.py), its ``_lane`` set. One whose claim was in
        flight when the stop began (a drain heard meanwhile), and landed after, is given back at
        once instead (release_task: no attempt spent; a stopping worker starts no work it
        claimed; what a commit hands it still runs). The check reads a flag, no database."""
        if self._stopping.is_set():
            self._give_back(task)
            return
        self._spawn(task)

    def _give_back(self, task: dict[str, Any]) -> None:
        """Release a task claimed too late, in the background (the stop's own release of
        everything this worker holds, _release, covers a release that fails)."""
        lane = lane_of(task)
        release = asyncio.create_task(
            lane.sql.release_task(task["task_id"], task["fencing_token"]), name=f"give-back-{task['task_id']}"
        )
        self._giving_back.add(release)
        release.add_done_callback(self._given_back)

    def _given_back(self, release: asyncio.Task[Any]) -> None:
        self._giving_back.discard(release)
        exc = None if release.cancelled() else release.exception()
        if exc is not None:  # (the stop's _release gives it back with the rest)
            log.debug("giving back a task claimed while stopping failed: %s", error_line(exc))

    def after_commit(self, lane: ShardLane, task_ids: list[int], kind: str | None) -> None:
        """A batch of these tasks' decisions (``kind`` None) or activity results (``kind``
        "workflow": what a result makes) committed on ``lane``: with Redis dispatch, publish
        the claimable tasks the commit made for their runs."""
        if self.redis is None:
            return
        runs = [self._run_of.get((lane.shard, task_id)) for task_id in task_ids]
        self.redis.committed([r for r in runs if r is not None], kind)

    def _spawn(self, task: dict[str, Any], slot_claimed_at: float | None = None) -> None:
        lane, kind = task["_lane"], task["kind"]
        if kind == "workflow":
            lane.owners.note(task)
            runner = run_workflow_task
        else:
            runner = run_activity_task
        lane.dispatched += 1
        self.metrics.dispatched(task["queue"], kind, lane.shard)
        key = (lane.shard, task["task_id"], task["fencing_token"])  # (_key, inline)
        if self.redis is not None:
            self._run_of[(key[0], key[1])] = str(task["execution_id"])
        # (The worker's clock, _now, which reserve_slots reads the slot's age on.)
        self._slot_claimed_at[key] = self._now() if slot_claimed_at is None else slot_claimed_at
        # (asyncio.create_task's own body, without its two Python calls: a task unnamed)
        handle = asyncio.get_running_loop().create_task(self._guard(runner, task))
        self._inflight[key] = handle
        self._held[key] = task

    async def _guard(
        self, runner: Callable[[Worker, dict[str, Any]], Awaitable[Any]], task: dict[str, Any]
    ) -> None:
        try:
            await runner(self, task)
        except asyncio.CancelledError:
            # Shutting down before it finished: hand the task back at once (a claim still open
            # gives it back by its rollback).
            claim = task.pop("_open_claim", None)
            if claim is not None:
                await asyncio.shield(claim.rollback())
            sql = lane_of(task).sql
            release = asyncio.ensure_future(sql.release_task(task["task_id"], task["fencing_token"]))
            release.add_done_callback(_retrieved)
            # Bounded: a database that does not answer leaves the task to the stop's release, or
            # to its lease's expiry. (A wait, not a shield: the release goes on if it is cut short.)
            await asyncio.wait({release}, timeout=STOP_CALL_SECS)
            stopping.leave_behind([release])
            raise
        except Exception as exc:
            if outage(exc):
                _cut_off(task, exc)
            else:
                # A database error's text carries its DETAIL and CONTEXT (a row's values): its
                # first line and SQLSTATE say what failed, and its traceback (where it failed)
                # prints it by that line too (DatabaseTextFilter, on this logger). Any other
                # error here is Harvest's bug: its traceback is the report.
                log.error(
                    "task %s (%s) crashed the handler; its lease will expire: %s",
                    task["task_id"],
                    task["kind"],
                    failure_reason(exc),
                    exc_info=True,
                )
        finally:
            claim = task.pop("_open_claim", None)
            if claim is not None:  # (a handler that crashed before its decision)
                with contextlib.suppress(Exception):
                    await claim.commit()
            key = _key(task)
            self._inflight.pop(key, None)
            self._held.pop(key, None)
            self._slot_claimed_at.pop(key, None)
            self.completed_tasks += 1
            self._finished(task)
            if self.redis is not None:
                self._run_of.pop((key[0], key[1]), None)
                self.redis.slot_freed()

    def _finished(self, task: dict[str, Any]) -> None:
        """A task in flight ended. A busy worker claims again at once (producers do not notify
        it). One whose mark asks every shard to notify it is told of any new claimable work, so
        it only reads the next due time again (the task may have made a timer or a retry due
        later), unless its handler saw it make nothing due later (``_nothing_due_later``: a
        result recorded, or a decision of activities and the run's end only), when the time
        read before stands; it claims when the task held an admission gate (concurrency_key,
        rate_limit), or its App declares flow-control policies, whose freed room no
        notification announces."""
        if not task.get("_nothing_due_later"):
            self._due_current.clear()  # it may have made a timer or a retry: read the due time again
            self._ends += 1
        options = task.get("options") or {}
        if (
            self._all_sleeping()
            and not self._claims_on_every_finish
            and "concurrency_key" not in options
            and "rate_limit" not in options
        ):
            if not self._wake.is_set():
                self._due_only = True
            self._wake.set()
        else:
            self.wake()

    async def _idle(self) -> None:
        if self._stopping.is_set():
            return  # (no sleep mark, no look for work: the claim loop ends)
        if len(self._inflight) < self.concurrency and not self._all_sleeping():
            # A busy worker's own finishing tasks wake this loop (and it claims again),
            # so it asks producers to notify only after BUSY_WAKE_SECS without one:
            # each NOTIFY serialises its producer's commit with every other notifier's.
            if self._inflight and await self._sleep(BUSY_WAKE_SECS):
                return
            # Mark ourselves asleep, then look once more: work committed before the
            # mark was visible to its producer came with no notification. A producer
            # that checked before then and is still committing gets a look of its own
            # once it has committed (the wait below).
            await self._set_sleeping(True)  # (notes the shards where such a producer is committing)
            claimed, _ = await self._claim()
            if claimed:
                return
        settle_wait = SETTLE_FIRST_SECS
        while True:
            self._due_only = False
            timeout = self.poll_interval
            if self._unsettled:
                timeout = min(timeout, settle_wait)
            if len(self._inflight) < self.concurrency:
                for lane in self.lanes:
                    if not lane.usable:
                        continue
                    due = self._due_at.get(lane.shard)
                    if lane.shard not in self._due_current or (due is not None and due <= datetime.now(UTC)):
                        # Else the time read before stands (see __init__): what another process
                        # made due meanwhile without a notification waits as it would for an
                        # idle worker, until poll_interval.
                        ends = self._ends
                        try:
                            due = await lane.sql.next_due_at(self.queues)
                        except Exception as exc:
                            lane.note_failure(exc, "reading the next due time")
                            continue
                        self._due_at[lane.shard] = due
                        if ends == self._ends:
                            self._due_current.add(lane.shard)
                    if due is not None:
                        until = (due - datetime.now(UTC)).total_seconds()
                        timeout = max(0.0, min(timeout, until + 0.005))
            woken = await self._sleep(timeout)
            if not woken and self._unsettled and not self._stopping.is_set():
                await self._ask_unsettled()
                if not self._unsettled:
                    return  # they have committed: look for their work
                if timeout == settle_wait:  # (else a due time came: claim)
                    settle_wait = min(settle_wait * 2, SETTLE_MAX_SECS)
                    continue
            if not (woken and self._due_only and not self._stopping.is_set()):
                self._woken_claim = woken and not self._due_only
                return

    async def _ask_unsettled(self) -> None:
        """Ask each shard in ``_unsettled`` again whether the producers that checked for sleeping
        workers before our mark was visible have committed (set_worker_sleeping, the mark
        already set); those that have leave the set. A shard that cannot answer leaves it too
        (its poll interval stands)."""
        for lane in self.lanes:
            if lane.shard not in self._unsettled:
                continue
            settled = True
            if lane.usable and lane.sleeping is True:
                try:
                    settled = await lane.sql.set_worker_sleeping(self.worker_id, True) is not False
                except Exception as exc:
                    if not lane.note_failure(exc, "updating the sleep mark"):
                        reason = failure_reason(exc, lane.dsn)
                        log.warning("could not update the sleep mark: %s", reason)
            if settled:
                self._unsettled.discard(lane.shard)

    def _all_sleeping(self) -> bool:
        """Whether every shard we can reach has our mark asking its producers to notify us."""
        if not self._sharded:
            return self.lanes[0].sleeping is True
        return all(lane.sleeping is True for lane in self.lanes if lane.usable)

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
    async def _scan(self, lane: ShardLane) -> None:
        """The scanner of one shard (each shard's timeouts, relays, ... are its own), until the
        stop ends the passes."""
        while not await self._passes_end(self.scan_interval):
            if not lane.usable:
                lane.scans_since = None
                if lane.down:  # a shard known to be down: a tick it cannot answer (logged by the lane)
                    self.metrics.scanned(lane.shard, False)
                continue
            scanned = False
            try:
                if self.run_worker:
                    # A worker thawed after a freeze past its lost_after, its scans unbroken in
                    # its own eyes, is not its own sweeper: it heartbeats first, and sweeps
                    # nothing while its own heartbeat has not landed.
                    await self._beat_if_silent(lane)
                # (the tick after that heartbeat, which may have waited for a connection: the
                # scans' answered time starts at a scan's own)
                tick = monotonic()
                answered = scanned_secs(lane.scans_since, tick)
                if self.run_worker and self._silent(lane, tick):
                    answered = 0.0
                # Timeouts, workflow deadlines, relays, mutex grants, deferred starts: one call.
                # A database that cannot be reached fails the tick at once, not after the pool's
                # 30 s (a busy pool is waited for: pools.unless_unreachable).
                with unless_unreachable():
                    moved = await lane.sql.scan(100, answered)
                if lane.scans_since is None:
                    lane.scans_since = tick
                self.metrics.scanned(lane.shard, True)
                scanned = True
                if lane.scan_failing:
                    lane.scan_failing = False
                    log.info("timeout scan: the database answers again")
                if moved["expired_tasks"]:
                    self.metrics.attempts_expired(moved["expired_tasks"])
                    log_expired(moved["expired_tasks"])
                if moved["timed_out_workflows"]:
                    log.info("timeout scanner: %d workflow run(s) timed out", moved["timed_out_workflows"])
                if (
                    moved["expired_tasks"]
                    or moved["relays_delivered"]
                    or moved["mutex_grants"]
                    or moved["starts_released"]
                    or moved["tasks_repaced"]
                ):
                    self.wake()
                # Shards only (relay_pump is None on a single database): the cross-shard pump
                # sweeps this shard's outbox and the cross-shard children its runs started (a
                # worker given one database and a pump sweeps the pump's own sources).
                sources = (lane.shard,) if self._sharded else None
                if self.relay_pump is not None:
                    report = await self.relay_pump.tick(sources)
                    self.metrics.pumped(report.claimed, report.settled, report.released)
                    self.metrics.children_stepped(report.children)
                    if report.by_id_indeterminate:
                        self.metrics.by_id_indeterminate(report.by_id_indeterminate)
                    self.metrics.by_id_found_over_incomplete_fanout(report.found_over_incomplete_fanout)
                    if report.moved:
                        self.wake()
                # Shards only: finish this shard's moves a killed rebalancer left mid-way (its
                # own pacing: every 5 s, moves stalled 30 s; harvest/shard/rebalance.py).
                if self.relay_pump is not None and self._sharded:
                    await self.rebalance_resume.tick(self.relay_pump.pools, lane.shard)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not scanned:  # (a tick counts once: the pump's or a resume's failure is not the scan's)
                    lane.scans_since = None
                    self.metrics.scanned(lane.shard, False, full=met_full_server(exc))
                if lane.note_failure(exc, "scanning"):
                    pass
                elif outage(exc) and not scanned:  # one line an outage (each tick is counted)
                    level = logging.DEBUG if lane.scan_failing else logging.WARNING
                    lane.scan_failing = True
                    log.log(level, "timeout scan failed: %s", failure_reason(exc, lane.dsn))
                else:
                    log.warning("timeout scan failed: %s", failure_reason(exc, lane.dsn))
            # A sweep's failure (a relay's remote shard down) stops no schedule; a scan that met
            # an outage does (the schedules' tick would meet it too).
            if lane.usable and not lane.scan_failing:
                await self._schedule(lane)

    async def _schedule(self, lane: ShardLane) -> scheduler.TickReport | None:
        """This shard's schedules (worker/scheduler.py): due slots fire, buffered ones start.
        The tick's report (None: the tick failed, logged)."""
        try:
            with unless_unreachable():  # (as the scan's)
                fired = await scheduler.tick(lane.sql, metrics=self.metrics)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not lane.note_failure(exc, "ticking the schedules"):
                log.warning("scheduler tick failed: %s", failure_reason(exc, lane.dsn))
            return None
        if fired.fired or fired.buffered_started:
            log.info("scheduler: %d slot(s) fired, %d run(s) started", len(fired.fired), fired.started)
            self.wake()
        return fired

    async def tick_schedules(self) -> list[scheduler.TickReport]:
        """One scheduler tick on each usable shard now, the scanner loop's own (none when this
        worker runs no scheduler). The test kit calls it right after it moves its clock, so a
        slot fires at its time rather than on the next scan pass."""
        if not self.run_scanner:
            return []
        reports = [await self._schedule(lane) for lane in self.lanes if lane.usable]
        return [r for r in reports if r is not None]

    async def _heartbeat(self, lane: ShardLane) -> None:
        """Keep our registry row on the shard fresh; a drain of it (on any shard) drains the
        whole worker, on every shard."""
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            if lane.usable:
                await self._beat(lane)

    async def _beat_if_silent(self, lane: ShardLane) -> None:
        """Heartbeat before a claim when this worker has been silent on the shard for 2
        intervals (frozen, cut off, its event loop blocked): the scanners may have taken it for
        lost meanwhile, and a swept worker is not watched again until it heartbeats
        (expire_lost_workers clears its lost_at); a task claimed first would wait for its lease
        if the worker died before its heartbeat loop turned."""
        if self._silent(lane, monotonic()):
            await self._beat(lane, quiet=True)

    def _silent(self, lane: ShardLane, now: float) -> bool:
        """No heartbeat of this worker has landed on the shard for 2 intervals at ``now``."""
        return lane.beat_at is None or now - lane.beat_at > 2 * self.heartbeat_interval

    async def _beat(self, lane: ShardLane, *, quiet: bool = False) -> None:
        """One heartbeat of our row on the shard, its answer acted on; ``quiet``: a failure is
        not logged (the claim that asked for it meets it, and the heartbeat loop logs it)."""
        try:
            status = await lane.sql.heartbeat_worker(self.worker_id, self.incarnation)
            if status == "superseded":
                self._superseded(lane)
                return
            self.heartbeat_ok_at = lane.beat_at = monotonic()
            if lane.owners.epochs:
                await self._renew_partitions(lane)
            if status != "active" and not self._stopping.is_set():
                if status == "draining":
                    await self._note_drain_deadline(lane)
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
                await self._register(lane)
                if self._stopping.is_set():  # still finishing in-flight work: say so again
                    await lane.sql.begin_worker_drain(self.worker_id, self.incarnation)
            except Exception as exc:
                log.warning(
                    "worker %s could not register again: %s",
                    self.worker_id,
                    failure_reason(exc, lane.dsn),
                )
        except Exception as exc:
            if not lane.note_failure(exc, "heartbeat") and not quiet:
                log.warning("worker heartbeat failed: %s", failure_reason(exc, lane.dsn))

    def _superseded(self, lane: ShardLane) -> None:
        """Another process registered this worker id since this one did: two live workers share
        one id (a restarted process would have no predecessor left to answer). Its register
        took back what this one held then; this one stops (once), touching nothing of the
        other's row, and its handlers give their tasks back by their fencing tokens."""
        if self._stopping.is_set():
            return
        log.error(
            "worker %s: another live process registered the same worker id on shard %d, so this "
            "one stops; give each worker process its own worker_id (unset, it is unique per process)",
            self.worker_id,
            lane.shard,
        )
        self.request_stop()

    async def _renew_partitions(self, lane: ShardLane) -> None:
        """Owner mode: renew the leases of the partitions this worker holds state for on
        ``lane``'s shard, and drop the cached runs of any another worker has acquired meanwhile."""
        owners = lane.owners
        asked = owners.to_renew(self.cache.ids(), RECENT_HEARTBEATS * self.heartbeat_interval)
        rows = await lane.sql.heartbeat_partitions(self.worker_id, asked) if asked else []
        gone = owners.renewed(asked, rows)
        for execution_id in gone:
            self.cache.drop(execution_id)
        if gone:
            log.info(
                "worker %s: %d cached run(s) on shard %d lost their partition's lease",
                self.worker_id,
                len(gone),
                lane.shard,
            )

    async def _note_drain_deadline(self, lane: ShardLane) -> None:
        """Remember when a remote drain must be done; _drain releases what is left then."""
        row = await lane.sql.get_worker_drain_deadline(self.worker_id)
        if row and row["remaining_secs"] is not None:
            self._drain_deadline_at = asyncio.get_running_loop().time() + max(0.0, row["remaining_secs"])
            log.info(
                "worker %s drains until %s (%.1fs)",
                self.worker_id,
                row["drain_deadline"],
                max(0.0, row["remaining_secs"]),
            )

    async def _retention(self, lane: ShardLane) -> None:
        """The retention janitor of one shard, a round every ``retention_interval``: one bounded
        batch per call, batch after batch while rows remain; and, once a round, the worker registry
        rule (stopped and long-stale worker rows), whether or not execution retention is
        configured, the unused flow keys and a page of seals; until the stop ends the passes."""
        while not self._passes_ending.is_set():
            if not lane.usable:
                await self._passes_end(self.retention_interval)
                continue
            try:
                pruned = await lane.sql.prune_workers()
                if pruned["deleted"]:
                    log.info(
                        "retention: deleted %d stopped or stale worker row(s) last seen before %s",
                        pruned["deleted"],
                        pruned["cutoff"],
                    )
                # The rows of quota and cancel_running keys no start needs (their count grows
                # with the keys: a per-tenant key makes one per tenant), configured or not.
                keys = await lane.sql.prune_flow_keys()
                if keys["deleted"]:
                    log.info("retention: deleted %d unused flow key row(s)", keys["deleted"])
                if self.audit_max_age:  # retention.audit_max_age, configured or not
                    await self._prune_audit_log(lane, self.audit_max_age)
                # Batch after batch while rows remain; the prunes above and the seals' page below
                # run once a round, not once a batch (behind a backlog a round is many batches).
                # A batch the statement_timeout ended is retried at once, smaller (at the floor
                # already: next round); see harvest/worker/janitor_batch.py.
                batch = self._janitor_batches.setdefault(lane.shard, JanitorBatch())
                while True:
                    try:
                        result = await lane.sql.run_retention(batch_size=batch.size)
                    except Exception as exc:
                        if getattr(exc, "sqlstate", None) != QUERY_CANCELED or self._passes_ending.is_set():
                            raise
                        if await self._janitor_timed_out(lane, batch, exc):
                            continue
                        break
                    grown = batch.succeeded(result)
                    if grown is not None:
                        log.info("retention: the janitor's batch grows back to %d execution(s)", grown)
                    if result["deleted"]:
                        log.info(
                            "retention: deleted %d execution(s), %d remaining",
                            result["deleted"],
                            result["remaining"],
                        )
                    if not (result["deleted"] and result["remaining"]) or self._passes_ending.is_set():
                        break
                if self.relay_pump is not None:  # shards: seals judged where their runs live
                    await self._collect_seals(lane)
            except asyncio.CancelledError:
                raise
            except InvalidArgument as exc:  # not configured (yet): nothing to do
                log.debug("retention: %s", exc)
            except PermissionDenied as exc:
                log.warning(
                    "retention janitor stopped: %s (connect this process as a login with "
                    "harvest_admin, or set HARVEST_RETENTION__ENABLED=false; a Worker built in "
                    "code: run_retention=False)",
                    exc,
                )
                return
            except Exception as exc:
                if not lane.note_failure(exc, "retention"):
                    log.warning("retention run failed: %s", failure_reason(exc, lane.dsn))
            await self._passes_end(self.retention_interval)

    async def _janitor_timed_out(self, lane: ShardLane, batch: JanitorBatch, exc: Exception) -> bool:
        """A janitor batch the statement_timeout ended (57014; rolled back whole): whether the
        round goes on with a smaller batch. One WARNING a new size (and one when the floor's
        batch is ended too), a DEBUG line for each retry at the floor: never one a round."""
        configured = None
        if batch.size is None and batch.configured is None:  # the configured size, to halve it
            try:
                configured = (await lane.sql.get_retention_status())["batch_size"]
            except Exception as status_exc:  # (its count may run past the timeout too)
                log.debug("retention: batch size not read: %s", failure_reason(status_exc, lane.dsn))
        floor_before = batch.at_floor
        smaller = batch.timed_out(configured)
        if smaller is not None:
            log.warning(
                "retention: a batch ran past the statement_timeout and was rolled back (%s); the "
                "janitor's batches are now %d execution(s) (it grows back after %d that succeed). "
                "To keep the configured size, give this login a longer timeout: ALTER ROLE <login> "
                "SET statement_timeout = '5min' (it overrides the database's)",
                failure_reason(exc, lane.dsn),
                smaller,
                batch.grow_after,
            )
            return True
        batch.at_floor = True
        (log.debug if floor_before else log.warning)(
            "retention: a batch of %d execution(s) ran past the statement_timeout and was rolled "
            "back (%s); nothing is deleted until a batch that small fits: give this login a longer "
            "timeout (ALTER ROLE <login> SET statement_timeout = '5min'), or find what holds it "
            "(a lock: pg_stat_activity)",
            batch.size,
            failure_reason(exc, lane.dsn),
        )
        return False

    async def _prune_audit_log(self, lane: ShardLane, age: str) -> None:
        """The audit rows older than ``retention.audit_max_age`` deleted, batch after batch until
        none older remains (a batch that deletes none while some remain: another prune holds
        them). An age the database refuses (HR001, or not an interval) is one warning naming the
        key; the round goes on."""
        from harvest.db.prunes import prune_audit_log_steps
        from harvest.db.steps import arun_steps

        deleted = 0
        try:
            steps = prune_audit_log_steps(age, stop=self._passes_ending.is_set)
            deleted = (await arun_steps(steps, lane.sql))["deleted"]
        except Exception as exc:
            # Refused by the function (HR001: '0 days') or by the cast to interval ('banana',
            # SQLSTATE 22007), which used to fail the whole round: no run was ever pruned.
            if not (isinstance(exc, InvalidArgument) or invalid_input(exc)):
                raise
            (log.debug if self._audit_age_refused else log.warning)(
                "retention: the audit log is not pruned: retention.audit_max_age %r: %s",
                age,
                failure_reason(exc, lane.dsn),
            )
            self._audit_age_refused = True
        if deleted:
            log.info("retention: deleted %d audit row(s) older than %s", deleted, age)

    async def _collect_seals(self, lane: ShardLane) -> None:
        """One page of the shard's MIGRATED seals past the window, each judged on the shard its
        run lives on, the collectable ones dropped (harvest/worker/seals.py); the page's keyset
        kept for the next pass, from the start again after the last page."""
        assert self.relay_pump is not None
        after = self._seal_cursors.get(lane.shard)
        report = await collect_seals(self.relay_pump.pools, lane.shard, after=after)
        self._seal_cursors[lane.shard] = report["next"]
        if report["deleted"]:
            log.info("retention: deleted %d seal(s) of run(s) moved away and collected", report["deleted"])
        if report["unreachable"]:
            log.info(
                "retention: seals pointing to shard(s) %s kept: not reachable from here",
                ", ".join(map(str, report["unreachable"])),
            )

    async def _passes_end(self, secs: float) -> bool:
        """Wait ``secs`` between two passes of the scanner or the janitor: True (at once) when
        the stop ends them."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._passes_ending.wait(), secs)
        return self._passes_ending.is_set()
