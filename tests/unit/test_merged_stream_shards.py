"""How the management API's merged ``/stream`` follows a shard it cannot read
(harvest/web/streams.py, ``_listener_up`` and ``_followed``; harvest/shard/event_merge.py),
with stand-in hubs: every stream waiting on one shard shares its tries, a read that keeps
failing is not made again in a loop, a shard back with fewer events is followed from its new
last, and the merged ids carry what the notes say (real hubs: tests/web/test_streams.py; real
servers: tests/shard/test_events_tail_shards.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from harvest.core.errors import DatabaseUnavailable
from harvest.shard.event_merge import ShardNote, merge_streams
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
    monkeypatch.setattr(streams, "RETRY_SECS", 0.2)

    async def main() -> tuple[int, float]:
        hub = _DownHub()
        until = time.monotonic() + 10
        waits = [asyncio.create_task(streams._listener_up(hub, until)) for _ in range(20)]  # type: ignore[arg-type]
        await asyncio.sleep(0.5)
        tries = hub.tries
        hub.up = True  # started by another stream or request: every wait sees it
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.wait_for(asyncio.gather(*waits), 2)
        return tries, loop.time() - began

    tries, took = asyncio.run(main())
    assert 1 <= tries <= 4  # one try a period (at 0, 0.2, 0.4 s), not one per waiting stream
    assert took < 0.5  # within a fifth of the period, and some slack for a loaded machine


class _Hub:
    """A hub that is up, whose database's events end at ``last``; each subscription's events
    are the next of ``rounds`` (an exception in one is raised, as a failed read), after which its
    listener stops."""

    next_try = 0.0

    def __init__(self, last: int, rounds: list[Any], *, cursor: int | None = None):
        # ``cursor``: the last id delivered, below ``last`` (handed out) while some are in flight.
        self.cursor = last if cursor is None else cursor
        self.rounds, self.read_after = list(rounds), list[int]()
        self.listening = self.up = True
        self.horizon_reads = 0

        async def horizon() -> dict[str, int]:
            self.horizon_reads += 1
            return {"last_global_id": last}

        self.source = SimpleNamespace(horizon=horizon)

    @contextlib.asynccontextmanager
    async def subscribe(self, execution_id: str | None = None) -> AsyncIterator[Any]:
        yield SimpleNamespace(start_cursor=self.cursor)

    async def events(
        self, sub: Any, last_id: int, *, keepalive: float, flushes: bool = False
    ) -> AsyncIterator[Any]:
        self.read_after.append(last_id)
        round_ = self.rounds.pop(0) if self.rounds else []
        if isinstance(round_, Exception):
            raise round_
        for event in round_:
            yield event


async def _first(items: AsyncIterator[Any], n: int) -> list[Any]:
    out = []
    async for item in items:
        out.append(item)
        if len(out) == n:
            break
    return out


def _notes(items: list[Any]) -> list[Any]:
    return [(i.text, i.position) if isinstance(i, ShardNote) else i for i in items]


def test_a_shard_back_with_fewer_events_is_followed_from_its_new_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failover to a replica that lacked the last events numbers the next ones from below the
    stream's position: the stream goes on after the shard's last, saying so, not past them."""
    monkeypatch.setattr(streams, "RETRY_SECS", 0.01)
    hub = _Hub(5, [[{"global_id": 6}]])
    got = asyncio.run(_first(streams._followed(hub, 1, 9, up=False), 3))  # type: ignore[arg-type]
    assert _notes(got) == [
        ("shard 1 is back: following its events after 1:5", 5),
        {"global_id": 6},
        ("shard 1 unavailable: its events after 1:6 follow when it is back", 6),
    ]
    assert hub.read_after == [5]


def test_a_position_past_the_shards_last_is_followed_from_its_last_when_the_stream_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same for a Last-Event-ID position past the shard's last, said in a note whose
    position the merged ids take, so a client that reconnects does not bring the old one back."""
    monkeypatch.setattr(streams, "RETRY_SECS", 0.01)
    hub = _Hub(5, [[{"global_id": 6}]])
    got = asyncio.run(_first(streams._followed(hub, 0, 9, up=True), 2))  # type: ignore[arg-type]
    said = "shard 0's events now end at 0:5, before 0:9: going on after 0:5"
    assert _notes(got) == [(said, 5), {"global_id": 6}]
    assert hub.read_after == [5]


def test_a_clamped_position_goes_on_after_the_last_id_delivered_not_the_last_handed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ids handed out to transactions still open (4 and 5 here, the hub having delivered up to
    3) are sent when they commit: the position goes back to the hub's cursor, not to 5."""
    monkeypatch.setattr(streams, "RETRY_SECS", 0.01)
    hub = _Hub(5, [[{"global_id": 4}]], cursor=3)
    got = asyncio.run(_first(streams._followed(hub, 0, 9, up=True), 2))  # type: ignore[arg-type]
    assert _notes(got)[0] == ("shard 0's events now end at 0:3, before 0:9: going on after 0:3", 3)
    assert hub.read_after == [3]


