"""The worker's scanner under an outage and under a busy pool (docs/observability.md, the scanner
metrics): a tick the database cannot answer is counted as an error within a tick, not after the
pool's 30 s wait for a connection, and logged once an outage; a pool whose connections are all
lent (the database fine) is waited for, so the scan still runs (and expires a lease) with no error
tick, however long the burst holds them."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from outage_helpers import wait_until

from harvest import App, Client, RetryPolicy, activity, workflow
from harvest.telemetry.metrics import process_metrics


def ticks(outcome: str) -> float:
    found = process_metrics().registry.get_sample_value(
        "harvest_scanner_tick_total", {"shard": "0", "outcome": outcome}
    )
    return 0.0 if found is None else found


@workflow
async def scan_outage_idle(ctx) -> None:
    await ctx.wait_for_signal("never")


def test_a_worker_cut_from_its_database_counts_error_ticks_and_logs_once(
    outage, start_worker, caplog: pytest.LogCaptureFixture
) -> None:
    proxy, url = outage
    start_worker(App(workflows=[scan_outage_idle]), dsn=url, scan_interval=0.2)
    ok = ticks("ok")
    wait_until(lambda: ticks("ok") > ok, "a scan tick through the forwarder")
    caplog.set_level(logging.DEBUG, logger="harvest.worker")
    error = ticks("error")
    proxy.down()
    # Before: each tick waited the pool's 30 s for a connection, and none was counted meanwhile.
    wait_until(lambda: ticks("error") - error >= 3, "three error ticks", timeout=10)
    failed = [r for r in caplog.records if r.getMessage().startswith("timeout scan failed")]
    assert len(failed) >= 3
    assert [r.levelno for r in failed].count(logging.WARNING) == 1  # one line an outage
    proxy.up()
    ok = ticks("ok")
    wait_until(lambda: ticks("ok") > ok, "a scan tick once the database is back")
    assert any(r.getMessage() == "timeout scan: the database answers again" for r in caplog.records)


RUNNING = threading.Event()
RELEASE = threading.Event()


@activity(start_to_close="1s", retry=RetryPolicy.none())
async def scan_busy_hangs(ctx) -> None:
    RUNNING.set()
    while not RELEASE.is_set():  # (its lease expires meanwhile: only the scan fails the run)
        await asyncio.sleep(0.05)


@workflow
async def scan_busy_wf(ctx) -> None:
    await ctx.execute_activity(scan_busy_hangs)


def test_a_busy_pool_is_waited_for_and_the_scan_still_expires_a_lease(start_worker, client: Client) -> None:
    """Every connection of the worker's pool lent longer than a scan would wait in an outage:
    the scan waits its turn (an attempt that gave up after max(scan_interval, 1 s) went to the
    back of the queue each tick and counted error ticks), then expires the attempt's lease."""
    running = start_worker(App(workflows=[scan_busy_wf], activities=[scan_busy_hangs]), concurrency=2)
    worker = running.worker
    client.start_workflow(scan_busy_wf)
    assert RUNNING.wait(20)
    pool = worker.lanes[0].sql.pool
    assert running.loop is not None
    error = ticks("error")

    def expired() -> float:
        found = process_metrics().registry.get_sample_value(
            "harvest_activity_failed_total",
            {
                "workflow_type": "scan_busy_wf",
                "activity": "scan_busy_hangs",
                "error_type": "StartToCloseTimeout",
            },
        )
        return 0.0 if found is None else found

    before = expired()

    async def hold_every_connection() -> None:
        held = [await pool.getconn() for _ in range(pool.max_size)]
        try:
            # The scan (and the claim loop) wait for one; then longer than a second.
            while not pool.get_stats().get("requests_waiting"):
                await asyncio.sleep(0.02)
            await asyncio.sleep(1.5)
        finally:
            for conn in held:
                await pool.putconn(conn)

    try:
        asyncio.run_coroutine_threadsafe(hold_every_connection(), running.loop).result(30)
        # The scan that waited expires the attempt (counted by the scanner that expired it).
        wait_until(lambda: expired() > before, "the scanner expired the attempt's lease")
        assert ticks("error") == error
    finally:
        RELEASE.set()
