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


# -- ShardPools.follow: try the id's shard, follow only what a seal names ------------------------
def _follow_pools(asynchronous: bool = False):
    from harvest.shard import AsyncShardPools, ShardPools

    urls = {s: f"postgresql://a@127.0.0.1:1/s{s}" for s in (0, 1, 2, 3)}
    router = ShardRouter([0, 1, 2, 3], [0, 1, 2, 3], 0)
    return (AsyncShardPools if asynchronous else ShardPools)(router, urls, acquire_timeout=0.1)


def _moved(shard: int | None, reason: str = "migrated") -> ExecutionMigrated:
    return ExecutionMigrated("moved", reason, None, shard)


def test_follow_makes_one_attempt_on_the_ids_shard_for_a_run_that_never_moved() -> None:
    tried: list[int] = []
    assert _follow_pools().follow(_id(1), lambda shard: tried.append(shard) or "answer") == "answer"
    assert tried == [1], "no lookup first: the call itself, on the id's shard"


def test_follow_goes_where_a_seal_points_and_refuses_what_is_not_a_move() -> None:
    pools, tried = _follow_pools(), []

    def attempt(shard: int) -> str:
        tried.append(shard)
        if shard == 0:
            raise _moved(2)
        return f"on {shard}"

    assert pools.follow(_id(0), attempt) == "on 2" and tried == [0, 2]
    with pytest.raises(ExecutionMigrated) as caught:
        pools.follow(_id(0), lambda shard: (_ for _ in ()).throw(_moved(1, "replace_migrated_prior")))
    assert caught.value.reason == "replace_migrated_prior", "only a seal's 'migrated' is followed"


def test_follow_stops_after_max_forward_hops_with_a_typed_retryable_error() -> None:
    tried: list[int] = []

    def endless(shard: int) -> None:
        tried.append(shard)
        raise _moved((shard + 1) % 4)

    with pytest.raises(ExecutionMigrated) as caught:
        _follow_pools().follow(_id(0), endless)
    assert caught.value.reason == "too_many_hops" and caught.value.retryable
    assert len(tried) == MAX_FORWARD_HOPS + 1


def test_follow_waits_for_a_staged_copy_to_be_activated_then_gives_up() -> None:
    pools, tried = _follow_pools(), []

    def staged_twice(shard: int) -> str:
        tried.append(shard)
        if len(tried) < 3:
            raise _moved(None)  # a staged copy: no pointer, not active yet
        return "active"

    assert pools.follow(_id(1), staged_twice) == "active" and tried == [1, 1, 1]
    with pytest.raises(ExecutionMigrated):
        pools.follow(_id(1), lambda shard: (_ for _ in ()).throw(_moved(None)), wait_secs=0.0)


def test_the_async_follow_is_the_same() -> None:
    pools, tried = _follow_pools(asynchronous=True), []

    async def attempt(shard: int) -> str:
        tried.append(shard)
        if shard == 3:
            raise _moved(1)
        return f"on {shard}"

    assert asyncio.run(pools.follow(_id(3), attempt)) == "on 1" and tried == [3, 1]


def test_a_row_read_by_id_is_a_seal_only_to_a_sharded_client() -> None:
    from harvest.client.routing import resident

    seal = {"id": _id(0), "status": "MIGRATED", "migrated_to_shard": 2}
    with pytest.raises(ExecutionMigrated) as caught:
        resident(seal, True)
    assert (caught.value.reason, caught.value.shard, caught.value.execution_id) == ("migrated", 2, seal["id"])
    assert resident(seal, False) is seal, "one database reads the seal as it is"
    staged = {"id": _id(0), "status": "MIGRATING", "migrated_to_shard": None}
    assert resident(staged, True) is staged, "a staged copy with no pointer is the run (awaiting activation)"
    assert resident({"execution_id": "x", "status": "RUNNING", "migrated_to_shard": None}, True)
