"""bench/raw_row_floor/: the floor's script must write, per run, the rows a canonical run
writes, or the "SQL efficiency" row divides by something else. No timing: one derivation
(a real run by the Python worker), then one execution of the generated script."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import psycopg

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _floor():
    spec = importlib.util.spec_from_file_location("bench_floor", BENCH / "raw_row_floor" / "floor.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_floor_script_writes_what_one_run_writes_for_fifty_runs(db):
    floor = _floor()
    derived = floor.derive(db)
    setup, script, summary = floor.generate(derived)
    # The run's own rows: one execution, its events and tasks (the worker's registration apart).
    assert summary["executions insert"] == 1
    assert summary["tasks insert"] == summary["tasks delete"]
    assert summary["events insert"] == derived["table_stat_deltas"]["events"]["ins"]
    assert summary["executions update"] == derived["table_stat_deltas"]["executions"]["upd"]
    with psycopg.connect(db, autocommit=True) as conn:
        history = conn.execute("SELECT count(*) FROM harvest.events").fetchone()[0]
        conn.execute(setup)
        # One script execution as pgbench would run it, the batch number given.
        text = script.replace("SELECT nextval('floor.batch') AS floor_batch \\gset\n", "")
        text = re.sub(r":floor_batch\b", "7", text)
        conn.execute(text)
        runs = conn.execute("SELECT count(*), count(DISTINCT status) FROM floor.executions").fetchone()
        assert runs == (floor.RUNS_PER_TRANSACTION, 1)
        assert conn.execute("SELECT min(status) FROM floor.executions").fetchone()[0] == "COMPLETED"
        events = conn.execute("SELECT count(*) FROM floor.events").fetchone()[0]
        assert events == floor.RUNS_PER_TRANSACTION * history
        assert conn.execute("SELECT count(*) FROM floor.tasks").fetchone()[0] == 0
        # Same sizes: the floor's event data is the run's, byte for byte per event.
        sizes = conn.execute("SELECT sum(pg_column_size(event_data)) FROM harvest.events").fetchone()[0]
        floor_sizes = conn.execute("SELECT sum(pg_column_size(event_data)) FROM floor.events").fetchone()[0]
        assert floor_sizes == floor.RUNS_PER_TRANSACTION * sizes
