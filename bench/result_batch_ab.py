"""Paired A/B of the server's cost of a batch of activity results (``complete_activities``)
between two checkouts of Harvest (a baseline and a candidate), on one embedded server.

Each side gets its own database migrated by its own code (bench/sql_path_ab.py's templates)
and one connection. Runs on queue ``wq`` each schedule 100 activities on ``fq``; per round
each side claims ``--steps`` batches of ``--batch`` tasks as worker ``w`` (``claim_tasks``),
then completes them a batch per call (``complete_activities``), as a worker's group commit
does; the figures are that backend's CPU (/proc/<pid>/schedstat: nanoseconds on a CPU, where utime + stime count
10 ms ticks; its WAL flushes at commit included) over the completing calls, per result, and over the claims, per task claimed. The side that goes first swaps every round. Prints one
line per round (candidate/base) and a JSON summary of the medians.

    python bench/result_batch_ab.py --base /work/wt/base --candidate . --rounds 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from psycopg.types.json import Jsonb
from result_claim_cost import claim, schedule
from run import SERVER_SETTINGS
from sql_path_ab import fresh, migrate_templates

from harvest.db.embedded import EmbeddedPostgres


def cpu_seconds(pid: int) -> float:
    """A process's time on a CPU so far, to the nanosecond (/proc/<pid>/schedstat)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def complete(conn: psycopg.Connection, held: list[tuple[int, int]]) -> None:
    ids, tokens = [t[0] for t in held], [t[1] for t in held]
    rows = conn.execute(
        "SELECT outcome FROM harvest.complete_activities('w', %s, %s, %s::jsonb[], true)",
        (ids, tokens, [Jsonb(i) for i in range(len(held))]),
    ).fetchall()
    assert all(r[0] == "completed" for r in rows), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
    per_round = args.steps * args.batch
    runs = ((args.rounds + 1) * per_round) // 100 + 2
    with (
        EmbeddedPostgres(settings=SERVER_SETTINGS) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        migrate_templates(admin, server, sides)
        conns, pids = {}, {}
        for key in sides:
            conn = psycopg.connect(fresh(admin, server, f"run_{key}", f"tmpl_{key}"), autocommit=True)
            conn.execute("SELECT harvest.register_worker('w', ARRAY['fq'], 'host', 1)")
            schedule(conn, runs)
            conns[key] = conn
            pids[key] = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            for _ in range(2):  # warm the plans
                complete(conn, claim(conn, args.batch))
        ratios, cpu = [], {key: [] for key in sides}
        claim_ratios, claim_cpu = [], {key: [] for key in sides}
        for r in range(args.rounds):
            order = ["base", "cand"] if r % 2 == 0 else ["cand", "base"]
            this, claims = {}, {}
            for key in order:
                conn = conns[key]
                c0 = cpu_seconds(pids[key])
                batches = [claim(conn, args.batch) for _ in range(args.steps)]
                claims[key] = (cpu_seconds(pids[key]) - c0) * 1000 / per_round
                assert all(len(b) == args.batch for b in batches), "the backlog ran out"
                c0 = cpu_seconds(pids[key])
                for held in batches:
                    complete(conn, held)
                this[key] = (cpu_seconds(pids[key]) - c0) * 1000 / per_round
                time.sleep(0.05)
            for key in sides:
                cpu[key].append(this[key])
                claim_cpu[key].append(claims[key])
            ratios.append(this["cand"] / this["base"])
            claim_ratios.append(claims["cand"] / claims["base"])
            print(
                f"round {r + 1} ({order[0]} first): backend CPU ms/result base {this['base']:.4f}"
                f" cand {this['cand']:.4f} ratio {ratios[-1]:.3f}; ms/task claimed base {claims['base']:.4f}"
                f" cand {claims['cand']:.4f} ratio {claim_ratios[-1]:.3f}; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        for conn in conns.values():
            conn.close()
    print(
        json.dumps(
            {
                "median_cpu_ratio": round(statistics.median(ratios), 3),
                "cpu_ratios": [round(x, 3) for x in ratios],
                "median_cpu_ms_per_result": {k: round(statistics.median(v), 4) for k, v in cpu.items()},
                "median_claim_ratio": round(statistics.median(claim_ratios), 3),
                "claim_ratios": [round(x, 3) for x in claim_ratios],
                "median_claim_ms_per_task": {k: round(statistics.median(v), 4) for k, v in claim_cpu.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
