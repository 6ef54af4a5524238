"""Owner mode (functions/owners.sql, harvest/worker/owners.py; docs/sharding.md "Owner mode").

Real workers with the switch on: every decision is committed by the worker that
holds its run's decision partition at the epoch recorded on the decision's marker;
a stale owner (its lease ran out on the engine clock, another worker acquired the
partition) is refused at commit and nothing it decided lands. Plus the partition
function (the same in SQL and Python) and who may turn the switch.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import defaultdict

import psycopg
from psycopg.rows import dict_row

from harvest import App, Client, activity, workflow
from harvest.core.ids import DECISION_PARTITIONS, partition_of
from harvest.db.connection import connect
from harvest.db.sqlapi import SqlApi
from harvest.testing import WorkflowReplayer


@activity
async def echo(ctx, text: str) -> str:
    return text


@workflow
async def steps(ctx, n: int) -> str:
    out = []
    for i in range(3):
        out.append(await ctx.execute_activity(echo, f"{n}.{i}"))
        if i == 1:
            await ctx.sleep(0.05)  # a timer: its workflow task is claimed, not handed
    return "|".join(out)


@workflow
async def one_step(ctx, text: str) -> str:
    return (await ctx.execute_activity(echo, text)) + "!"


APP = App(workflows=[steps, one_step], activities=[echo])


def _rows(db: str, sql: str, params=None) -> list[dict]:
    with psycopg.connect(db, autocommit=True) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _history(db: str, execution_id: str) -> list[dict]:
    return _rows(
        db,
        "SELECT event_id, event_type, event_data FROM harvest.events WHERE execution_id = %s "
        "ORDER BY event_id",
        (execution_id,),
    )


def _markers(db: str) -> list[dict]:
    return _rows(
        db,
        "SELECT e.workflow_id, e.id::text AS execution_id, ev.event_data FROM harvest.events AS ev "
        "JOIN harvest.executions AS e ON e.id = ev.execution_id "
        "WHERE ev.event_type = 'WorkflowTaskCompleted' ORDER BY ev.execution_id, ev.event_id",
    )


def _set_owner_mode(db: str, enabled: bool, lease_secs: float | None = None) -> dict:
    with connect(db, autocommit=True) as conn:
        return SqlApi(conn).set_owner_mode(enabled, lease_secs, "test")


def test_the_partition_of_a_workflow_id_is_the_same_in_sql_and_python(db: str) -> None:
    ids = [f"order-{n}" for n in range(6000)] + ["", "é", "日本語/ключ", "a" * 300, str(uuid.uuid4())]
    with psycopg.connect(db) as conn:
        found = conn.execute("SELECT harvest.partition_of(x) FROM unnest(%s::text[]) AS x", (ids,))
        in_sql = [r[0] for r in found]
    assert in_sql == [partition_of(i) for i in ids]
    assert set(in_sql[:6000]) == set(range(DECISION_PARTITIONS))


def test_two_workers_each_decision_is_committed_by_its_partitions_owner(db: str, start_worker) -> None:
    _set_owner_mode(db, True)
    first = start_worker(APP, worker_id="owner-1", concurrency=4)
    second = start_worker(APP, worker_id="owner-2", concurrency=4)
    with Client(db) as client:
        handles = [client.start_workflow(steps, n, workflow_id=f"run-{n}") for n in range(40)]
        assert [h.result(timeout=60) for h in handles] == [f"{n}.0|{n}.1|{n}.2" for n in range(40)]
    first.stop()
    second.stop()

    markers = _markers(db)
    assert markers and all("owner_epoch" in m["event_data"] for m in markers)
    # One worker per (partition, epoch): an epoch is one acquisition by one worker.
    deciders: dict[tuple[int, int], set[str]] = defaultdict(set)
    for m in markers:
        data = m["event_data"]
        deciders[(partition_of(m["workflow_id"]), data["owner_epoch"])].add(data["worker_id"])
    shared = {key: who for key, who in deciders.items() if len(who) > 1}
    assert not shared, f"an epoch's decisions were committed by more than one worker: {shared}"
    assert {w for who in deciders.values() for w in who} == {"owner-1", "owner-2"}
    for handle in handles:
        WorkflowReplayer(APP).replay_or_raise(_history(db, handle.execution_id))
    # Both workers stopped cleanly: they gave their owner rows up.
    held = _rows(db, "SELECT count(*) AS n FROM harvest.partition_owners WHERE worker_id IS NOT NULL")
    assert held[0]["n"] == 0


def test_owner_mode_off_writes_no_epoch_and_keeps_none(db: str, start_worker) -> None:
    running = start_worker(APP, worker_id="plain")
    with Client(db) as client:
        assert client.start_workflow(one_step, "x", workflow_id="plain-run").result(timeout=30) == "x!"
    running.stop()
    assert all(lane.owners.epochs == {} for lane in running.worker.lanes)
    assert all("owner_epoch" not in m["event_data"] for m in _markers(db))
    assert _rows(db, "SELECT max(epoch) AS e FROM harvest.partition_owners")[0]["e"] == 0


def _started(conn: psycopg.Connection, workflow_id: str) -> list[str]:
    """Start one_step("first") in this session (on its engine clock); its execution id."""
    row = conn.execute(
        "SELECT execution_id::text FROM harvest.start_workflow('one_step', '[\"first\"]', %s, 'default')",
        (workflow_id,),
    ).fetchone()
    return [row[0]]


def _same_partition_id(workflow_id: str) -> str:
    target = partition_of(workflow_id)
    return next(f"{workflow_id}-{n}" for n in range(100_000) if partition_of(f"{workflow_id}-{n}") == target)


def test_a_stale_owner_is_refused_at_commit_and_nothing_it_decided_lands(db: str, start_worker) -> None:
    """Worker "stale" starts and claims a run on an engine clock a minute behind (harvest.fake_now):
    by the real clock its owner lease (30 s) has run out, its task lease (1 h) has not. A real worker
    claims another run of the same partition and acquires it; the stale owner's decision is refused
    (not_owner), its task goes back to the queue, and the real worker finishes the run."""
    _set_owner_mode(db, True)
    first_id = "stale-a"
    second_id = _same_partition_id(first_id)
    with Client(db) as client:
        with connect(db, autocommit=True) as conn:
            sql = SqlApi(conn)
            minute_ago = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)
            conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (minute_ago.isoformat(),))
            [started] = _started(conn, first_id)
            first = client.get_handle(started, one_step)
            sql.register_worker("stale", ["default"], "host", 1, 10.0, {})
            [task] = sql.claim_tasks("stale", ["default"], 1, 3600)
            assert str(task["execution_id"]) == first.execution_id and task["owner_epoch"] == 1
            conn.execute("RESET harvest.fake_now")

            running = start_worker(APP, worker_id="live")
            second = client.start_workflow(one_step, "second", workflow_id=second_id)
            assert second.result(timeout=30) == "second!"
            owners = sql.list_partition_owners("live")
            [owner] = [o for o in owners if o["partition_id"] == partition_of(first_id)]
            assert owner["epoch"] == 2

            forged = [{"type": "complete_workflow", "result": "forged"}]
            [row] = sql.complete_workflow_tasks(
                "stale", [(task["task_id"], task["fencing_token"], 1, forged, 0, task["owner_epoch"])]
            )
            assert row["outcome"] == "not_owner"
            assert "held by live at epoch 2" in row["message"]
        assert first.result(timeout=30) == "first!"
    running.stop()
    history = _history(db, first.execution_id)
    deciders = {e["event_data"]["worker_id"] for e in history if e["event_type"] == "WorkflowTaskCompleted"}
    assert deciders == {"live"}
    assert all(e["event_data"].get("result") != "forged" for e in history)
    WorkflowReplayer(APP).replay_or_raise(history)
