"""PgQueuer draining N no-op jobs: the task-layer peer of Harvest's activity tasks.

N jobs are enqueued in one batch, then a ``QueueManager`` (``mode=drain``) with a
no-op entrypoint runs until the queue is empty. Jobs per second = N / the time
from the manager's start to its exit. PgQueuer runs on psycopg (its
``PsycopgDriver``, one async connection), the driver Harvest uses too.
``--batch-size`` and ``--concurrency`` (``max_concurrent_tasks``) default to the settings
every system gets (bench/common.py); bench/run.py also sweeps them to find PgQueuer's best.
It runs on asyncio's loop: PgQueuer's CLI (``pgq run``) takes uvloop when it is installed, but
uvloop measured no faster for this drain (docs/performance.md, "Cheaper Python, sixth cut").
Prints one JSON object (see bench/common.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from datetime import UTC, datetime, timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import contextlib

import psycopg
from common import CONCURRENCY, emit, server_cpu_seconds, settle_stats, xact_commits
from pgqueuer import Job, PsycopgDriver, Queries, QueueManager
from pgqueuer.domain.types import QueueExecutionMode

BATCH = CONCURRENCY // 2  # PgQueuer requires max_concurrent_tasks >= 2 * batch_size


async def bench(dsn: str, n: int, batch: int = BATCH, concurrency: int = CONCURRENCY) -> dict:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    queries = Queries(PsycopgDriver(conn))
    with contextlib.suppress(psycopg.errors.DuplicateObject):
        await queries.install()
    await conn.execute("DELETE FROM pgqueuer")
    chunk = 1000
    for i in range(0, n, chunk):
        size = min(chunk, n - i)
        await queries.enqueue(["noop"] * size, [None] * size, [0] * size)

    done = 0
    last_body = 0.0

    qm = QueueManager(queries)

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        nonlocal done, last_body
        done += 1
        last_body = time.monotonic()

    settle_stats()
    commits_before = xact_commits(dsn)
    drained_at = 0.0

    async def watch() -> None:
        # Done = every job gone from the queue table (its completion is durable), as Harvest's
        # figure counts only committed ActivityCompleted events.
        nonlocal drained_at
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as side:
            while True:
                left = (await (await side.execute("SELECT count(*) FROM pgqueuer")).fetchone())[0]
                if left == 0:
                    drained_at = time.monotonic()
                    qm.shutdown.set()
                    return
                await asyncio.sleep(0.02)

    cpu0, server0 = time.process_time(), server_cpu_seconds(dsn)
    t0 = time.monotonic()
    watcher = asyncio.create_task(watch())
    await qm.run(
        batch_size=batch,
        max_concurrent_tasks=concurrency,
        mode=QueueExecutionMode.drain,
        dequeue_timeout=timedelta(seconds=0.5),
    )
    await watcher
    elapsed = drained_at - t0
    cpu, server_cpu = time.process_time() - cpu0, server_cpu_seconds(dsn) - server0
    await conn.close()
    settle_stats()
    commits = xact_commits(dsn) - commits_before
    return {
        "system": "pgqueuer",
        "mode": "tasks",
        "n": n,
        "completed": done,
        "elapsed_s": round(elapsed, 3),
        "throughput": round(done / elapsed, 1),
        "last_job_body_s": round(last_body - t0, 3),
        "commits": commits,
        "commits_per_job": round(commits / n, 3),
        # The drain only (the jobs are enqueued before it): this process and the server, per job.
        "cpu": {
            "server_s": round(server_cpu, 3),
            "client_s": round(cpu, 3),
            "server_ms_per_job": round(server_cpu * 1000 / n, 4),
            "worker_ms_per_job": round(cpu * 1000 / n, 4),
        },
        "settings": {
            "batch_size": batch,
            "max_concurrent_tasks": concurrency,
            "mode": "drain",
            "driver": "PsycopgDriver",
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=BATCH)
    parser.add_argument(
        "--concurrency", type=int, default=CONCURRENCY, help="max_concurrent_tasks (>= 2 x batch size)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("pgqueuer").setLevel(logging.ERROR)
    result = asyncio.run(bench(args.dsn, args.n, args.batch_size, args.concurrency))
    result["measured_at"] = datetime.now(UTC).isoformat()
    emit(result)


if __name__ == "__main__":
    main()
