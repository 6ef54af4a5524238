"""Cross-shard children (ChildPlacement) on three real PostgreSQL servers: a parent on shard 0
with distributed children across 0, 1 and 2 gets every result; a child's failure reaches the
parent; cancelling the parent cancels (terminates) its remote children; the child's shard
stopped mid-test makes the child wait and start once it is back; a shard with no pool rolls the
decision back (nothing recorded) and retries it; the parent's history replays."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid

import psycopg
import psycopg.rows
import psycopg.types.json
import pytest
from cross_shard_helpers import (
    SHARDS,
    clients,
    decide_child,
    enable_cross_shard_relays,
    park_with_remote_child,
    router,
    shard_workers,
    wait_for,
)

from harvest import App, ChildPlacement, ChildWorkflowError, workflow
from harvest.core.errors import InvalidArgument, ShardUnavailable, WorkflowCancelled
from harvest.core.ids import shard_of
from harvest.db.connection import connect
from harvest.db.sqlapi import SqlApi
from harvest.shard import AsyncShardPools, ShardRouter
from harvest.shard.children import distributed_key, place_child
from harvest.shard.fanout import ShardReads
from harvest.shard.relay_pump import RelayPump
from harvest.shard.router import rendezvous
from harvest.testing import WorkflowReplayer

pytestmark = pytest.mark.shard


@workflow
async def square(ctx, n: int) -> list:
    return [n * n, shard_of(ctx.execution_id)]


@workflow
async def broken(ctx, why: str) -> None:
    raise ValueError(why)


@workflow
async def sleeper(ctx) -> None:
    await ctx.wait_for_signal("never")


@workflow
async def fan_out(ctx, count: int) -> list:
    handles = [
        await ctx.start_child_workflow(square, n, placement=ChildPlacement.DISTRIBUTED) for n in range(count)
    ]
    return [await h.result() for h in handles]


@workflow
async def pinned(ctx, shard: int, fail: bool) -> list:
    if fail:
        try:
            await ctx.execute_child_workflow(broken, "no", placement=ChildPlacement.shard(shard))
        except ChildWorkflowError as err:
            return [err.status, err.failure["error_type"], err.failure["message"]]
    return await ctx.execute_child_workflow(square, 7, placement=ChildPlacement.shard(shard))


@workflow
async def waits_on_sleepers(ctx, policy: str) -> None:
    for shard in (1, 2):
        await ctx.start_child_workflow(
            sleeper, placement=ChildPlacement.shard(shard), parent_close_policy=policy
        )
    await ctx.wait_for_signal("never")


app = App(workflows=[square, broken, sleeper, fan_out, pinned, waits_on_sleepers])


@contextlib.contextmanager
def sql_on(dsn: str):
    conn = connect(dsn, autocommit=True, connect_timeout=3)
    try:
        yield SqlApi(conn)
    finally:
        conn.close()


def history(client, execution_id: str) -> list[dict]:
    return client.get_handle(execution_id).history()


def children_rows(cluster, shard: int) -> list[tuple]:
    with cluster.connect(shard) as conn:
        return conn.execute(
            "SELECT target_shard, status, cancel_requested, attempts, last_error "
            "FROM harvest.cross_shard_children ORDER BY created_at"
        ).fetchall()


def test_distributed_children_across_three_shards_all_reach_the_parent(shards) -> None:
    enable_cross_shard_relays(shards)
    count = 30  # a shard gets none of 30 with probability 3 x (2/3)^30, about 1e-5
    with shard_workers(app, shards), clients(shards) as c:
        parent = c[0].start_workflow(fan_out, count)
        results = parent.result(timeout=90)
        assert [r[0] for r in results] == [n * n for n in range(count)]
        started = [e for e in history(c[0], parent.execution_id) if e["event_type"] == "ChildWorkflowStarted"]
        placed = [shard_of(e["event_data"]["child_execution_id"]) for e in started]
        assert [r[1] for r in results] == placed, "each child ran on the shard its id names"
        assert set(placed) == {0, 1, 2}, "spread over every writable shard"
        seqs = [e["event_data"]["seq"] for e in started]
        assert placed == [rendezvous(distributed_key(parent.execution_id, s), SHARDS) for s in seqs]
        for e in started:
            child = e["event_data"]["child_execution_id"]
            row = c[shard_of(child)].get_handle(child).describe()
            assert str(row["parent_id"]) == parent.execution_id
        WorkflowReplayer(app).replay_or_raise(history(c[0], parent.execution_id))
        reads = ShardReads({s: functools.partial(sql_on, shards.dsns[s]) for s in SHARDS})
        listed = reads.list_children(parent.execution_id)
        assert listed.status == "complete"
        assert sorted((str(r["execution_id"]), r["shard_id"]) for r in listed.value) == sorted(
            (e["event_data"]["child_execution_id"], shard_of(e["event_data"]["child_execution_id"]))
            for e in started
        ), "the fan-out children read finds every child on its shard"
    assert children_rows(shards, 0) == [], "every settled child deletes its row"


def test_a_remote_childs_failure_reaches_the_parent(shards) -> None:
    enable_cross_shard_relays(shards)
    with shard_workers(app, shards), clients(shards) as c:
        ok = c[0].start_workflow(pinned, 2, False)
        failed = c[0].start_workflow(pinned, 1, True)
        assert ok.result(timeout=60) == [49, 2]
        status, error_type, message = failed.result(timeout=60)
        assert (status, error_type) == ("FAILED", "ValueError") and "no" in message
        for run in (ok, failed):
            WorkflowReplayer(app).replay_or_raise(history(c[0], run.execution_id))


@pytest.mark.parametrize(("policy", "ends"), [("terminate", "TERMINATED"), ("request_cancel", "CANCELLED")])
def test_cancelling_the_parent_closes_its_remote_children(shards, policy: str, ends: str) -> None:
    enable_cross_shard_relays(shards)
    with shard_workers(app, shards), clients(shards) as c:
        parent = c[0].start_workflow(waits_on_sleepers, policy)
        wait_for(
            lambda: [r[1] for r in children_rows(shards, 0)] == ["running", "running"],
            what="both children started",
        )
        started = [e for e in history(c[0], parent.execution_id) if e["event_type"] == "ChildWorkflowStarted"]
        kids = [e["event_data"]["child_execution_id"] for e in started]
        assert sorted(shard_of(k) for k in kids) == [1, 2]
        parent.cancel("stop the tree")
        with pytest.raises(WorkflowCancelled):
            parent.result(timeout=60)
        for kid in kids:
            handle = c[shard_of(kid)].get_handle(kid)
            wait_for(lambda h=handle: h.describe()["status"] == ends, what=f"child {kid} {ends}")
        wait_for(lambda: children_rows(shards, 0) == [], what="the rows settled")
        WorkflowReplayer(app).replay_or_raise(history(c[0], parent.execution_id))


def test_a_stopped_child_shard_holds_the_child_which_starts_once_after_it_returns(shards) -> None:
    enable_cross_shard_relays(shards)
    with shard_workers(app, shards, (0, 1)), clients(shards) as c:
        with shard_workers(app, shards, (2,)):
            pass  # registers the workflows on shard 2
        shards.stop(2)
        try:
            parent = c[0].start_workflow(pinned, 2, False)
            stalled = wait_for(
                lambda: [r for r in children_rows(shards, 0) if r[3] >= 1],
                what="an attempt on the child's row",
            )
            assert stalled[0][:2] == (2, "starting") and "shard 2" in stalled[0][4]
            assert parent.describe()["status"] == "RUNNING"
        finally:
            shards.start(2)
        with shard_workers(app, shards, (2,)):
            assert parent.result(timeout=90) == [49, 2]
    with clients(shards) as c:
        started = [e for e in history(c[0], parent.execution_id) if e["event_type"] == "ChildWorkflowStarted"]
        (child,) = [e["event_data"]["child_execution_id"] for e in started]
        with shards.connect(2) as conn:
            runs = conn.execute(
                "SELECT id FROM harvest.executions WHERE parent_id = %s", (uuid.UUID(parent.execution_id),)
            ).fetchall()
        assert [str(r[0]) for r in runs] == [child], "started once"
        WorkflowReplayer(app).replay_or_raise(history(c[0], parent.execution_id))


def test_a_shard_with_no_pool_rolls_the_decision_back_and_retries_it(shards) -> None:
    """Placement never falls back: shard 2 has no pool in the parent's worker, so the decision
    records nothing until a worker that has one makes it."""
    enable_cross_shard_relays(shards)
    narrow = {0: shards.dsns[0], 1: shards.dsns[1]}

    class Narrow:
        dsns = narrow

        def connect(self, shard):
            return shards.connect(shard)

    with shard_workers(app, shards, (1, 2)), clients(shards) as c:
        with shard_workers(app, Narrow(), (0,)):
            parent = c[0].start_workflow(pinned, 2, False)
            wait_for(
                lambda: any(e["event_type"] == "WorkflowStarted" for e in history(c[0], parent.execution_id)),
                what="the parent",
            )
            with shards.connect(0) as conn:
                wait_for(
                    lambda: (
                        conn.execute(
                            "SELECT last_failure->>'error_type' FROM harvest.tasks WHERE execution_id = %s",
                            (uuid.UUID(parent.execution_id),),
                        ).fetchone()[0]
                        == "ShardUnavailable"
                    ),
                    what="the decision refused with ShardUnavailable",
                )
            types = [e["event_type"] for e in history(c[0], parent.execution_id)]
            assert "ChildWorkflowStarted" not in types and children_rows(shards, 0) == []
        with shard_workers(app, shards, (0,)):
            assert parent.result(timeout=90) == [49, 2]


def test_place_child_resolves_each_placement() -> None:
    router = ShardRouter([0, 1, 2], [0, 1], 0, residency_map={"eu": 1, "ap": 2})
    cmd = {"workflow_name": "w", "seq": 3}
    parent = "0000" + str(uuid.uuid4())[4:]
    assert place_child(router, (0, 1, 2), 0, parent, cmd) == 0
    distributed = {**cmd, "placement": {"kind": "distributed"}}
    assert place_child(router, (0, 1, 2), 0, parent, distributed) == rendezvous(f"{parent}#3", [0, 1])
    assert (
        place_child(router, (0, 1), 0, parent, {**cmd, "placement": {"kind": "residency_key", "key": "eu"}})
        == 1
    )
    with pytest.raises(InvalidArgument):
        place_child(router, (0, 1, 2), 0, parent, {**cmd, "placement": {"kind": "shard", "shard_id": 2}})
    with pytest.raises(InvalidArgument):
        place_child(
            router, (0, 1, 2), 0, parent, {**cmd, "placement": {"kind": "residency_key", "key": "us"}}
        )
    with pytest.raises(ShardUnavailable):
        place_child(router, (0,), 0, parent, {**cmd, "placement": {"kind": "shard", "shard_id": 1}})


def _started_on_shard_1(cluster, row: dict) -> None:
    """The pump's start on the child's shard (start_cross_shard_child), whose report to the
    parent's shard (set_cross_shard_child_running) never arrived."""
    with cluster.connect(1) as conn:
        conn.execute(
            "SELECT * FROM harvest.start_cross_shard_child(%s, %s, %s, %s, %s, %s, %s, %s)",
            (
                row["child_execution_id"],
                row["parent_execution_id"],
                row["parent_seq"],
                row["workflow_name"],
                row["workflow_id"],
                row["queue"],
                psycopg.types.json.Jsonb(row["input"]),
                row["parent_close_policy"],
            ),
        )


