"""Harvest's SQL path on its own: the canonical workflow driven through Harvest's
SQL functions by backends that run nothing else.

Each client is one connection running a procedure (``bench/sql_path.sql``,
installed in a ``bench`` schema of the throwaway database, never in ``harvest``)
that takes a batch of
workflows at a time through the calls the worker and the client make on the
fast path, one transaction each, as their group commits do:

    start_workflows -> claim_tasks -> complete_workflow_tasks (schedules step 1,
    handed to this worker) -> complete_activities x3 (each result with the
    decision made on it: steps 2, 3, then complete_workflow)

The commands are the ones the Python runtime issues for ``three_steps`` of
canonical.py (same activity options; every run gets input 0, so it returns 6),
and its histories replay against that workflow
(tests/integration/test_sql_path_bench.py). There is no Python and no network
round trip between the statements: this is what the server can do with Harvest's
statements alone, the ceiling the Python worker works against. Each client has
its own queue and worker id, so clients never contend for a row.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from canonical import noop, three_steps
from common import CLAIM_BATCH, emit, server_cpu_seconds

from harvest import App

PROCEDURE = (Path(__file__).resolve().parent / "sql_path.sql").read_text()


def run_clients(dsn: str, clients: int, per_client: int, batch: int, options: dict) -> dict:
    errors: list[BaseException] = []
    done_at: dict[str, float] = {}
    barrier = threading.Barrier(clients + 1)
    # Each client keeps its connection (its backend) until the server's CPU is read again: a
    # backend that has exited but is not yet reaped is in neither the postmaster's children nor
    # its reaped children's times, so at one client the reading could miss nearly all the work.
    measured = threading.Event()

    def client(tag: str) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                barrier.wait()
                conn.execute(
                    "CALL bench.sql_path(%s, %s, %s, %s)", (per_client, batch, tag, json.dumps(options))
                )
                done_at[tag] = time.perf_counter()
                measured.wait(timeout=600)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=client, args=(f"{clients}-{k}",)) for k in range(clients)]
    for thread in threads:
        thread.start()
    server0 = server_cpu_seconds(dsn)
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass  # a client failed before the start: its error is raised below
    started = time.perf_counter()
    while len(done_at) < clients and not errors and any(t.is_alive() for t in threads):
        time.sleep(0.001)
    elapsed = max(done_at.values(), default=time.perf_counter()) - started
    server_s = server_cpu_seconds(dsn) - server0
    measured.set()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        done = conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE status = 'COMPLETED' AND queue LIKE %s",
            (f"sql-path-{clients}-%",),
        ).fetchone()[0]
    if done != clients * per_client:
        raise RuntimeError(f"{done} of {clients * per_client} workflows completed")
    return {
        "clients": clients,
        "batch": batch,
        "workflows": done,
        "seconds": round(elapsed, 3),
        "wf_per_s": round(done / elapsed, 1),
        # The whole server's CPU (every backend, the postmaster's helpers) per workflow: beside
        # the canonical drain's figure it says how much more server work the worker causes.
        "server_cpu_ms_per_wf": round(server_s * 1000 / done, 3),
    }


def statement_costs(dsn: str, n: int, batch: int, options: dict, limit: int = 15) -> dict:
    """Where the SQL path's server time goes: one more, untimed run of n workflows from one
    client with ``pg_stat_statements.track = all``, so the statements inside Harvest's
    functions are counted (nested: a function's time includes the statements it runs)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT pg_stat_statements_reset()")
        except psycopg.Error as exc:
            return {"available": False, "reason": str(exc).splitlines()[0]}
        conn.execute("SET pg_stat_statements.track = 'all'")
        conn.execute("CALL bench.sql_path(%s, %s, 'statements', %s)", (n, batch, json.dumps(options)))
        rows = conn.execute(
            "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 110), toplevel, calls, total_exec_time"
            " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
            " WHERE datname = current_database()) AND NOT toplevel"
            " ORDER BY total_exec_time DESC LIMIT %s",
            (limit,),
        ).fetchall()
        # Every statement the functions run pays executor start-up and a plan check whatever
        # its rows (docs/performance.md "Where the SQL path's time goes"): count them.
        nested, writes = conn.execute(
            "SELECT coalesce(sum(calls), 0),"
            " coalesce(sum(calls) FILTER (WHERE query ~* '^\\s*(INSERT|UPDATE|DELETE)'), 0)"
            " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
            " WHERE datname = current_database()) AND NOT toplevel"
        ).fetchone()
    return {
        "available": True,
        "workflows": n,
        # sum() of a bigint is numeric: a Decimal, which the JSON output would write as a string.
        "statements_per_workflow": round(float(nested) / n, 1),
        "writes_per_workflow": round(float(writes) / n, 1),
        "top": [
            {"query": q, "calls_per_workflow": round(c / n, 2), "us_per_workflow": round(t * 1000 / n, 1)}
            for q, _top, c, t in rows
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--clients", default="1,2,4")
    parser.add_argument(
        "--batch",
        type=int,
        default=CLAIM_BATCH,
        help="workflows a client takes through each transaction (the worker's claim batch)",
    )
    parser.add_argument("--n", type=int, default=1000, help="workflows per client count, split among clients")
    parser.add_argument(
        "--statements", type=int, default=0, help="then N more, untimed, for per-statement costs"
    )
    args = parser.parse_args()
    options = App(workflows=[three_steps], activities=[noop]).activities["noop"].options_json()
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(PROCEDURE)
    runs = []
    for clients in (int(c) for c in args.clients.split(",")):
        runs.append(run_clients(args.dsn, clients, max(1, args.n // clients), args.batch, options))
        print(f"sql path: {runs[-1]}", file=sys.stderr, flush=True)
    emit(
        {
            "system": "harvest-sql",
            "mode": "sql_path",
            "runs": runs,
            "best_wf_per_s": max(r["wf_per_s"] for r in runs),
            "transactions_per_batch": 6,
            "statements": statement_costs(args.dsn, args.statements, args.batch, options)
            if args.statements
            else None,
            "measured_at": datetime.now(UTC).isoformat(),
        }
    )


if __name__ == "__main__":
    main()
