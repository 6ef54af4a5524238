"""Paired A/B of the management API's ``/stream`` fan-out: two checkouts of Harvest (a baseline
and a candidate), alternating, on one embedded server, each run a fresh clone of its side's
template database. A run is the candidate's ``bench/sse_fanout.py`` with that side's library
(``--clients`` SSE clients, a burst of ``--events`` starts); the figures are its wall time and
its process' CPU (clients and server in one process). Prints one line per pair and a JSON summary.

    python bench/sse_fanout_ab.py --base /work/wt/base --candidate . --pairs 8 --clients 50 --events 2000
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--events", type=int, default=2000)
    args = parser.parse_args()
    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
    bench = sides["cand"] / "bench"  # both sides measured by the same script
    ratios: dict[str, list[float]] = {"wall_s": [], "cpu_s": []}
    with (
        EmbeddedPostgres(settings=SERVER_SETTINGS) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        migrate_templates(admin, server, sides)
        run_args = ("--clients", str(args.clients), "--events", str(args.events))
        for row in paired_runs(
            admin,
            server,
            args.pairs,
            False,
            lambda key, dsn: bench_json(sides[key], "sse_fanout.py", "--dsn", dsn, *run_args, bench=bench),
        ):
            for figure, kept in ratios.items():
                kept.append(row["cand"][figure] / row["base"][figure])
            print(
                f"pair {row['pair']} ({row['first']} first): base {row['base']}  cand {row['cand']}"
                f"  cpu ratio {ratios['cpu_s'][-1]:.3f}  wall ratio {ratios['wall_s'][-1]:.3f}"
                f"  load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    print(
        json.dumps(
            {
                "median_cpu_ratio": round(statistics.median(ratios["cpu_s"]), 3),
                "cpu_ratios": [round(r, 3) for r in ratios["cpu_s"]],
                "median_wall_ratio": round(statistics.median(ratios["wall_s"]), 3),
                "wall_ratios": [round(r, 3) for r in ratios["wall_s"]],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
