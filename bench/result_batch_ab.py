"""Paired A/B of the server's cost of a batch of activity results (``complete_activities``)
between two checkouts of Harvest (a baseline and a candidate), on one embedded server.

Each side gets its own database migrated by its own code (bench/sql_path_ab.py's templates)
and one connection. Runs on queue ``wq`` each schedule 100 activities on ``fq``; per round
each side claims ``--steps`` batches of ``--batch`` tasks as worker ``w`` (``claim_tasks``),
then completes them a batch per call (``complete_activities``), as a worker's group commit
does, the two sides taking turns call by call; the figures are that backend's CPU (/proc/<pid>/schedstat: nanoseconds on a CPU, where utime + stime count
10 ms ticks; its WAL flushes at commit included) over the completing calls, per result, and over the claims, per task claimed. With ``--decide`` each side also makes, per round,
the decisions of ``--decide`` runs that schedule 100 activities each (``complete_workflow_task``; their
runs started and their workflow tasks claimed beforehand, unmeasured), and the figure is the backend's
CPU over those calls per activity scheduled. The side that goes first swaps every call and every round. Prints one
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
from collections.abc import Callable
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


COMMANDS = Jsonb(
    [
        {"type": "schedule_activity", "seq": i, "name": "noop", "queue": "fq", "input": [i], "options": {}}
        for i in range(1, 101)
    ]
)


def deciders(conn: psycopg.Connection, runs: int, first: int) -> list[tuple[int, int]]:
    """Start ``runs`` runs (``dec-<first>``...) and claim their workflow tasks: what ``decide`` decides."""
    tasks = []
    for k in range(first, first + runs):
        conn.execute("SELECT harvest.start_workflow('fan', '[]', %s, 'dq')", (f"dec-{k}",))
        tasks.append(
            conn.execute(
                "SELECT task_id, fencing_token FROM harvest.claim_tasks('decider', ARRAY['dq'], 1)"
            ).fetchone()
        )
    return tasks


def decide(conn: psycopg.Connection, task: tuple[int, int], hand: int = 0, fan: int = 100) -> None:
    """One decision scheduling ``fan`` activities, the first ``hand`` of them handed to its worker."""
    commands = COMMANDS if fan == 100 else Jsonb(COMMANDS.obj[:fan])
    if not hand:
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)", (task[0], task[1], commands)
        )
        return
    (handed,) = conn.execute(
        "SELECT jsonb_array_length(handed) FROM harvest.complete_workflow_task(%s, %s, 1, %s, 'decider',"
        " p_hand_off_slots => %s)",
        (task[0], task[1], commands, hand),
    ).fetchone()
    assert handed == min(hand, fan), (handed, hand)


def complete(conn: psycopg.Connection, held: list[tuple[int, int]]) -> None:
    ids, tokens = [t[0] for t in held], [t[1] for t in held]
    rows = conn.execute(
        "SELECT outcome FROM harvest.complete_activities('w', %s, %s, %s::jsonb[], true)",
        (ids, tokens, [Jsonb(i) for i in range(len(held))]),
    ).fetchall()
    assert all(r[0] == "completed" for r in rows), rows


def turns(
    pids: dict[str, int], orders: list[list[str]], first: int, calls: int, step: Callable[[str, int], object]
) -> dict[str, float]:
    """Each side's backend CPU seconds over `calls` calls of step(side, i), the sides taking
    turns call by call (which goes first swaps every call; `first` swaps it every round). The
    steps run at once, so they may read the caller's loop variables."""
    used = dict.fromkeys(pids, 0.0)
    for i in range(calls):
        for key in orders[(i + first) % 2]:
            c0 = cpu_seconds(pids[key])
            step(key, i)
            used[key] += cpu_seconds(pids[key]) - c0
    return used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument(
        "--decide", type=int, default=0, help="runs of 100 activities decided per round and side"
    )
    parser.add_argument(
        "--hand",
        type=int,
        default=0,
        help="with --decide: each decision hands this many of its activities to its worker (hand-off)",
    )
    parser.add_argument(
        "--fan",
        type=int,
        default=100,
        help="with --decide: activities per decision (100; 1 is the canonical drain's)",
    )
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
            if args.hand:  # the deciding worker polls fq: its activities may be handed to it
                conn.execute("SELECT harvest.register_worker('decider', ARRAY['dq', 'fq'], 'host', 1)")
            schedule(conn, runs)
            conns[key] = conn
            pids[key] = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            for _ in range(2):  # warm the plans
                complete(conn, claim(conn, args.batch))
            if args.decide:
                for task in deciders(conn, 2, -2):
                    decide(conn, task, args.hand, args.fan)
        ratios, cpu = [], {key: [] for key in sides}
        claim_ratios, claim_cpu = [], {key: [] for key in sides}
        decide_ratios, decide_cpu = [], {key: [] for key in sides}
        for r in range(args.rounds):
            # The sides take turns call by call (the first swapped every call and every
            # round), so the machine's drift over a round hits both alike.
            orders = [["base", "cand"], ["cand", "base"]]
            first = r % 2
            batches: dict[str, list[list[tuple[int, int]]]] = {key: [] for key in sides}
            used = turns(
                pids,
                orders,
                first,
                args.steps,
                lambda key, _, got=batches: got[key].append(claim(conns[key], args.batch)),
            )
            claims = {key: used[key] * 1000 / per_round for key in sides}
            assert all(len(b) == args.batch for key in sides for b in batches[key]), "the backlog ran out"
            used = turns(
                pids, orders, first, args.steps, lambda key, i, got=batches: complete(conns[key], got[key][i])
            )
            this = {key: used[key] * 1000 / per_round for key in sides}
            decisions = {}
            if args.decide:
                tasks = {key: deciders(conns[key], args.decide, r * args.decide) for key in sides}
                used = turns(
                    pids,
                    orders,
                    first,
                    args.decide,
                    lambda key, i, got=tasks: decide(conns[key], got[key][i], args.hand, args.fan),
                )
                decisions = {key: used[key] * 1000 / (args.decide * args.fan) for key in sides}
            time.sleep(0.05)
            for key in sides:
                cpu[key].append(this[key])
                claim_cpu[key].append(claims[key])
            ratios.append(this["cand"] / this["base"])
            claim_ratios.append(claims["cand"] / claims["base"])
            decided = ""
            if args.decide:
                for key in sides:
                    decide_cpu[key].append(decisions[key])
                decide_ratios.append(decisions["cand"] / decisions["base"])
                decided = (
                    f"; ms/activity decided base {decisions['base']:.4f} cand {decisions['cand']:.4f}"
                    f" ratio {decide_ratios[-1]:.3f}"
                )
            print(
                f"round {r + 1} ({orders[first][0]} first): backend CPU ms/result base {this['base']:.4f}"
                f" cand {this['cand']:.4f} ratio {ratios[-1]:.3f}; ms/task claimed base {claims['base']:.4f}"
                f" cand {claims['cand']:.4f} ratio {claim_ratios[-1]:.3f}{decided}; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        for conn in conns.values():
            conn.close()
    summary = {
        "median_cpu_ratio": round(statistics.median(ratios), 3),
        "cpu_ratios": [round(x, 3) for x in ratios],
        "median_cpu_ms_per_result": {k: round(statistics.median(v), 4) for k, v in cpu.items()},
        "median_claim_ratio": round(statistics.median(claim_ratios), 3),
        "claim_ratios": [round(x, 3) for x in claim_ratios],
        "median_claim_ms_per_task": {k: round(statistics.median(v), 4) for k, v in claim_cpu.items()},
    }
    if args.decide:
        summary |= {
            "median_decide_ratio": round(statistics.median(decide_ratios), 3),
            "decide_ratios": [round(x, 3) for x in decide_ratios],
            "median_decide_ms_per_activity": {
                k: round(statistics.median(v), 4) for k, v in decide_cpu.items()
            },
        }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
