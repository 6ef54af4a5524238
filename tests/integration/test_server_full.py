"""A server at max_connections is up but full, not down (harvest.db.pools.ServerFull): a pool whose
connects it turns away (SQLSTATE 53300, which libpq reports in words only) says so in its
log line, in what it raises, and in the scanner's line, with the remedy (raise max_connections or
lower the pools' sizes), and finds the server again as soon as a slot frees. Before, every one of
them read as an outage: "the database cannot be reached now (sorry, too many clients already)".

A real server of the module's own, with room for a handful of sessions: the test fills it with
idle sessions of its own, then ends the pool's backends (pg_terminate_backend) so the pool must
connect into the full server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import psycopg
import pytest
from outage_helpers import full, small_server, wait_until
from psycopg_pool import PoolTimeout

from harvest import App, workflow
from harvest.db import pools
from harvest.db.embedded import EmbeddedPostgres
from harvest.telemetry.metrics import process_metrics

pytestmark = pytest.mark.chaos


@pytest.fixture(scope="module")
def full_server() -> Iterator[EmbeddedPostgres]:
    with small_server() as pg:
        yield pg


async def first_refusal(pool) -> PoolTimeout:
    """Calls until the pool refuses one (its dead connections found, its connects turned away)."""
    for _ in range(200):
        try:
            async with pool.connection(timeout=5) as conn:
                await conn.execute("SELECT 1")
        except PoolTimeout as exc:
            return exc
        except psycopg.errors.AdminShutdown:  # (a call on an ended backend)
            pass
        await asyncio.sleep(0.02)
    raise AssertionError("never refused")


def test_a_pool_turned_away_at_max_connections_says_the_server_is_full(
    full_server: EmbeddedPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = full_server.dsn

    async def main() -> None:
        pool = await pools.open_async_pool(dsn, max_size=2, application_name="full-test")
        try:
            with full(dsn, "full-test"):
                # The scanner's way (unless_unreachable): refused at once, and said to be full.
                with pools.unless_unreachable():
                    refused = await first_refusal(pool)
                said = str(refused)  # (before: "the database cannot be reached now (...)")
                assert type(refused).__name__ == "ServerFull", said
                assert "max_connections" in said and "53300" in said and "too many clients" in said
                # A caller that waits: its PoolTimeout says why it got no connection.
                with pytest.raises(PoolTimeout, match="the server is up but full"):
                    async with pool.connection(timeout=0.5):
                        pass
            # A slot free again: the pool connects within its reconnect cap.
            async with pool.connection(timeout=pools.RECONNECT_CAP_SECS + 3) as conn:
                assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
        finally:
            await pool.close()

    caplog.set_level(logging.WARNING, logger="psycopg.pool")
    asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.name == "psycopg.pool"]
    failed = [line for line in lines if line.startswith("error connecting in")]
    assert len(failed) == 1, lines  # one line an outage, not one an attempt
    assert "max_connections" in failed[0] and "53300" in failed[0], failed[0]


def ticks(outcome: str) -> float:
    found = process_metrics().registry.get_sample_value(
        "harvest_scanner_tick_total", {"shard": "0", "outcome": outcome}
    )
    return 0.0 if found is None else found


@workflow
async def full_idle(ctx) -> None:
    await ctx.wait_for_signal("never")


def test_the_scanner_says_a_server_at_max_connections_is_full_not_down(
    full_server: EmbeddedPostgres, start_worker, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = psycopg.conninfo.make_conninfo(full_server.dsn, application_name="full-worker")
    caplog.set_level(logging.INFO, logger="harvest.worker")
    start_worker(App(workflows=[full_idle]), dsn=dsn, scan_interval=0.1, run_retention=False)
    started = lambda: any("polling" in r.getMessage() for r in caplog.records)  # noqa: E731
    wait_until(started, "the worker to start")

    def turned_away() -> list[str]:  # (the first tick may meet the ended backend itself)
        return [
            r.getMessage()
            for r in caplog.records
            if r.getMessage().startswith("timeout scan failed") and "too many clients" in r.getMessage()
        ]

    caplog.set_level(logging.DEBUG, logger="harvest.worker")  # (a tick's line after an outage's first)
    full_ticks = ticks("server_full")
    with full(full_server.dsn, "full-worker"):
        failed = wait_until(turned_away, "a scan tick turned away at max_connections", timeout=20)
        # Counted as a full server's tick, not a down one's (before: outcome="error" only).
        wait_until(lambda: ticks("server_full") > full_ticks, "a server_full tick", timeout=20)
    # Before: "ServerUnreachable: the database cannot be reached now (sorry, too many clients already)".
    assert "ServerFull" in failed[0] and "max_connections" in failed[0], failed
    assert "cannot be reached" not in failed[0]
    wait_until(
        lambda: any(r.getMessage() == "timeout scan: the database answers again" for r in caplog.records),
        "the scanner to answer again once a slot is free",
        timeout=20,
    )
