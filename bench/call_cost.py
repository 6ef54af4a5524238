"""Each hot function's server cost per CALL (docs/performance.md, "Latency rows, sixth cut").

Drives the start -> result row's SQL path (``one_step``: start, claim, decision with the activity
handed, result and close decided ahead, the waiter's read) from one connection, ``--batch`` runs
per call, each call its own transaction as the client and the worker send it, and reads the
backend's CPU from ``/proc/<pid>/schedstat`` (nanoseconds on a CPU) around every call. Prints,
per function, the backend CPU per call and per run: at ``--batch 1`` a call's whole cost is per
run, at ``--batch 50`` only the per-item part is, so the difference is what a call costs before
its first item. ``--statements`` adds ``pg_stat_statements`` (``track = all``) figures: the
statements one call runs, nested ones included, per call.

``--gaps 0,0.002,0.01,0.05``: the same calls with the connection idle that many seconds before
each (the gaps taken in turn, ten runs each, so every gap sees the same load), and each call's
wall clock besides its backend's CPU, per gap: what a call costs when it comes after a pause, as
every call of a run does at the latency rows' rate, against back to back (docs/performance.md,
"Latency rows, eleventh cut").

``--signal-calls``: besides, the signal round trip's calls back to back on the same connection
(a run waiting for a signal: ``signal_workflow``, ``claim_tasks`` of the woken workflow task, and
``complete_workflow_tasks`` scheduling and handing the activity the workflow runs on it; the
activity's result and the run's close follow, not timed): each call's wall p50 and their sum,
what the signal row's p50 is set against in ``make bench`` (bench/targets.py, proposed measures).
``--merged-claim``: in both, the claim and the decision in one transaction (BEGIN timed with the
claim, COMMIT with the decision), as a worker woken with nothing in flight sends them (docs/internals.md,
"A claim that decides"); ``make bench`` measures it so, the rows' own path.

    python bench/call_cost.py --dsn D --runs 300 --batch 1
    python bench/call_cost.py --dsn D --runs 200 --gaps 0,0.002,0.01,0.05
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from psycopg.types.json import Jsonb

STEPS = (
    "start_workflows",
    "claim_tasks",
    "complete_workflow_tasks",
    "complete_activities",
    "wait_for_result",
)
OPTIONS = {"retry": {"maximum_attempts": 3}, "start_to_close_secs": 30}
# A start as the client sends it (AsyncClient.start_workflow: every argument named).
START = {
    "workflow_name": "one_step",
    "input": [0],
    "workflow_id": None,
    "reuse_policy": "allow_duplicate",
    "conflict_policy": "unspecified",
    "search_attributes": {},
    "priority": 0,
    "execution_timeout": None,
    "run_timeout": None,
    "traceparent": None,
}


def on_cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def noop_activity(queue: str) -> dict:
    """The decision's command both sequences send: one no-op activity on ``queue``."""
    return {
        "type": "schedule_activity",
        "seq": 1,
        "name": "noop",
        "input": [1],
        "queue": queue,
        "options": OPTIONS,
    }


