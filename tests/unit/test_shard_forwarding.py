"""Forwarding without a database: shards.forwards (a decommissioned shard's ids), the
per-execution pointer chain that ShardRouter.resolve follows up to MAX_FORWARD_HOPS and then
refuses (typed, retryable), the topology's shard_forwards, and the worker's paced
rebalance-resume step."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from harvest.core.errors import ConfigError, ExecutionMigrated
from harvest.shard import ShardRouter
from harvest.shard import rebalance as rebalance_module
from harvest.shard.rebalance import STALL_FLOOR_SECS, ResumeScanner
from harvest.shard.router import MAX_FORWARD_HOPS


def _id(shard: int) -> str:
    raw = bytearray(uuid.uuid4().bytes)
    raw[0:2] = shard.to_bytes(2, "big")
    return str(uuid.UUID(bytes=bytes(raw)))


def test_route_follows_shard_forwards_of_a_decommissioned_shard() -> None:
    router = ShardRouter([0, 1, 2], [0, 1], 0, forwards={2: 1})
    assert router.route(_id(2)) == 1
    assert router.route(_id(0)) == 0
    assert router.topology()["shard_forwards"] == {"2": 1}
    assert json.dumps(router.topology()) == json.dumps(
        ShardRouter([0, 1, 2], [0, 1], 0, forwards={"2": 1}).topology()
    )


@pytest.mark.parametrize(
    ("forwards", "words"),
    [
        ({1: 0}, "shards.forwards.1: shard 1 is writable"),
        ({2: 7}, "shards.forwards.2 ends at shard 7, which is not in shards.readable"),
        ({2: 3, 3: 2}, "longer than 4 hops or loops"),
        ({"x": 0}, "'x' is not a shard number"),
    ],
)
def test_bad_forwards_are_refused_at_boot_naming_the_key(forwards, words) -> None:
    with pytest.raises(ConfigError) as caught:
        ShardRouter([0, 1, 2, 3], [0, 1], 0, forwards=forwards)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_resolve_follows_pointers_and_fails_closed_past_max_forward_hops() -> None:
    router = ShardRouter([0, 1, 2, 3, 4, 5, 6], [0], 0)
    chain = {0: 1, 1: 2, 2: 3}
    assert router.resolve(_id(0), chain.get) == (3, (0, 1, 2))
    assert router.resolve(_id(5), chain.get) == (5, ())
    endless = {s: s + 1 for s in range(6)}
    with pytest.raises(ExecutionMigrated) as caught:
        router.resolve(_id(0), endless.get)
    assert caught.value.reason == "too_many_hops" and caught.value.retryable
    assert f"more than {MAX_FORWARD_HOPS} forwarding hops" in str(caught.value)
    exactly = {s: s + 1 for s in range(MAX_FORWARD_HOPS)}
    assert router.resolve(_id(0), exactly.get)[0] == MAX_FORWARD_HOPS


class _Pools:
    shards = (0, 1)


def test_the_resume_scanner_is_paced_per_shard_and_can_be_turned_off(monkeypatch) -> None:
    calls: list[tuple[int, float]] = []

    async def fake(pools, shard, *, stall_after):
        calls.append((shard, stall_after))
        return 1

    monkeypatch.setattr(rebalance_module, "resume_stalled_migrations", fake)
    now = [100.0]
    scanner = ResumeScanner(interval=1, stall_after=1, clock=lambda: now[0])
    assert scanner.interval == scanner.stall_after == STALL_FLOOR_SECS, "both are floored at 5 s"

    async def ticks() -> list[int]:
        return [
            await scanner.tick(_Pools(), 0),
            await scanner.tick(_Pools(), 0),
            await scanner.tick(_Pools(), 1),
        ]

    assert asyncio.run(ticks()) == [1, 0, 1], "one pass per shard per interval"
    now[0] += STALL_FLOOR_SECS * 1.3
    assert asyncio.run(scanner.tick(_Pools(), 0)) == 1
    assert calls == [(0, 5.0), (1, 5.0), (0, 5.0)]
    off = ResumeScanner(enabled=False)
    assert asyncio.run(off.tick(_Pools(), 0)) == 0
    assert asyncio.run(ResumeScanner().tick(None, 0)) == 0, "no shard pools: nothing to resume"
