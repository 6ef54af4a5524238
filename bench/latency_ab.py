"""Paired A/B of the latency rows: two checkouts of Harvest (a baseline and a candidate),
alternating, on one embedded server.

Each side gets its own template database migrated by its own code, and every run a fresh
clone of it (bench/sql_path_ab.py's ``paired_runs``: the base first in odd pairs, the candidate
first in even ones). A run is one of the rows' own benchmarks with ``PYTHONPATH`` naming the
side's ``harvest_py``: ``remote`` (bench/remote_latency.py, start -> result from another
process), ``dispatch`` (harvest_bench.py ``--mode latency``) or ``signals`` (``--mode
signals``), each ``--seconds`` long at its default rate; the server's CPU is read from
``/proc`` around the run. ``--together``: a pair's two runs at once instead of one after the
other, so both see the same load (each then also loads the other; the server's CPU, which
``/proc`` cannot split between them, is not reported). Prints one line per pair and row (p50 / p99 of both sides, their
ratio) and a JSON summary with the per-pair ratios and their medians.

    python bench/latency_ab.py --base /work/wt/base27 --candidate . --pairs 6 --rows signals
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psutil
import psycopg
from common import server_cpu_seconds
from run import SERVER_SETTINGS
from sql_path_ab import bench_json, migrate_templates, paired_runs

from harvest.db.embedded import EmbeddedPostgres

ROWS = {
    # row -> (script, extra arguments, the figure's key, what the server's CPU is counted per)
    "remote": ("remote_latency.py", [], "start_to_result", "n"),
    "dispatch": ("harvest_bench.py", ["--mode", "latency"], "dispatch", "n"),
    "signals": ("harvest_bench.py", ["--mode", "signals", "--runs", "10"], "round_trip", "n"),
}


def one_run(
    root: Path, row: str, dsn: str, seconds: float, postmaster: int | None, more: list[str], bench: Path
) -> dict[str, Any]:
    """One run of ``row`` with the library of ``root`` and the scripts of ``bench``."""
    script, extra, key, per = ROWS[row]
    extra = extra + more
    before = 0.0 if postmaster is None else server_cpu_seconds(postmaster_pid=postmaster)
    result = bench_json(root, script, "--dsn", dsn, "--seconds", str(seconds), *extra, bench=bench)
    server = 0.0 if postmaster is None else server_cpu_seconds(postmaster_pid=postmaster) - before
    figure = result[key]
    return {
        "p50": figure["p50_ms"],
        "p99": figure["p99_ms"],
        # (both sides at once: the server's CPU is theirs together, so it is not given)
        "server_ms": float("nan") if postmaster is None else server * 1000 / result[per],
        **steady_cpu(result),
    }


def steady_cpu(result: dict[str, Any]) -> dict[str, float]:
    """The run's own CPU per run while its steady load ran, where its script reports it (the
    candidate's scripts do: ``--bench-from cand``): its database's backends, and its Python
    processes (worker and client). Each side's own, so it stands with ``--together`` too."""
    cpu = result.get("cpu_ms_per_run") or {}
    if "backends_ms_per_run" in result:  # remote_latency.py: a worker process and a client
        backends = result["backends_ms_per_run"]
        process = (cpu.get("worker") or float("nan")) + cpu.get("client", float("nan"))
    else:  # harvest_bench.py: one process
        backends = cpu.get("backends", float("nan"))
        process = cpu.get("process", float("nan"))
    return {"backends_ms": backends, "process_ms": process}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--rows", default="remote,dispatch,signals", help="comma-separated: " + ", ".join(ROWS)
    )
    parser.add_argument(
        "--bench-from",
        choices=("own", "cand"),
        default="own",
        help="run each side's own bench scripts (default), or the candidate's for both (a bench changed since the base)",
    )
    parser.add_argument(
        "--together", action="store_true", help="a pair's two runs at once (both see the same load)"
    )
    parser.add_argument(
        "--cand-args",
        default="",
        help="more arguments for the candidate's runs only (e.g. --cand-args=--eager)",
    )
    args = parser.parse_args()
    rows = [r for r in args.rows.split(",") if r]
    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
    with (
        EmbeddedPostgres(settings=SERVER_SETTINGS) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        backend = admin.execute("SELECT pg_backend_pid()").fetchone()[0]
        postmaster = psutil.Process(backend).ppid()
        migrate_templates(admin, server, sides)
        summary: dict[str, Any] = {}
        for row in rows:
            pairs = []
            for pair in paired_runs(
                admin,
                server,
                args.pairs,
                args.together,
                lambda key, dsn, row=row: one_run(
                    sides[key],
                    row,
                    dsn,
                    args.seconds,
                    None if args.together else postmaster,
                    args.cand_args.split() if key == "cand" else [],
                    sides["cand" if args.bench_from == "cand" else key] / "bench",
                ),
            ):
                base, cand = pair["base"], pair["cand"]
                pair["p50_ratio"] = cand["p50"] / base["p50"]
                pair["p99_ratio"] = cand["p99"] / base["p99"]
                pair["cpu_ratio"] = cand["server_ms"] / base["server_ms"]
                pair["backends_ratio"] = cand["backends_ms"] / base["backends_ms"]
                pair["process_ratio"] = cand["process_ms"] / base["process_ms"]
                pairs.append(pair)
                print(
                    f"{row} pair {pair['pair']} ({pair['first']} first): base {base['p50']:.2f} / {base['p99']:.2f} ms"
                    f"  cand {cand['p50']:.2f} / {cand['p99']:.2f} ms  p50 ratio {pair['p50_ratio']:.2f}"
                    f"  server {base['server_ms']:.2f} -> {cand['server_ms']:.2f} ms"
                    f"  backends {base['backends_ms']:.3f} -> {cand['backends_ms']:.3f} ms"
                    f"  python {base['process_ms']:.3f} -> {cand['process_ms']:.3f} ms"
                    f"  load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )

            def med(values: list[float]) -> float:
                return round(statistics.median(values), 3)

            summary[row] = {
                "base_p50_p99": [
                    med([p["base"]["p50"] for p in pairs]),
                    med([p["base"]["p99"] for p in pairs]),
                ],
                "cand_p50_p99": [
                    med([p["cand"]["p50"] for p in pairs]),
                    med([p["cand"]["p99"] for p in pairs]),
                ],
                "p50_ratios": [round(p["p50_ratio"], 2) for p in pairs],
                "p50_ratio_median": med([p["p50_ratio"] for p in pairs]),
                "p99_ratio_median": med([p["p99_ratio"] for p in pairs]),
                "server_ms": [
                    med([p["base"]["server_ms"] for p in pairs]),
                    med([p["cand"]["server_ms"] for p in pairs]),
                ],
                "cpu_ratios": [round(p["cpu_ratio"], 2) for p in pairs],
                "cpu_ratio_median": med([p["cpu_ratio"] for p in pairs]),
                "backends_ms": [
                    med([p["base"]["backends_ms"] for p in pairs]),
                    med([p["cand"]["backends_ms"] for p in pairs]),
                ],
                "backends_ratios": [round(p["backends_ratio"], 2) for p in pairs],
                "backends_ratio_median": med([p["backends_ratio"] for p in pairs]),
                "process_ms": [
                    med([p["base"]["process_ms"] for p in pairs]),
                    med([p["cand"]["process_ms"] for p in pairs]),
                ],
                "process_ratios": [round(p["process_ratio"], 2) for p in pairs],
                "process_ratio_median": med([p["process_ratio"] for p in pairs]),
            }
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
