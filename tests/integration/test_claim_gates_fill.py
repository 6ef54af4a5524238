"""bench/claim_gates.py: its set-based fill must write what the real functions write, or
the claim-cost row measures another table; and its claim-and-release loop must keep the
backlog's size and its full gates full. No timing."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg

from harvest.db.embedded import _memory_dir

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_claim_gates", BENCH / "claim_gates.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_fill_writes_what_start_and_a_decision_write_for_every_shape(db):
    bench = _bench()
    with psycopg.connect(db, autocommit=True) as conn:
        # Rows 1..20 cover the 20 shapes (two workflow starts, the activities of each gate).
        assert bench.check_fill(conn, range(1, 21)) == []
        assert conn.execute("SELECT count(*) FROM harvest.executions").fetchone()[0] == 0


def test_claims_keep_the_backlog_and_never_pass_a_full_gate(db):
    bench = _bench()
    bench.BULK = 100  # the deep fill's path: indexes dropped, filled, built again
    with psycopg.connect(db, autocommit=True) as conn:
        indexes = "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'harvest' ORDER BY 1"
        migrated = conn.execute(indexes).fetchall()
    bench.build(db, 400, say=lambda _message: None)
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute(indexes).fetchall() == migrated
        pending = "SELECT count(*) FROM harvest.tasks WHERE status = 'pending'"
        assert conn.execute(pending).fetchone()[0] == 400
        full = {
            key
            for (key,) in conn.execute(
                "SELECT concurrency_key FROM harvest.workflow_slots UNION SELECT 'act_cap_0'"
            ).fetchall()
        }
        claimed = []
        for _ in range(10):
            ids = [
                row[0]
                for row in conn.execute(
                    bench.CLAIM, {"worker": bench.WORKER, "queues": bench.QUEUES, "limit": bench.BATCH}
                ).fetchall()
            ]
            claimed += conn.execute(
                "SELECT concurrency_key FROM harvest.tasks WHERE id = ANY(%s)", [ids]
            ).fetchall()
            conn.execute(bench.sql(bench.RELEASE), {"ids": ids, "worker": bench.WORKER})
            assert conn.execute(pending).fetchone()[0] == 400
        assert claimed and not {key for (key,) in claimed} & full
        assert bench.claim_once(conn)[1] > 0
        # The held work is what keeps the gates full: twenty act_cap_0 attempts, two
        # admitted runs for each of the first tenants' keys; nothing else is left running.
        running = conn.execute(
            "SELECT coalesce(activity_name, concurrency_key), count(*) FROM harvest.tasks "
            "WHERE status = 'running' GROUP BY 1"
        ).fetchall()
        assert all(
            owner == "bench-holder"
            for (owner,) in conn.execute(
                "SELECT DISTINCT lease_owner FROM harvest.tasks WHERE status = 'running'"
            ).fetchall()
        )
        counts = dict(running)
        assert counts.pop("act_cap_0") == 20
        assert counts and all(key < "tenant-0100" and n <= 2 for key, n in counts.items())
        slots = conn.execute("SELECT count(*) FROM harvest.workflow_slots").fetchone()[0]
        assert slots == sum(counts.values())


def test_a_kept_data_directory_is_filled_once_and_measured_again(tmp_path):
    """--data: the first run makes the directory and fills it; the next, another process (the
    first one's embedded server stopped with it), starts a server on the kept databases and
    measures them."""
    # (as root, the server's user must reach it: not under tmp_path; in memory where there is
    # room, as the test servers, or in /tmp)
    data = (_memory_dir() or Path("/tmp")) / f"claim-gates-{tmp_path.name}"
    out = tmp_path / "claim_cost.json"
    run = [
        sys.executable,
        str(BENCH / "claim_gates.py"),
        "--data",
        str(data),
        "--depths",
        "100",
        "--out",
        str(out),
    ]
    try:
        subprocess.run([*run, "--fill-only"], check=True, capture_output=True)
        subprocess.run([*run, "--rounds", "2"], check=True, capture_output=True)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    row = json.loads(out.read_text())["rows"][0]
    assert (row["pending"], row["samples"], row["fill_s"]) == (100, 2, None)  # filled by the first run
