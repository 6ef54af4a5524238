"""The server's cost of a result batch and the claim after it: two transactions
(``complete_activities``, then ``claim_tasks``: what a worker without the batch's claim
does) against one (``complete_activities_with_claim``), on one connection, alternating.

One embedded server with bench/run.py's settings and one database migrated by this
checkout. Runs on queue ``wq`` each schedule 100 activities on ``fq``; a worker ``w``
claims a batch of them, then per step completes the batch it holds and claims as many
again, either way. Per round each side makes ``--steps`` steps of ``--batch``; the side
that goes first swaps every round. The figure is the backend's CPU (utime + stime from
/proc: its WAL flushes at commit included) per activity, and the wall time per step.

    python bench/result_claim_cost.py --rounds 10 --steps 50 --batch 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from psycopg.types.json import Jsonb
from run import SERVER_SETTINGS
from sql_path_ab import cpu_seconds

from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

TWO = "two transactions"
ONE = "one transaction"


def schedule(conn: psycopg.Connection, runs: int) -> None:
    """``runs`` runs, each deciding to schedule 100 activities on queue fq."""
    commands = Jsonb(
        [{"type": "schedule_activity", "seq": i, "name": "noop", "queue": "fq"} for i in range(1, 101)]
    )
    for k in range(runs):
        conn.execute("SELECT harvest.start_workflow('fan', '[]', %s, 'wq')", (f"fan-{k}",))
        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('decider', ARRAY['wq'], 1)"
        ).fetchone()
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)", (task[0], task[1], commands)
        )


def claim(conn: psycopg.Connection, n: int) -> list[tuple[int, int]]:
    return conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('w', ARRAY['fq'], %s)", (n,)
    ).fetchall()


def step(conn: psycopg.Connection, side: str, held: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    ids, tokens = [t[0] for t in held], [t[1] for t in held]
    results = [Jsonb(None)] * len(held)
    if side == TWO:
        rows = conn.execute(
            "SELECT outcome FROM harvest.complete_activities('w', %s, %s, %s::jsonb[])",
            (ids, tokens, results),
        ).fetchall()
        assert all(r[0] == "completed" for r in rows), rows
        return claim(conn, n)
    rows = conn.execute(
        "SELECT task_id, outcome, handed ->> 'fencing_token' FROM harvest.complete_activities_with_claim("
        "'w', ARRAY['fq'], %s, %s, %s, %s::jsonb[])",
        (n, ids, tokens, results),
    ).fetchall()
    assert all(r[1] in ("completed", "claimed") for r in rows), rows
    return [(r[0], int(r[2])) for r in rows if r[1] == "claimed"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=20)
    args = parser.parse_args()
    per_side = args.rounds * args.steps * args.batch
    runs = (2 * per_side + args.batch) // 100 + 2
    with EmbeddedPostgres(settings=SERVER_SETTINGS) as server:
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute("CREATE DATABASE result_claim")
        dsn = server.dsn_for("result_claim")
        Migrator(dsn).run()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT harvest.register_worker('w', ARRAY['fq'], 'host', 1)")
            schedule(conn, runs)
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            held = claim(conn, args.batch)
            for _ in range(3):  # warm the plans of both sides
                held = step(conn, TWO, held, args.batch)
                held = step(conn, ONE, held, args.batch)
            ratios, cpu, wall = [], {TWO: [], ONE: []}, {TWO: [], ONE: []}
            for r in range(args.rounds):
                order = [TWO, ONE] if r % 2 == 0 else [ONE, TWO]
                this = {}
                for side in order:
                    c0, w0 = cpu_seconds(pid), time.perf_counter()
                    for _ in range(args.steps):
                        held = step(conn, side, held, args.batch)
                        assert len(held) == args.batch, "the backlog ran out"
                    this[side] = (cpu_seconds(pid) - c0, time.perf_counter() - w0)
                n = args.steps * args.batch
                cpu[TWO].append(this[TWO][0] * 1000 / n)
                cpu[ONE].append(this[ONE][0] * 1000 / n)
                wall[TWO].append(this[TWO][1] * 1000 / args.steps)
                wall[ONE].append(this[ONE][1] * 1000 / args.steps)
                ratios.append(this[ONE][0] / this[TWO][0] if this[TWO][0] else float("nan"))
                print(
                    f"round {r + 1}: backend CPU ms/activity two {cpu[TWO][-1]:.4f} one {cpu[ONE][-1]:.4f}"
                    f" ratio {ratios[-1]:.3f}; ms/step two {wall[TWO][-1]:.2f} one {wall[ONE][-1]:.2f}",
                    flush=True,
                )
    print(
        json.dumps(
            {
                "median_cpu_ratio": round(statistics.median(ratios), 3),
                "cpu_ratios": [round(x, 3) for x in ratios],
                "median_cpu_ms_per_activity": {k: round(statistics.median(v), 4) for k, v in cpu.items()},
                "median_ms_per_step": {k: round(statistics.median(v), 3) for k, v in wall.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
