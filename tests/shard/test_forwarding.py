"""A run a rebalance moved keeps its execution id (minted for its origin shard) and lives on
another shard: on three real PostgreSQL servers, every id-routed path reaches it there.

* the sharded Client (describe, history, result and its LISTEN, cancel, terminate, signal, and
  signal_with_start by the business key) and the CLI's id-routed commands, by the original id,
  without the caller seeing HR013;
* workflows on shard 1 (where the run now lives) and on shard 2 signalling and cancelling it by
  id and by business key (ctx.signal_external_workflow / cancel_external_workflow), each
  delivered exactly once;
* a chain of moves 0 -> 1 -> 2, followed and collapsed.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid

import pytest
from click.testing import CliRunner
from cross_shard_helpers import clients, enable_cross_shard_relays, shard_workers
from rebalance_helpers import RunningWorker, authoritative, row, scalar, signals, wait_until
from test_cross_shard_relays import canceller, collector, sender, stubborn

from harvest import App, AsyncClient, Client, workflow
from harvest.cli.main import main as cli
from harvest.core.codecs import Payloads
from harvest.core.errors import WorkflowCancelled, WorkflowTerminated
from harvest.shard import AsyncShardPools, ShardPools, ShardRouter
from harvest.shard.rebalance import Rebalancer

pytestmark = pytest.mark.shard

ALL = [0, 1, 2]


@workflow
async def fw_parked(ctx, tag: str) -> dict:
    value = await ctx.wait_for_signal("go")
    return {"tag": tag, "value": value}


@workflow
async def fw_rotating(ctx, round_: int) -> dict:
    value = await ctx.wait_for_signal("go")
    if round_ == 0:
        ctx.continue_as_new(1)  # the successor is minted where the run lives
    return {"round": round_, "value": value}


@workflow
async def fw_rotating_items(ctx, round_: int) -> dict:
    value = await ctx.wait_for_signal("item")
    if round_ == 0:
        ctx.continue_as_new(1)
    return {"round": round_, "value": value}


# The cross-shard relay tests' workflows: collector (waits for N "item" signals), stubborn (stays
# running after a cancel request until "release"), sender and canceller.
APP = App(workflows=[fw_parked, fw_rotating, fw_rotating_items, collector, stubborn, sender, canceller])


def _pools(shards) -> ShardPools:
    return ShardPools(ShardRouter(ALL, ALL, 0), shards.dsns, max_size=4)


def _parked(dsn: str, execution_id: str) -> bool:
    """The run decided its first task and waits with no task at all (quiescent)."""
    decided = scalar(
        dsn,
        "SELECT count(*) FROM harvest.events "
        "WHERE execution_id = %s AND event_type = 'WorkflowTaskCompleted'",
        execution_id,
    )
    tasks = scalar(dsn, "SELECT count(*) FROM harvest.tasks WHERE execution_id = %s", execution_id)
    return decided >= 1 and tasks == 0


def _start_parked(shards, workflow, *args, workflow_id: str) -> str:
    """Start on shard 0 (an id of shard 0) and wait until it parks there."""
    with Client(shards.dsns[0]) as client:
        execution_id = client.start_workflow(workflow, *args, workflow_id=workflow_id).execution_id
    wait_until(lambda: _parked(shards.dsns[0], execution_id), what=f"{workflow_id} parked on shard 0")
    return execution_id


def _move(pools: ShardPools, execution_id: str, source: int, target: int) -> None:
    move = Rebalancer(pools, source, target, operator_id="ops@test").move(execution_id)
    assert move.outcome == "moved", move


def _cli(shards, *args: str) -> dict:
    env = {"HARVEST_DATABASE_URL": shards.dsns[0]}
    env.update({f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()})
    result = CliRunner().invoke(cli, [*args, "--output", "json"], env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_sharded_client_and_the_cli_reach_a_moved_run_by_its_original_id(shards) -> None:
    with RunningWorker(APP, shards.dsns[0]):
        execution_id = _start_parked(shards, fw_parked, "a", workflow_id="fw-moved")
        cancelled = _start_parked(shards, stubborn, workflow_id="fw-cancel-me")
        ended = _start_parked(shards, fw_parked, "t", workflow_id="fw-terminate-me")
    with _pools(shards) as pools:
        for run in (execution_id, cancelled, ended):
            _move(pools, run, 0, 1)
            assert authoritative(shards.dsns, run) == [1]
        with RunningWorker(APP, shards.dsns[1]), Client(shards=pools) as client:
            handle = client.get_handle(execution_id, fw_parked)
            described = handle.describe()
            assert (described["status"], described["migrated_from_shards"]) == ("RUNNING", [0]), (
                "describe reads the live copy on shard 1, not the seal on shard 0"
            )
            history = handle.history()
            with pools.api(1) as sql:
                assert history == sql.get_history(execution_id)
            # A result waiter LISTENs where the run lives, started before the signal.
            waited: dict = {}
            waiter = threading.Thread(target=lambda: waited.update(value=handle.result(timeout=60)))
            waiter.start()
            # By business key: the key's shard holds the seal; the client goes on to the live copy.
            attached = client.signal_with_start(
                fw_parked, "ignored", workflow_id="fw-moved", signal="go", signal_payload=7
            )
            assert (attached.execution_id, attached.started_fresh) == (execution_id, False)
            waiter.join(60)
            assert waited == {"value": {"tag": "a", "value": 7}}
            assert handle.history()[-1]["event_type"] == "WorkflowCompleted"
            assert signals(shards.dsns[1], execution_id, 7) == 1
            assert signals(shards.dsns[0], execution_id, 7) == 0, "nothing reached the seal"

            assert client.get_handle(cancelled).cancel("moved") is True
            client.get_handle(cancelled).signal("release")
            with pytest.raises(WorkflowCancelled):
                client.get_handle(cancelled).result(timeout=60)
            client.get_handle(ended).terminate("moved")
            with pytest.raises(WorkflowTerminated):
                client.get_handle(ended).result(timeout=60)
        assert row(shards.dsns[0], execution_id)["status"] == "MIGRATED", "the seal is untouched"

    # The CLI's id-routed commands, by the same ids, with [shards] from the environment.
    got = _cli(shards, "workflow", "get", execution_id)
    assert (got["status"], got["migrated_from_shards"]) == ("COMPLETED", [0])
    assert _cli(shards, "workflow", "history", execution_id)["execution"]["status"] == "COMPLETED"
    assert _cli(shards, "workflow", "stack", cancelled)["status"] == "CANCELLED"

    async def through_the_async_client() -> tuple:
        async with (
            AsyncShardPools(ShardRouter(ALL, ALL, 0), shards.dsns, max_size=2) as pools,
            await AsyncClient.connect(shards=pools) as client,
        ):
            handle = client.get_handle(execution_id)
            described, events = await handle.describe(), await handle.history()
            return described["status"], events[-1]["event_type"], await handle.result(timeout=10)

    assert asyncio.run(through_the_async_client()) == (
        "COMPLETED",
        "WorkflowCompleted",
        {"tag": "a", "value": 7},
    )


def test_workflows_on_shards_1_and_2_signal_and_cancel_a_moved_run_by_id_and_by_key_once(shards) -> None:
    enable_cross_shard_relays(shards)
    key = f"fw-collect-{uuid.uuid4().hex[:6]}"
    with shard_workers(APP, shards, shards=(0,)):
        target = _start_parked(shards, collector, 4, workflow_id=key)
        by_id = _start_parked(shards, stubborn, workflow_id="fw-stub-id")
        by_key = _start_parked(shards, stubborn, workflow_id="fw-stub-key")
    with _pools(shards) as pools:
        for run in (target, by_id, by_key):
            _move(pools, run, 0, 1)
        with shard_workers(APP, shards), Client(shards=pools) as client, clients(shards) as local:
            sent = [
                local[shard].start_workflow(sender, where, [f"{how}-from-{shard}"])
                for shard in (1, 2)
                for how, where in (
                    ("id", {"execution_id": target}),
                    ("key", {"workflow_id": key, "workflow_name": "collector"}),
                )
            ]
            cancels = [
                local[2].start_workflow(canceller, {"execution_id": by_id}),
                local[1].start_workflow(canceller, {"workflow_id": "fw-stub-key"}),
            ]
            for handle in sent:
                assert handle.result(timeout=60) == "sent"
            got = client.get_handle(target).result(timeout=60)
            assert sorted(got) == ["id-from-1", "id-from-2", "key-from-1", "key-from-2"], (
                "each delivered exactly once, to the live copy"
            )
            for handle in cancels:
                assert handle.result(timeout=60) == [True, False]
            for run in (by_id, by_key):
                client.get_handle(run).signal("release")
                with pytest.raises(WorkflowCancelled):
                    client.get_handle(run).result(timeout=60)
                requested = [
                    e
                    for e in client.get_handle(run).history()
                    if e["event_type"] == "WorkflowCancelRequested"
                ]
                assert [e["event_data"] for e in requested] == [{"reason": "not needed"}]
    for run in (target, by_id, by_key):
        assert row(shards.dsns[0], run)["status"] == "MIGRATED"
        assert authoritative(shards.dsns, run) == [1]
    assert (
        scalar(
            shards.dsns[0],
            "SELECT count(*) FROM harvest.events WHERE execution_id = ANY(%s::uuid[]) "
            "AND event_type IN ('SignalReceived', 'WorkflowCancelRequested')",
            [target, by_id, by_key],
        )
        == 0
    ), "nothing was delivered to a seal"
    for shard in ALL:
        with shards.connect(shard) as conn:
            assert conn.execute("SELECT count(*) FROM harvest.relays").fetchone()[0] == 0, f"shard {shard}"


def test_a_chain_of_moves_is_followed_by_the_client_and_the_cli(shards) -> None:
    with RunningWorker(APP, shards.dsns[0]):
        execution_id = _start_parked(shards, fw_parked, "chain", workflow_id="fw-chain")
    with _pools(shards) as pools:
        _move(pools, execution_id, 0, 1)
        _move(pools, execution_id, 1, 2)
    with shards.connect(0) as conn:  # undo the second move's collapse: the chain 0 -> 1 -> 2
        conn.execute("UPDATE harvest.executions SET migrated_to_shard = 1 WHERE id = %s", (execution_id,))
    assert _cli(shards, "workflow", "get", execution_id)["status"] == "RUNNING"
    _cli(shards, "workflow", "signal", execution_id, "aside", "--payload-json", '"by-cli"')
    assert signals(shards.dsns[2], execution_id, "by-cli") == 1, "the CLI's signal followed the chain"
    with _pools(shards) as pools, RunningWorker(APP, shards.dsns[2]), Client(shards=pools) as client:
        handle = client.get_handle(execution_id)
        assert handle.describe()["migrated_from_shards"] == [0, 1]
        assert row(shards.dsns[0], execution_id)["migrated_to_shard"] == 2, "a followed chain is collapsed"
        with shards.connect(0) as conn:
            conn.execute("UPDATE harvest.executions SET migrated_to_shard = 1 WHERE id = %s", (execution_id,))
        handle.signal("go", "far")
        assert handle.result(timeout=60) == {"tag": "chain", "value": "far"}
    assert signals(shards.dsns[2], execution_id, "far") == 1
    assert authoritative(shards.dsns, execution_id) == [2]


def test_a_moved_run_that_continues_as_new_is_followed_to_its_successor(shards) -> None:
    """The moved run (an id of shard 0, living on shard 1) continues as new; its successor's id
    is minted for shard 1. A handle of the first id follows the seal, then the chain."""
    with RunningWorker(APP, shards.dsns[0]):
        execution_id = _start_parked(shards, fw_rotating, 0, workflow_id="fw-rotating")
    with _pools(shards) as pools:
        _move(pools, execution_id, 0, 1)
        with RunningWorker(APP, shards.dsns[1]), Client(shards=pools) as client:
            handle = client.get_handle(execution_id)
            handle.signal("go", "first")
            wait_until(
                lambda: row(shards.dsns[1], execution_id)["status"] == "CONTINUED_AS_NEW", what="rotation"
            )
            handle.signal("go", "second")  # handed on to the successor, on shard 1
            assert handle.result(timeout=60) == {"round": 1, "value": "second"}
    successor = scalar(
        shards.dsns[1], "SELECT id::text FROM harvest.executions WHERE continued_from = %s", execution_id
    )
    assert successor.startswith("0001"), "minted for shard 1, where the run lived when it rotated"
    assert signals(shards.dsns[1], successor, "second") == 1


def test_an_offloading_signal_with_start_on_a_moved_run_stores_its_payload_where_the_run_lives(
    shards,
) -> None:
    big = "x" * 4000
    with RunningWorker(APP, shards.dsns[0]):
        execution_id = _start_parked(shards, fw_parked, "o", workflow_id="fw-offload")
    with _pools(shards) as pools:
        _move(pools, execution_id, 0, 1)
        with (
            RunningWorker(APP, shards.dsns[1]),
            Client(shards=pools, codecs=Payloads(offload_bytes=256)) as client,
        ):
            attached = client.signal_with_start(
                fw_parked, "ignored", workflow_id="fw-offload", signal="go", signal_payload=big
            )
            assert attached.execution_id == execution_id
            assert attached.result(timeout=60) == {"tag": "o", "value": big}
    # Stored first on the key's shard with the call, which the seal refused: rolled back there.
    assert scalar(shards.dsns[0], "SELECT count(*) FROM harvest.payloads") == 0
    owned = "SELECT count(*) FROM harvest.payloads WHERE execution_id = %s"
    assert scalar(shards.dsns[1], owned, execution_id) == 1, "stored on shard 1, owned by the run"


def test_a_signal_by_the_first_id_of_a_chain_whose_current_run_moved_reaches_it(shards) -> None:
    """A chain's first run continued as new on shard 0 and its successor (the current run) was
    moved to shard 1: the rotated run stays on shard 0, the successor's seal with it. A workflow
    on shard 2 signals by the first run's id: shard 0 walks the chain to the seal, and the pump
    delivers to the successor where it lives (it asked shard 1 for the first run's id, which is
    not there, and settled wrong_shard: ExternalWorkflowUnreachable with relays on)."""
    enable_cross_shard_relays(shards)
    with shard_workers(APP, shards, shards=(0,)), Client(shards.dsns[0]) as client:
        first = _start_parked(shards, fw_rotating_items, 0, workflow_id="fw-chain-moved")
        client.get_handle(first).signal("item", "rotate")
        wait_until(lambda: row(shards.dsns[0], first)["status"] == "CONTINUED_AS_NEW", what="rotation")
        current = scalar(
            shards.dsns[0], "SELECT id::text FROM harvest.executions WHERE continued_from = %s", first
        )
        wait_until(lambda: _parked(shards.dsns[0], current), what="the successor parked")
    with _pools(shards) as pools:
        _move(pools, current, 0, 1)
        with shard_workers(APP, shards), Client(shards=pools) as routed, clients(shards) as local:
            source = local[2].start_workflow(sender, {"execution_id": first}, ["by the first id"])
            assert source.result(timeout=60) == "sent"
            assert routed.get_handle(current).result(timeout=60) == {"round": 1, "value": "by the first id"}
    assert signals(shards.dsns[1], current, "by the first id") == 1