def test_a_position_the_hub_delivered_costs_no_read() -> None:
    """A stream opened at, or resumed from, a position up to the hub's cursor: no horizon read."""
    hub = _Hub(5, [[{"global_id": 6}]])
    got = asyncio.run(_first(streams._followed(hub, 0, 4, up=True), 1))  # type: ignore[arg-type]
    assert got == [{"global_id": 6}] and hub.horizon_reads == 0


def test_a_shard_down_from_the_start_with_no_position_starts_at_its_events_once_back() -> None:
    hub = _Hub(40, [])
    got = asyncio.run(_first(streams._followed(hub, 2, None, up=False), 1))  # type: ignore[arg-type]
    assert _notes(got) == [("shard 2 is back: following its events after 2:40", 40)]


def test_a_read_that_keeps_failing_is_made_again_once_a_period(monkeypatch: pytest.MonkeyPatch) -> None:
    """The listener up, the reads failing (a statement timeout, a privilege revoked): one read
    a period and one note for the loss, not a loop of them."""
    monkeypatch.setattr(streams, "RETRY_SECS", 0.1)

    async def main() -> list[Any]:
        hub = _Hub(5, [RuntimeError("permission denied")] * 1000)
        seen: list[Any] = []

        async def follow() -> None:
            async for item in streams._followed(hub, 1, 5, up=True):  # type: ignore[arg-type]
                seen.append(item)

        task = asyncio.create_task(follow())
        await asyncio.sleep(0.55)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return [len(hub.read_after), *seen]

    reads, *seen = asyncio.run(main())
    assert 3 <= reads <= 7, reads  # one a period (0.1 s) over 0.55 s
    # Gone once; each try after is back, then gone again (the read fails after the subscription).
    assert seen[0] == ShardNote(1, "shard 1 unavailable: its events after 1:5 follow when it is back", 5)


def test_a_note_sets_its_shards_position_in_the_merged_ids() -> None:
    """A shard back after a failover from a lower position: the note's id, and every id after
    it, carry the new position, so a client that reconnects does not skip its renumbered
    events; a shard that joins (down at the start, no position) joins the ids."""

    async def shard(items: list[Any]) -> AsyncIterator[Any]:
        for item in items:
            yield item

    async def merged(items: list[Any], positions: dict[int, int]) -> list[Any]:
        return await _first(merge_streams({0: shard(items)}, positions, keepalive=5), len(items))

    back, event = asyncio.run(merged([ShardNote(0, "back", 5), {"global_id": 6}], {0: 9, 1: 3}))
    assert (back.positions, event.position) == ("0:5,1:3", "0:6,1:3")
    (joined,) = asyncio.run(merged([ShardNote(0, "back", 40)], {1: 3}))
    assert joined.positions == "0:40,1:3"


class _SlowSource:
    """An event source whose connect takes ``opens_in`` seconds, then follows nothing."""

    def __init__(self, opens_in: float):
        self.opens_in = opens_in

    async def open(self) -> None:
        await asyncio.sleep(self.opens_in)

    async def start_position(self) -> int:
        return 7

    async def follow(self, after: int) -> AsyncIterator[list[dict[str, Any]]]:
        await asyncio.Event().wait()
        yield []

    async def close(self) -> None:
        pass


def _slow_hub(opens_in: float, idle_secs: float) -> streams.EventHub:
    hub = streams.EventHub("postgresql://unused", idle_secs=idle_secs)
    hub.source = _SlowSource(opens_in)  # type: ignore[assignment]
    return hub


def test_a_start_in_progress_is_not_stopped_idle() -> None:
    """A shard's last subscriber left (its idle stop due in 0.1 s) and a stream tries it again
    with a connect slower than that: the start is interest, so the idle stop does not cancel it
    (which ended that shard's part of every merged stream, silently)."""

    async def main() -> tuple[bool, bool]:
        hub = _slow_hub(opens_in=0.3, idle_secs=0.1)
        hub._stop_later()  # as after the last subscriber left
        await asyncio.wait_for(hub.start(), 5)
        up = hub.listening
        await asyncio.wait_for(_until(lambda: not hub.listening), 5)  # idle once up: stopped
        await hub.aclose()
        return up, hub.listening

    assert asyncio.run(main()) == (True, False)


