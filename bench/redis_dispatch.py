"""Redis dispatch vs LISTEN/NOTIFY plus hand-off, with 1 and 8 worker processes (docs/redis-dispatch.md).

``python bench/redis_dispatch.py [--pairs 6] [--workflows 40] [--fan 25] [--procs 1,8] [--rate R]``

One embedded PostgreSQL and one redis-server (Debian's, ``make redis``) on free ports. Each
round runs the same workload twice on a fresh clone of a migrated template, once per mode, in
alternating order (pg then redis, redis then pg, ...), so drift on a shared machine hits
both modes alike:

* ``pg``: the default: the Postgres claim woken by LISTEN/NOTIFY, with hand-off;
* ``redis``: the same workers with ``redis_url`` set: decisions and activity results publish
  the tasks they leave claimable, and each worker also claims by reference.

The workload: W workflows started at once (or at a steady ``--rate`` per second, for latency
under a moderate load), each fanning out F no-op activities (the deciding worker takes what
its free slots allow by hand-off; the rest wait in the queue, where the two modes differ). Per run: activities per second over the whole run (W x F / (last
completed_at - first created_at) of the executions) and start-to-result latency per workflow
(p50, p99). Each worker process prints its Redis counters at exit (references read, claimed
by reference, skipped because another path took the row first).

Prints one line per run, then a JSON summary (medians per mode and process count, and the
ratio redis / pg of each pair's throughput).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from common import percentile

from harvest import App, AsyncClient, Worker, activity, workflow

HERE = Path(__file__).resolve()
CONCURRENCY = 10  # per worker process


@activity
async def nop(ctx, i: int) -> int:
    return i


@workflow
async def fan(ctx, n: int) -> int:
    return sum(await asyncio.gather(*(ctx.execute_activity(nop, i) for i in range(n))))


app = App(workflows=[fan], activities=[nop])


# -- a worker process -------------------------------------------------------------------------------
def run_worker(dsn: str, redis_url: str | None) -> None:
    worker = Worker(
        app, dsn, concurrency=CONCURRENCY, claim_batch=CONCURRENCY, poll_interval=2.0, redis_url=redis_url
    )
    loop = asyncio.new_event_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.request_stop)
    loop.run_until_complete(worker.run())
    dispatch = worker.redis
    stats = {"dispatched": worker.lanes[0].dispatched, "handed": worker.handed_tasks}
    if dispatch is not None:
        stats |= {
            "published": dispatch.published,
            "read": dispatch.read,
            "claimed": dispatch.claimed,
            "skipped": dispatch.skipped,
        }
    print(json.dumps(stats), flush=True)


# -- the driver -----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(directory: str) -> tuple[subprocess.Popen, str]:
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server is not installed: make redis")
    port = free_port()
    proc = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            directory,
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def flush_redis(url: str) -> None:
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"FLUSHALL\r\n")
        s.recv(16)


async def drive(dsn: str, workflows: int, width: int, rate: float | None = None) -> dict[str, Any]:
    """Start the workflows at once (``rate`` None: a burst, throughput) or ``rate`` per second
    (a steady load: latency), then wait for every result."""
    client = await AsyncClient.connect(dsn)
    try:
        if rate is None:
            handles = await asyncio.gather(
                *(client.start_workflow(fan, width, workflow_id=f"f-{i}") for i in range(workflows))
            )
        else:
            handles = []
            began = time.monotonic()
            for i in range(workflows):
                await asyncio.sleep(max(0.0, began + i / rate - time.monotonic()))
                handles.append(await client.start_workflow(fan, width, workflow_id=f"f-{i}"))
        for h in handles:
            await h.result(timeout=600)
    finally:
        await client.close()
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM completed_at - created_at), created_at, completed_at "
            "FROM harvest.executions WHERE status = 'COMPLETED'"
        ).fetchall()
    latencies = [float(r[0]) for r in rows]
    span = (max(r[2] for r in rows) - min(r[1] for r in rows)).total_seconds()
    return {
        "activities_per_s": round(workflows * width / span, 1),
        "p50_ms": round(1000 * (percentile(latencies, 50) or 0), 1),
        "p99_ms": round(1000 * (percentile(latencies, 99) or 0), 1),
    }


def one_run(
    admin: str,
    template: str,
    procs: int,
    redis_url: str | None,
    workflows: int,
    width: int,
    rate: float | None = None,
) -> dict:
    name = f"rd_{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    dsn = admin.rsplit("/", 1)[0] + "/" + name
    if redis_url:
        flush_redis(redis_url)
    workers = [
        subprocess.Popen(
            [sys.executable, str(HERE), "--worker", dsn, *(["--redis-url", redis_url] if redis_url else [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(procs)
    ]
    try:
        deadline = time.monotonic() + 60
        while True:  # every worker registered (and, with Redis, connected before that)
            with psycopg.connect(dsn) as conn:
                up = conn.execute("SELECT count(*) FROM harvest.workers WHERE status = 'active'").fetchone()[
                    0
                ]
            if up == procs:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not start")
            time.sleep(0.05)
        result = asyncio.run(drive(dsn, workflows, width, rate))
    finally:
        stats = []
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            out, _ = w.communicate(timeout=60)
            lines = [x for x in out.splitlines() if x.startswith("{")]
            if lines:
                stats.append(json.loads(lines[-1]))
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    for key in ("claimed", "read", "skipped", "published", "handed", "dispatched"):
        if any(key in s for s in stats):
            result[key] = sum(s.get(key, 0) for s in stats)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", metavar="DSN", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--workflows", type=int, default=40)
    parser.add_argument("--fan", type=int, default=25)
    parser.add_argument("--procs", default="1,8")
    parser.add_argument(
        "--rate", type=float, help="start the workflows at this steady rate per second instead of at once"
    )
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker, args.redis_url)
        return

    from harvest.db.embedded import EmbeddedPostgres
    from harvest.db.migrate import Migrator

    tmp = tempfile.mkdtemp(prefix="harvest-redis-bench-")
    server = EmbeddedPostgres()
    server.start()
    redis_proc, redis_url = start_redis(tmp)
    runs: list[dict[str, Any]] = []
    try:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute('CREATE DATABASE "rd_template"')
        Migrator(server.dsn_for("rd_template")).run()
        for pair in range(args.pairs):
            for procs in (int(p) for p in args.procs.split(",")):
                order = ("pg", "redis") if pair % 2 == 0 else ("redis", "pg")
                for mode in order:
                    url = redis_url if mode == "redis" else None
                    row = one_run(server.dsn, "rd_template", procs, url, args.workflows, args.fan, args.rate)
                    row |= {"pair": pair, "procs": procs, "mode": mode}
                    runs.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        redis_proc.kill()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    summary: dict[str, Any] = {
        "workload": f"{args.workflows} workflows x {args.fan} no-op activities"
        + (f", started at {args.rate}/s" if args.rate else ", started at once"),
        "concurrency_per_process": CONCURRENCY,
        "pairs": args.pairs,
        "cpus": os.cpu_count(),
        "rows": {},
    }
    for procs in sorted({r["procs"] for r in runs}):
        for mode in ("pg", "redis"):
            rs = [r for r in runs if r["procs"] == procs and r["mode"] == mode]
            entry = {k: statistics.median(r[k] for r in rs) for k in ("activities_per_s", "p50_ms", "p99_ms")}
            if mode == "redis":
                entry["claimed_by_reference"] = sum(r.get("claimed", 0) for r in rs)
                entry["references_read"] = sum(r.get("read", 0) for r in rs)
            summary["rows"][f"{procs}p_{mode}"] = entry
        ratios = []
        for pair in range(args.pairs):
            by = {r["mode"]: r for r in runs if r["procs"] == procs and r["pair"] == pair}
            ratios.append(by["redis"]["activities_per_s"] / by["pg"]["activities_per_s"])
        summary["rows"][f"{procs}p_ratio"] = {
            "median_redis_over_pg": round(statistics.median(ratios), 3),
            "min": round(min(ratios), 3),
            "max": round(max(ratios), 3),
        }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
