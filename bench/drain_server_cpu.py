"""The canonical drain's server CPU per workflow against the SQL path's, on one server in the
same minutes: each round runs, in alternating order, ``bench/harvest_bench.py --mode workflows``
(8 starters and one in-process Worker) and ``bench/sql_path.py`` at each given shape (clients x
batch), each on a fresh clone of one migrated template. The figure is every server process'
CPU (the postmaster tree, from /proc) per workflow over the run, plus its throughput.

    python bench/drain_server_cpu.py --rounds 3 --n 1000 --sql-path 1x50,3x50,1x25
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
from common import server_cpu_seconds
from run import SERVER_SETTINGS
from sql_path_ab import bench_json, fresh, migrate_templates

from harvest.db.embedded import EmbeddedPostgres


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkout", default=Path("."), type=Path, help="the Harvest checkout to measure")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument(
        "--sql-path", default="1x50", help="SQL path shapes, clients x batch, comma-separated"
    )
    args = parser.parse_args()
    root = args.checkout.resolve()
    kinds = ["drain", *(f"sql {shape}" for shape in args.sql_path.split(","))]
    figures: dict[str, list[float]] = {kind: [] for kind in kinds}
    with (
        EmbeddedPostgres(settings=SERVER_SETTINGS) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        migrate_templates(admin, server, {"x": root})
        for i in range(args.rounds):
            for kind in kinds if i % 2 == 0 else kinds[::-1]:
                dsn = fresh(admin, server, "run_x", "tmpl_x")
                if kind == "drain":
                    out = bench_json(
                        root, "harvest_bench.py", "--dsn", dsn, "--mode", "workflows", "--n", f"{args.n}"
                    )
                    cpu, rate = out["cpu"]["server_s"], out["throughput"]
                else:
                    clients, batch = kind.split()[1].split("x")
                    before = server_cpu_seconds(dsn)
                    out = bench_json(
                        root,
                        "sql_path.py",
                        "--dsn",
                        dsn,
                        "--clients",
                        clients,
                        "--n",
                        f"{args.n}",
                        "--batch",
                        batch,
                    )
                    cpu, rate = server_cpu_seconds(dsn) - before, out["best_wf_per_s"]
                admin.execute('DROP DATABASE "run_x"')
                figures[kind].append(cpu * 1000 / args.n)
                print(
                    f"round {i + 1} {kind}: server {figures[kind][-1]:.2f} ms/wf, {rate:.0f} wf/s,"
                    f" load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    print(
        json.dumps(
            {
                "median_server_ms_per_wf": {k: round(statistics.median(v), 3) for k, v in figures.items()},
                "per_round_over_drain": {
                    k: [round(a / b, 3) for a, b in zip(v, figures["drain"], strict=True)]
                    for k, v in figures.items()
                    if k != "drain"
                },
            }
        )
    )


if __name__ == "__main__":
    main()
