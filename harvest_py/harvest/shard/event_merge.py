"""Every shard's event stream followed as one (docs/event-streams.md, "On shards"): written once
for the management API's ``/stream`` (harvest/web/streams.py) and ``harvest events tail`` over
SQL with ``[shards]`` (harvest/cli/events.py).

A position is every shard's last delivered global id, ``shard:global_id`` comma-separated
(``0:812,1:77``): the ``id:`` of each merged event and what a resumed stream starts after. The
shards' events are interleaved as they arrive, each shard's in order; two events of different
shards carry no order between them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from harvest.core.errors import InvalidArgument, NoShardReached

# Events one merge may hold before a fast shard waits for the reader.
MERGE_QUEUE = 1000


def parse_global_id(raw: str, given_as: str = "Last-Event-ID") -> int:
    """One database's resume position: the global id of the last event seen (``given_as``: the
    header or parameter it came in, which a refusal names)."""
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(
            f"{given_as} {raw!r} is not an event id: pass the id: of the last event seen"
        ) from None
    if value < 0:
        raise InvalidArgument(f"{given_as} {value} is negative: pass the id: of the last event seen")
    return value


def parse_positions(raw: str, given_as: str = "Last-Event-ID") -> dict[int, int]:
    """A merged stream's resume position: ``shard:global_id`` for each shard, comma-separated."""
    out: dict[int, int] = {}
    for part in raw.split(","):
        shard, _, position = part.strip().partition(":")
        if not (shard.isdigit() and position.isdigit()):
            raise InvalidArgument(
                f"{given_as} {raw!r} is not a position of this sharded stream (shard:global_id, "
                "comma-separated): pass the id: of the last event seen"
            )
        out[int(shard)] = int(position)
    return out


def format_positions(positions: Mapping[int, int]) -> str:
    return ",".join(f"{shard}:{position}" for shard, position in sorted(positions.items()))


def named(shard: int | None) -> str:
    """A source as a stream or a tail names it: a shard, or (None) the one database."""
    return "the database" if shard is None else f"shard {shard}"


def at_position(shard: int | None, position: int) -> str:
    """A source's position as the stream's ids and the tail's lines give it (``shard:global_id``)."""
    return str(position) if shard is None else f"{shard}:{position}"


def unavailable_note(shard: int | None, position: int | None, whose: str = "its") -> str:
    """What a stream says of a source it cannot read, when it opens or once it goes. ``whose``
    events it follows: the source's own, or (one execution's stream) "the execution's"."""
    which = "the database is" if shard is None else f"shard {shard}"
    if position is None:
        return f"{which} unavailable: {whose} events written once it is back follow then"
    return f"{which} unavailable: {whose} events after {at_position(shard, position)} follow when it is back"


def back_note(shard: int | None, position: int, whose: str = "its") -> str:
    return f"{named(shard)} is back: following {whose} events after {at_position(shard, position)}"


def past_the_end_note(shard: int | None, last: int, position: int, whose: str | None = None) -> str:
    """What a stream says of a source whose events now end before the position it had (a
    failover to a replica that had not received the last of them); ``whose``: as above, None
    for the source's own."""
    now, before = at_position(shard, last), at_position(shard, position)
    subject = f"{named(shard)}'s" if whose is None else whose
    return f"{subject} events now end at {now}, before {before}: going on after {now}"


def none_readable(unavailable: list[int]) -> NoShardReached:
    shards = ", ".join(map(str, unavailable))
    return NoShardReached(f"no shard's events could be read (shard(s) {shards}); retry later")


@dataclass(frozen=True)
class ShardNote:
    """What a stream says of one shard (or its one database) between events (it went, it is
    back, its events end before the position), with the position it names (None: none yet).
    merge_streams sets ``positions``: every shard's, from then on (a shard back after a
    failover may go on from a lower one)."""

    shard: int | None  # (None: the one database of a stream that is not merged)
    text: str
    position: int | None = None
    positions: str = ""


@dataclass(frozen=True)
class MergedEvent:
    """One event of the merged stream: its shard, the event, and every shard's position once it
    is delivered (resume after this to miss nothing of any shard)."""

    shard: int
    event: dict[str, Any]
    position: str


async def merge_streams(
    streams: Mapping[int, AsyncIterator[dict[str, Any] | ShardNote | None]],
    positions: Mapping[int, int],
    *,
    keepalive: float,
) -> AsyncGenerator[MergedEvent | ShardNote | None, None]:
    """The shards' events (each stream: one shard's events in global id order; a ShardNote in one
    passed on with every shard's position, its own set from it; a None skipped) as they arrive;
    None after ``keepalive`` seconds without any. ``positions``: each shard's start (a shard not
    streamed keeps its given position). Ends when one stream ends, raising what it raised; a
    stream that follows its shard through outages (the management API's, the CLI's) does not
    end."""
    import asyncio  # (here: `harvest events --help` imports this module, tests/unit/test_startup.py)

    merged: asyncio.Queue[tuple[int, dict[str, Any]] | ShardNote | None] = asyncio.Queue(MERGE_QUEUE)
    at = dict(positions)

    failed: list[Exception] = []

    async def pump(shard: int, stream: AsyncIterator[dict[str, Any] | ShardNote | None]) -> None:
        try:
            async for event in stream:
                if isinstance(event, ShardNote):
                    await merged.put(event)
                elif event is not None:  # (a keepalive is skipped)
                    await merged.put((shard, event))
        except Exception as exc:  # its database went: the merge ends with the error
            failed.append(exc)
        await merged.put(None)

    tasks = [asyncio.create_task(pump(s, stream)) for s, stream in streams.items()]
    try:
        while True:
            try:
                item = (
                    merged.get_nowait()
                    if not merged.empty()
                    else await asyncio.wait_for(merged.get(), keepalive)
                )
            except TimeoutError:
                yield None
                continue
            if item is None:
                if failed:
                    raise failed[0]
                return
            if isinstance(item, ShardNote):
                if item.position is not None and item.shard is not None:
                    at[item.shard] = item.position
                yield dataclasses.replace(item, positions=format_positions(at))
                continue
            shard, event = item
            at[shard] = event["global_id"]
            yield MergedEvent(shard, event, format_positions(at))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
