"""An error the database answered with is not a database that cannot be reached.

psycopg calls whole SQLSTATE classes an OperationalError: 55 (55P03 a lock not available, 55000
raised by a function), 57014 (a statement timeout), 53 (out of memory), as well as a lost
connection. The shard pools turned every OperationalError into ShardUnavailable, so a bug in a
SQL function raising 55000 read as "shard 0 is unavailable" (an operator sent to check the
network, a client retrying an error that repeats, a fan-out answering partial). Only a failed or
lost connection is unavailable (harvest.db.pools.database_unreachable); each kind here is raised
inside a call on a real connection of each pool.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Iterator

import psycopg
import pytest
from worker_helpers import RunningWorker

from harvest import App, Client, Worker, activity, workflow
from harvest.core.errors import ShardUnavailable
from harvest.db.pools import open_pool
from harvest.shard.fanout import fan_out
from harvest.shard.pools import AsyncShardPools, ShardPools
from harvest.shard.router import ShardRouter


@pytest.fixture
def held_row(db: str) -> Iterator[None]:
    """A row of a table of its own, locked FOR UPDATE by another connection for the test."""
    with psycopg.connect(db, autocommit=True) as setup:
        setup.execute("CREATE TABLE public.held (id int PRIMARY KEY)")
        setup.execute("INSERT INTO public.held VALUES (1)")
    with psycopg.connect(db) as holder:
        holder.execute("SELECT id FROM public.held WHERE id = 1 FOR UPDATE")
        yield
        holder.rollback()


def _terminated(db: str, pid: int) -> None:
    with psycopg.connect(db, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s, 10000)", [pid]).fetchone() == (True,)


# Each kind: what it runs on a lent connection (the sync and the async twin), and what a
# caller of the pools must see. The lost connection is the one kind that is unavailable.
NOWAIT = "SELECT id FROM public.held WHERE id = 1 FOR UPDATE NOWAIT"
RAISES = "DO $$ BEGIN RAISE EXCEPTION 'a bug in a new function' USING ERRCODE = '55000'; END $$"
KINDS = {
    "lock_not_available": psycopg.errors.LockNotAvailable,
    "statement_timeout": psycopg.errors.QueryCanceled,
    "raised_55000": psycopg.errors.ObjectNotInPrerequisiteState,
    "lost_connection": ShardUnavailable,
}


def _run(conn: psycopg.Connection, kind: str, db: str) -> None:
    if kind == "lock_not_available":
        conn.execute(NOWAIT)
    elif kind == "statement_timeout":
        with conn.transaction():
            conn.execute("SET LOCAL statement_timeout = '50ms'")
            conn.execute("SELECT pg_sleep(30)")
    elif kind == "raised_55000":
        conn.execute(RAISES)
    else:
        _terminated(db, conn.info.backend_pid)
        conn.execute("SELECT 1")


async def _run_async(conn: psycopg.AsyncConnection, kind: str, db: str) -> None:
    if kind == "lock_not_available":
        await conn.execute(NOWAIT)
    elif kind == "statement_timeout":
        async with conn.transaction():
            await conn.execute("SET LOCAL statement_timeout = '50ms'")
            await conn.execute("SELECT pg_sleep(30)")
    elif kind == "raised_55000":
        await conn.execute(RAISES)
    else:
        await asyncio.to_thread(_terminated, db, conn.info.backend_pid)
        await conn.execute("SELECT 1")


def _shard_pools(db: str) -> ShardPools:
    return ShardPools(ShardRouter(readable=[0], writable=[0], default=0), {0: db}, acquire_timeout=10)


@pytest.mark.parametrize("kind", KINDS)
def test_the_shard_pools_raise_the_databases_answer_and_only_a_lost_connection_as_unavailable(
    db: str, held_row: None, kind: str
) -> None:
    pools = _shard_pools(db)
    try:
        with pytest.raises(KINDS[kind]) as raised, pools.connection(0) as conn:
            _run(conn, kind, db)
        if kind != "lost_connection":
            assert not isinstance(raised.value, ShardUnavailable)
        with pools.api(0) as sql:  # the shard answers the next call: it never was down
            assert sql.get_shard_id() == 0
    finally:
        pools.close()


@pytest.mark.parametrize("kind", KINDS)
def test_the_async_shard_pools_raise_the_databases_answer_and_only_a_lost_connection_as_unavailable(
    db: str, held_row: None, kind: str
) -> None:
    async def main() -> None:
        pools = AsyncShardPools(
            ShardRouter(readable=[0], writable=[0], default=0), {0: db}, acquire_timeout=10
        )
        try:
            with pytest.raises(KINDS[kind]):
                async with pools.connection(0) as conn:
                    await _run_async(conn, kind, db)
            async with pools.api(0) as sql:
                assert await sql.get_shard_id() == 0
        finally:
            await pools.close()

    asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_one_databases_pool_tells_a_lost_connection_from_the_databases_answer(
    db: str, held_row: None, kind: str
) -> None:
    """The predicate every caller asks (the management API's 503, the dashboard's, a fan-out's
    unavailable shard), on what a plain pool's connection raised."""
    from harvest.db.pools import database_unreachable

    pool = open_pool(db, max_size=2)
    try:
        with pytest.raises(psycopg.OperationalError) as raised, pool.connection() as conn:
            _run(conn, kind, db)
        assert database_unreachable(raised.value) is (kind == "lost_connection"), raised.value
    finally:
        pool.close()