def one_round(
    conn: psycopg.Connection,
    pid: int,
    queue: str,
    worker: str,
    batch: int,
    cost: dict[str, int],
    gap: float = 0.0,
    walls: dict[str, list[float]] | None = None,
    merged: bool = False,
) -> None:
    """One batch of runs through the path, each call's backend CPU added to ``cost``; with
    ``gap``, the connection idle that many seconds before each call, and with ``walls``, each
    call's wall clock (ms) appended to its step's list. With ``merged``, the claim and the
    decision share one transaction, as a woken idle worker sends them (docs/internals.md, "A
    claim that decides"): the claim's BEGIN is timed with it, the COMMIT with the decision."""

    def call(step: str, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        if gap:
            time.sleep(gap)
        before = on_cpu_ns(pid)
        began = time.perf_counter()
        if merged and step == "claim_tasks":
            conn.execute("BEGIN")
        cur = conn.execute(sql, params, prepare=True)
        rows = cur.fetchall()
        if merged and step == "complete_workflow_tasks":
            conn.execute("COMMIT")
        if walls is not None:
            walls[step].append((time.perf_counter() - began) * 1000)
        cost[step] += on_cpu_ns(pid) - before
        names = [d.name for d in cur.description or []]
        return [dict(zip(names, row, strict=True)) for row in rows]

    starts = [dict(START, queue=queue) for _ in range(batch)]
    started = call("start_workflows", "SELECT * FROM harvest.start_workflows(%s)", (Jsonb(starts),))
    claimed = call(
        "claim_tasks", "SELECT * FROM harvest.claim_tasks(%s, %s, %s, %s)", (worker, [queue], batch, 30.0)
    )
    if len(claimed) != batch:
        raise SystemExit(f"claimed {len(claimed)} of {batch}")
    tasks = claimed
    command = noop_activity(queue)
    decided = call(
        "complete_workflow_tasks",
        "SELECT * FROM harvest.complete_workflow_tasks(%s, %s, %s, %s, %s::jsonb[], %s::integer[], 50000, 52428800, NULL)",
        (
            worker,
            [t["task_id"] for t in tasks],
            [t["fencing_token"] for t in tasks],
            [t["new_events_after"] + len(t["new_events"]) for t in tasks],
            [Jsonb([command]) for _ in tasks],
            [1 for _ in tasks],
        ),
    )
    handed = [row["handed"][0] for row in decided]
    decisions = [
        Jsonb(
            {
                "after": row["last_event_id"],
                "result_text": "1",
                "hand_off_slots": 1,
                "commands": [{"type": "complete_workflow", "result": 1}],
            }
        )
        for row in decided
    ]
    closed = call(
        "complete_activities",
        "SELECT * FROM harvest.complete_activities(%s, %s, %s, %s::jsonb[], true, 30, %s::jsonb[], 50000, 52428800)",
        (
            worker,
            [h["task_id"] for h in handed],
            [h["fencing_token"] for h in handed],
            [Jsonb(1) for _ in handed],
            decisions,
        ),
    )
    if sum(1 for row in closed if row["decided"] is not None) != batch:
        raise SystemExit(f"closed {closed}")
    waiter = uuid.uuid4()
    for row in started:
        call(
            "wait_for_result", "SELECT * FROM harvest.wait_for_result(%s, %s)", (row["execution_id"], waiter)
        )


SIGNAL_STEPS = ("signal_workflow", "claim_tasks", "complete_workflow_tasks")


def signal_round(
    conn: psycopg.Connection, queue: str, worker: str, walls: dict[str, list[float]], merged: bool = False
) -> None:
    """One run through the signal row's path: started, its first task decided with no command
    (it waits for a signal; not timed), then the three timed calls from the signal to the
    activity handed, then the activity's result closing the run (not timed). ``merged`` as in one_round."""

    def call(step: str | None, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        began = time.perf_counter()
        if merged and sql == claim:
            conn.execute("BEGIN")
        cur = conn.execute(sql, params, prepare=True)
        rows = cur.fetchall()
        if merged and sql == decide:
            conn.execute("COMMIT")
        if step is not None:
            walls[step].append((time.perf_counter() - began) * 1000)
        names = [d.name for d in cur.description or []]
        return [dict(zip(names, row, strict=True)) for row in rows]

    claim = "SELECT * FROM harvest.claim_tasks(%s, %s, 1, 30.0)"
    decide = (
        "SELECT * FROM harvest.complete_workflow_tasks(%s, %s, %s, %s, %s::jsonb[], %s::integer[],"
        " 50000, 52428800, NULL)"
    )

    def decided(step: str | None, commands: list[dict[str, Any]], slots: int) -> dict[str, Any]:
        (task,) = call(step and "claim_tasks", claim, (worker, [queue]))
        (row,) = call(
            step and "complete_workflow_tasks",
            decide,
            (
                worker,
                [task["task_id"]],
                [task["fencing_token"]],
                [task["new_events_after"] + len(task["new_events"])],
                [Jsonb(commands)],
                [slots],
            ),
        )
        if row["outcome"] != "completed" or (slots and not row["handed"]):
            raise SystemExit(f"decision: {row}")
        return row

    (started,) = call(None, "SELECT * FROM harvest.start_workflows(%s)", (Jsonb([dict(START, queue=queue)]),))
    decided(None, [], 0)  # the run waits for its signal
    call(
        "signal_workflow",
        "SELECT harvest.signal_workflow(%s, 'ping', %s)",
        (started["execution_id"], Jsonb(1)),
    )
    command = noop_activity(queue)
    row = decided("signal", [command], 1)
    handed = row["handed"][0]
    decision = {
        "after": row["last_event_id"],
        "result_text": "1",
        "hand_off_slots": 1,
        "commands": [{"type": "complete_workflow", "result": 1}],
    }
    call(
        None,
        "SELECT * FROM harvest.complete_activities(%s, %s, %s, %s::jsonb[], true, 30, %s::jsonb[], 50000, 52428800)",
        (worker, [handed["task_id"]], [handed["fencing_token"]], [Jsonb(1)], [Jsonb(decision)]),
    )


def signal_calls(
    conn: psycopg.Connection, queue: str, worker: str, runs: int, warmup: int, merged: bool = False
) -> dict[str, Any]:
    """The signal row's three calls back to back: per call its wall p50 (ms), and their sum."""
    walls: dict[str, list[float]] = {step: [] for step in SIGNAL_STEPS}
    for _ in range(warmup):
        signal_round(conn, queue, worker, {step: [] for step in SIGNAL_STEPS}, merged)
    for _ in range(runs):
        signal_round(conn, queue, worker, walls, merged)
    row = {step: {"wall_ms_p50": round(statistics.median(walls[step]), 3)} for step in SIGNAL_STEPS}
    return {
        "runs": runs,
        "merged_claim": merged,
        **row,
        "wall_ms_sum": round(sum(r["wall_ms_p50"] for r in row.values()), 3),
    }


def prepare(conn: psycopg.Connection, registrations: int = 0) -> tuple[int, str, str]:
    """A worker and a queue of this run's own: (backend pid, queue, worker id). With
    ``registrations``, first that many other (queue, workflow) registrations and as many
    workflows declared without flow control, as the workers of a larger deployment leave
    them (ten queues), analysed."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    tag = uuid.uuid4().hex[:8]
    queue, worker = f"call-cost-{tag}", f"call-cost-{tag}"
    if registrations:
        names = [f"other-{tag}-{i}" for i in range(max(1, registrations // 10))]
        conn.execute(
            "SELECT harvest.register_workflows(%s, %s)", ([f"other-{tag}-q{i}" for i in range(10)], names)
        )
        conn.execute(
            "SELECT harvest.declare_flow_policies(%s)", (Jsonb({"workflows": {name: {} for name in names}}),)
        )
        conn.execute("ANALYZE harvest.registered_workflows")
        conn.execute("ANALYZE harvest.flow_policies")
    conn.execute("SELECT harvest.register_worker(%s, %s, 'bench', %s, 100, '{}')", (worker, [queue], pid))
    # What a worker of an App with one_step and no flow control declares at start-up.
    conn.execute("SELECT harvest.register_workflows(%s, %s)", ([queue], ["one_step"]))
    conn.execute(
        """SELECT harvest.declare_flow_policies('{"workflows": {"one_step": {}}, "activities": {}}')"""
    )
    return pid, queue, worker


def by_gap(
    conn: psycopg.Connection, pid: int, queue: str, worker: str, runs: int, gaps: str, merged: bool = False
) -> dict[str, Any]:
    """One run per round, the gaps in turn ten rounds each: per gap and step, the call's wall
    p50 and its backend's CPU per call (ms), and the five calls' wall p50s summed."""
    pauses = [float(g) for g in gaps.split(",")]
    walls: dict[float, dict[str, list[float]]] = {g: {step: [] for step in STEPS} for g in pauses}
    cost: dict[float, dict[str, int]] = {g: dict.fromkeys(STEPS, 0) for g in pauses}
    blocks = max(1, runs // 10)
    for _ in range(blocks):
        for g in pauses:
            for _ in range(10):
                one_round(conn, pid, queue, worker, 1, cost[g], g, walls[g], merged)
    out: dict[str, Any] = {"runs_per_gap": blocks * 10, "merged_claim": merged}
    for g in pauses:
        row = {
            step: {
                "wall_ms_p50": round(statistics.median(walls[g][step]), 3),
                "cpu_ms": round(cost[g][step] / (blocks * 10) / 1e6, 3),
            }
            for step in STEPS
        }
        out[f"gap_{g * 1000:g}ms"] = {
            **row,
            "wall_ms_sum": round(sum(r["wall_ms_p50"] for r in row.values()), 3),
            "cpu_ms_sum": round(sum(r["cpu_ms"] for r in row.values()), 3),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=20, help="runs first, not counted")
    parser.add_argument("--statements", action="store_true", help="pg_stat_statements (track = all) per call")
    parser.add_argument(
        "--registrations",
        type=int,
        default=0,
        help="other (queue, workflow) registrations first (see prepare)",
    )
    parser.add_argument(
        "--gaps",
        help="comma-separated seconds idle before each call, taken in turn (wall and CPU per gap)",
    )
    parser.add_argument(
        "--signal-calls",
        action="store_true",
        help="with --gaps: also the signal round trip's three calls back to back (signal_calls)",
    )
    parser.add_argument(
        "--merged-claim",
        action="store_true",
        help="with --gaps: the claim and the decision in one transaction, as a woken idle worker sends them",
    )
    args = parser.parse_args()
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        pid, queue, worker = prepare(conn, args.registrations)
        warm = dict.fromkeys(STEPS, 0)
        for _ in range(max(1, args.warmup // args.batch)):
            one_round(conn, pid, queue, worker, args.batch, warm)
        if args.gaps:
            out = by_gap(conn, pid, queue, worker, args.runs, args.gaps, args.merged_claim)
            if args.signal_calls:
                out["signal_calls"] = signal_calls(
                    conn, queue, worker, args.runs, args.warmup, args.merged_claim
                )
            print(json.dumps(out))
            return
        if args.statements:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SET pg_stat_statements.track = 'all'")
            conn.execute("SET pg_stat_statements.track_planning = on")
            conn.execute("SELECT pg_stat_statements_reset()")
        cost = dict.fromkeys(STEPS, 0)
        rounds = max(1, args.runs // args.batch)
        for _ in range(rounds):
            one_round(conn, pid, queue, worker, args.batch, cost)
        runs = rounds * args.batch
        out: dict[str, Any] = {"batch": args.batch, "runs": runs}
        for step in STEPS:
            calls = rounds * (args.batch if step == "wait_for_result" else 1)
            out[step] = {
                "us_per_call": round(cost[step] / calls / 1000, 1),
                "us_per_run": round(cost[step] / runs / 1000, 1),
            }
        out["total_us_per_run"] = round(sum(cost.values()) / runs / 1000, 1)
        if args.statements:
            nested = conn.execute(
                "SELECT sum(calls), sum(total_exec_time) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM"
                " pg_database WHERE datname = current_database()) AND NOT toplevel"
            ).fetchone()
            out["nested_statements_per_run"] = round(float(nested[0] or 0) / runs, 1)  # type: ignore[index]
        print(json.dumps(out))


if __name__ == "__main__":
    main()
