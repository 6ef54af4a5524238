"""The client's list and count read every shard, as `harvest workflow list/count` and GET
/workflows do (the fan-out's list_workflows and count_executions plans): each row with its
shard_id, one cursor across the shards; a shard that is down makes a page ``partial`` and keeps
its place in the cursor, its runs coming once it answers; the iteration stops with
DatabaseUnavailable once only that shard's runs are left. Two shards of the cluster."""

from __future__ import annotations

import asyncio

import pytest

from harvest import AsyncClient, Client
from harvest.core.errors import DatabaseUnavailable
from harvest.core.ids import shard_of
from harvest.shard import AsyncShardPools, ShardPools, ShardRouter

pytestmark = pytest.mark.shard

TWO = [0, 1]


def _pools(shards, cls=ShardPools):  # type: ignore[no-untyped-def]
    router = ShardRouter(TWO, TWO, 0)
    return cls(router, {s: shards.dsns[s] for s in TWO}, max_size=2, acquire_timeout=2.0)


def test_the_client_lists_and_counts_over_two_shards_partial_with_one_down(shards) -> None:
    with _pools(shards) as pools, Client(shards=pools) as client:
        ids = {s: [client.start_workflow("leaf", i, shard_id=s).execution_id for i in range(3)] for s in TWO}
        every = ids[0] + ids[1]
        listed = list(client.list_workflows(page_size=2))
        assert sorted(str(r["execution_id"]) for r in listed) == sorted(every)
        assert all(r["shard_id"] == shard_of(r["execution_id"]) for r in listed)
        keys = [(r["created_at"], str(r["execution_id"])) for r in listed]
        assert keys == sorted(keys, reverse=True), "one order across the shards, newest first"
        count = client.count_workflows()
        assert count.status == "complete" and [(r["status"], r["executions"]) for r in count] == [
            ("RUNNING", 6)
        ]

        shards.stop(1)
        try:
            page = client.list_workflows_page(page_size=10)
            assert (page.status, page.unavailable_shards) == ("partial", [1])
            assert sorted(str(r["execution_id"]) for r in page) == sorted(ids[0])
            assert page.next_cursor is not None, "could not inspect is not no more rows"
            cursor = page.next_cursor
            partial = client.count_workflows()
            assert (partial.status, partial.unavailable_shards) == ("partial", [1])
            assert [r["executions"] for r in partial] == [3]
            # The iteration gives what it can read, then names the shard it could not.
            given: list[str] = []
            with pytest.raises(DatabaseUnavailable, match="shard\\(s\\) 1"):
                given.extend(str(r["execution_id"]) for r in client.list_workflows(page_size=2))
            assert sorted(given) == sorted(ids[0])
            # No shard read at all: an error, not an empty list (the CLI's exit 1).
            only = ShardRouter([1], [1], 1)
            with ShardPools(only, {1: shards.dsns[1]}, max_size=1, acquire_timeout=1.0) as down:
                with Client(shards=down) as blind, pytest.raises(DatabaseUnavailable, match="shard\\(s\\) 1"):
                    blind.list_workflows_page()
                with Client(shards=down) as blind, pytest.raises(DatabaseUnavailable, match="workflow count"):
                    blind.count_workflows()
        finally:
            shards.start(1)
        # Back up: the cursor of the partial page brings the runs it missed, and nothing twice.
        later = client.list_workflows_page(page_size=10, cursor=cursor)
        assert later.status == "complete" and later.next_cursor is None
        assert sorted(str(r["execution_id"]) for r in later) == sorted(ids[1])


def test_the_async_client_lists_and_counts_over_two_shards(shards) -> None:
    async def go() -> tuple[list[str], list[str], int]:
        async with (
            _pools(shards, AsyncShardPools) as pools,
            await AsyncClient.connect(shards=pools) as client,
        ):
            started = [(await client.start_workflow("leaf", s, shard_id=s)).execution_id for s in TWO]
            listed = [str(r["execution_id"]) async for r in client.list_workflows(page_size=1)]
            counts = await client.count_workflows(group_by="workflow_name")
            return started, listed, sum(r["executions"] for r in counts)

    started, listed, counted = asyncio.run(go())
    assert sorted(listed) == sorted(started) and counted == 2
