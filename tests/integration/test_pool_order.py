"""The pools lend the connection returned last (harvest.db.pools): one call at a time keeps to
one server backend, whose plans and caches are warm, instead of rotating over all of them
(docs/performance.md, "One-item calls")."""

from __future__ import annotations

import asyncio

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
