"""bench/sql_path.sql takes runs through Harvest's SQL alone; its histories must be the
ones the Python worker writes, or the benchmark's "SQL path" row measures something else.

It also keeps the procedure working as the SQL API changes (``make test`` does not run
the benchmarks).
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from harvest import App, activity, workflow
from harvest.testing import WorkflowReplayer

PROCEDURE = Path(__file__).resolve().parents[2] / "bench" / "sql_path.sql"


# The canonical workflow of bench/harvest_bench.py, as the procedure drives it.
@activity
async def noop(ctx, step: int) -> int:
    return step


@workflow
async def three_steps(ctx, n: int) -> int:
    a = await ctx.execute_activity(noop, 1)
    b = await ctx.execute_activity(noop, 2)
    c = await ctx.execute_activity(noop, 3)
    return a + b + c + n


APP = App(workflows=[three_steps], activities=[noop])
STEP_EVENTS = ["WorkflowTaskCompleted", "ActivityScheduled", "ActivityCompleted"]


def test_the_sql_path_procedure_writes_the_histories_the_worker_writes(db):
    options = APP.activities["noop"].options_json()
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(PROCEDURE.read_text())
        # 7 runs, 3 at a time: two full batches and a short one.
        conn.execute("CALL bench.sql_path(7, 3, 't', %s)", (json.dumps(options),))
        cur = conn.cursor(row_factory=dict_row)
        runs = cur.execute("SELECT id, status, output FROM harvest.executions ORDER BY created_at").fetchall()
        assert [r["status"] for r in runs] == ["COMPLETED"] * 7
        assert cur.execute("SELECT count(*) AS n FROM harvest.tasks").fetchone()["n"] == 0
        for run in runs:
            history = cur.execute("SELECT event_id, event_type, event_data FROM harvest.events "
                                  "WHERE execution_id = %s ORDER BY event_id", (run["id"],)).fetchall()
            assert [e["event_type"] for e in history] == (
                ["WorkflowStarted"] + STEP_EVENTS * 3 + ["WorkflowTaskCompleted", "WorkflowCompleted"])
            assert history[-1]["event_data"]["result"] == 6
            scheduled = [e["event_data"] for e in history if e["event_type"] == "ActivityScheduled"]
            # What the runtime would issue (a replay compares only each command's kind and name).
            assert [(s["seq"], s["name"], s["input"], s["options"]) for s in scheduled] == [
                (seq, "noop", [seq], options) for seq in (1, 2, 3)]
            results = [e["event_data"]["result"] for e in history if e["event_type"] == "ActivityCompleted"]
            assert results == [1, 2, 3]
            WorkflowReplayer(APP).replay_or_raise(history)
