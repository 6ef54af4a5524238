"""The management API opens its own pool on the first request when its database was down at boot
(or when mounted). Under a plain lock, a burst of N requests with the database down waited in
turn: each took the lock and tried its own open, so the last answered after N open timeouts
(N x OPEN_SECS). The requests that arrive during an open now share it: one attempt, one wait,
every one of them answered 503 with its failure; the next request after it tries again."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg_pool
import pytest

from harvest.config import load_config
from harvest.web import app as web_app
from harvest.web.app import management_app

BURST = 6


def test_a_burst_with_the_database_down_shares_one_open_and_the_next_request_retries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timeouts: list[float | None] = []

    async def down(dsn: str, **kwargs: Any) -> Any:
        timeouts.append(kwargs.get("timeout"))
        await asyncio.sleep(0.05)  # the open's wait for a database that does not answer
        raise psycopg_pool.PoolTimeout("pool initialization incomplete after 0.05 sec")

    monkeypatch.setattr(web_app, "open_async_pool", down)
    api = management_app(
        dsn="postgresql://harvest@db.invalid/harvest", config=load_config(env={}), profile="dev"
    )
    api.state.harvest.open_timeout = 0.05  # (injected: the deployed wait is OPEN_SECS)

    async def main() -> tuple[list[int], list[int]]:
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            burst = await asyncio.gather(*(client.get("/workflows") for _ in range(BURST)))
            later = await client.get("/workflows")
        return [r.status_code for r in burst], [later.status_code]

    burst, later = asyncio.run(main())
    assert burst == [503] * BURST and later == [503], (burst, later)
    assert len(timeouts) == 2, f"{len(timeouts)} opens for a burst of {BURST} and one request after"
    assert timeouts == [0.05, 0.05], timeouts


class _FakePool:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def test_a_pool_opened_whose_first_read_fails_is_closed_before_the_next_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The database answers the connection but refuses the boot's read (a privilege, a schema):
    the open fails and the next request opens again. The pool of the failed open stayed open,
    never closed: one more pool, holding its connection, per request while the refusal lasted."""
    opened: list[_FakePool] = []

    async def up(dsn: str, **_: Any) -> _FakePool:
        opened.append(_FakePool())
        return opened[-1]

    async def refused(*_: Any) -> bool:
        raise PermissionError("permission denied for schema harvest")

    monkeypatch.setattr(web_app, "open_async_pool", up)
    monkeypatch.setattr(web_app, "_warn_if_not_migrated", refused)
    state = management_app(
        dsn="postgresql://harvest@db.invalid/harvest", config=load_config(env={}), profile="dev"
    ).state.harvest

    async def main() -> None:
        for _ in range(3):
            with pytest.raises(PermissionError):
                await state.open()

    asyncio.run(main())
    assert len(opened) == 3 and all(p.closed for p in opened), [p.closed for p in opened]
    assert not state.opened


def test_a_burst_on_a_shard_that_is_down_shares_one_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """AsyncShardPools opened a shard's pool under a lock per shard: the same wait in turn, each
    request of a burst its own open of acquire_timeout (10 s by default) after the one before."""
    from harvest.core.errors import ShardUnavailable
    from harvest.shard import pools as shard_pools
    from harvest.shard.router import ShardRouter

    attempts: list[float | None] = []

    async def down(dsn: str, **kwargs: Any) -> Any:
        attempts.append(kwargs.get("timeout"))
        await asyncio.sleep(0.05)
        raise psycopg_pool.PoolTimeout("pool initialization incomplete after 0.05 sec")

    monkeypatch.setattr(shard_pools, "open_async_pool", down)
    pools = shard_pools.AsyncShardPools(
        ShardRouter.single(0), {0: "postgresql://harvest@db.invalid/harvest"}, acquire_timeout=0.05
    )

    async def main() -> list[Any]:
        async def one() -> None:
            async with pools.api(0):
                pass

        burst = await asyncio.gather(*(one() for _ in range(BURST)), return_exceptions=True)
        later = await asyncio.gather(one(), return_exceptions=True)
        return [*burst, *later]

    outcomes = asyncio.run(main())
    assert all(isinstance(o, ShardUnavailable) for o in outcomes), outcomes
    assert attempts == [0.05, 0.05], f"{len(attempts)} opens for a burst of {BURST} and one request after"


def test_the_api_over_shards_waits_for_a_shard_as_long_as_for_its_one_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The management API's shard pools took AsyncShardPools' default acquire_timeout (10 s, a
    client's), twice the OPEN_SECS its one-database pool, its token check and the dashboard
    wait: a request over shards waited 10 s for a shard that was down, one database 5 s."""
    from harvest.shard import pools as shard_pools
    from harvest.web.auth import OPEN_SECS

    waits: list[float | None] = []

    async def down(dsn: str, **kwargs: Any) -> Any:
        waits.append(kwargs.get("timeout"))
        raise psycopg_pool.PoolTimeout("pool initialization incomplete")

    monkeypatch.setattr(shard_pools, "open_async_pool", down)
    config = load_config(env={"HARVEST_SHARDS__URLS__1": "postgresql://harvest@db-1.invalid/harvest"})
    state = management_app(
        dsn="postgresql://harvest@db-0.invalid/harvest", config=config, profile="dev"
    ).state.harvest
    assert state.open_timeout == OPEN_SECS
    state.open_timeout = 0.05  # (injected, to see it reach the shards' pools)

    async def main() -> Any:
        await state.open()  # (every shard down: named at boot, not fatal)
        try:
            return state.pools.acquire_timeout
        finally:
            await state.close()

    assert asyncio.run(main()) == 0.05 and waits == [0.05, 0.05], waits


def test_a_role_view_after_its_pools_close_lends_no_closed_pool_and_leaks_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AsyncShardPools.close() swapped in a new dict of pools, so a role view (with_role: one per
    request) made before it kept the old one: it lent the closed pool of a shard opened before
    the close, and a shard it opened after went into a dict no close ever read (a leak). The
    close now empties the dict every view shares: a view opens again where its owner does, and
    the owner's next close closes what the view opened."""
    from harvest.shard import pools as shard_pools
    from harvest.shard.router import ShardRouter

    class FakePool:
        def __init__(self, dsn: str) -> None:
            self.dsn, self.closed = dsn, False

        async def close(self) -> None:
            self.closed = True

    opened: list[FakePool] = []

    async def fake_open(dsn: str, **kwargs: Any) -> FakePool:
        opened.append(FakePool(dsn))
        return opened[-1]

    monkeypatch.setattr(shard_pools, "open_async_pool", fake_open)
    pools = shard_pools.AsyncShardPools(
        ShardRouter([0, 1], [0, 1], 0), {0: "postgresql://db-0.invalid/h", 1: "postgresql://db-1.invalid/h"}
    )
    view = pools.with_role("harvest_reader")

    async def main() -> None:
        first = await pools._pool(0)
        await pools.close()
        assert first.closed
        again = await view._pool(0)
        assert not again.closed, "the view lent the pool its owner closed"
        late = await view._pool(1)
        assert await pools._pool(1) is late and await pools._pool(0) is again  # one set of pools
        await pools.close()
        await view.close()  # (a view closes nothing of its own)

    asyncio.run(main())
    assert [p.closed for p in opened] == [True, True, True], "a pool the view opened was never closed"