def test_a_pool_with_no_connection_in_time_is_unreachable(db: str) -> None:
    from harvest.db.pools import database_unreachable

    pool = open_pool(db, max_size=1)
    try:
        with (
            pool.connection(),
            pytest.raises(psycopg.OperationalError) as raised,
            pool.connection(timeout=0.1),
        ):
            pass
        assert database_unreachable(raised.value)
    finally:
        pool.close()


def test_a_fan_out_raises_a_shards_sql_error_instead_of_naming_it_unavailable(
    two_shards: dict[int, str],
) -> None:
    """A SQL error on one shard is raised by the fan-out (a bug, not an outage): before, the read
    answered ``partial`` with the shard in ``unavailable_shards``, as if it were down."""
    bodies = {0: "RETURN 0;", 1: "RAISE EXCEPTION 'a bug in a new function' USING ERRCODE = '55000';"}
    for shard, body in bodies.items():
        with psycopg.connect(two_shards[shard], autocommit=True) as conn:
            conn.execute(
                f"CREATE FUNCTION public.probe() RETURNS int LANGUAGE plpgsql AS $$ BEGIN {body} END $$"
            )
    pools = ShardPools(
        ShardRouter(readable=[0, 1], writable=[0, 1], default=0), two_shards, acquire_timeout=10
    )
    try:
        providers = {s: functools.partial(pools.api, s) for s in (0, 1)}
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
            fan_out(providers, lambda api: api.conn.execute("SELECT public.probe()").fetchone())
    finally:
        pools.close()


@activity
async def _double(ctx, n: int) -> int:
    return n * 2


@workflow
async def _doubled(ctx, n: int) -> int:
    return await ctx.execute_activity(_double, n)


def test_a_sharded_worker_does_not_mark_a_shard_down_for_its_sql_error(
    two_shards: dict[int, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Shard 1's claim function fails with 55000 (a bug in it): the worker logs the claim's
    error with its SQLSTATE and claims there again at its next poll, serving shard 0 meanwhile;
    before, it marked shard 1 down ("shard 1 is unavailable") and probed it as an outage."""
    caplog.set_level(logging.WARNING, logger="harvest.worker")
    with psycopg.connect(two_shards[1], autocommit=True) as conn:
        ((args, result),) = conn.execute(
            "SELECT pg_get_function_arguments(oid), pg_get_function_result(oid) FROM pg_proc "
            "WHERE pronamespace = 'harvest'::regnamespace AND proname = 'claim_tasks'"
        ).fetchall()
        conn.execute(
            f"CREATE OR REPLACE FUNCTION harvest.claim_tasks({args}) RETURNS {result} LANGUAGE plpgsql "
            "AS $$ BEGIN RAISE EXCEPTION 'a bug in a new function' USING ERRCODE = '55000'; END $$"
        )
    app = App(workflows=[_doubled], activities=[_double])
    running = RunningWorker(Worker(app, shards=two_shards, poll_interval=0.1, scan_interval=0.2)).start()
    try:
        with Client(two_shards[0]) as client:
            assert client.start_workflow(_doubled, 21).result(timeout=30) == 42
        deadline = time.monotonic() + 30  # (a bound, not a timing: the next poll is 0.1 s away)
        while not any("shard 1" in r.getMessage() for r in caplog.records):  # (what it made of it)
            assert time.monotonic() < deadline, "the claim's error on shard 1 was never logged"
            time.sleep(0.05)
        lane = next(lane for lane in running.worker.lanes if lane.shard == 1)
        assert lane.outages == 0 and not lane.down
    finally:
        running.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "harvest.worker"]
    assert not any("is unavailable" in line for line in lines), lines
    assert any("SQLSTATE 55000" in line and "a bug in a new function" in line for line in lines), lines
