"""Client, AsyncClient and CLI over three real PostgreSQL servers: hashed starts spread over the
writable shards; a residency-pinned start lands on its shard and its whole tree (children,
continue-as-new) stays there; every placement refusal the guide lists (nothing written); id-routed
signal, cancel, result and history across shards; the CLI's placement flags, id routing and
fan-out list, partial with one server stopped. One ordinary worker per shard runs the runs."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from harvest import App, AsyncClient, Batch, Client, Debounce, Throttle, workflow
from harvest.cli.main import main
from harvest.config import load_config
from harvest.core.errors import (
    InvalidArgument,
    NotFound,
    ShardUnavailable,
    WorkflowCancelled,
    WorkflowNotRunning,
)
from harvest.core.ids import shard_of
from harvest.db.sqlapi import AsyncSqlApi, SqlApi
from harvest.shard import AsyncShardPools, ShardPools, ShardRouter
from harvest.web.app import management_app

pytestmark = pytest.mark.shard

ALL = [0, 1, 2]
RESIDENCY = {"eu": 0, "us": 1, "apac": 2}


@workflow
async def leaf(ctx, n: int) -> int:
    return n * 10


@workflow
async def tree(ctx, n: int, total: int = 0) -> int:
    """A child per run, then continue-as-new until n is 0: a tree and a chain."""
    got = await ctx.execute_child_workflow(leaf, n)
    if n > 0:
        await ctx.continue_as_new(n - 1, total + got)
    return total + got


@workflow
async def waiter(ctx) -> str:
    return await ctx.wait_for_signal("go")


@workflow(debounce=Debounce(quiet=60))
async def debounced(ctx) -> None:
    return None


@workflow(debounce=Debounce(quiet=60, key="input.doc"))
async def reindex(ctx, change: dict) -> None:
    return None


@workflow(batch=Batch(max_size=100, window=60, key="input.tenant"))
async def gather(ctx, items: list) -> None:
    return None


@workflow(throttle=Throttle(rps=0.001, burst=1))
async def throttled(ctx) -> None:
    return None


APP = App(workflows=[leaf, tree, waiter])


def _router(writable=ALL, residency=RESIDENCY) -> ShardRouter:
    return ShardRouter(ALL, writable, 0, residency_map=residency)


def _counts(shards, sql: str = "SELECT count(*) FROM harvest.executions") -> list[int]:
    out = []
    for s in ALL:
        with shards.connect(s) as conn:
            out.append(conn.execute(sql).fetchone()[0])
    return out


def test_hashed_starts_spread_over_the_writable_shards(shards) -> None:
    router = _router(writable=[0, 1])  # shard 2 is readable only: it takes no new work
    with ShardPools(router, shards.dsns, max_size=2) as pools, Client(shards=pools) as client:
        handles = [client.start_workflow("leaf", i, workflow_id=f"order-{i}") for i in range(40)]
        minted = client.start_workflow("leaf", 1)  # no id: minted here, then hashed
    for h in [*handles, minted]:
        assert h.shard_id == shard_of(h.execution_id) == router.pick_for_new_workflow("leaf", h.workflow_id)
    by_shard = [sum(1 for h in handles if h.shard_id == s) for s in ALL]
    assert by_shard[0] > 5 and by_shard[1] > 5 and by_shard[2] == 0, by_shard
    assert _counts(shards)[:2] == [by_shard[0] + (minted.shard_id == 0), by_shard[1] + (minted.shard_id == 1)]
    assert _counts(shards)[2] == 0


def test_async_starts_batch_per_shard_and_land_where_the_hash_says(shards) -> None:
    router = _router()

    async def go():
        pools = AsyncShardPools(router, shards.dsns, max_size=2)
        async with pools, await AsyncClient.connect(shards=pools) as client:
            handles = await asyncio.gather(
                *(client.start_workflow("leaf", i, workflow_id=f"a-{i}") for i in range(30))
            )
            return handles, client._starts.batches

    handles, batches = asyncio.run(go())
    for h in handles:
        assert shard_of(h.execution_id) == router.pick_for_new_workflow("leaf", h.workflow_id)
    assert {h.shard_id for h in handles} == set(ALL)
    assert batches <= 6, "30 concurrent starts over 3 shards commit in a few batches, one shard each"
    assert sum(_counts(shards)) == 30


def test_a_residency_pinned_tree_stays_on_its_shard(shards, per_shard_workers) -> None:
    per_shard_workers(APP)
    router = _router()
    with ShardPools(router, shards.dsns, max_size=4) as pools, Client(shards=pools) as client:
        handle = client.start_workflow(tree, 1, residency_key="apac")
        assert handle.shard_id == 2 and shard_of(handle.execution_id) == 2
        # The minted workflow id hashes to the pinned shard: an unpinned start of it finds the run.
        assert router.pick_for_new_workflow("tree", handle.workflow_id) == 2
        assert handle.result(timeout=30) == 10  # leaf(1) + leaf(0), across one continue-as-new
        children = handle.children()
        assert children.status == "complete" and [c["shard_id"] for c in children] == [2]
        assert handle.describe()["status"] == "CONTINUED_AS_NEW"
    # Two tree runs and two leaves, all on shard 2 and nowhere else, every id saying so.
    assert _counts(shards) == [0, 0, 4]
    with shards.connect(2) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM harvest.executions")]
    assert {shard_of(i) for i in ids} == {2}


def test_placement_refusals_write_nothing(shards, caplog) -> None:
    # Shard 2 is readable, not writable (being drained); "drain" maps to it, "nowhere" to nothing.
    with caplog.at_level(logging.WARNING, logger="harvest.shard"):
        router = _router(writable=[0, 1], residency={"eu": 0, "drain": 2})
    assert "not writable" in caplog.text
    with ShardPools(router, shards.dsns, max_size=2) as pools, Client(shards=pools) as client:
        refusals = [
            ({"shard_id": 1, "residency_key": "eu"}, "mutually exclusive"),
            ({"residency_key": "nowhere"}, "unknown residency_key 'nowhere'"),
            ({"residency_key": " "}, "blank"),
            ({"shard_id": 2}, "shard_id 2 is not accepting new workflows"),
            ({"residency_key": "drain"}, "maps to a shard that is not accepting new workflows"),
            ({"shard_id": 7}, "shard_id 7 is not a shard of this deployment"),
        ]
        for pin, message in refusals:
            with pytest.raises(InvalidArgument, match=message) as caught:
                client.start_workflow("leaf", 1, workflow_id="x", **pin)
            assert "[0, 1]" not in str(caught.value), "terse: the shard set is not enumerated"
        # A pin with a debounce: refused from the definition, before anything is sent ...
        with pytest.raises(InvalidArgument, match="declares a debounce"):
            client.start_workflow(debounced, shard_id=1)
        # ... and by name, from the pinned shard's own policy, the start rolled back.
        with pools.api(1) as sql:
            sql.declare_flow_policies(App(workflows=[debounced, throttled]).flow_policies())
        with pytest.raises(InvalidArgument, match="declares a debounce"):
            client.start_workflow("debounced", shard_id=1)
        assert _counts(shards, "SELECT count(*) FROM harvest.pending_starts") == [0, 0, 0]
        assert _counts(shards) == [0, 0, 0]
        # A throttled start keeps its pin: deferred on the pinned shard (no execution yet).
        client.start_workflow("throttled", shard_id=1)
        deferred = client.start_workflow("throttled", shard_id=1)
        assert deferred.deferred and deferred.shard_id == 1
        assert _counts(shards, "SELECT count(*) FROM harvest.pending_starts") == [0, 1, 0]
        # Unpinned, the debounce applies as always (on whatever shard the id hashes to).
        assert client.start_workflow("debounced", workflow_id="d-1").deferred

    # The client takes the pools of its kind, and not a dsn besides.
    with ShardPools(_router(), shards.dsns, max_size=1) as pools:
        with pytest.raises(InvalidArgument, match="a dsn or shards=, not both"):
            Client(shards.dsns[0], shards=pools)
        with pytest.raises(InvalidArgument, match="takes an AsyncShardPools, got ShardPools"):
            asyncio.run(AsyncClient.connect(shards=pools))

    # A pin to a shard the router accepts but this process has no pool for: 503, no fallback.
    with ShardPools(_router(), {s: shards.dsns[s] for s in (0, 1)}, max_size=2) as pools:
        with Client(shards=pools) as client, pytest.raises(ShardUnavailable) as caught:
            client.start_workflow("leaf", 1, residency_key="apac")
        assert caught.value.shard == 2 and "postgresql" not in str(caught.value)
    assert _counts(shards)[2] == 0 and _counts(shards)[0] == 0


def test_a_burst_of_a_debounce_or_batch_key_collapses_on_one_shard(shards) -> None:
    """The sharding guide: debounce records are routed to the shard of the debounce key, since
    every admission of a burst for one (workflow, key) must land on one shard for the collapse
    to work. Each start was placed by its workflow id, a fresh one when none was given, so a
    burst without ids spread over the shards and started a run on each. A batch gathers the
    same way."""
    gated = App(workflows=[reindex, gather]).flow_policies()
    with ShardPools(_router(), shards.dsns, max_size=2) as pools, Client(shards=pools) as client:
        for s in ALL:
            with pools.api(s) as sql:
                sql.declare_flow_policies(gated)
        burst = [client.start_workflow(reindex, {"doc": "d-1", "n": n}) for n in range(12)]
        assert all(h.deferred for h in burst)
        assert len({h.shard_id for h in burst}) == 1, "one shard for the burst"
        assert len({h.workflow_id for h in burst}) == 1, "the burst's first start names the run"
        # The minted id hashes where the run is: a lookup by that workflow id finds it there.
        router = client._target.router
        assert router.pick_for_new_workflow("reindex", burst[0].workflow_id) == burst[0].shard_id
        items = [client.start_workflow(gather, {"tenant": "acme", "n": n}) for n in range(8)]
        assert len({h.shard_id for h in items}) == 1
    pending = "SELECT count(*) FROM harvest.pending_starts WHERE workflow_name = '%s'"
    assert sorted(_counts(shards, pending % "reindex")) == [0, 0, 1]
    assert sorted(_counts(shards, pending % "gather")) == [0, 0, 1]


PENDING = "SELECT count(*) FROM harvest.pending_starts WHERE workflow_name = '%s'"


def _declare_gates(shards) -> None:
    """What a worker of [reindex, gather] declares on each shard it polls at start-up."""
    gated = App(workflows=[reindex, gather]).flow_policies()
    with ShardPools(_router(), shards.dsns, max_size=1) as pools:
        for s in ALL:
            with pools.api(s) as sql:
                sql.declare_flow_policies(gated)


def _counting(monkeypatch, cls) -> list[str]:
    """Each get_start_gate call of ``cls`` (SqlApi, AsyncSqlApi), by workflow name."""
    reads: list[str] = []
    original = cls.get_start_gate

    def counted(self, workflow_name):
        reads.append(workflow_name)
        return original(self, workflow_name)

    monkeypatch.setattr(cls, "get_start_gate", counted)
    return reads


@pytest.mark.parametrize("served_app", [None, App(workflows=[reindex, gather])], ids=["no-app", "app"])
def test_a_burst_started_by_name_over_http_collapses_on_one_shard(shards, monkeypatch, served_app) -> None:
    """POST /workflows/{name}/start on a sharded server, by name: placed by its gate's key like a
    start by the function, so the burst meets on one shard and collapses into one run. With
    --app the served App's declaration places it (no read); without, the shards' declaration
    (what the workers registered), read once per name for the process, not per start. Each start
    was placed by a fresh workflow id, so a burst spread over the shards (one run on each)."""
    _declare_gates(shards)
    reads = _counting(monkeypatch, AsyncSqlApi)
    env = {f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()}
    env |= {"HARVEST_SHARDS__READABLE": "0,1,2", "HARVEST_SHARDS__WRITABLE": "0,1,2"}
    api = management_app(config=load_config(env=env), profile="dev", app=served_app)
    with TestClient(api) as http:
        for n in range(12):
            started = http.post("/workflows/reindex/start", json={"input": {"doc": "d-1", "n": n}})
            assert started.status_code == 202, started.text
        for n in range(8):
            body = {"input": {"tenant": "acme", "n": n}}
            assert http.post("/workflows/gather/start", json=body).status_code == 202
        # A given workflow_id keeps its hashed shard (a lookup by it looks there), as by function.
        keyed = http.post("/workflows/reindex/start", json={"workflow_id": "w", "input": {"doc": "d-2"}})
        assert keyed.status_code == 202 and keyed.json()["workflow_id"] == "w"
    d1 = _counts(shards, (PENDING % "reindex") + " AND gate_key = 'd-1'")
    assert d1[_router().pick_for_gate("reindex", "d-1")] == 1 and sum(d1) == 1, d1
    w = _counts(shards, (PENDING % "reindex") + " AND workflow_id = 'w'")
    assert w[_router().pick_for_new_workflow("reindex", "w")] == 1 and sum(w) == 1, w
    assert sorted(_counts(shards, PENDING % "gather")) == [0, 0, 1]
    assert _counts(shards) == [0, 0, 0]
    assert reads == ([] if served_app else ["reindex", "gather"]), "one read per name, none with --app"


def test_a_burst_started_by_name_by_a_client_without_the_app_collapses(shards, monkeypatch) -> None:
    """Client(shards=) and AsyncClient by name (harvest workflow start over SQL is the former):
    the shards' declaration, read once per name and kept by the pools; a workflow with no gate
    declared is read once too and placed by its id; nothing declared yet on the shards (no worker
    registered) is no gate there either, and the start is placed by its id."""
    _declare_gates(shards)
    reads = _counting(monkeypatch, SqlApi)
    with ShardPools(_router(), shards.dsns, max_size=2) as pools, Client(shards=pools) as client:
        burst = [client.start_workflow("reindex", {"doc": "d-1", "n": n}) for n in range(12)]
        assert all(h.deferred for h in burst) and len({h.shard_id for h in burst}) == 1
        router = client._target.router
        assert burst[0].shard_id == router.pick_for_gate("reindex", "d-1")
        assert router.pick_for_new_workflow("reindex", burst[0].workflow_id) == burst[0].shard_id
        plain = [client.start_workflow("leaf", n) for n in range(6)]
        assert len({h.shard_id for h in plain}) > 1, "no gate: spread by id as before"
    assert reads == ["reindex", "leaf"]
    assert sorted(_counts(shards, PENDING % "reindex")) == [0, 0, 1]

    areads = _counting(monkeypatch, AsyncSqlApi)

    async def go():
        pools = AsyncShardPools(_router(), shards.dsns, max_size=2)
        async with pools, await AsyncClient.connect(shards=pools) as client:
            return [await client.start_workflow("gather", {"tenant": "t", "n": n}) for n in range(6)]

    items = asyncio.run(go())
    assert len({h.shard_id for h in items}) == 1 and areads == ["gather"]
    assert sorted(_counts(shards, PENDING % "gather")) == [0, 0, 1]

    # A concurrent burst of a name this process has not read yet waits for one read, not one
    # read a start (each start reading its own reached the start batcher apart: CI 59c's
    # test_async_starts_batch_per_shard_and_land_where_the_hash_says committed 30 starts in 14
    # batches).
    areads.clear()

    async def burst():
        pools = AsyncShardPools(_router(), shards.dsns, max_size=2)
        async with pools, await AsyncClient.connect(shards=pools) as client:
            return await asyncio.gather(*(client.start_workflow("leaf", n) for n in range(20)))

    assert len(asyncio.run(burst())) == 20
    assert areads == ["leaf"]


def test_id_routed_calls_follow_the_id_across_shards(shards, per_shard_workers) -> None:
    per_shard_workers(APP)
    router = _router()
    with ShardPools(router, shards.dsns, max_size=4) as pools:
        with Client(shards=pools) as starter:
            ids = [starter.start_workflow(waiter, shard_id=s).execution_id for s in ALL]
        assert [shard_of(i) for i in ids] == ALL
        with Client(shards=pools) as client:  # a fresh client: only the ids are known
            for s in (0, 2):
                handle = client.get_handle(ids[s])
                handle.signal("go", f"ok-{s}")
                assert handle.result(timeout=30) == f"ok-{s}"
                assert "SignalReceived" in [e["event_type"] for e in handle.history()]
            cancelled = client.get_handle(ids[1])
            assert cancelled.cancel("stop") is True
            with pytest.raises(WorkflowCancelled):
                cancelled.result(timeout=30)
            assert cancelled.describe()["status"] == "CANCELLED"

    async def go():
        apools = AsyncShardPools(router, shards.dsns, max_size=4)
        async with apools, await AsyncClient.connect(shards=apools) as aclient:
            handle = await aclient.start_workflow(waiter, residency_key="apac")
            again = aclient.get_handle(handle.execution_id)
            await again.signal("go", "async")
            return handle.shard_id, await again.result(timeout=30), await again.describe()

    shard, value, row = asyncio.run(go())
    assert (shard, value, row["status"]) == (2, "async", "COMPLETED")


def _cli_env(shards) -> dict[str, str]:
    return {
        "HARVEST_DATABASE_URL": shards.dsns[0],
        "HARVEST_SHARDS__URLS__1": shards.dsns[1],
        "HARVEST_SHARDS__URLS__2": shards.dsns[2],
        "HARVEST_SHARDS__RESIDENCY__APAC": "2",
    }


def test_cli_places_by_residency_key_and_routes_by_id(shards, per_shard_workers) -> None:
    per_shard_workers(APP)
    runner = CliRunner(env=_cli_env(shards))
    args = ["workflow", "start", "waiter", "--workflow-id", "order-1001", "--residency-key", "apac"]
    out = runner.invoke(main, [*args, "-o", "json"])
    assert out.exit_code == 0, out.output
    started = json.loads(out.stdout)
    assert started["shard_id"] == 2 and shard_of(started["execution_id"]) == 2
    execution_id = started["execution_id"]

    out = runner.invoke(main, ["workflow", "signal", execution_id, "go", "--payload-json", '"from-cli"'])
    assert out.exit_code == 0, out.output
    out = runner.invoke(main, ["workflow", "result", execution_id, "--timeout", "30"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == "from-cli"
    out = runner.invoke(main, ["workflow", "get", execution_id, "-o", "json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["status"] == "COMPLETED"
    out = runner.invoke(main, ["workflow", "history", execution_id, "-o", "json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["events"]

    # --shard-id pins by number; terminate and stack follow the id to shard 1.
    out = runner.invoke(main, ["workflow", "start", "waiter", "--shard-id", "1", "-o", "json"])
    assert out.exit_code == 0, out.output
    on_one = json.loads(out.stdout)
    assert on_one["shard_id"] == 1 and shard_of(on_one["execution_id"]) == 1
    out = runner.invoke(main, ["workflow", "terminate", on_one["execution_id"], "--reason", "cli"])
    assert out.exit_code == 0, out.output
    out = runner.invoke(main, ["workflow", "stack", on_one["execution_id"], "-o", "json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["status"] == "TERMINATED"

    # An unpinned start's output is the old shape: no shard_id.
    out = runner.invoke(main, ["workflow", "start", "leaf", "--input-json", "[1]", "-o", "json"])
    assert out.exit_code == 0 and "shard_id" not in json.loads(out.stdout)
    # The refusals exit 2 (InvalidArgument), nothing written.
    out = runner.invoke(main, [*args[:3], "--residency-key", "mars"])
    assert out.exit_code == 2 and "unknown residency_key 'mars'" in out.output
    out = runner.invoke(main, [*args[:3], "--shard-id", "1", "--residency-key", "apac"])
    assert out.exit_code == 2 and "mutually exclusive" in out.output

    # A dead letter's id is per shard: --shard-id says which.
    with shards.connect(2) as conn:
        conn.execute(
            "INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name, queue,"
            " attempts, failure, scheduled_at, failed_at)"
            " SELECT id, workflow_name, 1, 'act', 'default', 3, '{\"error_type\": \"Boom\"}', now(), now()"
            " FROM harvest.executions WHERE id = %s",
            (execution_id,),
        )
    out = runner.invoke(main, ["dlq", "get", "1", "--shard-id", "2", "-o", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["execution_id"] == execution_id
    # Without --shard-id every shard is searched: only shard 2 holds id 1, so it is that one.
    out = runner.invoke(main, ["dlq", "get", "1", "-o", "json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["execution_id"] == execution_id, out.output


def test_cli_list_reads_every_shard_and_goes_partial_with_one_stopped(shards) -> None:
    with ShardPools(_router(), shards.dsns, max_size=2) as pools, Client(shards=pools) as client:
        ids = {client.start_workflow("leaf", s, shard_id=s).execution_id for s in ALL}
    runner = CliRunner(env=_cli_env(shards))
    out = runner.invoke(main, ["workflow", "list", "-o", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["status"] == "complete" and {e["execution_id"] for e in data["executions"]} == ids

    shards.stop(2)
    try:
        out = runner.invoke(main, ["workflow", "list", "-o", "json"])
        assert out.exit_code == 0, out.output
        data = json.loads(out.stdout)
        assert (data["status"], data["unavailable_shards"]) == ("partial", [2])
        assert sorted(shard_of(e["execution_id"]) for e in data["executions"]) == [0, 1]
        # An id on the stopped shard: unavailable (exit 1), never another shard's answer.
        stopped = next(i for i in ids if shard_of(i) == 2)
        out = runner.invoke(main, ["workflow", "get", stopped])
        assert out.exit_code == 1 and "shard 2" in out.output
    finally:
        shards.start(2)


def test_a_continue_as_new_chain_is_followed_onto_another_shard(shards, per_shard_workers) -> None:
    """Today a successor is minted on its predecessor's shard; once a run can move (rebalancing,
    cross-shard successors) the next run of a chain can live elsewhere. The chain is stood up
    by hand here: run A on shard 1 continued as new into run B on shard 2."""
    per_shard_workers(APP)
    with ShardPools(_router(), shards.dsns, max_size=4) as pools, Client(shards=pools) as client:
        first = client.start_workflow(waiter, shard_id=1)
        second = client.start_workflow(waiter, shard_id=2)
        with shards.connect(1) as conn:
            conn.execute(
                "UPDATE harvest.executions SET status = 'CONTINUED_AS_NEW', completed_at = now(),"
                " output = jsonb_build_object('continued_as_new', %s::text) WHERE id = %s",
                (second.execution_id, first.execution_id),
            )
        fresh = client.get_handle(first.execution_id)
        fresh.signal("go", "hopped")  # A is not running: the signal goes on to B, on shard 2
        assert fresh.result(timeout=30) == "hopped"

        third = client.start_workflow(waiter, shard_id=0)
        with shards.connect(0) as conn:
            conn.execute(
                "UPDATE harvest.executions SET status = 'CONTINUED_AS_NEW', completed_at = now(),"
                " output = jsonb_build_object('continued_as_new', %s::text) WHERE id = %s",
                (first.execution_id, third.execution_id),
            )

    async def go():  # 0 -> 1 -> 2: two hops, the async handle
        apools = AsyncShardPools(_router(), shards.dsns, max_size=4)
        async with apools, await AsyncClient.connect(shards=apools) as aclient:
            handle = aclient.get_handle(third.execution_id)
            value = await handle.result(timeout=30)
            with pytest.raises(WorkflowNotRunning):  # followed to B, which has completed
                await handle.cancel("late")
            return value

    assert asyncio.run(go()) == "hopped"


def test_a_chain_whose_successor_on_another_shard_is_gone_is_not_found_naming_its_last_run(shards) -> None:
    """Run A on shard 1 continued as new into run B on shard 2, and B was erased by hand (or
    purged): the chain has no current run. A call by A's id hops to shard 2 and finds nothing:
    NotFound naming A, the chain's last run, and B (it named B alone, a run the caller never
    asked about, with a hint that A's id might be a workflow id; and the handle kept B as its
    current run, so its next call named B alone)."""
    with ShardPools(_router(), shards.dsns, max_size=2) as pools, Client(shards=pools) as client:
        first = client.start_workflow(waiter, shard_id=1).execution_id
        gone = client.start_workflow(waiter, shard_id=2).execution_id
        with shards.connect(2) as conn:
            conn.execute("DELETE FROM harvest.executions WHERE id = %s", (gone,))
        with shards.connect(1) as conn:
            conn.execute(
                "UPDATE harvest.executions SET status = 'CONTINUED_AS_NEW', completed_at = now(),"
                " output = jsonb_build_object('continued_as_new', %s::text) WHERE id = %s",
                (gone, first),
            )
        why = f"chain ends at run {first}, which continued as new as run {gone}, and that run does not exist"
        handle = client.get_handle(first)
        for act in (lambda: handle.signal("go", 1), handle.cancel, lambda: handle.result(timeout=5)):
            with pytest.raises(NotFound, match=why) as raised:
                act()
            assert "is a workflow id" not in str(raised.value)

    async def go() -> None:
        apools = AsyncShardPools(_router(), shards.dsns, max_size=2)
        async with apools, await AsyncClient.connect(shards=apools) as aclient:
            with pytest.raises(NotFound, match=why):
                await aclient.get_handle(first).terminate("late")
            with pytest.raises(NotFound, match=why):
                await aclient.get_handle(first).result(timeout=5)

    asyncio.run(go())
