"""Owner mode, off against on, in one run (docs/sharding.md "Owner mode").

One embedded PostgreSQL (durable settings), a migrated template, then for each round
and workload both configurations in alternating order, each on a fresh clone,
drained by two in-process workers. The workloads: ``canonical`` (``three_steps``:
three no-op activities in sequence; every step after the first is decided ahead or
handed on, so no workflow task is claimed after the first) and ``timers`` (the same
with a 10 ms timer between the steps: a fired timer queues a workflow task that any
worker may claim, which is where the sticky cache hits or misses). Per
configuration: throughput, the sticky cache's hits and misses (``Worker.cache``,
counted when a workflow task runs), the decisions committed ahead and the tasks
handed on, the decisions refused as a stale owner's, and who decided. Then the cost
of the switch read the off path pays per claim and per commit
(``harvest._owner_mode_on()``, timed in a PL/pgSQL loop against an empty loop).

    .venv/bin/python bench/owner_mode.py [--n 400] [--rounds 3] [--workers 2]

Prints progress, then one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from canonical import noop, three_steps

from harvest import App, AsyncClient, Worker, workflow
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator


@workflow
async def timer_steps(ctx, n: int) -> int:
    a = await ctx.execute_activity(noop, 1)
    await ctx.sleep(0.01)
    b = await ctx.execute_activity(noop, 2)
    await ctx.sleep(0.01)
    c = await ctx.execute_activity(noop, 3)
    return a + b + c + n


APP = App(workflows=[three_steps, timer_steps], activities=[noop])
WORKLOADS = {"canonical": three_steps, "timers": timer_steps}
SETTINGS = {"fsync": "on", "synchronous_commit": "on", "max_connections": "200", "shared_buffers": "256MB"}
STARTERS = 8


async def drain(dsn: str, n: int, workers: int, concurrency: int, wf=three_steps) -> dict:
    running = [
        Worker(
            APP,
            dsn,
            worker_id=f"bench-{i}",
            concurrency=concurrency,
            claim_batch=concurrency,
            poll_interval=2.0,
            scan_interval=1.0,
            cache_size=10_000,
        )
        for i in range(workers)
    ]
    tasks = [asyncio.create_task(w.run()) for w in running]
    while any(w.sql is None for w in running):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    client = await AsyncClient.connect(dsn, pool_size=STARTERS, check_schema=False)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def starter() -> None:
        while not queue.empty():
            await client.start_workflow(wf, queue.get_nowait())

    try:
        await asyncio.gather(*(starter() for _ in range(STARTERS)))
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 300
            while True:
                cur = await conn.execute("SELECT count(*) FROM harvest.executions WHERE status <> 'RUNNING'")
                if (await cur.fetchone())[0] >= n:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("runs did not finish in 300 s")
                await asyncio.sleep(0.05)
    finally:
        await client.close()
        for w in running:
            w.request_stop()
        await asyncio.gather(*tasks)
    with psycopg.connect(dsn, autocommit=True) as conn:
        first, last, done = conn.execute(
            "SELECT min(created_at), max(completed_at), count(*) FILTER (WHERE status = 'COMPLETED') "
            "FROM harvest.executions"
        ).fetchone()
        deciders = dict(
            conn.execute(
                "SELECT event_data->>'worker_id', count(*) FROM harvest.events "
                "WHERE event_type = 'WorkflowTaskCompleted' GROUP BY 1"
            ).fetchall()
        )
    hits = sum(w.cache.hits for w in running)
    misses = sum(w.cache.misses for w in running)
    elapsed = (last - first).total_seconds()
    return {
        "completed": done,
        "elapsed_s": round(elapsed, 3),
        "throughput": round(done / elapsed, 1),
        "cache": {"hits": hits, "misses": misses, "hit_rate": round(hits / max(1, hits + misses), 3)},
        "decided_ahead": sum(w.decided_ahead for w in running),
        "handed_tasks": sum(w.handed_tasks for w in running),
        "refused_as_stale_owner": sum(w.owners.refused for w in running),
        "decisions_by_worker": deciders,
    }


SWITCH_COST = """
CREATE FUNCTION pg_temp.loop_switch(p_n integer) RETURNS double precision LANGUAGE plpgsql AS $$
DECLARE
    v boolean;
    t0 timestamptz := clock_timestamp();
BEGIN
    FOR i IN 1 .. p_n LOOP
        v := harvest._owner_mode_on();
    END LOOP;
    RETURN extract(EPOCH FROM clock_timestamp() - t0);
END $$;
CREATE FUNCTION pg_temp.loop_empty(p_n integer) RETURNS double precision LANGUAGE plpgsql AS $$
DECLARE
    v boolean;
    t0 timestamptz := clock_timestamp();
BEGIN
    FOR i IN 1 .. p_n LOOP
        v := i > 0;
    END LOOP;
    RETURN extract(EPOCH FROM clock_timestamp() - t0);
END $$;
"""


def switch_cost(dsn: str, n: int = 200_000) -> dict:
    """Microseconds per read of the switch, as claim_tasks and the commits read it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SWITCH_COST)
        per_call = []
        for _ in range(5):
            switch = conn.execute("SELECT pg_temp.loop_switch(%s)", (n,)).fetchone()[0]
            empty = conn.execute("SELECT pg_temp.loop_empty(%s)", (n,)).fetchone()[0]
            per_call.append((switch - empty) / n * 1e6)
    return {
        "us_per_read": round(statistics.median(per_call), 2),
        "samples_us": [round(x, 2) for x in per_call],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=25, help="per worker")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    server = EmbeddedPostgres(settings=SETTINGS)
    server.start()
    out: dict = {
        "n": args.n,
        "workers": args.workers,
        "concurrency_per_worker": args.concurrency,
        "rounds": [],
    }
    try:
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute("CREATE DATABASE om_template")
        Migrator(server.dsn_for("om_template")).run()
        counter = 0
        for r in range(args.rounds):
            order = ("off", "on") if r % 2 == 0 else ("on", "off")
            for workload, wf in WORKLOADS.items():
                row: dict = {"workload": workload}
                for mode in order:
                    counter += 1
                    name = f"om_{counter}"
                    with psycopg.connect(server.dsn, autocommit=True) as admin:
                        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE om_template')
                    dsn = server.dsn_for(name)
                    if mode == "on":
                        with psycopg.connect(dsn, autocommit=True) as conn:
                            conn.execute("SELECT harvest.set_owner_mode(true, 30, 'bench')")
                    row[mode] = asyncio.run(drain(dsn, args.n, args.workers, args.concurrency, wf))
                    print(
                        f"[owner-mode bench] round {r + 1} {workload} {mode}: {json.dumps(row[mode])}",
                        flush=True,
                    )
                    with psycopg.connect(server.dsn, autocommit=True) as admin:
                        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
                out["rounds"].append(row)
        for workload in WORKLOADS:
            rows = [r for r in out["rounds"] if r["workload"] == workload]
            out[workload] = {
                mode: {
                    "median_throughput": statistics.median(r[mode]["throughput"] for r in rows),
                    "median_hit_rate": statistics.median(r[mode]["cache"]["hit_rate"] for r in rows),
                }
                for mode in ("off", "on")
            }
        out["switch_read"] = switch_cost(server.dsn_for("om_template"))
    finally:
        server.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
