"""An outage costs a bounded number of lines from psycopg_pool (harvest.db.pools._OutageLines).

psycopg_pool logs every failed connect, the driver's error whole, and Harvest's pools try every
2 s at most (RECONNECT_CAP_SECS): a worker's four pools wrote four multi-line warnings every 2 s
of an outage. Now a pool's first failure is one line, then one a minute (the filter's clock,
set here, not waited for), then one when it connects again. The attempts are scaled down
(psycopg_pool's first gap and the cap: 20 ms) so that many fail within a second.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from outage_helpers import wait_until
from psycopg_pool import PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from harvest.db import pools


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 0.02)
    monkeypatch.setattr(pools, "RECONNECT_CAP_SECS", 0.02)
    clock = _Clock()
    if hasattr(pools, "OUTAGE_LINES"):  # (the old code has none: it logs every attempt)
        monkeypatch.setattr(pools.OUTAGE_LINES, "clock", clock)
    return clock


def _lines(caplog: pytest.LogCaptureFixture, pool_name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "psycopg.pool" and r.levelno >= logging.WARNING and pool_name in r.getMessage()
    ]


def _attempts(name: str) -> int:
    """Failed connects seen by the filter and not logged (the old code: read off the lines)."""
    state = getattr(pools, "OUTAGE_LINES", None)
    return state.down.get(name, [0, 0])[1] if state is not None else 10**6


def _check(caplog: pytest.LogCaptureFixture, name: str, clock: _Clock, port: int, proxy) -> None:
    wait_until(lambda: _lines(caplog, name), "the first failure's line", timeout=10)
    # Many attempts fail (20 ms apart): one line still.
    attempts = wait_until(lambda: _attempts(name) >= 10 and _attempts(name), "ten more attempts", timeout=10)
    lines = _lines(caplog, name)
    assert len(lines) == 1, f"{len(lines)} lines after {attempts} failed attempts: {lines[:3]}"
    (first,) = lines
    assert "\n" not in first and str(port) not in first  # one line; not the DSN (nor its host)
    assert "OperationalError" in first
    clock.now += pools.OUTAGE_LINE_EVERY_SECS + 1  # a minute on
    wait_until(lambda: len(_lines(caplog, name)) == 2, "the minute's line", timeout=10)
    assert "more failed attempts since the last line" in _lines(caplog, name)[1]
    proxy.up()
    wait_until(lambda: len(_lines(caplog, name)) == 3, "the line saying it is back", timeout=10)
    assert "connected again" in _lines(caplog, name)[2]


def test_a_pools_outage_costs_a_line_a_minute(
    outage, quick: _Clock, caplog: pytest.LogCaptureFixture
) -> None:
    proxy, dsn = outage
    caplog.set_level(logging.INFO, logger="psycopg.pool")
    pool = pools.open_pool(dsn, max_size=1, name="quiet-sync")
    try:
        with pool.connection(timeout=10) as conn:
            conn.execute("SELECT 1")
        proxy.down()
        with pytest.raises(PoolTimeout), pool.connection(timeout=0.2) as conn:
            conn.execute("SELECT 1")  # (the dead connection found: the reconnects begin)
        _check(caplog, "quiet-sync", quick, proxy.port, proxy)
        # The pool's other records pass as they were (INFO here): nothing else is hidden.
        assert any(r.getMessage() == "connection requested from 'quiet-sync'" for r in caplog.records)
    finally:
        pool.close()


def test_an_async_pools_outage_too(outage, quick: _Clock, caplog: pytest.LogCaptureFixture) -> None:
    """The asyncio pools' (the management API's, a shard's, the async client's)."""
    proxy, dsn = outage
    caplog.set_level(logging.WARNING, logger="psycopg.pool")

    async def main() -> None:
        pool = await pools.open_async_pool(dsn, max_size=1, name="quiet-async")
        try:
            async with pool.connection(timeout=10) as conn:
                await conn.execute("SELECT 1")
            proxy.down()
            with pytest.raises(PoolTimeout):
                async with pool.connection(timeout=0.2) as conn:
                    await conn.execute("SELECT 1")
            await asyncio.to_thread(_check, caplog, "quiet-async", quick, proxy.port, proxy)
        finally:
            await pool.close()

    asyncio.run(main())
