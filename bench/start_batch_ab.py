"""Paired A/B of the server CPU an AsyncClient's starts cost, with a worker's App declared:
two checkouts of Harvest (a baseline and a candidate), alternating, on one embedded server.

Each run (a fresh clone of its side's migrated template) first does what a starting worker
does to the database (``harvest.register_workflows`` and ``harvest.declare_flow_policies`` of
the canonical App: every workflow declared, ``{}`` for one without a flow policy), then
starts N canonical runs through one ``AsyncClient`` from 8 concurrent starters (the starts of
``bench/harvest_bench.py --mode workflows``), with no worker running. The figure is the
server's CPU (the postmaster and every backend, from /proc) per start.

    python bench/start_batch_ab.py --base /work/wt/base --candidate . --pairs 6 --n 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

STARTERS = 8  # harvest_bench.py's


async def _starts(dsn: str, n: int) -> dict[str, float]:
    import psycopg
    from canonical import three_steps
    from common import server_cpu_seconds
    from harvest_bench import APP, _start_many

    from harvest import AsyncClient
    from harvest.db.sqlapi import SqlApi

    with psycopg.connect(dsn, autocommit=True) as conn:  # what a starting worker writes
        SqlApi(conn).register_workflows(["default"], sorted(APP.workflows))
        SqlApi(conn).declare_flow_policies(APP.flow_policies())
    client = await AsyncClient.connect(dsn, pool_size=STARTERS, check_schema=False)
    try:
        server0, wall0 = server_cpu_seconds(dsn), time.monotonic()
        await _start_many(client, three_steps, list(range(n)))
        wall, server = time.monotonic() - wall0, server_cpu_seconds(dsn) - server0
    finally:
        await client.close()
    return {"server_ms_per_start": server * 1000 / n, "starts_per_s": n / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--dsn", help="(internal) run one side's starts on this database and print JSON")
    args = parser.parse_args()
    if args.dsn:
        print(json.dumps(asyncio.run(_starts(args.dsn, args.n))))
        return
    if args.base is None:
        parser.error("--base is required")

    import psycopg
    from run import SERVER_SETTINGS
    from sql_path_ab import bench_json, migrate_templates, paired_runs

    from harvest.db.embedded import EmbeddedPostgres

    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
    here = Path(__file__).resolve().parent

    def one_run(key: str, dsn: str) -> dict[str, float]:
        # This script (the candidate's) drives each side's library and bench modules.
        return bench_json(sides[key], "start_batch_ab.py", "--dsn", dsn, "--n", f"{args.n}", bench=here)

    with (
        EmbeddedPostgres(settings=SERVER_SETTINGS) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        migrate_templates(admin, server, sides)
        pairs = []
        for row in paired_runs(admin, server, args.pairs, False, one_run):
            row["ratio"] = row["cand"]["server_ms_per_start"] / row["base"]["server_ms_per_start"]
            pairs.append(row)
            print(
                f"pair {row['pair']} ({row['first']} first): server ms/start"
                f" {row['base']['server_ms_per_start']:.3f} -> {row['cand']['server_ms_per_start']:.3f}"
                f" ({row['ratio']:.2f})  starts/s {row['base']['starts_per_s']:.0f} ->"
                f" {row['cand']['starts_per_s']:.0f}  load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        print(
            json.dumps(
                {
                    "median_server_ratio": round(statistics.median(p["ratio"] for p in pairs), 3),
                    "server_ratios": [round(p["ratio"], 3) for p in pairs],
                    "median_base_ms": round(
                        statistics.median(p["base"]["server_ms_per_start"] for p in pairs), 3
                    ),
                    "median_cand_ms": round(
                        statistics.median(p["cand"]["server_ms_per_start"] for p in pairs), 3
                    ),
                    "median_base_starts_s": round(
                        statistics.median(p["base"]["starts_per_s"] for p in pairs), 1
                    ),
                    "median_cand_starts_s": round(
                        statistics.median(p["cand"]["starts_per_s"] for p in pairs), 1
                    ),
                }
            )
        )


if __name__ == "__main__":
    main()
