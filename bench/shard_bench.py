"""The canonical workflow on 1, 2 and 4 shards, each shard its own PostgreSQL server.

    python bench/shard_bench.py                 # standalone: starts the servers, prints the rows
    python bench/shard_bench.py --quick
    python bench/shard_bench.py --dsns 0=postgresql://...,1=... --n 1500   # one drain (run.py's child)

:func:`measure` (called by bench/run.py, or by ``main`` standalone) starts four
``EmbeddedPostgres`` servers, migrates a template on each with its shard id
(``Migrator.run(shard_id=N)``), and for each shard count gives every shard in use a fresh
clone and runs one drain in a subprocess: an ``AsyncClient`` over ``AsyncShardPools``
starts N canonical runs (8 starters, unpinned: rendezvous-hashed placement, one
``start_workflows`` batch per shard per flush) while one multi-shard ``Worker``
(``shards={n: url}``, every shard assigned, the same options as bench/harvest_bench.py)
drains them. Measured per drain:

* workflows/s: completed runs / (last ``completed_at`` - first ``created_at``) over all shards;
* each shard server's CPU over the drain (its postmaster and every backend, exited ones
  included: ``/proc/<pid>/stat`` of the server's process tree, read with psutil as
  bench/common.py does), divided by the runs placed on that shard;
* each server's idle rate (2 s with the worker up and no work) and the CPU net of it;
* each server's statements per run placed on it (``pg_stat_statements`` top-level calls);
* the bench process' CPU (``time.process_time()``: the worker and the starters), per run.

Each round also runs 4 shards with 50 slots and 8 starters *per shard* (``--scale``, 4x the
runs), so each shard sees the concurrency the single server did.

A separate, untimed drain (``--trace``) counts the cross-shard round trips with
bench/trips.py: every statement this process sends is recorded with the server it went to and
the run identifiers in its parameters (execution, workflow and task ids; each shard's task ids
restarted in a range of their own first), and a statement naming a run that lives on another
shard than that server is a cross-shard round trip. Statements that name no run (claims,
heartbeats, the scanner) are each shard's own polling, reported by function.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import psycopg
import report
import trips
from canonical import noop, three_steps
from common import emit, server_cpu_seconds
from harvest_bench import STARTERS, WORKER_OPTIONS, _worker_ended

from harvest import App, AsyncClient, Worker
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator
from harvest.shard import AsyncShardPools, ShardRouter
from harvest.worker.options import WorkerOptions

APP = App(workflows=[three_steps], activities=[noop])
SHARD_COUNTS = (1, 2, 4)
TEMPLATE = "harvest_shard_template"
# Four servers on one machine: a smaller buffer pool each than run.py's one server; the rest
# of run.py's settings (durability on, pg_stat_statements) are the same.
SERVER_OVERRIDES = {"shared_buffers": "128MB", "max_connections": "120"}

IDLE_SECS = 2.0  # each server's CPU with the worker up and nothing to do, before the drain


# -- the drain (the subprocess) ----------------------------------------------------------------
TRACE = trips.Trace()


async def _wait_done(dsns: dict[int, str], n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    conns = {s: await psycopg.AsyncConnection.connect(d, autocommit=True) for s, d in dsns.items()}
    TRACE.ignored.update(id(c) for c in conns.values())
    try:
        while True:
            done = 0
            for conn in conns.values():
                cur = await conn.execute("SELECT count(*) FROM harvest.executions WHERE status <> 'RUNNING'")
                done += (await cur.fetchone())[0]
            if done >= n:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"harvest: only {done} of {n} runs finished in {timeout:.0f}s")
            await asyncio.sleep(0.05)
    finally:
        for conn in conns.values():
            await conn.close()


async def _start_many(client: AsyncClient, n: int, starters: int) -> None:
    """n canonical runs, unpinned, from ``starters`` concurrent tasks (as harvest_bench.py)."""
    todo = iter(range(n))

    async def starter() -> None:
        for i in todo:
            await client.start_workflow(three_steps, i)

    await asyncio.gather(*(starter() for _ in range(starters)))


async def drain(dsns: dict[int, str], n: int, timeout: float, trace: bool, scale: bool = False) -> dict:
    """One drain; ``scale``: 50 slots and 8 starters per shard instead of for the whole process
    (each shard then sees the load one server does in the 1-shard drain)."""
    shards = sorted(dsns)
    router = ShardRouter(shards, shards, shards[0])
    per = len(shards) if scale else 1
    worker_options = {**WORKER_OPTIONS, "concurrency": WORKER_OPTIONS["concurrency"] * per}
    starters = STARTERS * per
    options = WorkerOptions(**worker_options, shard_assignments=tuple(shards))
    worker = Worker(APP, options=options, shards=dsns, router=router)
    task = asyncio.create_task(worker.run())
    task.add_done_callback(_worker_ended)
    while not all(lane.usable for lane in worker.lanes) and not task.done():
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # LISTEN is up on every shard
    if task.done():
        task.result()
    if trace:
        trips.separate_task_ids(dsns)
    pools = AsyncShardPools(router, dsns, max_size=STARTERS)
    try:
        client = await AsyncClient.connect(shards=pools, check_schema=False)
        # Open every shard's pool before the clock starts (each checks its identity once).
        for shard in shards:
            async with pools.api(shard) as sql:
                await sql.get_shard_id()
        # The fixed cost: every server's CPU (and this process') with the worker polling, the
        # scanner and heartbeats running on every shard, and no work.
        idle0, idle_cpu0 = {s: server_cpu_seconds(dsns[s]) for s in shards}, time.process_time()
        await asyncio.sleep(IDLE_SECS)
        idle = {s: (server_cpu_seconds(dsns[s]) - idle0[s]) / IDLE_SECS for s in shards}
        idle_cpu = (time.process_time() - idle_cpu0) / IDLE_SECS
        for shard in shards:
            _statements_reset(dsns[shard])
        cpu0, wall0 = time.process_time(), time.monotonic()
        server0 = {s: server_cpu_seconds(dsns[s]) for s in shards}
        TRACE.on = trace
        await _start_many(client, n, starters)
        await _wait_done(dsns, n, timeout)
        TRACE.on = False
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        server = {s: server_cpu_seconds(dsns[s]) - server0[s] for s in shards}
        calls = {s: _statement_calls(dsns[s]) for s in shards}
        await client.close()
    finally:
        await pools.close()
        worker.request_stop()
        await task

    runs: dict[int, list] = {}
    for shard in shards:
        with psycopg.connect(dsns[shard], autocommit=True) as conn:
            runs[shard] = conn.execute(
                "SELECT id::text, workflow_id, created_at, completed_at, status FROM harvest.executions"
            ).fetchall()
    every = [r for rows in runs.values() for r in rows]
    completed = [r for r in every if r[4] == "COMPLETED"]
    elapsed = (max(r[3] for r in completed) - min(r[2] for r in every)).total_seconds()
    placed = {s: len(runs[s]) for s in shards}
    out: dict[str, Any] = {
        "system": "harvest",
        "mode": "shards",
        "shards": len(shards),
        "n": n,
        "completed": len(completed),
        "elapsed_s": round(elapsed, 3),
        "throughput": round(len(completed) / elapsed, 1),
        "placed": {str(s): placed[s] for s in shards},
        "cpu": {
            "worker_s": round(cpu, 3),
            "worker_ms_per_workflow": round(cpu * 1000 / n, 3),
            "server_s": {str(s): round(server[s], 3) for s in shards},
            # Each server's CPU over the runs placed on it: what one shard pays per workflow.
            "server_ms_per_workflow": {
                str(s): round(server[s] * 1000 / placed[s], 3) if placed[s] else None for s in shards
            },
            "servers_ms_per_workflow": round(sum(server.values()) * 1000 / n, 3),
            # Idle: CPU ms per second with nothing to do; net: the drain's CPU less that rate
            # over the drain's wall time, per run (what each more workflow costs).
            "window_s": round(wall, 3),
            "idle_server_ms_per_s": {str(s): round(idle[s] * 1000, 2) for s in shards},
            "idle_worker_ms_per_s": round(idle_cpu * 1000, 2),
            "net_server_ms_per_workflow": {
                str(s): round((server[s] - idle[s] * wall) * 1000 / placed[s], 3) if placed[s] else None
                for s in shards
            },
            "net_worker_ms_per_workflow": round((cpu - idle_cpu * wall) * 1000 / n, 3),
        },
        # Round trips each server took (pg_stat_statements, top-level Harvest calls) per run
        # placed on it: fewer runs per shard per moment means smaller group commits.
        "statements_per_workflow": {
            str(s): round(sum(calls[s].values()) / placed[s], 3) if placed[s] else None for s in shards
        },
        "statements_by_call": {str(s): calls[s] for s in shards},
        "steps": {"handed_tasks": worker.handed_tasks, "decided_ahead": worker.decided_ahead},
        "dispatched": {str(lane.shard): lane.dispatched for lane in worker.lanes},
        "scaled": scale,
        "worker_options": worker_options,
        "starters": starters,
    }
    if trace:
        out["trips"] = trips.count(TRACE.statements, dsns, trips.run_homes(dsns), n)
    return out


def _statements_reset(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")


def _statement_calls(dsn: str) -> dict[str, int]:
    """Calls of each harvest.* function this database ran at top level since the reset."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query, calls FROM pg_stat_statements WHERE toplevel"
            " AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
    calls: Counter[str] = Counter()
    for query, n in rows:
        what = trips.call_name(query)
        if what.isidentifier():
            calls[what] += n
    return dict(calls.most_common())


