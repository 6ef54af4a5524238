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
import contextlib
import logging
import time
from collections.abc import Iterator

import psycopg
import pytest
from outage_helpers import wait_until
from psycopg_pool import PoolTimeout

from harvest import App, workflow
from harvest.db import pools
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

pytestmark = pytest.mark.chaos


@pytest.fixture(scope="module")
def small_server() -> Iterator[EmbeddedPostgres]:
    # No slots kept for superusers (the tests connect as one): a full server refuses them too.
    pg = EmbeddedPostgres(
        settings={
            "fsync": "off",
            "max_connections": "14",
            "superuser_reserved_connections": "0",
            "reserved_connections": "0",
        },
        in_memory=True,
    )
    pg.start()
    try:
        Migrator(pg.dsn).run()
        yield pg
    finally:
        pg.stop()


@contextlib.contextmanager
def full(dsn: str, application_name: str) -> Iterator[None]:
    """Every free slot of the server taken by an idle session, then every backend of the pool
    under test (its ``application_name``) ended: its next connect meets 53300."""
    held: list[psycopg.Connection] = []

    def fill(for_secs: float = 0.0) -> None:
        """Take every free slot; keep taking the slots that free for ``for_secs`` more."""
        until = time.monotonic() + for_secs
        refused = None
        while refused is None or time.monotonic() < until:
            try:
                held.append(psycopg.connect(dsn, autocommit=True, connect_timeout=5))
            except psycopg.OperationalError as exc:
                refused = str(exc)
        assert "too many clients" in refused, refused

    try:
        fill()
        end = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
        left = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        # The slots the ended backends free are taken at once, before the pool's next connect
        # (its attempts are a second or more apart); one it took anyway is ended again.
        for _ in range(20):
            held[0].execute(end, (application_name,))
            fill(for_secs=0.5)
            if held[0].execute(left, (application_name,)).fetchone()[0] == 0:
                break
        yield
    finally:
        for conn in held:
            conn.close()


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
    small_server: EmbeddedPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = small_server.dsn

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


@workflow
async def full_idle(ctx) -> None:
    await ctx.wait_for_signal("never")


def test_the_scanner_says_a_server_at_max_connections_is_full_not_down(
    small_server: EmbeddedPostgres, start_worker, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = psycopg.conninfo.make_conninfo(small_server.dsn, application_name="full-worker")
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
    with full(small_server.dsn, "full-worker"):
        failed = wait_until(turned_away, "a scan tick turned away at max_connections", timeout=20)
    # Before: "ServerUnreachable: the database cannot be reached now (sorry, too many clients already)".
    assert "ServerFull" in failed[0] and "max_connections" in failed[0], failed
    assert "cannot be reached" not in failed[0]
    wait_until(
        lambda: any(r.getMessage() == "timeout scan: the database answers again" for r in caplog.records),
        "the scanner to answer again once a slot is free",
        timeout=20,
    )