def _status(cluster, shard: int, execution_id) -> str | None:
    with cluster.connect(shard) as conn:
        found = conn.execute(
            "SELECT status, cancel_requested FROM harvest.executions WHERE id = %s", (execution_id,)
        ).fetchone()
    return None if found is None else found[0] + (" (cancel requested)" if found[1] else "")


async def _tick(cluster) -> None:
    async with AsyncShardPools(router(), cluster.dsns, max_size=2, acquire_timeout=2.0) as pools:
        await RelayPump(pools, sources=[0]).tick()


@pytest.mark.parametrize(
    ("policy", "ends"), [("terminate", "TERMINATED"), ("request_cancel", "RUNNING (cancel requested)")]
)
def test_a_parent_closed_before_its_childs_start_was_reported_still_closes_the_child(
    shards, policy: str, ends: str
) -> None:
    """The child was started on its shard, but the report to the parent's shard was lost (the
    row still says ``starting``) when the parent ended: its close policy reaches the child
    that exists, as it does once the row says ``running``."""
    enable_cross_shard_relays(shards)
    parent, row = park_with_remote_child(shards, f"lost-report-{policy}", policy)
    _started_on_shard_1(shards, row)
    with shards.connect(0) as conn:
        conn.execute("SELECT harvest.terminate_workflow(%s, 'stop the tree')", (parent,))
    asyncio.run(_tick(shards))
    child = row["child_execution_id"]
    assert _status(shards, 1, child) == ends
    if policy == "request_cancel":
        with shards.connect(1) as conn:
            assert conn.execute(
                "SELECT cancel_requested FROM harvest.executions WHERE id = %s", (child,)
            ).fetchone()[0]
    assert children_rows(shards, 0) == [], "the row settled"


