"""Prometheus metrics: one registry per process, counted on the hot paths, sampled from SQL.

Two kinds of numbers (docs/observability.md has the table of every name):

* **Counted** by the process that does the work, on its hot paths: tasks dispatched per queue
  and shard, claim latency, activity completions and failures, workflow tasks, terminal runs,
  continue-as-new, history sizes, transaction retries, scanner ticks, relay pump moves. Each
  update is a dict lookup and an increment (label children are cached), so counting costs a
  few hundred nanoseconds per task.
* **Sampled** from the database by one placed sampler per database (harvest/worker/sampler.py,
  ``harvest.get_metric_samples()``): queue depth and age, dead letters, workers, concurrency
  keys, stranded work, relay backlogs, retention lag. A process that is not the sampler's
  leader exports none of these, so a gauge is never emitted twice.

Names are the spec's with dots as underscores (``harvest.workflow.history_size`` is
``harvest_workflow_history_size``); labels are bounded: queue, kind, workflow type, activity,
error type, shard, worker health, at most ``max_keys`` concurrency keys. Never an id.

Without ``prometheus-client`` (the ``metrics`` extra) :func:`process_metrics` answers a
:class:`NullMetrics` whose methods do nothing, and :func:`render_metrics` says how to install it.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from types import EllipsisType
from typing import Any, cast

from harvest.core.errors import ConfigError
from harvest.core.sqlstates import session_ended

try:  # the `metrics` extra
    import prometheus_client as _prom
    from prometheus_client import CollectorRegistry, Gauge
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
    from prometheus_client.utils import floatToGoString
except ImportError:  # pragma: no cover - exercised by the import test in a bare interpreter
    _prom = None  # type: ignore[assignment]  # the module, or None without prometheus-client

__all__ = [
    "CONTENT_TYPE",
    "Metrics",
    "NullMetrics",
    "available",
    "metric_names",
    "process_metrics",
    "render_metrics",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds: claims, workflow tasks and activities (a claim is ~1 ms; an activity may take minutes).
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# Events in a terminal run's history (the default hard cap is 50,000).
_HISTORY_BUCKETS = (10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 50_000)

# The key the concurrency keys past the sampler's limit are summed under.
OTHER_KEYS = "_other"


# The schedule names harvest_schedule_missed_total keeps a series each for, per process: the
# schedules missed past them are counted under OTHER_KEYS (schedules made at runtime, one per
# tenant or per job, would make a series each for the life of the process).
SCHEDULE_LABELS_MAX = 200


# The reason label of harvest_db_transaction_retry_total for the SQLSTATEs a retry is for.
_RETRY_REASONS = {"40P01": "deadlock", "40001": "serialization_failure", "55P03": "lock_not_available"}


def retry_reason(exc: BaseException) -> str:
    """The bounded ``reason`` label of a retried transaction's error."""
    state = getattr(exc, "sqlstate", None)
    if state in _RETRY_REASONS:
        return _RETRY_REASONS[state]
    # A connection that failed with no SQLSTATE, or a session that ended under the call (the
    # same SQLSTATEs harvest/db/resend.py sends a report again for).
    if type(exc).__name__ in ("OperationalError", "PoolTimeout") or session_ended(state):
        return "connection"
    return "other"


def available() -> bool:
    """Whether prometheus-client is installed (the ``metrics`` extra)."""
    return _prom is not None


class _CounterChild:
    __slots__ = ("lock", "value")

    def __init__(self, lock: Any):
        self.lock = lock
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        with self.lock:
            self.value += amount


class _HistogramChild:
    __slots__ = ("bounds", "counts", "lock", "sum")

    def __init__(self, lock: Any, bounds: tuple[float, ...]):
        self.lock = lock
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        with self.lock:
            self.observe_locked(value)

    def observe_locked(self, value: float) -> None:
        """``observe`` for a caller that holds the lock already (Metrics.activity_finished)."""
        self.counts[bisect_left(self.bounds, value)] += 1  # the first bucket whose bound (le) holds it
        self.sum += value


