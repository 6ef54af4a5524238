"""How the management API's merged ``/stream`` waits on a shard it cannot read
(harvest/web/streams.py, ``_listener_up`` and ``_shard_events``), with stand-in hubs: every
stream waiting on one shard shares its tries, and a shard back with fewer events is followed
from its new last (the whole path against real servers: tests/shard/test_events_tail_shards.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from harvest.shard.event_merge import ShardNote
from harvest.web import streams


class _DownHub:
    """A hub whose listener cannot start until ``up`` is set; counts the tries."""

    def __init__(self) -> None:
        self.up = False
        self.tries = 0
        self.next_try = 0.0

    @property
    def listening(self) -> bool:
        return self.up

    async def start(self) -> None:
        self.tries += 1
        raise ConnectionError("connection refused")


def test_every_stream_waiting_on_one_shard_shares_its_tries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "SHARD_RETRY_SECS", 0.2)

    async def main() -> tuple[int, float]:
        hub = _DownHub()
        waits = [asyncio.create_task(streams._listener_up(hub)) for _ in range(20)]  # type: ignore[arg-type]
        await asyncio.sleep(0.5)
        tries = hub.tries
        hub.up = True  # started by another stream or request: every wait sees it
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.wait_for(asyncio.gather(*waits), 1)
        return tries, loop.time() - began

    tries, took = asyncio.run(main())
    assert 2 <= tries <= 4  # one try a period (at 0, 0.2, 0.4 s), not one per waiting stream
    assert took < 0.1  # within a fifth of the period


class _BackHub:
    """A hub up again whose events end at ``cursor``; its listener stops after ``events``."""

    listening = True
    next_try = 0.0

    def __init__(self, cursor: int, events: list[dict[str, Any]]):
        self.cursor, self._events, self.read_after = cursor, events, []

    @contextlib.asynccontextmanager
    async def subscribe(self, execution_id: str | None = None) -> AsyncIterator[Any]:
        yield SimpleNamespace(start_cursor=self.cursor)

    async def events(self, sub: Any, last_id: int | None, *, keepalive: float) -> AsyncIterator[Any]:
        self.read_after.append(last_id)
        for event in self._events:
            yield event


async def _first(items: AsyncIterator[Any], n: int) -> list[Any]:
    out = []
    async for item in items:
        out.append(item)
        if len(out) == n:
            break
    return out


def test_a_shard_back_with_fewer_events_is_followed_from_its_new_last() -> None:
    """A failover to a replica that lacked the last events numbers the next ones from below the
    stream's position: the stream goes on after the shard's last, saying so, not past them."""
    hub = _BackHub(5, [{"global_id": 6}])
    got = asyncio.run(_first(streams._shard_events(hub, 1, 9, up=False), 3))  # type: ignore[arg-type]
    assert got == [
        ShardNote(1, "shard 1 is back: following its events after 1:5"),
        {"global_id": 6},
        ShardNote(1, "shard 1 unavailable: its events after 1:6 follow when it is back"),
    ]
    assert hub.read_after == [5]


def test_a_shard_down_from_the_start_with_no_position_starts_at_its_events_once_back() -> None:
    hub = _BackHub(40, [])
    got = asyncio.run(_first(streams._shard_events(hub, 2, None, up=False), 2))  # type: ignore[arg-type]
    assert got[0] == ShardNote(2, "shard 2 is back: following its events after 2:40")
    assert hub.read_after == [40]


def test_a_shard_followed_from_the_start_keeps_its_position() -> None:
    """Up when the stream opens, a position past the shard's cursor is not moved (only a shard
    back after an outage is checked) and no note is said."""
    hub = _BackHub(5, [{"global_id": 10}])
    got = asyncio.run(_first(streams._shard_events(hub, 0, 9, up=True), 2))  # type: ignore[arg-type]
    assert got == [
        {"global_id": 10},
        ShardNote(0, "shard 0 unavailable: its events after 0:10 follow when it is back"),
    ]
    assert hub.read_after == [9]
