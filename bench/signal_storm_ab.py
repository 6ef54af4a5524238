"""Paired A/B of a signal storm: a few runs whose signals land while their activities run.

``bench/harvest_bench.py --mode signals --runs 4 --rate R`` (``ping_loop``: each signal's
workflow task schedules a no-op activity, whose result the worker decides on ahead) at each of
``--rates``, two checkouts of Harvest (a baseline and a candidate) alternating, each run on a
fresh clone of its side's template database (bench/sql_path_ab.py's ``paired_runs``: the base
first in odd pairs, the candidate first in even ones; one after the other, not ``--together``
unless asked, since a storm's own worker loop is what is measured). Both sides run this
checkout's bench scripts, which print the worker's whole-history replays (cache misses past one
a run) and, where the library counts them, its refused decisions ahead.

A run is "slow" when its round trip's p99 is over ``--slow-ms`` (default 100 ms: a run with no
refusal has a p99 of 4-40 ms; one that fell into replays, hundreds of ms to seconds;
docs/performance.md, "Signal storms"). Prints one line per run pair and a JSON summary per rate.

    python bench/signal_storm_ab.py --base /work/wt/base43 --candidate . --pairs 6 --rates 100,140
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

import psycopg
from run import SERVER_SETTINGS
from sql_path_ab import bench_json, migrate_templates, paired_runs

from harvest.db.embedded import EmbeddedPostgres


def one_run(
    root: Path, bench: Path, dsn: str, rate: float, seconds: float, runs: int, plain: bool = False
) -> dict[str, Any]:
    result = bench_json(
        root,
        "harvest_bench.py",
        "--dsn",
        dsn,
        "--mode",
        "signals",
        "--runs",
        str(runs),
        "--rate",
        str(rate),
        "--seconds",
        str(seconds),
        *(["--plain-results"] if plain else []),
        bench=bench,
    )
    trip = result["round_trip"]
    return {
        "p50": trip["p50_ms"],
        "p99": trip["p99_ms"],
        "replays": result["replays"],
        "refused": result.get("refused_ahead"),
        "ahead": result["decided_ahead"],
        "plain": result.get("plain_by_storm_rule"),
        "commits": result.get("commits_per_signal", float("nan")),
        "handed": result.get("handed_per_signal", float("nan")),
        "process_ms": (result.get("cpu_ms_per_run") or {}).get("process", float("nan")),
        "load": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--rates", default="100,140", help="comma-separated signals/s, all runs together")
    parser.add_argument("--runs", type=int, default=4, help="workflows the signals go to, round-robin")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--slow-ms", type=float, default=100.0, help="a run whose round trip p99 is over this is slow"
    )
    parser.add_argument(
        "--together", action="store_true", help="a pair's two runs at once (both see the same load)"
    )
    parser.add_argument(
        "--plain-results",
        action="store_true",
        help="both sides decide on no result ahead (harvest_bench.py --plain-results): the storm's plain path",
    )
    args = parser.parse_args()
    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
    bench = Path(__file__).resolve().parent  # this checkout's scripts, for both sides
    with (
        EmbeddedPostgres(settings=SERVER_SETTINGS) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        migrate_templates(admin, server, sides)
        summary: dict[str, Any] = {}
        for rate in (float(r) for r in args.rates.split(",") if r):
            pairs = []
            for pair in paired_runs(
                admin,
                server,
                args.pairs,
                args.together,
                lambda key, dsn, rate=rate: one_run(
                    sides[key], bench, dsn, rate, args.seconds, args.runs, args.plain_results
                ),
            ):
                base, cand = pair["base"], pair["cand"]
                pairs.append(pair)
                print(
                    f"{rate:g}/s pair {pair['pair']} ({pair['first']} first):"
                    f" base p50/p99 {base['p50']:.1f}/{base['p99']:.1f} ms replays {base['replays']}"
                    f" refused {base['refused']}"
                    f" | cand {cand['p50']:.1f}/{cand['p99']:.1f} ms replays {cand['replays']}"
                    f" refused {cand['refused']} plain {cand['plain']}"
                    f" | commits/signal {base['commits']:.2f}/{cand['commits']:.2f}"
                    f" handed/signal {base['handed']:.2f}/{cand['handed']:.2f}"
                    f" | load {base['load']}/{cand['load']}",
                    flush=True,
                )

            def side(key: str, pairs: list[dict[str, Any]] = pairs) -> dict[str, Any]:
                runs = [p[key] for p in pairs]
                return {
                    "replays": [r["replays"] for r in runs],
                    "replays_total": sum(r["replays"] for r in runs),
                    "refused": [r["refused"] for r in runs],
                    "p50_ms": [round(r["p50"], 1) for r in runs],
                    "p99_ms": [round(r["p99"], 1) for r in runs],
                    "p50_median": round(statistics.median(r["p50"] for r in runs), 2),
                    "p99_median": round(statistics.median(r["p99"] for r in runs), 1),
                    "slow_runs": sum(r["p99"] > args.slow_ms for r in runs),
                    "process_ms_per_signal": round(statistics.median(r["process_ms"] for r in runs), 3),
                    "commits_per_signal": round(statistics.median(r["commits"] for r in runs), 3),
                    "handed_per_signal": round(statistics.median(r["handed"] for r in runs), 3),
                }

            summary[f"{rate:g}"] = {
                "pairs": len(pairs),
                "base": side("base"),
                "cand": side("cand"),
                "p50_ratios": [round(p["cand"]["p50"] / p["base"]["p50"], 2) for p in pairs],
                "p99_ratios": [round(p["cand"]["p99"] / p["base"]["p99"], 2) for p in pairs],
                "load": [p["base"]["load"] for p in pairs],
            }
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
