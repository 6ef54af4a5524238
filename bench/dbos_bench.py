"""DBOS Transact running the canonical workload: three no-op steps in sequence.

Modes (``--mode``):

* ``direct``: ``DBOS.start_workflow(three_steps, i)`` from 8 starter threads; DBOS
  runs each workflow at once in its executor thread pool (50 threads).
* ``queue``: ``queue.enqueue(three_steps, i)`` from 8 starter threads onto a queue
  with ``worker_concurrency=50``; DBOS's queue thread dequeues them.

Throughput and start-to-result latency come from DBOS's own ``workflow_status``
table (``created_at`` / ``updated_at``, epoch milliseconds), the same way
Harvest's come from ``harvest.executions``. Commits per workflow from
``pg_stat_database``. Prints one JSON object (see bench/common.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from common import CONCURRENCY, emit, latency_summary, server_cpu_seconds, settle_stats, xact_commits
from dbos import DBOS, DBOSConfig

STARTERS = 8
QUEUE_POLL = 0.05  # seconds; DBOS's default is 1.0, far too slow for a throughput test
SYS_POOL = CONCURRENCY + 4  # the same pool size Harvest's worker opens (concurrency + 4)


@DBOS.step()
def noop(step: int) -> int:
    return step


@DBOS.workflow()
def three_steps(n: int) -> int:
    a = noop(1)
    b = noop(2)
    c = noop(3)
    return a + b + c + n


def _wait_done(dsn: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            done = conn.execute(
                "SELECT count(*) FROM dbos.workflow_status WHERE status IN ('SUCCESS', 'ERROR')"
            ).fetchone()[0]
            if done >= n:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"dbos: only {done} of {n} runs finished in {timeout:.0f}s")
            time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--mode", choices=["direct", "queue"], required=True)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    config: DBOSConfig = {
        "name": "harvest-bench",
        "system_database_url": args.dsn,
        "max_executor_threads": CONCURRENCY,
        "sys_db_pool_size": SYS_POOL,
        "log_level": "ERROR",
    }
    DBOS(config=config)
    DBOS.launch()
    queue = None
    if args.mode == "queue":
        queue = DBOS.register_queue("bench", worker_concurrency=CONCURRENCY, polling_interval_sec=QUEUE_POLL)
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM dbos.workflow_status")
    settle_stats()
    commits_before = xact_commits(args.dsn)
    cpu0, server0 = time.process_time(), server_cpu_seconds(args.dsn)

    def start(i: int) -> None:
        if queue is None:
            DBOS.start_workflow(three_steps, i)
        else:
            queue.enqueue(three_steps, i)

    wall0 = time.monotonic()
    with ThreadPoolExecutor(STARTERS) as pool:
        list(pool.map(start, range(args.n)))
    start_wall = time.monotonic() - wall0
    _wait_done(args.dsn, args.n, args.timeout)
    cpu, server_cpu = time.process_time() - cpu0, server_cpu_seconds(args.dsn) - server0
    DBOS.destroy()
    settle_stats()
    commits = xact_commits(args.dsn) - commits_before

    with psycopg.connect(args.dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT created_at, updated_at, status FROM dbos.workflow_status WHERE name LIKE '%%three_steps'"
        ).fetchall()
    completed = [r for r in rows if r[2] == "SUCCESS"]
    first = min(r[0] for r in rows)
    last = max(r[1] for r in completed)
    elapsed = (last - first) / 1000.0
    emit(
        {
            "system": "dbos",
            "mode": args.mode,
            "n": args.n,
            "completed": len(completed),
            "elapsed_s": round(elapsed, 3),
            "throughput": round(len(completed) / elapsed, 1),
            "latency": latency_summary([(r[1] - r[0]) / 1000.0 for r in completed]),
            "start_phase_s": round(start_wall, 3),
            "commits": commits,
            "commits_per_workflow": round(commits / args.n, 2),
            "cpu": {"server_s": round(server_cpu, 3), "client_s": round(cpu, 3)},
            "settings": {
                "max_executor_threads": CONCURRENCY,
                "sys_db_pool_size": SYS_POOL,
                "starters": STARTERS,
                **(
                    {"queue_worker_concurrency": CONCURRENCY, "queue_polling_interval_sec": QUEUE_POLL}
                    if queue is not None
                    else {}
                ),
            },
            "measured_at": datetime.now(UTC).isoformat(),
        }
    )


if __name__ == "__main__":
    main()