class _Family:
    """A hot-path counter or histogram: label children cached by label values, each update a
    dict lookup and an addition under one uncontended lock (several times cheaper than a
    prometheus_client metric's), exposed by :class:`_HotCollector` at scrape time."""

    __slots__ = ("bounds", "children", "doc", "kind", "labels", "lock", "name")

    def __init__(
        self, kind: str, name: str, doc: str, labels: Iterable[str], lock: Any, bounds: tuple[Any, ...] = ()
    ):
        self.kind, self.name, self.doc, self.labels = kind, name, doc, list(labels)
        self.lock, self.bounds = lock, tuple(float(b) for b in bounds)
        self.children: dict[tuple[Any, ...], Any] = {}

    def __call__(self, *labels: Any) -> Any:
        child = self.children.get(labels)
        if child is None:
            if len(labels) != len(self.labels):
                raise ValueError(f"{self.name} takes labels {self.labels}, got {labels!r}")
            made = (
                _CounterChild(self.lock)
                if self.kind == "counter"
                else _HistogramChild(self.lock, self.bounds)
            )
            child = self.children.setdefault(labels, made)
        return child

    def family(self) -> Any:
        if self.kind == "counter":
            family: Any = CounterMetricFamily(self.name, self.doc, labels=self.labels)
            for labels, child in list(self.children.items()):
                family.add_metric([str(v) for v in labels], child.value)
            return family
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        edges = [floatToGoString(b) for b in self.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        for labels, child in list(self.children.items()):
            with self.lock:
                counts, total = list(child.counts), child.sum
            cumulative, running = [], 0
            for edge, count in zip(edges, counts, strict=True):
                running += count
                cumulative.append((edge, running))
            family.add_metric([str(v) for v in labels], cumulative, total)
        return family


class _HotCollector:
    """Exposes the hot-path families of one Metrics (a prometheus_client custom collector)."""

    def __init__(self, families: list[_Family]):
        self.families = families

    def collect(self) -> Iterable[Any]:
        for family in self.families:
            yield family.family()


class _Sampled:
    """A sampled gauge: each sample sets the label sets it saw and removes those it did not
    (a queue that emptied out, a key that went away), so the exposition is the last sample."""

    __slots__ = ("metric", "seen")

    def __init__(self, metric: Any):
        self.metric = metric
        self.seen: dict[str, set[tuple[str, ...]]] = {}  # per shard

    def replace(self, shard: str, values: Mapping[tuple[str, ...], float]) -> None:
        for labels, value in values.items():
            self.metric.labels(shard, *labels).set(value)
        for labels in self.seen.get(shard, set()) - set(values):
            try:
                self.metric.remove(shard, *labels)
            except KeyError:
                pass
        self.seen[shard] = set(values)

    def forget(self, shard: str) -> None:
        self.replace(shard, {})


class Metrics:
    """The metrics of one process (or of one test's registry)."""

    def __init__(self, registry: Any = None):
        if _prom is None:
            raise RuntimeError("prometheus-client is not installed: pip install 'harvest-workflows[metrics]'")
        self.registry: Any = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry

        lock = threading.Lock()
        hot: list[_Family] = []

        def counter(name: str, doc: str, labels: Iterable[str]) -> _Family:
            hot.append(_Family("counter", name, doc, labels, lock))
            return hot[-1]

        def histogram(name: str, doc: str, labels: Iterable[str], buckets: tuple[Any, ...]) -> _Family:
            hot.append(_Family("histogram", name, doc, labels, lock, buckets))
            return hot[-1]

        def sampled(name: str, doc: str, labels: Iterable[str]) -> _Sampled:
            self._sampled_names.append(name)
            return _Sampled(Gauge(name, doc, ["shard", *labels], registry=r))

        self._sampled_names: list[str] = []

        # -- counted on the hot paths ------------------------------------------------------------
        self.queue_dispatched = counter(
            "harvest_queue_dispatched",
            "Tasks dispatched to a handler (claimed or handed off), per queue and kind.",
            ("queue", "kind"),
        )
        self.shard_dispatched = counter(
            "harvest_shard_dispatched",
            "Tasks dispatched per shard (the shard twin of harvest_queue_dispatched).",
            ("shard",),
        )
        self.claim_duration = histogram(
            "harvest_claim_duration_seconds",
            "Latency of one claim_tasks round trip, per shard.",
            ("shard",),
            _LATENCY_BUCKETS,
        )
        self.activity_completed = counter(
            "harvest_activity_completed",
            "Activity attempts that returned a result.",
            ("workflow_type", "activity"),
        )
        self.activity_failed = counter(
            "harvest_activity_failed",
            "Activity attempts that failed (retried, dead-lettered or final), by error type.",
            ("workflow_type", "activity", "error_type"),
        )
        self.activity_duration = histogram(
            "harvest_activity_duration_seconds",
            "Time an activity attempt ran in its handler.",
            ("activity",),
            _LATENCY_BUCKETS,
        )
        self.workflow_task_duration = histogram(
            "harvest_workflow_task_duration_seconds",
            "A workflow task from dispatch to committed decision (replay included).",
            ("workflow_type",),
            _LATENCY_BUCKETS,
        )
        self.workflow_task_replays = counter(
            "harvest_workflow_task_replays",
            "Workflow tasks that replayed the history from the start (no warm cached run).",
            ("workflow_type",),
        )
        self.workflow_task_failed = counter(
            "harvest_workflow_task_failed",
            "Workflow tasks that failed on the worker (non-determinism, an unknown workflow, a bug).",
            ("workflow_type", "error_type"),
        )
        self.workflow_terminal = counter(
            "harvest_workflow_terminal",
            "Runs closed, by status: by a decision of this process, or (TERMINATED, TIMED_OUT, a "
            "superseded CANCELLED) counted by the placed sampler.",
            ("workflow_type", "status"),
        )
        self.workflow_history_size = histogram(
            "harvest_workflow_history_size",
            "Events in the history of a run when it closed.",
            ("workflow_type",),
            _HISTORY_BUCKETS,
        )
        self.workflow_continue_as_new = counter(
            "harvest_workflow_continue_as_new",
            "Runs that continued as new (rotated their history).",
            ("workflow_type",),
        )
        self.workflow_history_bloat = counter(
            "harvest_workflow_history_bloat",
            "Runs past the history-bloat warning (once per run and worker).",
            ("workflow_type",),
        )
        self.db_transaction_retry = counter(
            "harvest_db_transaction_retry",
            "Engine transactions retried, by call site and reason.",
            ("site", "reason"),
        )
        self.scanner_tick = counter(
            "harvest_scanner_tick",
            "Scanner ticks (harvest.scan), per shard and outcome (ok, error, server_full).",
            ("shard", "outcome"),
        )
        self.scanner_last_tick = Gauge(
            "harvest_scanner_last_tick_timestamp_seconds",
            "When the scanner last ticked on a shard.",
            ["shard"],
            registry=r,
        )
        self.relay_pump = counter(
            "harvest_relay_pump",
            "Cross-shard relay rows the pump claimed, settled or released for a retry.",
            ("outcome",),
        )
        self.cross_shard_child = counter(
            "harvest_cross_shard_child",
            "Cross-shard children the pump moved a step: started, settled (an end or a close policy "
            "reached), released (no progress: retried with a backoff).",
            ("outcome",),
        )
        self.external_signal_by_id_indeterminate_shard = counter(
            "harvest_external_signal_by_id_indeterminate_shard",
            "External signals and cancels (by execution id, or by business key per shard its fan-out "
            "missed) left pending because a shard could not be inspected (kind: no_pool in this "
            "process, or unreachable).",
            ("shard", "kind"),
        )
        self.external_signal_by_id_found_over_incomplete_fanout = counter(
            "harvest_external_signal_by_id_found_over_incomplete_fanout",
            "External signals and cancels by business key delivered to a live run found while some "
            "shard of the fan-out could not be inspected.",
            (),
        )
        self.schedule_missed = counter(
            "harvest_schedule_missed",
            "Schedule fires that were skipped or came too late (fed by the schedule ticker).",
            ("schedule",),
        )
        self.concurrency_superseded = counter(
            "harvest_concurrency_superseded",
            "Runs superseded by a newer run of their concurrency key (counted by the placed sampler).",
            ("workflow",),
        )
        # -- sampled from SQL by the placed sampler ---------------------------------------------
        self.queue_claimable = sampled(
            "harvest_queue_claimable", "Tasks due and waiting for a claim (the backlog).", ("queue", "kind")
        )
        self.queue_scheduled = sampled(
            "harvest_queue_scheduled",
            "Tasks pending with a due time in the future (retries, delays).",
            ("queue", "kind"),
        )
        self.queue_depth_estimated = sampled(
            "harvest_queue_depth_estimated",
            "1: this queue's claimable and scheduled are estimated from a block sample (its pending "
            "tasks are past the exact-count cap); 0: exact.",
            ("queue", "kind"),
        )
        self.queue_running = sampled("harvest_queue_running", "Tasks claimed and running.", ("queue", "kind"))
        self.queue_schedule_to_start = sampled(
            "harvest_queue_schedule_to_start_seconds",
            "How long the oldest claimable task has waited since it was due (0: none waits).",
            ("queue", "kind"),
        )
        self.timers_pending = sampled("harvest_timers_pending", "Durable timers not fired yet.", ())
        self.dlq_size = sampled(
            "harvest_dlq_size",
            "Dead letters parked, per workflow and activity.",
            ("workflow_type", "activity"),
        )
        self.workers = sampled(
            "harvest_workers",
            "Workers not stopped, per queue and health (healthy, draining, stale).",
            ("queue", "health"),
        )
        self.concurrency_in_flight = sampled(
            "harvest_concurrency_in_flight",
            f"Live work holding a concurrency key (the busiest keys; the rest summed as {OTHER_KEYS}).",
            ("key", "task_type"),
        )
        self.concurrency_pending = sampled(
            "harvest_concurrency_pending", "Work waiting on a concurrency key.", ("key", "task_type")
        )
        self.concurrency_pending_estimated = sampled(
            "harvest_concurrency_pending_estimated",
            f"1: the {OTHER_KEYS} pending sum is estimated (the keyed pending activities are past the "
            "exact-count cap); 0: exact.",
            (),
        )
        self.shard_stranded_pending = sampled(
            "harvest_shard_stranded_pending",
            "Claimable tasks on a queue no live worker of the shard polls.",
            ("queue",),
        )
        self.relay_backlog = sampled(
            "harvest_relay_backlog",
            "Relay rows not delivered yet (local, or remote: for the cross-shard pump).",
            ("kind",),
        )
        self.relay_oldest_age = sampled(
            "harvest_relay_oldest_age_seconds", "Age of the oldest remote relay row.", ()
        )
        self.external_signal_by_id_stuck_age = sampled(
            "harvest_external_signal_by_id_oldest_pending_indeterminate_age_seconds",
            "Age of the oldest by-id external signal to another shard that a delivery attempt left pending.",
            (),
        )
        self.external_cancel_by_id_stuck_age = sampled(
            "harvest_external_cancel_by_id_oldest_pending_indeterminate_age_seconds",
            "Age of the oldest by-id external cancel to another shard that a delivery attempt left pending.",
            (),
        )
        self.cross_shard_children = sampled(
            "harvest_cross_shard_children_in_flight", "Cross-shard children not settled yet.", ()
        )
        self.cross_shard_children_oldest_age = sampled(
            "harvest_cross_shard_children_oldest_age_seconds",
            "Age of the oldest unsettled cross-shard child.",
            (),
        )
        # The child's side of the same (issue #1263): ended children this shard keeps until their
        # parent's shard takes their ends. A count that stays, or an age that grows, is a parent
        # waiting on a child's end (its shard, or its pump, away; or a shard gone for good).
        self.child_ends_owed = sampled(
            "harvest_cross_shard_child_ends_owed",
            "Ended cross-shard children kept for their parent's shard until it takes their ends.",
            ("parent_shard",),
        )
        self.child_ends_owed_oldest_age = sampled(
            "harvest_cross_shard_child_ends_owed_oldest_age_seconds",
            "How long the oldest ended cross-shard child kept for a parent's shard has waited (0: none).",
            ("parent_shard",),
        )
        self.retention_lag = sampled(
            "harvest_retention_lag_seconds",
            "How long the oldest terminal run past retention.max_age has waited for the janitor.",
            (),
        )
        self.schema_behind = sampled(
            "harvest_schema_behind",
            "1 when the database's schema is older than this process's (migrate).",
            (),
        )
        self.sampler_last_success = sampled(
            "harvest_sampler_last_success_timestamp_seconds", "When the sampler last read this database.", ()
        )
        self.sampler_errors = counter(
            "harvest_sampler_errors", "Samples that failed (the database did not answer).", ("shard",)
        )

        r.register(_HotCollector(hot))
        # The hot paths' children by their calls' labels, each call's two children in one
        # look-up and their updates under one hold of the lock (see dispatched).
        self._lock = lock
        self._dispatched: dict[tuple[Any, ...], tuple[_CounterChild, _CounterChild]] = {}
        self._completed: dict[tuple[str, str], tuple[_CounterChild, _HistogramChild]] = {}

    # -- hot paths ---------------------------------------------------------------------------------
    def dispatched(self, queue: str, kind: str, shard: int) -> None:
        # (queue_dispatched(queue, kind).inc() and shard_dispatched(shard).inc(): four calls a
        # task, where the children's pair is one look-up)
        pair = self._dispatched.get((queue, kind, shard))
        if pair is None:
            pair = (self.queue_dispatched(queue, kind), self.shard_dispatched(shard))
            self._dispatched[(queue, kind, shard)] = pair
        with self._lock:
            pair[0].value += 1.0
            pair[1].value += 1.0

    def claimed(self, shard: int, seconds: float) -> None:
        self.claim_duration(shard).observe(seconds)

    def activity_finished(
        self, workflow_type: str, activity: str, seconds: float, error_type: str | None = None
    ) -> None:
        if error_type is None:
            # (activity_completed(...).inc() and activity_duration(activity).observe(seconds),
            # the children's pair in one look-up, as dispatched does)
            pair = self._completed.get((workflow_type, activity))
            if pair is None:
                pair = (self.activity_completed(workflow_type, activity), self.activity_duration(activity))
                self._completed[(workflow_type, activity)] = pair
            completed, duration = pair
            with self._lock:
                completed.value += 1.0
                duration.observe_locked(seconds)
            return
        self.activity_failed(workflow_type, activity, error_type).inc()
        self.activity_duration(activity).observe(seconds)

    def workflow_task(self, workflow_type: str, seconds: float, replayed: bool) -> None:
        self.workflow_task_duration(workflow_type).observe(seconds)
        if replayed:
            self.workflow_task_replays(workflow_type).inc()

    def workflow_task_failure(self, workflow_type: str, error_type: str) -> None:
        self.workflow_task_failed(workflow_type, error_type).inc()

    def workflow_closed(self, workflow_type: str, status: str, history_size: int) -> None:
        self.workflow_terminal(workflow_type, status).inc()
        self.workflow_history_size(workflow_type).observe(history_size)
        if status == "CONTINUED_AS_NEW":
            self.workflow_continue_as_new(workflow_type).inc()

    def forced_close(self, workflow_type: str, status: str, history_size: int, superseded: bool) -> None:
        """For the sampler: a run closed outside any decision (harvest.list_forced_closes)."""
        self.workflow_closed(workflow_type, status, history_size)
        if superseded:
            self.concurrency_superseded(workflow_type).inc()

    def history_bloat(self, workflow_type: str) -> None:
        self.workflow_history_bloat(workflow_type).inc()

    def transaction_retry(self, site: str, reason: str) -> None:
        self.db_transaction_retry(site, reason).inc()

    def scanned(self, shard: int, ok: bool, full: bool = False) -> None:
        """A scanner tick: ``ok``, or failed, on a server up but full (``full``: its connects
        turned away at max_connections, harvest.db.pools.met_full_server) or else."""
        self.scanner_tick(shard, "ok" if ok else "server_full" if full else "error").inc()
        if ok:
            self.scanner_last_tick.labels(str(shard)).set(time.time())

    def attempts_expired(self, expired: list[dict[str, Any]]) -> None:
        """The activity attempts a scan failed (harvest.expire_tasks: a lease or a
        schedule_to_close ran out), which no handler reported: a worker killed mid-activity."""
        for row in expired:
            if row["kind"] == "activity" and row.get("error_type") is not None:
                self.activity_failed(row["workflow_type"], row["activity"], row["error_type"]).inc()

    def pumped(self, claimed: int, settled: int, released: int) -> None:
        if claimed:
            self.relay_pump("claimed").inc(claimed)
        if settled:
            self.relay_pump("settled").inc(settled)
        if released:
            self.relay_pump("released").inc(released)

    def children_stepped(self, steps: Mapping[str, int]) -> None:
        """The relay pump's tick moved cross-shard children: outcome -> how many (PumpReport.children)."""
        for outcome, count in steps.items():
            if count:
                self.cross_shard_child(outcome).inc(count)

    def by_id_indeterminate(self, counts: Mapping[tuple[int, str], int]) -> None:
        """By-id external signals and cancels the relay pump left pending this tick because the
        target's shard could not be inspected: (shard, ``no_pool`` | ``unreachable``) -> count."""
        for (shard, kind), count in counts.items():
            self.external_signal_by_id_indeterminate_shard(shard, kind).inc(count)

    def by_id_found_over_incomplete_fanout(self, count: int) -> None:
        """Business-key deliveries the relay pump made this tick to a live run found while some
        shard could not be inspected (PumpReport.found_over_incomplete_fanout)."""
        if count:
            self.external_signal_by_id_found_over_incomplete_fanout().inc(count)

    def missed_schedule(self, schedule: str, count: int = 1) -> None:
        """For the schedule ticker: ``count`` fires of ``schedule`` skipped or late (under
        OTHER_KEYS once SCHEDULE_LABELS_MAX schedules have a series)."""
        family = self.schedule_missed
        if (schedule,) not in family.children and len(family.children) >= SCHEDULE_LABELS_MAX:
            schedule = OTHER_KEYS
        family(schedule).inc(count)

    # -- the sampler -------------------------------------------------------------------------------
    def apply_samples(self, samples: Mapping[str, Any], *, schema_behind: bool = False) -> None:
        """Publish one ``harvest.get_metric_samples()`` answer (every gauge of its shard)."""
        shard = str(samples["shard_id"])
        queues = samples.get("queues") or []
        self.queue_claimable.replace(shard, {(q["queue"], q["kind"]): q["claimable"] for q in queues})
        self.queue_scheduled.replace(shard, {(q["queue"], q["kind"]): q["scheduled"] for q in queues})
        self.queue_depth_estimated.replace(
            shard, {(q["queue"], q["kind"]): 1 if q.get("estimated") else 0 for q in queues}
        )
        self.queue_running.replace(shard, {(q["queue"], q["kind"]): q["running"] for q in queues})
        self.queue_schedule_to_start.replace(
            shard, {(q["queue"], q["kind"]): max(0.0, q["oldest_claimable_secs"] or 0.0) for q in queues}
        )
        self.timers_pending.replace(shard, {(): samples.get("timers_pending") or 0})
        self.dlq_size.replace(
            shard,
            {(d["workflow_name"], d["activity_name"]): d["count"] for d in samples.get("dead_letters") or []},
        )
        self.workers.replace(
            shard, {(w["queue"], w["health"]): w["count"] for w in samples.get("workers") or []}
        )
        keys = samples.get("concurrency") or []
        in_flight: dict[tuple[str, ...], float] = {(k["key"], k["task_type"]): k["in_flight"] for k in keys}
        pending: dict[tuple[str, ...], float] = {(k["key"], k["task_type"]): k["pending"] for k in keys}
        other = samples.get("other_keys") or {}
        # The keys past max_keys, while they hold work ("keys": their number, from older functions
        # that counted every key; these sum the others and no longer count them).
        if other.get("in_flight") or other.get("pending") or other.get("keys"):
            in_flight[(OTHER_KEYS, "any")] = other["in_flight"]
            pending[(OTHER_KEYS, "any")] = other["pending"]
        self.concurrency_in_flight.replace(shard, in_flight)
        self.concurrency_pending.replace(shard, pending)
        self.concurrency_pending_estimated.replace(shard, {(): 1 if other.get("pending_estimated") else 0})
        self.shard_stranded_pending.replace(
            shard, {(s["queue"],): s["pending"] for s in samples.get("stranded") or []}
        )
        relays = samples.get("relays") or {}
        self.relay_backlog.replace(
            shard, {("local",): relays.get("local", 0), ("remote",): relays.get("remote", 0)}
        )
        self.relay_oldest_age.replace(shard, {(): relays.get("remote_oldest_secs") or 0.0})
        self.external_signal_by_id_stuck_age.replace(
            shard, {(): relays.get("by_id_indeterminate_signal_oldest_secs") or 0.0}
        )
        self.external_cancel_by_id_stuck_age.replace(
            shard, {(): relays.get("by_id_indeterminate_cancel_oldest_secs") or 0.0}
        )
        children = samples.get("cross_shard_children") or {}
        self.cross_shard_children.replace(shard, {(): children.get("in_flight", 0)})
        self.cross_shard_children_oldest_age.replace(shard, {(): children.get("oldest_secs") or 0.0})
        owed = samples.get("owed_child_ends") or []
        self.child_ends_owed.replace(shard, {(str(o["parent_shard"]),): o["ended"] for o in owed})
        self.child_ends_owed_oldest_age.replace(
            shard, {(str(o["parent_shard"]),): max(0.0, o["oldest_secs"] or 0.0) for o in owed}
        )
        retention = samples.get("retention") or {}
        self.retention_lag.replace(
            shard, {(): max(0.0, retention.get("lag_secs") or 0.0)} if retention.get("configured") else {}
        )
        self.schema_behind.replace(shard, {(): 1 if schema_behind else 0})
        self.sampler_last_success.replace(shard, {(): time.time()})

    def sample_failed(self, shard: int) -> None:
        self.sampler_errors(shard).inc()

    def forget_samples(self, shard: int) -> None:
        """Stop exporting a shard's sampled gauges (this process no longer leads its sampler)."""
        for value in vars(self).values():
            if isinstance(value, _Sampled):
                value.forget(str(shard))

    def render(self) -> bytes:
        return _prom.generate_latest(self.registry)  # pyright: ignore[reportOptionalMemberAccess]  # set: Metrics() needs it

    def render_sampled(self) -> bytes:
        """The exposition of the gauges sampled from the database only (`harvest metrics`): a
        one-shot process has no counter worth printing (each would start at 0 every run)."""
        restricted = self.registry.restricted_registry(self._sampled_names)
        return _prom.generate_latest(restricted)  # pyright: ignore[reportOptionalMemberAccess]  # set: Metrics() needs it


class NullMetrics:
    """Metrics turned off (``Worker(metrics=False)``) or not installed: every update is a no-op."""

    registry = None

    def __getattr__(self, name: str) -> Any:
        return _nothing

    def render(self) -> bytes:
        return render_metrics(None)


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


NULL_METRICS = NullMetrics()
_PROCESS: Metrics | None = None


def process_metrics() -> Metrics | NullMetrics:
    """This process's metrics (one registry per process), or NullMetrics without prometheus-client."""
    global _PROCESS
    if _prom is None:
        return NULL_METRICS
    if _PROCESS is None:
        _PROCESS = Metrics()
    return _PROCESS


def serve_metrics(port: int, host: str = "127.0.0.1") -> Any:
    """Serve this process's metrics at ``http://host:port/metrics`` from a daemon thread
    (``harvest worker --metrics-port``); unauthenticated: bind it where only the scraper reaches."""
    if _prom is None:
        raise ConfigError("--metrics-port needs prometheus-client: pip install 'harvest-workflows[metrics]'")
    try:
        return _prom.start_http_server(port, addr=host, registry=cast(Metrics, process_metrics()).registry)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None


def render_metrics(metrics: Metrics | NullMetrics | EllipsisType | None = ...) -> bytes:
    """The Prometheus text exposition of ``metrics`` (default: this process's)."""
    if metrics is ...:
        metrics = process_metrics()
    if _prom is None or metrics is None or isinstance(metrics, NullMetrics):
        if _prom is None:
            return b"# harvest metrics need prometheus-client: pip install 'harvest-workflows[metrics]'\n"
        return b""
    return metrics.render()


def metric_names(metrics: Metrics | None = None) -> set[str]:
    """Every sample name the registry can expose (``_total``, ``_bucket``, ... included)."""
    metrics = metrics or Metrics()
    names: set[str] = set()
    for family in metrics.registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.update({family.name + "_total", family.name + "_created"})
        elif family.type == "histogram":
            names.update(family.name + s for s in ("_bucket", "_count", "_sum", "_created"))
    return names
