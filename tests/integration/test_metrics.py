"""Prometheus metrics after a known workload (harvest/telemetry/metrics.py, docs/observability.md).

N runs whose activity fails once and then succeeds, and one run whose activity always fails
and is dead-lettered: the counters of the worker that ran them and the gauges of the placed
sampler must say exactly that, and only one of two scanning workers samples the database.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import time
from typing import Any

import psycopg
import pytest

from harvest import App, Client, RetryPolicy, activity, workflow
from harvest.db import testkit
from harvest.telemetry.metrics import process_metrics, render_metrics

N = 4
attempts: dict[int, int] = {}


@activity(retry=RetryPolicy.exponential(max_attempts=3, initial="10ms"))
async def metrics_flaky(ctx, i: int) -> int:
    attempts[i] = attempts.get(i, 0) + 1
    if attempts[i] == 1:
        raise ValueError(f"first attempt of {i} fails")
    return i


@activity(retry=RetryPolicy.none())
async def metrics_broken(ctx) -> None:
    raise ConnectionError("upstream returned 503")


@workflow
async def metrics_wf(ctx, i: int) -> int:
    return await ctx.execute_activity(metrics_flaky, i)


@workflow
async def metrics_dl_wf(ctx) -> None:
    await ctx.execute_activity(metrics_broken)


@activity(start_to_close="60s", retry=RetryPolicy.none())
async def metrics_hangs(ctx) -> None:
    await asyncio.Event().wait()  # a worker that went silent: its handler never reports


@workflow
async def metrics_hang_wf(ctx) -> None:
    await ctx.execute_activity(metrics_hangs)


# Set by the test once the scanner expired metrics_late's attempt: its handler then ends.
LATE_END = threading.Event()


@activity(start_to_close="60s", retry=RetryPolicy.none())
async def metrics_late(ctx) -> None:
    while not LATE_END.is_set():  # (a handler alive past its lease: a blocked loop, a slow call)
        await asyncio.sleep(0.02)
    raise ValueError("ended after the scanner expired it")


@workflow
async def metrics_late_wf(ctx) -> None:
    await ctx.execute_activity(metrics_late)


def value(name: str, **labels: str) -> float:
    found = process_metrics().registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def wait_for(check, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_known_workload_is_counted_and_sampled(start_worker, client: Client) -> None:
    app = App(workflows=[metrics_wf, metrics_dl_wf], activities=[metrics_flaky, metrics_broken])
    worker = start_worker(app, metrics_interval=0.2).worker
    dispatched_before = value("harvest_queue_dispatched_total", queue="default", kind="activity")
    handles = [client.start_workflow(metrics_wf, i) for i in range(N)]
    assert sorted(h.result(timeout=30) for h in handles) == list(range(N))
    client.start_workflow(metrics_dl_wf)

    failed = {"workflow_type": "metrics_wf", "activity": "metrics_flaky", "error_type": "ValueError"}
    assert value("harvest_activity_failed_total", **failed) == N
    assert (
        value("harvest_activity_completed_total", workflow_type="metrics_wf", activity="metrics_flaky") == N
    )
    # The worker counts a close once its batch call returns; the client may have the result first.
    wait_for(
        lambda: value("harvest_workflow_terminal_total", workflow_type="metrics_wf", status="COMPLETED") == N
    )
    assert value("harvest_workflow_history_size_count", workflow_type="metrics_wf") == N
    assert value("harvest_activity_duration_seconds_count", activity="metrics_flaky") == 2 * N
    # 2N activity attempts of metrics_wf, and metrics_dl_wf's one.
    wait_for(
        lambda: (
            value(
                "harvest_activity_failed_total",
                workflow_type="metrics_dl_wf",
                activity="metrics_broken",
                error_type="ConnectionError",
            )
            == 1
        )
    )
    assert (
        value("harvest_queue_dispatched_total", queue="default", kind="activity") - dispatched_before
        == 2 * N + 1
    )
    assert value("harvest_claim_duration_seconds_count", shard="0") > 0
    # The scanner's first tick comes scan_interval (0.2 s here) after the worker starts.
    wait_for(lambda: value("harvest_scanner_tick_total", shard="0", outcome="ok") > 0)

    # The sampler (it leads: the only scanning process on this database) publishes the gauges.
    wait_for(
        lambda: (
            value("harvest_dlq_size", shard="0", workflow_type="metrics_dl_wf", activity="metrics_broken")
            == 1
        )
    )
    assert worker.sampler.leading == {0}
    assert value("harvest_workers", shard="0", queue="default", health="healthy") == 1
    assert value("harvest_schema_behind", shard="0") == 0
    assert value("harvest_queue_claimable", shard="0", queue="default", kind="activity") == 0

    text = render_metrics().decode()
    assert (
        'harvest_activity_failed_total{activity="metrics_flaky",error_type="ValueError",'
        'workflow_type="metrics_wf"} 4.0' in text
    )
    assert 'harvest_dlq_size{activity="metrics_broken",shard="0",workflow_type="metrics_dl_wf"} 1.0' in text


def test_one_sampler_per_database(start_worker) -> None:
    app = App(workflows=[metrics_wf], activities=[metrics_flaky])
    first = start_worker(app, metrics_interval=0.1).worker
    second = start_worker(app, metrics_interval=0.1).worker
    wait_for(lambda: first.sampler.samples + second.sampler.samples >= 3)
    assert sorted([first.sampler.leading, second.sampler.leading], key=len) == [set(), {0}]
    assert min(first.sampler.samples, second.sampler.samples) == 0


class _FailingPump:
    """A cross-shard relay pump whose sweep fails (a remote shard down), after the scan did not."""

    ticks = 0

    async def tick(self, sources) -> None:
        _FailingPump.ticks += 1
        raise RuntimeError("shard 2 is down")


def test_a_scan_tick_is_counted_once_when_the_pump_after_it_fails(start_worker) -> None:
    """A tick whose scan succeeded and whose relay pump then failed was counted twice, ok and
    error: harvest_scanner_tick_total{outcome="error"} rose on ticks that had scanned."""
    ok, error = (value("harvest_scanner_tick_total", shard="0", outcome=o) for o in ("ok", "error"))
    running = start_worker(App(workflows=[metrics_wf], activities=[metrics_flaky]), metrics_interval=0.2)
    running.worker.relay_pump = _FailingPump()
    wait_for(lambda: _FailingPump.ticks >= 2)
    assert value("harvest_scanner_tick_total", shard="0", outcome="ok") - ok >= 2
    assert value("harvest_scanner_tick_total", shard="0", outcome="error") == error


def _expire_its_activity(
    client: Client, conn: Any, clock: Any, wf: Any, activity_name: str, worker: Any
) -> None:
    """Start ``wf`` and, once its activity ``activity_name`` runs, move the shared clock past its
    60 s start_to_close: the next scan expires the attempt's lease. The jump stamps ``worker``'s
    heartbeat at the new time: it is past the worker's lost_after too (30 s), and a scan that
    found the worker lost would fail the attempt with WorkerLost instead."""
    client.start_workflow(wf)

    def status() -> str | None:
        row = conn.execute(
            "SELECT status FROM harvest.tasks WHERE activity_name = %s", (activity_name,)
        ).fetchone()
        return None if row is None else row[0]

    wait_for(lambda: status() == "running")
    clock.set_offset(clock.offset() + dt.timedelta(seconds=61), heartbeat=[worker.worker.worker_id])


def test_an_attempt_whose_lease_the_scanner_expired_is_counted_as_failed(
    start_worker, db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An activity whose worker never reports (killed, hung) fails by the scanner's
    StartToCloseTimeout: harvest_activity_failed_total counted no such attempt, so a poison
    activity dead-lettered that way was invisible to HarvestActivityFailures. The scanner's
    line about it names its run (the line said `activity <task id> dead_lettered`)."""
    caplog.set_level(logging.INFO, logger="harvest.worker")
    labels = {
        "workflow_type": "metrics_hang_wf",
        "activity": "metrics_hangs",
        "error_type": "StartToCloseTimeout",
    }
    before = value("harvest_activity_failed_total", **labels)
    clock = testkit.SharedClock(db)
    try:
        dsn = testkit.shared_clock_dsn(db)
        worker = start_worker(App(workflows=[metrics_hang_wf], activities=[metrics_hangs]), dsn=dsn)
        with Client(dsn) as client, psycopg.connect(db, autocommit=True) as conn:
            _expire_its_activity(client, conn, clock, metrics_hang_wf, "metrics_hangs", worker)
            wait_for(lambda: value("harvest_activity_failed_total", **labels) - before == 1)
            (error_type,) = conn.execute(
                "SELECT failure ->> 'error_type' FROM harvest.dead_letters "
                "WHERE activity_name = 'metrics_hangs'"
            ).fetchone()
            assert error_type == "StartToCloseTimeout"
            (run,) = conn.execute(
                "SELECT execution_id::text FROM harvest.dead_letters WHERE activity_name = 'metrics_hangs'"
            ).fetchone()
        lines = [r for r in caplog.records if r.getMessage().startswith("timeout scanner: activity")]
        expected = f"timeout scanner: activity metrics_hangs attempt 1 of {run} (metrics_hang_wf) failed"
        said = [r.getMessage().split(": StartToCloseTimeout")[0] for r in lines]
        assert said == [f"{expected} (dead_lettered)"]
        assert lines[0].levelno == logging.WARNING
        assert (lines[0].execution_id, lines[0].activity, lines[0].attempt) == (run, "metrics_hangs", 1)
    finally:
        clock.close()