def test_a_child_started_after_another_pump_settled_its_closed_parents_row_is_closed(shards) -> None:
    """Two pumps on one shard: pump A claims the row and goes to start the child; meanwhile the
    parent ends and pump B settles the row (its terminate finds no child yet). A's start then
    makes a child whose row is gone: A applies the parent's close policy to it."""
    enable_cross_shard_relays(shards)
    parent, _ = park_with_remote_child(shards, "two-pumps")

    class PumpA(AsyncShardPools):
        """Pump A's pools: B runs while A is on its way to the child's shard."""

        raced = False

        @contextlib.asynccontextmanager
        async def api(self, shard: int):
            if shard == 1 and not self.raced:
                self.raced = True
                with shards.connect(0) as conn:
                    conn.execute("SELECT harvest.terminate_workflow(%s, 'stop the tree')", (parent,))
                async with AsyncShardPools(router(), shards.dsns, max_size=2, acquire_timeout=2.0) as b:
                    await RelayPump(b, sources=[0]).tick()
                assert children_rows(shards, 0) == [], "pump B settled the row"
            async with super().api(shard) as sql:
                yield sql

    async def race() -> None:
        async with PumpA(router(), shards.dsns, max_size=2, acquire_timeout=2.0) as a:
            await RelayPump(a, sources=[0]).tick()
            assert a.raced

    asyncio.run(race())
    with shards.connect(0) as conn:
        child = conn.execute(
            "SELECT event_data ->> 'child_execution_id' FROM harvest.events "
            "WHERE execution_id = %s AND event_type = 'ChildWorkflowStarted'",
            (parent,),
        ).fetchone()[0]
    assert _status(shards, 1, child) == "TERMINATED"


def test_a_remote_child_that_continued_as_new_many_times_reaches_its_parent(shards) -> None:
    """The pump reads the child's current run however long its continue-as-new chain: a child
    entity that rotated more than a hundred times still delivers its end to the parent."""
    enable_cross_shard_relays(shards)
    parent, _ = park_with_remote_child(shards, "long-chain")
    asyncio.run(_tick(shards))  # the pump starts the child on shard 1
    assert children_rows(shards, 0)[0][1] == "running"
    for n in range(105):
        decide_child(shards, [{"type": "continue_as_new", "input": [n]}])
    decide_child(shards, [{"type": "complete_workflow", "result": "done"}])
    asyncio.run(_tick(shards))
    with shards.connect(0) as conn:
        ended = conn.execute(
            "SELECT event_data FROM harvest.events "
            "WHERE execution_id = %s AND event_type = 'ChildWorkflowCompleted'",
            (parent,),
        ).fetchone()
    assert ended is not None and ended[0]["result"] == "done"
    assert children_rows(shards, 0) == []
