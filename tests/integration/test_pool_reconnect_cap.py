"""A pool finds its server back soon after an outage ends (harvest.db.pools, RECONNECT_CAP_SECS).

psycopg_pool replaces the connections an outage took with attempts ever further apart (1 s,
2 s, 4 s, ... up to 5 minutes) and a call with no connection to take waits for the next one:
after a minute's outage a sharded API kept a restarted shard "unreachable" for up to another
minute (CI 61a). Harvest's pools cap the gap. The test runs the outage on a scaled clock:
psycopg_pool's first gap and the cap divided by ten, so the outage lasts 3.2 s instead of 32.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from psycopg_pool import PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from harvest.db import pools


def test_a_pool_finds_its_server_back_within_the_cap(outage, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy, dsn = outage
    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 0.1)  # (psycopg_pool's 1 s, scaled)
    monkeypatch.setattr(pools, "RECONNECT_CAP_SECS", 0.2)  # (Harvest's 2 s, scaled)
    pool = pools.open_pool(dsn, max_size=1)
    try:
        with pool.connection(timeout=10) as conn:
            conn.execute("SELECT 1")
        proxy.down()
        # The dead connection is found as it is lent; its replacement's attempts begin: uncapped
        # they would come 0.1, 0.2, 0.4, 0.8, 1.6 and 3.2 s apart (the last ~6.3 s in).
        with pytest.raises(PoolTimeout), pool.connection(timeout=0.5) as conn:
            conn.execute("SELECT 1")
        time.sleep(2.7)  # down 3.2 s in all
        proxy.up()
        # Capped, the next attempt comes within 0.2 s; uncapped, about 3 s from now.
        with pool.connection(timeout=2.0) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()


def test_an_async_pool_finds_its_server_back_within_the_cap(outage, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for the asyncio pools (the management API's, a shard's, the async client's)."""
    proxy, dsn = outage
    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 0.1)
    monkeypatch.setattr(pools, "RECONNECT_CAP_SECS", 0.2)

    async def main() -> None:
        pool = await pools.open_async_pool(dsn, max_size=1)
        try:
            async with pool.connection(timeout=10) as conn:
                await conn.execute("SELECT 1")
            proxy.down()
            with pytest.raises(PoolTimeout):
                async with pool.connection(timeout=0.5) as conn:
                    await conn.execute("SELECT 1")
            await asyncio.sleep(2.7)
            proxy.up()
            async with pool.connection(timeout=2.0) as conn:
                assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
        finally:
            await pool.close()

    asyncio.run(main())


def test_the_cap_bounds_each_gap_and_the_attempts_still_give_up() -> None:
    attempt = pools._CappedBackoff(timeout=30.0)
    gaps = []
    now = 0.0
    while not attempt.time_to_give_up(now):
        attempt.update_delay(now)
        gaps.append(attempt.delay)
        now += attempt.delay
    assert max(gaps) <= pools.RECONNECT_CAP_SECS
    assert gaps[-2] == pools.RECONNECT_CAP_SECS  # (the doubling reached the cap and stayed)
    assert 29.0 <= now <= 30.0 + pools.RECONNECT_CAP_SECS  # gives up at psycopg_pool's timeout
