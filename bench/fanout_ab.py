"""Paired A/B of the fan-out row (issue 20): two checkouts of Harvest (a baseline and a
candidate), alternating, on one embedded server with bench/run.py's settings.

Each side gets its own template database migrated by its own code, and every run a fresh
clone of it. A run is ``bench/harvest_bench.py --mode tasks --n N`` of that side (its own
harvest_py on PYTHONPATH): N/100 workflows each fanning out 100 no-op activities, drained
by one in-process Worker. Per run: activities per second, the server's CPU per activity
(its process tree, /proc) and the bench process' CPU per activity (``time.process_time()``).
Prints one line per pair (ratios candidate/base) and a JSON summary of the medians.
With ``--together`` each pair's two drains run at once, each on its own database of the
one server: both see the same load, but the server CPU column is then the two sides'
together; read the backends column instead (each side's database's own backends: the
worker's and the client's connections), with the bench process' CPU, the throughput and
the commits.

    python bench/fanout_ab.py --base /work/wt/base --candidate . --pairs 6 --n 5000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from run import SERVER_SETTINGS
from sql_path_ab import bench_json, migrate_templates, paired_runs

from harvest.db.embedded import EmbeddedPostgres

BENCH = Path(__file__).resolve().parent  # the bench scripts both sides run


def one_run(root: Path, dsn: str, n: int, concurrency: int, claim_batch: int) -> dict[str, float]:
    """One drain: throughput, server, this database's backends' and bench-process CPU ms per
    activity, result batches. Both sides run this checkout's bench script (with their own
    library), so both report the same figures."""
    result = bench_json(
        root,
        "harvest_bench.py",
        "--dsn",
        dsn,
        "--mode",
        "tasks",
        "--n",
        f"{n}",
        "--concurrency",
        f"{concurrency}",
        "--claim-batch",
        f"{claim_batch}",
        bench=BENCH,
    )
    assert result["completed"] == n, result
    cpu = result["cpu"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        (commits,) = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        # Decisions per run (WorkflowTaskCompleted markers): 2 are needed, the schedule and the close.
        (decisions,) = conn.execute(
            "SELECT count(*) FILTER (WHERE event_type = 'WorkflowTaskCompleted')::float8"
            " / greatest(count(DISTINCT execution_id), 1) FROM harvest.events"
        ).fetchone()
    return {
        "tput": result["throughput"],
        "server": cpu["server_ms_per_activity"],
        "worker": cpu["worker_ms_per_activity"],
        "backends": cpu["backends_ms_per_activity"],
        "batches": result["steps"]["result_batches"],
        "commits": commits,
        "decisions": round(decisions, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--claim-batch", type=int, default=50)
    parser.add_argument(
        "--together",
        action="store_true",
        help="run each pair's two sides at once (same load; the server CPU column is then both sides')",
    )
    args = parser.parse_args()
    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
    keys = ("tput", "server", "backends", "worker")
    with (
        EmbeddedPostgres(settings=SERVER_SETTINGS) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        migrate_templates(admin, server, sides)
        pairs = []
        for row in paired_runs(
            admin,
            server,
            args.pairs,
            args.together,
            lambda key, dsn: one_run(sides[key], dsn, args.n, args.concurrency, args.claim_batch),
        ):
            ratios = {k: row["cand"][k] / row["base"][k] for k in keys}
            pairs.append({**row, "ratios": ratios})
            b, c = row["base"], row["cand"]
            print(
                f"pair {row['pair']} ({row['first']} first): act/s {b['tput']:.0f} -> {c['tput']:.0f}"
                f" ({ratios['tput']:.2f}); server ms/act {b['server']:.3f} -> {c['server']:.3f}"
                f" ({ratios['server']:.2f}); backends ms/act {b['backends']:.3f} -> {c['backends']:.3f}"
                f" ({ratios['backends']:.2f}); worker ms/act {b['worker']:.3f} -> {c['worker']:.3f}"
                f" ({ratios['worker']:.2f}); commits {b['commits']} -> {c['commits']};"
                f" decisions/run {b['decisions']} -> {c['decisions']};"
                f" load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        summary = {
            f"median_{k}_ratio": round(statistics.median(p["ratios"][k] for p in pairs), 3) for k in keys
        }
        summary |= {f"{k}_ratios": [round(p["ratios"][k], 3) for p in pairs] for k in keys}
        for side in ("base", "cand"):
            summary |= {
                f"median_{side}_{k}": round(statistics.median(p[side][k] for p in pairs), 4) for k in keys
            }
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
