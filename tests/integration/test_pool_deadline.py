"""A pool lends a connection by the deadline ``connections_by`` sets (a wait's read), not
after its own wait for a connection (harvest.db.pools)."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from psycopg_pool import PoolTimeout

from harvest.db.pools import LAST_CHANCE_SECS, connections_by, open_async_pool, open_pool

OWN_WAIT_SECS = 5.0


def test_a_deadline_cuts_the_pools_wait_for_a_busy_connection(db: str) -> None:
    pool = open_pool(db, max_size=1)
    pool.timeout = OWN_WAIT_SECS
    try:
        with pool.connection():  # the only one, held
            started = time.monotonic()
            with connections_by(time.monotonic() + 0.3), pytest.raises(PoolTimeout), pool.connection():
                pass
            assert time.monotonic() - started < 2
            started = time.monotonic()
            # Outside the block: the pool's own wait (cut to 1 s here).
            with pytest.raises(PoolTimeout), pool.connection(timeout=1.0):
                pass
            assert time.monotonic() - started >= 1.0
        # A deadline already passed still takes a free connection.
        with connections_by(time.monotonic() - 10), pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()


def test_a_deadline_later_than_the_pools_wait_leaves_that_wait(db: str) -> None:
    pool = open_pool(db, max_size=1)
    pool.timeout = 0.5
    try:
        with pool.connection():
            started = time.monotonic()
            with connections_by(time.monotonic() + 60), pytest.raises(PoolTimeout), pool.connection():
                pass
            assert time.monotonic() - started < 5
    finally:
        pool.close()


def test_an_async_pool_lends_by_the_deadline(db: str) -> None:
    async def main() -> float:
        pool = await open_async_pool(db, max_size=1)
        pool.timeout = OWN_WAIT_SECS
        try:
            async with pool.connection():
                started = time.monotonic()
                with connections_by(time.monotonic() + 0.3), pytest.raises(PoolTimeout):
                    async with pool.connection():
                        pass
                return time.monotonic() - started
        finally:
            await pool.close()

    assert asyncio.run(main()) < 2


def test_the_deadline_stays_with_its_task(db: str) -> None:
    """A context variable: a deadline set in one asyncio task does not cut another's wait."""

    async def main() -> tuple[float, float]:
        pool = await open_async_pool(db, max_size=1)
        pool.timeout = 3.0
        held = await pool.getconn()

        async def timed() -> float:
            started = time.monotonic()
            with pytest.raises(PoolTimeout):
                async with pool.connection():
                    pass
            return time.monotonic() - started

        async def cut() -> float:
            with connections_by(time.monotonic() - 10):
                return await timed()

        try:
            cut_took, plain_took = await asyncio.gather(cut(), timed())
            await pool.putconn(held)
            return cut_took, plain_took
        finally:
            await pool.close()

    cut_took, plain_took = asyncio.run(main())
    assert cut_took < LAST_CHANCE_SECS + 1.0
    assert plain_took >= 3.0


def test_a_passed_deadline_still_replaces_a_connection_whose_backend_ended(db: str) -> None:
    """After a restart the pool's idle connection is dead: a call at its wait's deadline still
    gets the time to find that and connect anew (LAST_CHANCE_SECS), not a PoolTimeout."""
    pool = open_pool(db, max_size=1)
    try:
        with pool.connection() as conn:
            pid = conn.info.backend_pid
        with psycopg.connect(db, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        time.sleep(0.2)  # its FATAL message is on the idle connection's socket
        with connections_by(time.monotonic() - 10), pool.connection() as conn:
            assert conn.info.backend_pid != pid
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()


def test_a_block_with_no_deadline_keeps_an_enclosing_ones(db: str) -> None:
    pool = open_pool(db, max_size=1)
    pool.timeout = OWN_WAIT_SECS
    try:
        with pool.connection():  # the only one, held
            started = time.monotonic()
            outer, inner = connections_by(time.monotonic() + 0.3), connections_by(None)
            with outer, inner, pytest.raises(PoolTimeout), pool.connection():
                pass
            assert time.monotonic() - started < 2
    finally:
        pool.close()
