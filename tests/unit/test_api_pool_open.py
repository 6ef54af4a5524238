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
