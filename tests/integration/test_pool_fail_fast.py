"""A pool opened with ``fail_fast`` (harvest.db.pools, ServerUnreachable) does not make its caller
wait out its timeout for a server that refused it: the shards of the CLI and of the HTTP API,
whose fan-outs name a shard that does not answer. Every command with a shard down waited its
whole ``shards.cli_timeout`` (5 s) for it, every dashboard page ``shard_timeout``, although the
server had refused at once. The waits here are 20 s or more: a caller told in time is told by
the failed connect, never by its timeout (ServerUnreachable is not the timeout's PoolTimeout).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from harvest.db import pools
from harvest.db.pools import ServerUnreachable

LONG_WAIT = 20.0  # a caller's wait: never waited out here


def _refused_dsn(db: str) -> str:
    """A URL of a port nobody listens on (bound and closed: the connect is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return make_conninfo(db, host="127.0.0.1", port=port)


def _until_it_lends(pool, bound: float = 10.0) -> None:
    """Ask ``pool`` until it lends a working connection (ServerUnreachable meanwhile), within
    ``bound`` (the pool tries again every 0.2 s on the scaled clock)."""
    deadline = time.monotonic() + bound
    while True:
        try:
            with pool.connection(timeout=LONG_WAIT) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
            return
        except ServerUnreachable:
            assert time.monotonic() < deadline, "the pool never found its server back"
            time.sleep(0.02)


@pytest.fixture
def scaled_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 0.1)  # (psycopg_pool's 1 s, scaled)
    monkeypatch.setattr(pools, "RECONNECT_CAP_SECS", 0.2)  # (Harvest's 2 s, scaled)


def test_a_caller_is_told_at_once_that_a_refusing_server_cannot_be_reached(db: str) -> None:
    pool = pools.open_pool(_refused_dsn(db), max_size=2, fail_fast=True)
    try:
        # The first caller waits for the pool's first connect, which is refused: told then.
        with pytest.raises(ServerUnreachable), pool.connection(timeout=LONG_WAIT):
            pass
        # The next is told at once: the last connect failed and none has succeeded since.
        with pytest.raises(ServerUnreachable), pool.connection(timeout=LONG_WAIT):
            pass
    finally:
        pool.close(timeout=1)


def test_a_pool_without_fail_fast_still_waits_for_its_server(db: str) -> None:
    """The client's and the worker's pools ride out a restart within their wait, as before."""
    pool = pools.open_pool(_refused_dsn(db), max_size=2)
    try:
        with pytest.raises(PoolTimeout) as caught, pool.connection(timeout=0.5):
            pass
        assert not isinstance(caught.value, ServerUnreachable)
    finally:
        pool.close(timeout=1)


def test_a_fail_fast_pool_tells_its_callers_of_an_outage_and_lends_again_once_it_ends(
    outage, scaled_backoff
) -> None:
    proxy, dsn = outage
    pool = pools.open_pool(dsn, max_size=1, fail_fast=True)
    try:
        with pool.connection(timeout=LONG_WAIT) as conn:
            conn.execute("SELECT 1")
        proxy.down()
        # The dead connection is found as it is lent; its replacement is refused: told then.
        with pytest.raises(ServerUnreachable), pool.connection(timeout=LONG_WAIT) as conn:
            conn.execute("SELECT 1")
        with pytest.raises(ServerUnreachable), pool.connection(timeout=LONG_WAIT):
            pass
        proxy.up()
        _until_it_lends(pool)
    finally:
        pool.close(timeout=1)


def test_an_async_fail_fast_pool_opens_and_lends_as_the_sync_one(db: str, outage, scaled_backoff) -> None:
    proxy, dsn = outage

    async def main() -> None:
        # Opening on a refusing server: told at the first failed connect, not after the timeout.
        with pytest.raises(ServerUnreachable):
            await pools.open_async_pool(_refused_dsn(db), max_size=1, timeout=LONG_WAIT, fail_fast=True)
        pool = await pools.open_async_pool(dsn, max_size=1, timeout=LONG_WAIT, fail_fast=True)
        try:
            proxy.down()
            with pytest.raises(ServerUnreachable):
                async with pool.connection(timeout=LONG_WAIT) as conn:
                    await conn.execute("SELECT 1")
            with pytest.raises(ServerUnreachable):
                async with pool.connection(timeout=LONG_WAIT):
                    pass
            proxy.up()
            deadline = time.monotonic() + 10
            while True:
                try:
                    async with pool.connection(timeout=LONG_WAIT) as conn:
                        assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
                    break
                except ServerUnreachable:
                    assert time.monotonic() < deadline, "the pool never found its server back"
                    await asyncio.sleep(0.02)
        finally:
            await pool.close()

    asyncio.run(main())


