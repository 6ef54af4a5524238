"""The pools lend the connection returned last (harvest.db.pools, docs/performance.md "Canonical
drain, seventh cut"): calls stay on as few backends as their concurrency needs, so each backend
that runs the hot statements is one more that plans them. psycopg_pool alone lends the one
returned first, so every connection of a pool takes turns."""

from __future__ import annotations

import asyncio

import psycopg

from harvest.db.pools import open_async_pool, open_pool


async def _pid(conn: psycopg.AsyncConnection) -> int:
    row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
    assert row is not None
    return int(row[0])


def test_the_async_pool_lends_the_connection_returned_last(db: str) -> None:
    async def go() -> None:
        pool = await open_async_pool(db, min_size=3, max_size=3)
        try:
            await pool.wait()
            # Three connections at once, given back oldest first: a, b, c.
            held = [await pool.getconn() for _ in range(3)]
            pids = [await _pid(conn) for conn in held]
            for conn in held:
                await pool.putconn(conn)
            # One caller at a time: always the one given back last (c), never a or b.
            for _ in range(5):
                async with pool.connection() as conn:
                    assert await _pid(conn) == pids[2]
            # Two at once: the two given back last, newest first.
            async with pool.connection() as first, pool.connection() as second:
                assert [await _pid(first), await _pid(second)] == [pids[2], pids[1]]
            # The least recently used stays at the head of the deque, where the pool's own
            # shrinking (max_idle) takes the connection it closes.
            assert await _pid(pool._pool[0]) == pids[0]
        finally:
            await pool.close()

    asyncio.run(go())


def test_the_sync_pool_lends_the_connection_returned_last(db: str) -> None:
    pool = open_pool(db, min_size=3, max_size=3)
    try:
        pool.wait()
        held = [pool.getconn() for _ in range(3)]
        pids = [conn.info.backend_pid for conn in held]
        for conn in held:
            pool.putconn(conn)
        for _ in range(5):
            with pool.connection() as conn:
                assert conn.info.backend_pid == pids[2]
        with pool.connection() as first, pool.connection() as second:
            assert [first.info.backend_pid, second.info.backend_pid] == [pids[2], pids[1]]
    finally:
        pool.close()


def test_a_lone_connection_and_an_empty_pool_still_lend(db: str) -> None:
    async def go() -> None:
        pool = await open_async_pool(db, min_size=1, max_size=2)
        try:
            async with pool.connection() as conn:  # one ready connection: no reordering needed
                first = await _pid(conn)
                async with pool.connection() as other:  # none ready: the pool grows, as before
                    assert await _pid(other) != first
        finally:
            await pool.close()

    asyncio.run(go())
