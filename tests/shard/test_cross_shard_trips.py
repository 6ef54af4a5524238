"""The canonical workflow's hot path stays on the run's shard: on three PostgreSQL servers, an
AsyncClient over AsyncShardPools (hashed placement) and one multi-shard Worker take runs from
start to result without one statement naming a run sent to another shard's server. The count
is bench/trips.py's, the tracer behind the sharding row of ``make bench``; a call deliberately
sent to the wrong shard is counted, so the zero is not the tracer's blindness."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path

import pytest

from harvest import App, AsyncClient, Worker
from harvest.core.errors import NotFound
from harvest.core.ids import shard_of
from harvest.db.sqlapi import AsyncSqlApi
from harvest.shard import AsyncShardPools, ShardRouter

pytestmark = pytest.mark.shard

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):
    """A bench module by path (bench/ is not a package; its directory is not put on sys.path)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TRIPS = _load("trips")
CANONICAL = _load("canonical")
APP = App(workflows=[CANONICAL.three_steps], activities=[CANONICAL.noop])
RUNS = 24


async def _drain(dsns: dict[int, str], trace) -> list[str]:
    shards = sorted(dsns)
    router = ShardRouter(shards, shards, shards[0])
    worker = Worker(APP, shards=dsns, router=router, poll_interval=0.3, scan_interval=0.2, concurrency=8)
    task = asyncio.create_task(worker.run())
    pools = AsyncShardPools(router, dsns, max_size=4)
    try:
        deadline = time.monotonic() + 30
        while not all(lane.usable for lane in worker.lanes):
            assert not task.done(), task.result()
            assert time.monotonic() < deadline, "the worker never came up on every shard"
            await asyncio.sleep(0.02)
        client = await AsyncClient.connect(shards=pools)
        trace.on = True
        handles = await asyncio.gather(
            *(client.start_workflow(CANONICAL.three_steps, i) for i in range(RUNS))
        )
        results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
        trace.on = False
        assert results == [6 + i for i in range(RUNS)]
        await client.close()
        return [h.execution_id for h in handles]
    finally:
        trace.on = False
        await pools.close()
        worker.request_stop()
        await task


def test_the_canonical_workflow_sends_nothing_to_another_shard(shards) -> None:
    dsns = dict(shards.dsns)
    TRIPS.separate_task_ids(dsns)
    trace = TRIPS.Trace()
    trace.install()
    try:
        ids = asyncio.run(_drain(dsns, trace))
    finally:
        trace.uninstall()
    assert len({shard_of(i) for i in ids}) > 1, "hashed placement spread the runs"
    counted = TRIPS.count(trace.statements, dsns, TRIPS.run_homes(dsns), RUNS)
    assert counted["cross_shard"] == 0, counted["cross_shard_by_call"]
    # What it saw: the starts, the decisions and the results, each naming its runs.
    assert {"start_workflows", "complete_workflow_tasks", "complete_activities"} <= set(
        counted["run_statements_by_call"]
    )
    # Every identifier was placed, but for the result waiters' own ids (random, no run's).
    homes = TRIPS.run_homes(dsns)
    unplaced = {what for _, what, ids in trace.statements for i in ids if TRIPS.home_of(i, homes) is None}
    assert unplaced <= {"wait_for_result", "stop_waiting_for_result"}


def test_a_call_sent_to_the_wrong_shard_is_counted(shards) -> None:
    dsns = dict(shards.dsns)
    TRIPS.separate_task_ids(dsns)
    with shards.connect(1) as conn:
        (execution_id,) = conn.execute(
            "SELECT execution_id::text FROM harvest.start_workflow('three_steps', '[1]')"
        ).fetchone()
        (task_id,) = conn.execute(
            "SELECT id FROM harvest.tasks WHERE execution_id = %s", (execution_id,)
        ).fetchone()
    assert task_id // TRIPS.TASK_ID_STRIDE == 1, "shard 1's task ids are its own range"

    async def misrouted(trace) -> None:
        router = ShardRouter([0, 1, 2], [0, 1, 2], 0)
        async with AsyncShardPools(router, dsns) as pools:
            trace.on = True
            async with pools.api(0) as sql:  # shard 1's run, asked of shard 0
                assert isinstance(sql, AsyncSqlApi)
                with pytest.raises(NotFound):
                    await sql.get_execution(execution_id)
                assert await sql.release_task(task_id, 1) is False
            async with pools.api(1) as sql:  # and once where it lives
                await sql.get_execution(execution_id)
            trace.on = False

    trace = TRIPS.Trace()
    trace.install()
    try:
        asyncio.run(misrouted(trace))
    finally:
        trace.uninstall()
    counted = TRIPS.count(trace.statements, dsns, TRIPS.run_homes(dsns), 1)
    assert counted["cross_shard_by_call"] == {"get_execution": 1, "release_task": 1}
    assert counted["run_statements_by_call"] == {"get_execution": 1}