# -- the servers and the rounds (the parent) ---------------------------------------------------
def measure(cfg: dict, say: Any, settings: dict[str, str], counts: tuple[int, ...] = SHARD_COUNTS) -> dict:
    """Start max(counts) servers, run cfg['shard_rounds'] rounds of a drain of cfg['shard_workflows']
    runs at each shard count (alternating), then one traced drain at the largest count."""
    servers = [EmbeddedPostgres(settings={**settings, **SERVER_OVERRIDES}) for _ in range(max(counts))]
    out: dict[str, Any] = {
        "server_settings": {**settings, **SERVER_OVERRIDES},
        "load_average_at_start": os.getloadavg(),
        "rounds": [],
    }
    made = 0
    try:
        for shard, server in enumerate(servers):
            server.start()
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
            Migrator(server.dsn_for(TEMPLATE)).run(shard_id=shard)
        say(f"sharding: {len(servers)} servers up, templates migrated with shard ids 0..{len(servers) - 1}")

        def one(k: int, n: int, trace: bool, scale: bool = False) -> dict:
            nonlocal made
            made += 1
            name = f"shard_run_{made}"
            dsns = {}
            for shard in range(k):
                with psycopg.connect(servers[shard].dsn, autocommit=True) as conn:
                    conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
                dsns[shard] = servers[shard].dsn_for(name)
            args = ["--dsns", ",".join(f"{s}={d}" for s, d in dsns.items()), "--n", str(n)]
            args += ["--trace"] if trace else []
            args += ["--scale"] if scale else []
            try:
                return _child(args)
            finally:
                for shard in range(k):
                    with psycopg.connect(servers[shard].dsn, autocommit=True) as conn:
                        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

        n = cfg["shard_workflows"]
        for i in range(cfg["shard_rounds"]):
            rnd = {}
            for k in counts:
                say(f"sharding round {i + 1}/{cfg['shard_rounds']}: {n} workflows on {k} shard(s)")
                rnd[str(k)] = one(k, n, False)
                _said(say, rnd[str(k)])
            k = max(counts)
            say(f"sharding round {i + 1}: {n * k} workflows on {k} shards, 50 slots and 8 starters per shard")
            rnd[f"{k}x"] = one(k, n * k, False, scale=True)
            _said(say, rnd[f"{k}x"])
            out["rounds"].append(rnd)
        k = max(counts)
        say(
            f"sharding: cross-shard round trips, {cfg['shard_trace_workflows']} workflows on {k} shards (traced)"
        )
        out["trace"] = one(k, cfg["shard_trace_workflows"], True)
        say(f"  cross-shard statements: {out['trace']['trips']['cross_shard']}")
    finally:
        for server in servers:
            server.stop()
    out["load_average_at_end"] = os.getloadavg()
    out["summary"] = summarize(out)
    return out