def test_a_handler_that_ends_after_the_scanner_expired_its_attempt_is_not_counted_again(
    start_worker, db: str
) -> None:
    """The scanner counts the attempt whose lease it expired (StartToCloseTimeout); the handler,
    still alive, that ends later (its report refused: the lease is gone) counted its own failure
    too, so one attempt was two failures (docs/observability.md said so)."""
    labels = {"workflow_type": "metrics_late_wf", "activity": "metrics_late"}
    expired_before = value("harvest_activity_failed_total", **labels, error_type="StartToCloseTimeout")
    late_before = value("harvest_activity_failed_total", **labels, error_type="ValueError")
    ended_before = value("harvest_activity_duration_seconds_count", activity="metrics_late")
    LATE_END.clear()
    clock = testkit.SharedClock(db)
    try:
        dsn = testkit.shared_clock_dsn(db)
        worker = start_worker(App(workflows=[metrics_late_wf], activities=[metrics_late]), dsn=dsn)
        with Client(dsn) as client, psycopg.connect(db, autocommit=True) as conn:
            _expire_its_activity(client, conn, clock, metrics_late_wf, "metrics_late", worker)
            wait_for(
                lambda: (
                    value("harvest_activity_failed_total", **labels, error_type="StartToCloseTimeout")
                    - expired_before
                    == 1
                )
            )
            LATE_END.set()  # the handler ends now, its lease long gone
            wait_for(
                lambda: (
                    value("harvest_activity_duration_seconds_count", activity="metrics_late") > ended_before
                )
            )
        assert value("harvest_activity_failed_total", **labels, error_type="ValueError") == late_before
        assert (
            value("harvest_activity_failed_total", **labels, error_type="StartToCloseTimeout")
            - expired_before
            == 1
        )
    finally:
        LATE_END.set()
        clock.close()
