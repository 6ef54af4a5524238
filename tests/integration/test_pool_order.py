"""The pools lend the connection returned last (harvest.db.pools): one call at a time keeps to
one server backend, whose plans and caches are warm, instead of rotating over all of them
(docs/performance.md, "One-item calls")."""

from __future__ import annotations

import asyncio

from harvest.db import pools
from harvest.db.pools import open_async_pool, open_pool


def test_the_async_pool_lends_the_connection_returned_last(db: str) -> None:
    async def go() -> None:
        pool = await open_async_pool(db, min_size=3, max_size=3)
        try:
            pids = []
            for _ in range(6):
                async with pool.connection() as conn:
                    pids.append(conn.info.backend_pid)
            assert len(set(pids)) == 1, pids
            # Two at once still take two connections, and the one returned last comes back next.
            async with pool.connection() as first, pool.connection() as second:
                assert first.info.backend_pid != second.info.backend_pid
                last = first.info.backend_pid
            async with pool.connection() as conn:
                assert conn.info.backend_pid == last
        finally:
            await pool.close()

    asyncio.run(go())


def test_the_sync_pool_lends_the_connection_returned_last(db: str) -> None:
    pool = open_pool(db, min_size=3, max_size=3)
    try:
        pool.wait()
        pids = []
        for _ in range(6):
            with pool.connection() as conn:
                pids.append(conn.info.backend_pid)
        assert len(set(pids)) == 1, pids
    finally:
        pool.close()


def test_a_connection_idle_too_long_is_pinged_and_a_dead_one_not_lent(db: str) -> None:
    """Lent last-returned-first, the connections beyond the usual one idle through a quiet
    spell, and a server or proxy may close them meanwhile: one idle past IDLE_CHECK_SECS is
    pinged before it is lent, and a dead one is replaced instead of failing the call."""
    import psycopg

    async def go() -> None:
        pool = await open_async_pool(db, min_size=2, max_size=2)
        try:
            async with pool.connection() as older, pool.connection() as newer:
                older_pid, newer_pid = older.info.backend_pid, newer.info.backend_pid
                stale = older
            # (newer went back last, so it is lent first; older is the idle one behind it)
            with psycopg.connect(db, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [older_pid])
            stale._harvest_idle_since -= pools.IDLE_CHECK_SECS + 1
            async with pool.connection() as first, pool.connection() as second:
                assert first.info.backend_pid == newer_pid
                assert second.info.backend_pid not in (older_pid, newer_pid)
                assert (await (await second.execute("SELECT 1")).fetchone()) == (1,)
        finally:
            await pool.close()

    asyncio.run(go())


def test_a_connection_in_steady_use_is_lent_without_a_ping(db: str, monkeypatch) -> None:
    calls: list[object] = []
    monkeypatch.setattr(pools.AsyncConnectionPool, "check_connection", staticmethod(calls.append))

    async def go() -> None:
        pool = await open_async_pool(db, min_size=1, max_size=1)
        try:
            for _ in range(3):
                async with pool.connection() as conn:
                    await conn.execute("SELECT 1")
        finally:
            await pool.close()

    asyncio.run(go())
    assert calls == []