def _said(say: Any, r: dict) -> None:
    say(
        f"  {r['throughput']} wf/s; server CPU ms/workflow per shard {r['cpu']['server_ms_per_workflow']}, "
        f"statements/workflow per shard {r['statements_per_workflow']}, worker {r['cpu']['worker_ms_per_workflow']}"
    )


def _child(args: list[str]) -> dict:
    cmd = [sys.executable, str(HERE / "shard_bench.py"), *args]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900, cwd=HERE.parent)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"shard_bench.py {' '.join(args[2:])} failed ({proc.returncode}):\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return json.loads(lines[-1])


def summarize(out: dict) -> dict:
    """Medians over rounds per shard count; the traced drain's cross-shard count."""
    import statistics

    rows = []
    for label in out["rounds"][0]:
        runs = [r[label] for r in out["rounds"]]
        stmts = [v for r in runs for v in r["statements_per_workflow"].values() if v is not None]
        per_shard = [v for r in runs for v in r["cpu"]["server_ms_per_workflow"].values() if v is not None]
        net = [v for r in runs for v in r["cpu"]["net_server_ms_per_workflow"].values() if v is not None]
        idle = [v for r in runs for v in r["cpu"]["idle_server_ms_per_s"].values()]
        rows.append(
            {
                "label": label,
                "shards": runs[0]["shards"],
                "scaled": runs[0]["scaled"],
                "n": runs[0]["n"],
                "statements_per_workflow_per_shard": round(statistics.median(stmts), 3),
                "wf_per_s": round(statistics.median(r["throughput"] for r in runs), 1),
                "server_ms_per_workflow_per_shard": {
                    "median": round(statistics.median(per_shard), 3),
                    "min": round(min(per_shard), 3),
                    "max": round(max(per_shard), 3),
                },
                "servers_ms_per_workflow": round(
                    statistics.median(r["cpu"]["servers_ms_per_workflow"] for r in runs), 3
                ),
                "worker_ms_per_workflow": round(
                    statistics.median(r["cpu"]["worker_ms_per_workflow"] for r in runs), 3
                ),
                "net_server_ms_per_workflow_per_shard": round(statistics.median(net), 3),
                "net_worker_ms_per_workflow": round(
                    statistics.median(r["cpu"]["net_worker_ms_per_workflow"] for r in runs), 3
                ),
                "idle_server_ms_per_s_per_shard": round(statistics.median(idle), 2),
                "idle_worker_ms_per_s": round(
                    statistics.median(r["cpu"]["idle_worker_ms_per_s"] for r in runs), 2
                ),
                "placed": runs[-1]["placed"],
            }
        )
    trips = out["trace"]["trips"]
    return {
        "rows": rows,
        "cross_shard_round_trips": trips["cross_shard"],
        "cross_shard_per_workflow": trips["cross_shard_per_workflow"],
        "cross_shard_by_call": trips["cross_shard_by_call"],
        "traced_shards": out["trace"]["shards"],
        "traced_workflows": out["trace"]["n"],
        "run_statements_per_workflow": trips["run_statements_per_workflow"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsns", help="shard=url,... : run one drain against these shards (a child)")
    parser.add_argument("--n", type=int, default=1500)
    parser.add_argument("--trace", action="store_true", help="count cross-shard round trips (untimed)")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--scale", action="store_true", help="50 slots and 8 starters per shard")
    parser.add_argument("--quick", action="store_true", help="standalone: small N, one round")
    args = parser.parse_args()
    if args.dsns:
        import logging

        logging.basicConfig(level=logging.ERROR)
        dsns = {int(k): v for k, v in (item.split("=", 1) for item in args.dsns.split(","))}
        if args.trace:
            TRACE.install()
        result = asyncio.run(drain(dsns, args.n, args.timeout, args.trace, args.scale))
        result["measured_at"] = datetime.now(UTC).isoformat()
        emit(result)
        return
    from run import FULL, QUICK, SERVER_SETTINGS

    cfg = QUICK if args.quick else FULL
    started = time.monotonic()
    out = measure(
        cfg, lambda msg: print(f"[shard {time.strftime('%H:%M:%S')}] {msg}", flush=True), SERVER_SETTINGS
    )
    out["total_seconds"] = round(time.monotonic() - started, 1)
    path = HERE / "results" / ("shards_quick.json" if args.quick else "shards.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print("\n".join(report.sharding_lines(out)))
    print(f"wrote {path} in {out['total_seconds']:.0f}s")


if __name__ == "__main__":
    main()