def test_a_start_stopped_before_it_is_up_is_an_outage_to_its_caller() -> None:
    """A listener closed while starting: its starter gets DatabaseUnavailable (what a merged
    stream's retry loop expects), not a CancelledError that would end the stream's task."""

    async def main() -> BaseException | None:
        hub = _slow_hub(opens_in=1.0, idle_secs=60)
        starting = asyncio.create_task(hub.start())
        await asyncio.sleep(0.05)
        await hub.aclose()
        try:
            await asyncio.wait_for(starting, 5)
        except BaseException as exc:  # (what it raised is the finding)
            return exc
        return None

    got = asyncio.run(main())
    assert isinstance(got, DatabaseUnavailable), repr(got)


async def _until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0.01)


def test_a_wait_for_a_database_that_stays_down_ends_at_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower waits in spans of its keepalive (it sends one between): the wait says no once
    the span is over, and a try is not made before ``not_before`` (the pause after a loss)."""
    monkeypatch.setattr(streams, "RETRY_SECS", 0.05)

    async def main() -> tuple[bool, int, bool]:
        hub = _DownHub()
        began = time.monotonic()
        up = await streams._listener_up(hub, began + 0.2)  # type: ignore[arg-type]
        tries, took = hub.tries, time.monotonic() - began
        later = _DownHub()
        later.up = True
        held = await streams._listener_up(later, time.monotonic() + 0.05, time.monotonic() + 1)  # type: ignore[arg-type]
        return up, tries, took < 1 and not held

    up, tries, on_time = asyncio.run(main())
    assert not up and 2 <= tries <= 6 and on_time


def test_a_follower_keeps_its_keepalives_while_a_connect_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A database whose connects hang (a silent host): the follower waits for the start no
    longer than its next keepalive, so a keepalive goes out every ``keepalive`` seconds (a
    proxy's read timeout, or the CLI's idle limit, would end a stream silent for longer)."""
    monkeypatch.setattr(streams, "RETRY_SECS", 0.05)

    async def main() -> list[float]:
        hub = _slow_hub(opens_in=30, idle_secs=60)
        follower = streams._followed(hub, None, 5, False, keepalive=0.1)
        began, at = time.monotonic(), []
        try:
            async for item in follower:
                assert item is None, item
                at.append(time.monotonic() - began)
                if len(at) == 5:
                    break
        finally:
            await follower.aclose()
            await hub.aclose()
        return at

    at = asyncio.run(main())
    gaps = [b - a for a, b in zip([0.0, *at], at, strict=False)]
    assert max(gaps) < 0.5, gaps  # one every 0.1 s, with slack; the connect takes 30


def test_a_streams_writes_gather_events_until_nothing_more_is_at_hand() -> None:
    async def items() -> AsyncIterator[Any]:
        for item in ({"global_id": 1}, {"global_id": 2}, streams.FLUSH, {"global_id": 3}, None):
            yield item

    async def main() -> list[bytes]:
        writes = streams._Writes("global_id")
        return [written async for item in items() if (written := writes.of(item)) is not None]

    writes = asyncio.run(main())
    assert [w.count(b"id: ") for w in writes] == [2, 1]  # 1 and 2 in one write; 3 with the keepalive
    assert writes[1].endswith(b": keepalive\n\n")


def test_a_wait_with_no_time_left_keeps_the_shared_try_for_the_others() -> None:
    """A try cut at once (no time left before the stream's keepalive) is not made, so the slot
    every stream waiting on the database shares is not spent on nothing."""

    async def main() -> tuple[bool, int, float]:
        hub = _DownHub()
        up = await streams._listener_up(hub, time.monotonic() - 1)  # type: ignore[arg-type]
        return up, hub.tries, hub.next_try

    assert asyncio.run(main()) == (False, 0, 0.0)


def test_a_listener_that_stops_flushes_what_was_gathered_first() -> None:
    """EventHub.events(flushes=True) says FLUSH before it returns on a stopped listener: a stream
    that gathered events (a catch-up) writes them before it ends."""

    async def main() -> list[Any]:
        hub = streams.EventHub("postgresql://unused")
        sub = streams.Subscriber(None, 5)
        sub.end()  # the listener stopped
        return [item async for item in hub.events(sub, None, flushes=True)]

    assert asyncio.run(main()) == [streams.FLUSH]
