"""TokenAuthorizer(dsn=...) opens its pool on the first request: requests that arrive together
before it is open (a burst at boot, the dashboard's page and its assets) must share one pool,
not each open one and leave all but the last open, unclosed, holding their connections."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harvest.web import auth


class _FakePool:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def test_requests_before_the_pool_is_open_share_one_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[_FakePool] = []

    async def slow_open(dsn: str, **_: Any) -> _FakePool:
        await asyncio.sleep(0)  # the open's round trips: the other requests run meanwhile
        await asyncio.sleep(0)
        pool = _FakePool()
        opened.append(pool)
        return pool

    monkeypatch.setattr(auth, "open_async_pool", slow_open)
    authorizer = auth.TokenAuthorizer(dsn="postgresql://tokens.invalid/db")

    async def main() -> None:
        await asyncio.gather(*(authorizer._api() for _ in range(5)))
        await authorizer.aclose()

    asyncio.run(main())
    assert len(opened) == 1, f"{len(opened)} pools opened for one authorizer"
    assert all(p.closed for p in opened), "a pool the authorizer opened was never closed"


def test_a_failed_open_fails_the_requests_waiting_on_it_once_and_the_next_one_retries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The token database down: the requests that came during the open share its one failure
    (under a plain lock each would wait out its own open in turn, request n n opens long); a
    request after it opens again."""
    attempts: list[int] = []

    async def down(dsn: str, **_: Any) -> _FakePool:
        attempts.append(1)
        await asyncio.sleep(0)
        raise OSError("connection refused")

    monkeypatch.setattr(auth, "open_async_pool", down)
    authorizer = auth.TokenAuthorizer(dsn="postgresql://tokens.invalid/db")

    async def main() -> list[Any]:
        burst = await asyncio.gather(*(authorizer._api() for _ in range(5)), return_exceptions=True)
        later = await asyncio.gather(authorizer._api(), return_exceptions=True)
        return [*burst, *later]

    outcomes = asyncio.run(main())
    assert all(isinstance(o, OSError) for o in outcomes), outcomes
    assert len(attempts) == 2, f"{len(attempts)} opens for a burst of 5 and one request after"


def test_the_token_pool_gives_up_opening_when_the_api_pool_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """The token check guards every API call: with the token database down it waited
    open_async_pool's 30 s default, six times the API pool's OPEN_SECS, so a request hung on the
    check far longer than on the call it guards. Both now wait the one OPEN_SECS."""
    import harvest.web.app

    timeouts: list[float | None] = []

    async def recording_open(dsn: str, **kwargs: Any) -> _FakePool:
        timeouts.append(kwargs.get("timeout"))
        return _FakePool()

    monkeypatch.setattr(auth, "open_async_pool", recording_open)
    authorizer = auth.TokenAuthorizer(dsn="postgresql://tokens.invalid/db")
    asyncio.run(authorizer._api())
    assert timeouts == [harvest.web.app.OPEN_SECS] == [auth.OPEN_SECS], timeouts


def test_the_token_pool_open_timeout_is_injected_and_ends_an_unreachable_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unreachable port with a short injected open timeout: the open fails (not hangs), with
    the timeout passed through to the pool and one open for the one request."""
    import socket

    from harvest.db import pools
    from harvest.db.connection import DatabaseError

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    passed: list[float | None] = []

    async def recording_open(dsn: str, **kwargs: Any) -> Any:
        passed.append(kwargs.get("timeout"))
        return await pools.open_async_pool(dsn, **kwargs)

    monkeypatch.setattr(auth, "open_async_pool", recording_open)
    authorizer = auth.TokenAuthorizer(
        dsn=f"postgresql://harvest@127.0.0.1:{port}/harvest?connect_timeout=1", open_timeout=0.2
    )
    with pytest.raises(DatabaseError):  # (the pool's PoolTimeout)
        asyncio.run(authorizer._api())
    assert passed == [0.2]
