"""The Worker's options: every tunable with its name, default and bounds, in one place.

``WorkerOptions`` is shared by the constructor (``Worker(app, dsn, options=WorkerOptions(...))``,
or the same names as keyword arguments), ``harvest.toml`` (the fields with a ``config`` key:
``[worker] concurrency``, ``retention.interval`` ...; see ``harvest.config``) and ``harvest
worker`` (flags > ``HARVEST_*`` variables > file, built into one ``WorkerOptions``). The config
file's types and bounds are read from here, so a tunable is defined once.

Every interval has a floor: a 0 s heartbeat or poll interval is a busy loop (a 0 s heartbeat
committed ~2,400 times a second).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from harvest.core.durations import plain_number
from harvest.core.errors import ConfigError, InvalidArgument
from harvest.core.ids import shard_number

__all__ = [
    "AUTO",
    "Tunable",
    "WorkerOptions",
    "parse_shard_assignments",
    "refuse_auto_with_cells",
    "resolve_shard_assignments",
    "tunables",
]

# shard_assignments' default: every shard this process has a pool for.
AUTO = "auto"


def parse_shard_assignments(value: Any, key: str = "Worker(shard_assignments)") -> tuple[int, ...] | str:
    """``"auto"`` or the sorted, distinct shard numbers of a list (or of a string ``"0,1"``, as a
    ``HARVEST_*`` variable gives it); anything else is an InvalidArgument naming ``key``."""
    if value is None:
        return AUTO
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == AUTO:
            return AUTO
        parts = [p.strip() for p in text.split(",") if p.strip()]
        value = [int(p) if p.isdigit() else p for p in parts]
    if isinstance(value, bytes) or not isinstance(value, list | tuple | set | frozenset):
        raise InvalidArgument(f'{key}: expected "auto" or a list of shard numbers, got {value!r}')
    for shard in value:
        shard_number(shard, key)
    if not value:
        raise InvalidArgument(
            f'{key} is empty: list the shards to poll, or "auto" for every shard with a url'
        )
    return tuple(sorted(set(value)))


def resolve_shard_assignments(
    assignments: tuple[int, ...] | str, configured: Iterable[int]
) -> tuple[int, ...]:
    """The shards a worker polls: every ``configured`` shard (the shards with a url) for
    ``"auto"``, else the assigned ones, each of which must be configured: a ConfigError naming
    the key and the shard otherwise, so the worker refuses to start."""
    configured = sorted(set(configured))
    if assignments == AUTO:
        if not configured:
            raise ConfigError("worker.shard_assignments is auto and no shard has a url: set database_url")
        return tuple(configured)
    missing = [s for s in assignments if s not in configured]
    if missing:
        shard = missing[0]
        raise ConfigError(
            f"worker.shard_assignments names shard {shard}, which has no url: add shards.urls.{shard} "
            f"(HARVEST_SHARDS__URLS__{shard}) or remove it from worker.shard_assignments"
        )
    return tuple(cast("tuple[int, ...]", assignments))  # not AUTO: the shard numbers


def refuse_auto_with_cells(assignments: tuple[int, ...] | str, reserved: Iterable[int]) -> None:
    """The guide's rule for tenant cells (docs/sharding.md, "Tenant cells"): a worker left on
    ``"auto"`` would poll every shard with a url, the reserved cell shards included, so the
    start is refused with one line naming the key while the router reserves any shard. Explicit
    assignments pass (a cell's pool lists its cell, the shared pool the shared shards)."""
    cells = sorted(set(reserved))
    if assignments == AUTO and cells:
        listed = ", ".join(map(str, cells))
        raise ConfigError(
            f"worker.shard_assignments is auto, and shards.reserved reserves tenant cell shard(s) {listed}: "
            "an auto worker would poll the cells too; list the shards this worker polls "
            "(HARVEST_WORKER__SHARD_ASSIGNMENTS, e.g. the shared shards, or one cell's shard)"
        )


def _num(
    low: float,
    high: float,
    default: Any,
    *,
    integer: bool = False,
    optional: bool = False,
    unit: str = "",
    config: tuple[str, str] | None = None,
) -> Any:
    """A numeric tunable: ``low <= value <= high``; ``optional`` allows None; ``config`` is its
    harvest.toml key, when the file may set it."""
    return field(
        default=default,
        metadata={
            "bounds": (low, high),
            "integer": integer,
            "optional": optional,
            "unit": unit,
            "config": config,
        },
    )


def _secs(low: float, high: float, default: float, *, config: tuple[str, str] | None = None) -> Any:
    return _num(low, high, default, unit=" seconds", config=config)


@dataclass(frozen=True)
class WorkerOptions:
    """How a Worker runs. Frozen: derive a variant with :meth:`replace`."""

    # The queues to poll (None: every queue the App's workflows and activities use).
    queues: list[str] | None = None
    # Tasks in flight at once, and the most one claim takes.
    concurrency: int = _num(1, 10_000, 20, integer=True, config=("worker", "concurrency"))
    claim_batch: int = _num(1, 1_000, 20, integer=True)
    # Plain `def` activities run in a thread pool of this many threads (None: concurrency, so
    # every slot can run one); @activity(executor="process") ones in a process pool of this many
    # processes (None: the CPU count), started with the first such task (docs/activities.md).
    activity_threads: int | None = _num(
        1, 10_000, None, integer=True, optional=True, config=("worker", "activity_threads")
    )
    activity_processes: int | None = _num(
        1, 1_024, None, integer=True, optional=True, config=("worker", "activity_processes")
    )
    # Seconds: the drain on SIGTERM, the heartbeat, the fallback poll (notifications wake the loop
    # first), the timeout scanner's tick, a workflow task's lease, the retention janitor's tick.
    shutdown_grace: float = _secs(0, 86_400, 30.0, config=("worker", "shutdown_grace"))
    heartbeat_interval: float = _secs(0.1, 3_600, 5.0, config=("worker", "heartbeat_interval"))
    # Silent this long (no heartbeat), the worker is lost: the scanner takes back the tasks it
    # held, activities as a failed attempt (WorkerLost). At least 3 x heartbeat_interval; None:
    # 6 x heartbeat_interval (30 s by default).
    lost_after: float | None = _num(
        0.3, 86_400, None, optional=True, unit=" seconds", config=("worker", "lost_after")
    )
    poll_interval: float = _secs(0.01, 3_600, 2.0)
    scan_interval: float = _secs(0.01, 3_600, 1.0)
    workflow_lease: float = _secs(0.1, 86_400, 30.0)
    retention_interval: float = _secs(0.1, 86_400, 60.0, config=("retention", "interval"))
    # Runs kept in the sticky cache (an LRU; 0 replays every task), and the most bytes they may
    # hold by the cache's estimate (a fixed cost per run plus the payloads fed to it; docs/
    # workflows.md "The sticky cache"); past either bound the least recently used runs go.
    # None: bounded in runs only.
    cache_size: int = _num(0, 10_000_000, 1000, integer=True, config=("worker", "cache_size"))
    cache_max_bytes: int | None = _num(
        0, 2**62, 256 * 1024 * 1024, integer=True, optional=True, config=("worker", "cache_max_bytes")
    )
    worker_id: str | None = None  # None: <host>-<pid>-<random>
    # History guardrails (docs/workflows.md): the soft threshold feeds ctx.should_continue_as_new();
    # a run past a hard cap fails (None: unlimited); the bloat warning fires at this fraction of
    # the event cap.
    continue_as_new_threshold: int = _num(1, 10**9, 10_000, integer=True)
    history_event_hard_cap: int | None = _num(1, 10**9, 50_000, integer=True, optional=True)
    history_byte_hard_cap: int | None = _num(1, 2**62, 50 * 1024 * 1024, integer=True, optional=True)
    history_bloat_warn_fraction: float = _num(0, 1, 0.2048)
    # Process roles (harvest.config): the claim loop, the scheduler-side loops, the janitor.
    # run_retention None: the janitor follows run_scanner, as retention.run_on = "scheduler"
    # places it in a configured process (a Worker built with no config has no role: both on).
    run_worker: bool = True
    run_scanner: bool = True
    run_retention: bool | None = None
    # The janitor's age for the audit log (config key retention.audit_max_age, a PostgreSQL
    # interval such as "400 days"): each round deletes the audit rows older than that
    # (harvest.prune_audit_log, batch after batch). None, the default: never, as the engine
    # always did; prune it as your audit policy says (`harvest audit prune`).
    audit_max_age: str | None = None
    # Hand a task a commit returned straight to a free slot (docs/workflows.md, Hand-off).
    hand_off: bool = True
    # Results, failures and heartbeat details larger than this fail the activity here, typed
    # and final (PayloadTooLarge); None: the server's limit, read at start.
    max_payload_bytes: int | None = _num(
        1, 2**31 - 1, None, integer=True, optional=True, config=("worker", "max_payload_bytes")
    )
    # The shards whose tasks this worker claims (docs/sharding.md, Workers and shard assignments):
    # "auto" = every shard this process has a pool for (shards.urls, shard 0 = the database
    # url), or shard numbers; config key worker.shard_assignments.
    shard_assignments: tuple[int, ...] | str = AUTO
    # The rebalance-resume scanner (shards only; docs/sharding.md, "Automatic resume"): a move
    # a killed rebalancer left past its cutover, idle rebalance_stall_after seconds, is
    # activated and completed by the worker, one pass every rebalance_resume_interval seconds
    # per assigned shard. Off: only `harvest shard rebalance-resume` settles it.
    rebalance_resume_enabled: bool = True
    rebalance_resume_interval: float = _secs(5, 86_400, 5.0, config=("worker", "rebalance_resume_interval"))
    rebalance_stall_after: float = _secs(5, 86_400, 30.0, config=("worker", "rebalance_stall_after"))
    # The probes' liveness (`harvest worker --health-port`, harvest/worker/probes.py): /health/live
    # answers 503 once the event loop has not turned for this many seconds (a blocking call in
    # async code); past the worker's stale mark (2 x heartbeat_interval) and a GC pause's length.
    liveness_stall_after: float = _secs(2, 86_400, 30.0, config=("worker", "liveness_stall_after"))
    # Telemetry (docs/observability.md): count Prometheus metrics on the hot paths, and (with the
    # scanner) sample the database's gauges every metrics_interval seconds, on the one process
    # per database that holds the sampler's lock; 0 turns the sampler off.
    metrics: bool = True
    metrics_interval: float = _num(0, 3_600, 15.0, unit=" seconds")

    def __post_init__(self) -> None:
        for tunable in tunables():
            tunable.check(getattr(self, tunable.name))
        if self.audit_max_age is not None and (
            not isinstance(self.audit_max_age, str) or not self.audit_max_age.strip()
        ):
            raise InvalidArgument(
                f"Worker(audit_max_age={self.audit_max_age!r}): allowed a PostgreSQL interval such as "
                "'400 days', or None to never prune the audit log"
            )
        # (a hair of slack: 3 x 0.1 is 0.30000000000000004 in floating point)
        if self.lost_after is not None and self.lost_after * (1 + 1e-9) < 3 * self.heartbeat_interval:
            raise InvalidArgument(
                f"Worker(lost_after={self.lost_after!r}): allowed at least 3 x heartbeat_interval "
                f"({plain_number(3 * self.heartbeat_interval)} seconds), or None for 6 x heartbeat_interval"
            )
        if self.queues is not None:
            object.__setattr__(self, "queues", _queue_names(self.queues))
        object.__setattr__(self, "shard_assignments", parse_shard_assignments(self.shard_assignments))

    def replace(self, **changes: Any) -> WorkerOptions:
        """A copy with ``changes`` applied (and checked); an unknown name is a TypeError."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise TypeError(
                f"Worker() got unknown option(s) {', '.join(unknown)}; "
                f"the options are {', '.join(f.name for f in dataclasses.fields(self))}"
            )
        return dataclasses.replace(self, **changes) if changes else self


def _queue_names(queues: Any) -> list[str]:
    """``queues``: a list of queue names. A string was polled letter by letter (sorted("orders"):
    d, e, o, r, r, s) and a name that is not one reached the database as another type."""
    if isinstance(queues, str) or not isinstance(queues, Iterable):
        raise InvalidArgument(
            f"Worker(queues={queues!r}): expected a list of queue names, queues=[{queues!r}]"
        )
    names = list(queues)
    for name in names:
        if not isinstance(name, str) or not name.strip() or "\x00" in name:
            raise InvalidArgument(f"Worker(queues=...): {name!r} is not a queue name (a non-empty string)")
    return names


def retention_placed(options: WorkerOptions) -> bool:
    """Whether a Worker built with ``options`` runs the retention janitor. An explicit
    ``run_retention`` wins; unset, the janitor follows the scheduler (``run_scanner``), as
    ``retention.run_on = "scheduler"`` places it in a configured process. (A Worker with no
    role and the scheduler off warns that its retention may run nowhere: Worker.__init__, once
    per worker, however many places ask this.)"""
    return options.run_scanner if options.run_retention is None else options.run_retention


@dataclass(frozen=True)
class Tunable:
    """One numeric option of WorkerOptions: its name, default, bounds and harvest.toml key."""

    name: str
    default: Any
    low: float
    high: float
    integer: bool
    optional: bool  # None allowed (no cap, or the server's limit)
    unit: str  # " seconds" or ""
    config: tuple[str, str] | None

    def check(self, value: Any) -> None:
        """Refuse a value outside the bounds with one line naming it (InvalidArgument)."""
        if value is None and self.optional:
            return
        ok_type = isinstance(value, int if self.integer else int | float) and not isinstance(value, bool)
        if not ok_type or not self.low <= cast(float, value) <= self.high:  # NaN fails the comparison
            raise InvalidArgument(
                f"Worker({self.name}={value!r}): allowed {'an integer' if self.integer else 'a number'} "
                f"from {plain_number(self.low)} to {plain_number(self.high)}"
            )


def tunables() -> Iterator[Tunable]:
    """The numeric options, in declaration order."""
    for f in dataclasses.fields(WorkerOptions):
        if "bounds" in f.metadata:
            low, high = f.metadata["bounds"]
            yield Tunable(
                f.name,
                f.default,
                low,
                high,
                f.metadata["integer"],
                f.metadata["optional"],
                f.metadata["unit"],
                f.metadata["config"],
            )
