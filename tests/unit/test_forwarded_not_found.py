"""A run looked up by an id of a retired shard, where ``shards.forwards`` sends it, and not found
there: the answer says the shard is retired and where its ids went (the decommission runbook's
step 5: only the runs moved off it before it was retired are there). It said only that the id
may be a workflow id, which an operator holding an execution id of the retired shard could not
act on. An id of a shard that is not retired, or a call that passed a seal, is answered as it
was."""

from __future__ import annotations

import asyncio

import pytest

from harvest.core.errors import ExecutionMigrated, NotFound
from harvest.shard import AsyncShardPools, ShardPools, ShardRouter

ROUTER = ShardRouter([0, 2], [0, 2], 0, forwards={1: 0})
URLS = {0: "postgresql://app@127.0.0.1:1/s0", 2: "postgresql://app@127.0.0.1:1/s2"}  # never opened
OF_SHARD_1 = "00011a25-0007-4607-9abf-3f1f4733c505"
OF_SHARD_0 = "00001a25-0007-4607-9abf-3f1f4733c505"
SAID = f"execution {OF_SHARD_1} not found"
RETIRED = (
    "shard 1 is retired: shards.forwards sends its ids to shard 0, which holds only the runs "
    "moved off shard 1 before it was retired"
)


SAID_0 = f"execution {OF_SHARD_0} not found"


def _missing(shard: int) -> None:
    raise NotFound(SAID)


def _missing_0(shard: int) -> None:
    raise NotFound(SAID_0)


def test_a_not_found_of_something_else_of_a_run_behind_a_forward_is_as_it_was() -> None:
    """A query request expired on the run the forward reached (review68c): the run is there, and
    "only the runs moved off shard 1" said it was not."""
    said = "query request 7b0c2f4e-0000-4000-8000-000000000001 does not exist (it may have expired)"

    def expired(shard: int) -> None:
        raise NotFound(said)

    with ShardPools(ROUTER, URLS) as pools, pytest.raises(NotFound) as raised:
        pools.follow(OF_SHARD_1, expired)
    assert str(raised.value) == said


def test_a_run_not_found_behind_a_forward_says_the_shard_is_retired() -> None:
    with ShardPools(ROUTER, URLS) as pools:
        with pytest.raises(NotFound) as raised:
            pools.follow(OF_SHARD_1, _missing)
        assert str(raised.value) == f"{SAID} ({RETIRED})"
        with pytest.raises(NotFound) as raised:
            pools.follow(OF_SHARD_0, _missing_0)
        assert str(raised.value) == SAID_0, "an id of a shard in service: as it was"


def test_a_call_that_passed_a_seal_is_answered_as_it_was() -> None:
    tried: list[int] = []

    def attempt(shard: int) -> None:
        tried.append(shard)
        if shard == 0:
            raise ExecutionMigrated("moved", reason="migrated", shard=2)
        raise NotFound(SAID)

    with ShardPools(ROUTER, URLS) as pools, pytest.raises(NotFound) as raised:
        pools.follow(OF_SHARD_1, attempt)
    assert tried == [0, 2] and str(raised.value) == SAID


def test_the_async_pools_say_the_same() -> None:
    async def missing(shard: int) -> None:
        raise NotFound(SAID)

    async def main() -> str:
        async with AsyncShardPools(ROUTER, URLS) as pools:
            try:
                await pools.follow(OF_SHARD_1, missing)
            except NotFound as exc:
                return str(exc)
        return "no error"

    assert asyncio.run(main()) == f"{SAID} ({RETIRED})"
