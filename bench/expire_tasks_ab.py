"""A/B: one scanner tick (harvest.scan) that expires 1,000 activity leases, on two databases of
one server: A migrated by another checkout (--old-tree, e.g. the tree before migration 0124), B
by this one. Each round fills both with 1,000 claimed activities whose start_to_close has passed
(pgtap/fixtures/common.sql, in a transaction on the session's fake clock), times the scan, and
rolls back; the order of A and B alternates. Also times the worker's side of a tick of 1,000
rows (Metrics.attempts_expired).

    PYTHONPATH=harvest_py .venv/bin/python bench/expire_tasks_ab.py --old-tree /tmp/old --pairs 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from harvest.db import testkit
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

FIXTURES = (Path(__file__).resolve().parents[1] / "pgtap" / "fixtures" / "common.sql").read_text()
FILL = """
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT count(pg_temp.start_activity('k' || i, 'bench_wf', 'wq', 'bench_act', 'aq',
                                    p_options => '{"start_to_close": 10}')) FROM generate_series(1, 1000) AS i;
SET LOCAL harvest.fake_now = '2030-01-01 00:00:11+00';
"""


def tick(dsn: str) -> tuple[float, int]:
    with psycopg.connect(dsn) as conn:
        conn.execute(FIXTURES)
        conn.commit()
        conn.execute(FILL)
        started = time.perf_counter()
        moved = conn.execute("SELECT harvest.scan(1000)").fetchone()[0]
        seconds = time.perf_counter() - started
        conn.rollback()
    return seconds, len(moved["expired_tasks"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old-tree", required=True)
    parser.add_argument("--pairs", type=int, default=8)
    args = parser.parse_args()
    pg = EmbeddedPostgres(settings={"fsync": "off", "synchronous_commit": "off"}, in_memory=True)
    pg.start()
    try:
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench_a")
            conn.execute("CREATE DATABASE bench_b")
        a, b = pg.dsn_for("bench_a"), pg.dsn_for("bench_b")
        env = {**os.environ, "PYTHONPATH": str(Path(args.old_tree) / "harvest_py")}
        subprocess.run(
            [sys.executable, "-c", f"from harvest.db.migrate import Migrator; Migrator({a!r}).run()"],
            env=env,
            check=True,
        )
        Migrator(b).run()
        for dsn in (a, b):
            testkit.allow_test_clock(dsn)
        tick(a), tick(b)  # warm-up
        times: dict[str, list[float]] = {"A": [], "B": []}
        for i in range(args.pairs):
            for side in "AB" if i % 2 == 0 else "BA":
                seconds, expired = tick(a if side == "A" else b)
                assert expired == 1000, expired
                times[side].append(seconds)
    finally:
        pg.stop()

    from harvest.telemetry.metrics import Metrics

    rows = [
        {
            "task_id": i,
            "kind": "activity",
            "outcome": "retry_scheduled",
            "workflow_type": "bench_wf",
            "activity": "bench_act",
            "error_type": "StartToCloseTimeout",
        }
        for i in range(1000)
    ]
    metrics = Metrics()
    python = []
    for _ in range(20):
        started = time.perf_counter()
        metrics.attempts_expired(rows)
        python.append(time.perf_counter() - started)
    print(
        json.dumps(
            {
                "scan_1000_ms": {k: [round(v * 1000, 1) for v in vs] for k, vs in times.items()},
                "median_ms": {k: round(statistics.median(vs) * 1000, 1) for k, vs in times.items()},
                "attempts_expired_1000_rows_ms_median": round(statistics.median(python) * 1000, 2),
                "load": os.getloadavg(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
