"""Paired A/B of the worker/client process' Python CPU per canonical workflow: two
checkouts of Harvest (a baseline and a candidate), alternating, on one embedded server.

Each side gets its own template database migrated by its own code, and every run a
fresh clone of it. A run is ``bench/harvest_bench.py --mode workflows --n N`` of that
side (its own harvest_py on PYTHONPATH; both sides run the candidate's bench scripts, so they
are measured the same way, unless ``--bench-from own``): 8 starters and one in-process Worker. The figure is the bench
process' ``time.process_time()`` over the drain divided by N (``cpu.client_s``), plus the
throughput, the whole server's CPU per workflow and that of the side's own database's backends
(``cpu.backends_s``: the worker's and the client's pools; the server measure that stays the
side's own with ``--together``). Prints one line per pair and a JSON summary.

    python bench/python_cpu_ab.py --base /work/wt/base --candidate . --pairs 6 --n 600

With ``--together`` each pair's two runs go at once (each on its own database of the
one server), so both sides see the same load from whatever else runs on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from run import SERVER_SETTINGS
from sql_path_ab import bench_json, migrate_templates, paired_runs

from harvest.db.embedded import EmbeddedPostgres


def one_run(root: Path, dsn: str, n: int, bench: Path) -> tuple[float, float, float, float]:
    """(process CPU ms per workflow, server CPU ms per workflow, workflows per second, this
    database's backends' CPU ms per workflow)."""
    result = bench_json(
        root, "harvest_bench.py", "--dsn", dsn, "--mode", "workflows", "--n", f"{n}", bench=bench
    )
    assert result["completed"] == n, result
    cpu = result["cpu"]
    return (
        cpu["client_s"] * 1000 / n,
        cpu["server_s"] * 1000 / n,
        result["throughput"],
        cpu.get("backends_s", math.nan) * 1000 / n,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument(
        "--together", action="store_true", help="run each pair's two sides at once (both see the same load)"
    )
    parser.add_argument(
        "--bench-from",
        choices=("cand", "own"),
        default="cand",
        help="run the candidate's bench scripts for both sides (default: both measured the same way), "
        "or each side's own (a base whose harvest_bench.py reports no backends' CPU shows nan there)",
    )
    args = parser.parse_args()
    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
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
            lambda key, dsn: one_run(
                sides[key], dsn, args.n, sides["cand" if args.bench_from == "cand" else key] / "bench"
            ),
        ):
            row["ratio"] = row["cand"][0] / row["base"][0]
            row["tput_ratio"] = row["cand"][2] / row["base"][2]
            row["server_ratio"] = row["cand"][1] / row["base"][1]
            row["backends_ratio"] = row["cand"][3] / row["base"][3]
            pairs.append(row)
            print(
                f"pair {row['pair']} ({row['first']} first): base {row['base'][0]:.3f} ms/wf ({row['base'][2]:.0f} wf/s)"
                f"  cand {row['cand'][0]:.3f} ms/wf ({row['cand'][2]:.0f} wf/s)  cpu ratio {row['ratio']:.3f}"
                f"  tput ratio {row['tput_ratio']:.2f}  server ms/wf {row['base'][1]:.2f} -> {row['cand'][1]:.2f}"
                f" ({row['server_ratio']:.2f})  backends ms/wf {row['base'][3]:.2f} -> {row['cand'][3]:.2f}"
                f" ({row['backends_ratio']:.2f})  load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        print(
            json.dumps(
                {
                    "median_cpu_ratio": round(statistics.median(p["ratio"] for p in pairs), 3),
                    "cpu_ratios": [round(p["ratio"], 3) for p in pairs],
                    "median_base_ms_wf": round(statistics.median(p["base"][0] for p in pairs), 3),
                    "median_cand_ms_wf": round(statistics.median(p["cand"][0] for p in pairs), 3),
                    "median_tput_ratio": round(statistics.median(p["tput_ratio"] for p in pairs), 3),
                    "median_server_ratio": round(statistics.median(p["server_ratio"] for p in pairs), 3),
                    "backends_ratios": [round(p["backends_ratio"], 3) for p in pairs],
                    "median_backends_ratio": round(statistics.median(p["backends_ratio"] for p in pairs), 3),
                    "median_base_backends_ms_wf": round(statistics.median(p["base"][3] for p in pairs), 3),
                    "median_cand_backends_ms_wf": round(statistics.median(p["cand"][3] for p in pairs), 3),
                    "median_base_wf_s": round(statistics.median(p["base"][2] for p in pairs), 1),
                    "median_cand_wf_s": round(statistics.median(p["cand"][2] for p in pairs), 1),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
