"""Paired A/B of each hot function's server CPU per call at one item (bench/call_cost.py).

Two checkouts (a baseline and a candidate) on one embedded server: a template database per
side migrated by its own code, a fresh clone of it per run, the base first in odd pairs and the
candidate first in even ones (bench/sql_path_ab.py's ``paired_runs``). A run is the candidate's
``bench/call_cost.py --runs N --batch B`` with the side's library. ``--interleaved``: both
sides' runs at once in this process instead, a round (``--batch`` runs) of one side then one of
the other, so the machine's load swings hit both alike. Prints one line per pair (backend CPU
per run of each function, both sides, and their ratio) and a JSON summary with the per-pair
ratios and their medians.

    python bench/call_cost_ab.py --base /work/wt/base29 --candidate . --pairs 8
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
from call_cost import STEPS, one_round, prepare
from run import SERVER_SETTINGS
from sql_path_ab import bench_json, migrate_templates, paired_runs

from harvest.db.embedded import EmbeddedPostgres


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dsn", help="an existing server's admin DSN (default: an embedded server)")
    parser.add_argument(
        "--registrations",
        type=int,
        default=0,
        help="other (queue, workflow) registrations in each database first (call_cost.py --registrations)",
    )
    parser.add_argument(
        "--interleaved", action="store_true", help="both sides' rounds alternating in one process"
    )
    args = parser.parse_args()
    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
    bench = sides["cand"] / "bench"
    server = None if args.dsn else EmbeddedPostgres(settings=dict(SERVER_SETTINGS))
    admin_dsn = args.dsn or server.start()  # type: ignore[union-attr]
    keys = (*STEPS, "total")
    try:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            for key in sides:
                admin.execute(f'DROP DATABASE IF EXISTS "tmpl_{key}"')
            if server is None:
                from urllib.parse import urlsplit, urlunsplit

                parts = urlsplit(admin_dsn)

                class _At:
                    def dsn_for(self, name: str) -> str:
                        return urlunsplit(parts._replace(path="/" + name))

                at: Any = _At()
            else:
                at = server
            migrate_templates(admin, at, sides)

            def run(key: str, dsn: str) -> dict[str, float]:
                out = bench_json(
                    sides[key],
                    "call_cost.py",
                    "--dsn",
                    dsn,
                    "--runs",
                    str(args.runs),
                    "--batch",
                    str(args.batch),
                    "--registrations",
                    str(args.registrations),
                    bench=bench,
                )
                figures = {step: float(out[step]["us_per_run"]) for step in STEPS}
                figures["total"] = float(out["total_us_per_run"])
                return figures

            def interleaved(dsns: dict[str, str]) -> dict[str, dict[str, float]]:
                conns = {key: psycopg.connect(dsn, autocommit=True) for key, dsn in dsns.items()}
                try:
                    setup = {key: prepare(conn, args.registrations) for key, conn in conns.items()}
                    costs = {key: dict.fromkeys(STEPS, 0) for key in conns}
                    rounds = max(1, args.runs // args.batch)
                    for i in range(20 + rounds):
                        for key in conns if i % 2 == 0 else reversed(list(conns)):
                            into = costs[key] if i >= 20 else dict.fromkeys(STEPS, 0)
                            one_round(conns[key], *setup[key], args.batch, into)
                finally:
                    for conn in conns.values():
                        conn.close()
                out: dict[str, dict[str, float]] = {}
                for key, cost in costs.items():
                    runs = rounds * args.batch
                    out[key] = {step: cost[step] / runs / 1000 for step in STEPS}
                    out[key]["total"] = sum(cost.values()) / runs / 1000
                return out

            def pairs() -> Any:
                if not args.interleaved:
                    yield from paired_runs(admin, at, args.pairs, False, run)
                    return
                from sql_path_ab import fresh

                for i in range(args.pairs):
                    order = ["base", "cand"] if i % 2 == 0 else ["cand", "base"]
                    dsns = {key: fresh(admin, at, f"run_{key}", f"tmpl_{key}") for key in order}
                    row: dict[str, Any] = {"pair": i + 1, "first": order[0], **interleaved(dsns)}
                    for key in order:
                        admin.execute(f'DROP DATABASE "run_{key}"')
                    yield row

            ratios: dict[str, list[float]] = {key: [] for key in keys}
            sums: dict[str, dict[str, list[float]]] = {side: {key: [] for key in keys} for side in sides}
            for row in pairs():
                line = [f"pair {row['pair']} ({row['first']} first)"]
                for key in keys:
                    base, cand = row["base"][key], row["cand"][key]
                    ratios[key].append(cand / base)
                    sums["base"][key].append(base)
                    sums["cand"][key].append(cand)
                    line.append(f"{key} {base:.0f}/{cand:.0f} us ({cand / base:.2f})")
                print("; ".join(line), flush=True)
            for key in sides:
                admin.execute(f'DROP DATABASE IF EXISTS "tmpl_{key}"')
    finally:
        if server is not None:
            server.stop()
    summary = {
        key: {
            "base_median_us": round(statistics.median(sums["base"][key]), 1),
            "cand_median_us": round(statistics.median(sums["cand"][key]), 1),
            "ratios": [round(r, 3) for r in ratios[key]],
            "median_ratio": round(statistics.median(ratios[key]), 3),
        }
        for key in keys
    }
    print(
        json.dumps(
            {
                "batch": args.batch,
                "runs": args.runs,
                "pairs": args.pairs,
                "interleaved": args.interleaved,
                "per_run": summary,
            }
        )
    )


if __name__ == "__main__":
    main()
