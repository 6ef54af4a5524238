"""bench/sql_path.sql takes runs through Harvest's SQL alone; its histories must be the
ones the Python worker writes, or the benchmark's "SQL path" row measures something else.

It also keeps the procedure working as the SQL API changes (``make test`` does not run
the benchmarks).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from harvest import App
from harvest.testing import WorkflowReplayer

BENCH = Path(__file__).resolve().parents[2] / "bench"
PROCEDURE = BENCH / "sql_path.sql"


def _canonical():
    """bench/canonical.py, loaded by path (bench/ is not a package, and putting it on
    sys.path would put its common.py and run.py there too)."""
    spec = importlib.util.spec_from_file_location("bench_canonical", BENCH / "canonical.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CANONICAL = _canonical()
APP = App(workflows=[CANONICAL.three_steps], activities=[CANONICAL.noop])
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
            history = cur.execute(
                "SELECT event_id, event_type, event_data FROM harvest.events "
                "WHERE execution_id = %s ORDER BY event_id",
                (run["id"],),
            ).fetchall()
            assert [e["event_type"] for e in history] == (
                ["WorkflowStarted"] + STEP_EVENTS * 3 + ["WorkflowTaskCompleted", "WorkflowCompleted"]
            )
            assert history[-1]["event_data"]["result"] == 6
            scheduled = [e["event_data"] for e in history if e["event_type"] == "ActivityScheduled"]
            # What the runtime would issue (a replay compares only each command's kind and name).
            assert [(s["seq"], s["name"], s["input"], s["options"]) for s in scheduled] == [
                (seq, "noop", [seq], options) for seq in (1, 2, 3)
            ]
            results = [e["event_data"]["result"] for e in history if e["event_type"] == "ActivityCompleted"]
            assert results == [1, 2, 3]
            WorkflowReplayer(APP).replay_or_raise(history)


def test_the_sql_path_row_reports_the_servers_cpu_per_workflow(db):
    # bench/sql_path.py as make bench runs it (a subprocess: bench/ is not a package), smaller.
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "harvest_py")}
    command = [sys.executable, str(BENCH / "sql_path.py"), "--dsn", db]
    out = subprocess.run(
        # Enough runs that the server's CPU spans many of psutil's 10 ms clock ticks.
        [*command, "--clients", "1,2", "--n", "200", "--batch", "50"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    ).stdout
    row = json.loads(out.strip().splitlines()[-1])
    assert [r["clients"] for r in row["runs"]] == [1, 2]
    for run in row["runs"]:
        assert run["workflows"] == 200
        # 200 runs through the server's functions cost it something, and far less than a second each.
        assert 0 < run["server_cpu_ms_per_wf"] < 1000
