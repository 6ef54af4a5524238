"""SIGKILL a worker in the middle of a DAG run: a new worker finishes it, no task is lost and
none runs twice (counted by the activities' real runs), and the run view agrees."""

from __future__ import annotations

import harness
import pytest
from harness import check_history, history, query, runs, wait_until

from harvest.db.connection import connect
from harvest.db.sqlapi import SqlApi

pytestmark = pytest.mark.chaos


def _task_runs(dsn: str, execution_ids: list[str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for execution_id in execution_ids:
        for row in runs(dsn, execution_id):
            out.setdefault(row["kind"].removeprefix("dag:"), []).append(row)
    return out


def test_sigkill_mid_dag_loses_no_task_and_runs_none_twice(chaos_db, workers, client, monkeypatch):
    monkeypatch.setattr(harness, "RUN_WORKER", harness.HERE / "run_dag_worker.py")
    a = workers.start()
    wait_until(
        lambda: query(chaos_db, "SELECT 1 FROM harvest.dags WHERE dag_name = 'chaos_dag'"), 15, "the DAG"
    )
    sql = SqlApi(connect(chaos_db, autocommit=True))
    started = sql.trigger_dag("chaos_dag", {"date": "d1"})
    run_id = str(started["execution_id"])

    # The worker holds `slow` (its first run blocks) once `a`, `fast` and the child are done.
    def mid_dag():
        done = _task_runs(chaos_db, [run_id])
        return (
            [r for r in done.get("slow", []) if r["finished_at"] is None]
            and all(done.get(t) and done[t][0]["finished_at"] for t in ("a", "fast"))
            and sql.get_dag_run(run_id)["counts"].get("success") == 3
        )

    wait_until(mid_dag, 30, "the DAG to be mid-run with `slow` held")
    workers.kill(a)  # SIGKILL: the held attempt of `slow` never finishes
    view = sql.get_dag_run(run_id)
    assert {t["task"]: t["state"] for t in view["tasks"]} == {
        "a": "success",
        "fast": "success",
        "slow": "running",
        "child": "success",
        "join": "pending",
        "after_join": "pending",
    }
    b = workers.start()

    result = client.get_handle(run_id).result(timeout=60)
    assert result["states"] == dict.fromkeys(("a", "fast", "slow", "child", "join", "after_join"), "success")
    assert result["results"]["join"] == "join:d1"

    child_id = next(t for t in sql.get_dag_run(run_id)["tasks"] if t["task"] == "child")["child_execution_id"]
    done = _task_runs(chaos_db, [run_id, child_id])
    # Every task ran to its end exactly once; only `slow` ran twice, its killed run unfinished.
    finished = {task: sum(1 for r in rows if r["finished_at"]) for task, rows in done.items()}
    assert finished == dict.fromkeys(("a", "fast", "slow", "child_step", "join", "after_join"), 1)
    assert {task: len(rows) for task, rows in done.items() if task != "slow"} == dict.fromkeys(
        ("a", "fast", "child_step", "join", "after_join"), 1
    )
    slow = done["slow"]
    assert [(r["attempt"], r["worker_pid"], r["finished_at"] is not None) for r in slow] == [
        (1, a.pid, False),
        (2, b.pid, True),
    ]
    assert all(r["worker_pid"] == a.pid for t in ("a", "fast") for r in done[t])
    assert all(r["worker_pid"] == b.pid for t in ("join", "after_join") for r in done[t])

    events = history(chaos_db, run_id)
    check_history(events)
    scheduled = [
        e["event_data"]["options"]["dag_node"] for e in events if e["event_type"] == "ActivityScheduled"
    ]
    assert sorted(scheduled) == ["a", "after_join", "fast", "join", "slow"]  # each once
    assert sum(e["event_type"] == "ChildWorkflowStarted" for e in events) == 1

    view = sql.get_dag_run(run_id)
    assert view["status"] == "COMPLETED"
    by_task = {t["task"]: t for t in view["tasks"]}
    assert by_task["slow"]["state"] == "success" and by_task["slow"]["attempts"] == 2
    assert by_task["a"]["attempts"] == 1 and by_task["child"]["attempts"] == 1
