"""Offloaded payloads move with a run (functions/rebalance.sql, docs/payloads.md): on real
servers, a run whose start argument a client offloaded on shard 0 is rebalanced to shard 1 (a
reference no longer blocks the move); the row arrives there owned by the run, and the run
finishes on shard 1 with its input and a signal a sharded client offloaded there resolved."""

from __future__ import annotations

import pytest
from rebalance_helpers import RunningWorker, authoritative, scalar, wait_until

from harvest import App, Client, workflow
from harvest.core.codecs import Payloads
from harvest.shard import ShardPools, ShardRouter
from harvest.shard.rebalance import Rebalancer

pytestmark = pytest.mark.shard

ALL = [0, 1, 2]
BIG = "z" * 3000


@workflow
async def or_parked(ctx, big: str) -> list:
    extra = await ctx.wait_for_signal("go")
    return [len(big), len(extra)]


APP = App(workflows=[or_parked])


def test_a_runs_offloaded_input_moves_with_it_and_resolves_on_the_target(shards) -> None:
    with (
        RunningWorker(APP, shards.dsns[0]),
        Client(shards.dsns[0], codecs=Payloads(offload_bytes=256)) as client,
    ):
        execution_id = client.start_workflow(or_parked, BIG, workflow_id="or-moved").execution_id
        wait_until(
            lambda: (
                scalar(
                    shards.dsns[0],
                    "SELECT count(*) FROM harvest.events"
                    " WHERE execution_id = %s AND event_type = 'WorkflowTaskCompleted'",
                    execution_id,
                )
                >= 1
            ),
            what="the run parked on shard 0",
        )
    assert (
        scalar(shards.dsns[0], "SELECT count(*) FROM harvest.payloads WHERE execution_id = %s", execution_id)
        == 1
    )
    with ShardPools(ShardRouter(ALL, ALL, 0), shards.dsns, max_size=4) as pools:
        move = Rebalancer(pools, 0, 1, operator_id="ops@test").move(execution_id)
        assert move.outcome == "moved", move
        assert authoritative(shards.dsns, execution_id) == [1]
        assert (
            scalar(
                shards.dsns[1], "SELECT count(*) FROM harvest.payloads WHERE execution_id = %s", execution_id
            )
            == 1
        ), "the offloaded input arrived, owned by the run"
        with (
            RunningWorker(APP, shards.dsns[1]),
            Client(shards=pools, codecs=Payloads(offload_bytes=256)) as sharded,
        ):
            handle = sharded.get_handle(execution_id)
            handle.signal("go", BIG + "!")
            assert handle.result(timeout=60) == [3000, 3001]
    assert (
        scalar(shards.dsns[1], "SELECT count(*) FROM harvest.payloads WHERE execution_id = %s", execution_id)
        == 2
    )
