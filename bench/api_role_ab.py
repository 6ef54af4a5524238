"""Paired A/B of the management API's requests per second, two checkouts side by side: each
side's ``bench/api_role_load.py`` (this checkout's script, the side's library) on a fresh clone
of its own migrated template, one route at a time (a read, GET /workflows/{id}; a signal,
POST /workflows/{id}/signal), the base first in odd pairs and the candidate first in even ones;
the ratios of requests per second and of the API process's CPU per request.
Written for the face's role as its call's transaction (SET LOCAL always, docs/performance.md).
``--shards``: a deployment of two shards ([shards]: each side's clone shard 0, a second clone of
its template shard 1, where the route's run lives); ``--routes list`` adds GET /workflows (a
read of every shard).

    python bench/api_role_ab.py --base /tmp/old --candidate . --pairs 6 [--shards]
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
from sql_path_ab import bench_json, fresh, migrate_templates, paired_runs

from harvest.db.embedded import EmbeddedPostgres

BENCH = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--secs", type=float, default=4.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--routes", default="read,signal", help="comma-separated: read, signal, list")
    parser.add_argument("--shards", action="store_true", help="two shards, the run on shard 1")
    args = parser.parse_args()
    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
    summary: dict[str, dict[str, dict[str, float]]] = {}
    with (
        EmbeddedPostgres(settings=SERVER_SETTINGS) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        migrate_templates(admin, server, sides)
        for route in args.routes.split(","):
            ratios: dict[str, list[float]] = {"rps": [], "cpu_ms": []}

            def run(side: str, dsn: str, route: str = route) -> dict[str, float]:
                options = ["--route", route, "--secs", str(args.secs), "--concurrency", str(args.concurrency)]
                if not args.shards:
                    return bench_json(sides[side], "api_role_load.py", dsn, *options, bench=BENCH)
                shard1 = fresh(admin, server, f"run_{side}_s1", f"tmpl_{side}")
                try:
                    return bench_json(
                        sides[side], "api_role_load.py", dsn, *options, "--shard1", shard1, bench=BENCH
                    )
                finally:
                    admin.execute(f'DROP DATABASE "run_{side}_s1"')

            for row in paired_runs(admin, server, args.pairs, False, run):
                for key, values in ratios.items():
                    values.append(row["cand"][key] / row["base"][key])
                print(json.dumps({"route": route, **row}), flush=True)
            summary[route] = {
                f"{key} cand/base": {
                    "median": round(statistics.median(values), 3),
                    "min": round(min(values), 3),
                    "max": round(max(values), 3),
                }
                for key, values in ratios.items()
            }
    print(json.dumps({"load": os.getloadavg(), **summary}))


if __name__ == "__main__":
    main()