def test_a_server_with_no_room_for_one_more_connection_is_waited_for_not_called_away(db: str) -> None:
    """A connect refused for want of room (SQLSTATE class 53: here the role's connection limit)
    says the server is there: the caller waits for a connection in use to come back."""
    role = f"limited_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
    try:
        pool = pools.open_pool(make_conninfo(db, user=role), max_size=2, fail_fast=True)
        try:
            pool.wait(LONG_WAIT)  # its one connection made (else the first caller grows it too)
            held = pool.getconn(timeout=LONG_WAIT)
            # A second caller: the pool grows, its connect is refused (too many connections for
            # the role), and the caller waits; the held connection comes back and is lent.
            returned = False

            def give_back() -> None:
                nonlocal returned
                time.sleep(0.5)
                returned = True
                pool.putconn(held)

            threading.Thread(target=give_back, daemon=True).start()
            with pool.connection(timeout=LONG_WAIT) as conn:
                assert returned
                assert conn.execute("SELECT current_user").fetchone() == (role,)
        finally:
            pool.close(timeout=1)
    finally:
        with psycopg.connect(db, autocommit=True) as admin:
            admin.execute(f"DROP ROLE {role}")


def test_a_shard_pools_failed_connects_are_logged_under_the_shards_name(db: str, caplog) -> None:
    """psycopg_pool logs a pool's failed connects by its name (its first, then a line a minute
    while a server is down: harvest.db.pools._OutageLines): a shard's pools are named after the
    shard (``shard-1``), not ``pool-N``, so the warning says which shard it is about
    (docs/failures.md, "A pool finds its database back")."""
    from harvest.core.errors import ShardUnavailable
    from harvest.shard import AsyncShardPools, ShardPools, ShardRouter

    caplog.set_level(logging.WARNING, logger="psycopg.pool")
    router = ShardRouter(readable=[0, 1], writable=[0, 1], default=0)
    dsns = {0: db, 1: _refused_dsn(db)}
    with ShardPools(router, dsns, fail_fast=True) as sharded, pytest.raises(ShardUnavailable), sharded.api(1):
        pass

    async def main() -> None:
        async with AsyncShardPools(router, dsns, fail_fast=True) as sharded:
            with pytest.raises(ShardUnavailable):
                async with sharded.api(1):
                    pass

    asyncio.run(main())
    logged = [r.getMessage() for r in caplog.records if r.name == "psycopg.pool"]
    failed = [line for line in logged if "error connecting" in line]
    assert len(failed) >= 2, failed
    assert all("error connecting in 'shard-1'" in line for line in failed), failed


def test_the_token_check_is_told_at_once_when_its_database_refuses_after_the_pool_opened(
    db: str, outage, scaled_backoff
) -> None:
    """With the token database (the default shard) down, every API request's token check asked
    a pool opened before the outage for a connection and waited its 30 s before the 503: a
    request hung six times longer than docs/auth.md says (the open's 5 s) and than the call it
    guards, whose shard pools are fail-fast. The token pool is fail-fast too."""
    from harvest.core.errors import Unauthenticated
    from harvest.web import auth

    proxy, dsn = outage
    authorizer = auth.TokenAuthorizer(dsn=dsn)

    async def main() -> BaseException | None:
        with pytest.raises(Unauthenticated):  # the pool opened while the database is up
            await (await authorizer._api()).authenticate_api_token("0" * 64)
        proxy.down()
        try:
            await (await authorizer._api()).authenticate_api_token("0" * 64)
        except BaseException as exc:
            return exc
        finally:
            await authorizer.aclose()
        return None

    failure = asyncio.run(main())
    assert isinstance(failure, PoolTimeout), repr(failure)  # the API answers it 503
    assert isinstance(pools._unwrapped(failure), ServerUnreachable), repr(failure)
