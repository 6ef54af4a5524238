"""The inputs of make bench's proposed measures (bench/targets.py PROPOSED): the signal row's
calls back to back (bench/call_cost.py --signal-calls) and the raw-row floor's server CPU per
run (bench/raw_row_floor/floor.py). No timing: each figure exists and the runs it drove closed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import psycopg

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str, path: Path):
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_the_signal_rows_calls_run_back_to_back_and_close_their_runs(db):
    call_cost = _load("bench_call_cost", BENCH / "call_cost.py")
    with psycopg.connect(db, autocommit=True) as conn:
        _pid, queue, worker = call_cost.prepare(conn)
        out = call_cost.signal_calls(conn, queue, worker, runs=3, warmup=1)
        assert out["runs"] == 3 and out["merged_claim"] is False
        # The claim and the decision in one transaction, as a woken idle worker sends them.
        merged = call_cost.signal_calls(conn, queue, worker, runs=2, warmup=0, merged=True)
        assert merged["merged_claim"] is True
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        steps = ("signal_workflow", "claim_tasks", "complete_workflow_tasks")
        assert out["wall_ms_sum"] == round(sum(out[s]["wall_ms_p50"] for s in steps), 3)
        rows = conn.execute(
            "SELECT status, count(*) FROM harvest.executions WHERE queue = %s GROUP BY status", (queue,)
        ).fetchall()
        assert rows == [("COMPLETED", 6)]
        signals = conn.execute(
            "SELECT count(*) FROM harvest.events e JOIN harvest.executions x ON x.id = e.execution_id"
            " WHERE x.queue = %s AND e.event_type = 'SignalReceived'",
            (queue,),
        ).fetchone()[0]
        assert signals == 6


def test_the_floor_reads_the_servers_cpu_per_run(db):
    floor = _load("bench_floor_cpu", BENCH / "raw_row_floor" / "floor.py")
    setup, script, _summary = floor.generate(floor.derive(db))
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(setup)
    # pgbench is given the server as a URL's parts (as bench/run.py's DSNs are written).
    d = psycopg.conninfo.conninfo_to_dict(db)
    url = f"postgresql://{d.get('user') or 'postgres'}@{d['host']}:{d['port']}/{d['dbname']}"
    run = floor.run_pgbench(url, script, 1, 1)
    assert run["clients"] == 1
    assert run["server_cpu_ms_per_run"] is not None and run["server_cpu_ms_per_run"] > 0
