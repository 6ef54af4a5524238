"""Harvest under load, in one process: an in-process Worker plus the starters.

Modes (``--mode``):

* ``workflows``: the canonical workload. N runs of a workflow that calls three
  no-op activities in sequence are started (8 concurrent starters) while the
  worker drains them. Throughput = N / (last completed_at - first created_at) and
  start-to-result latency per run = completed_at - created_at, both read from
  ``harvest.executions``. Also: commits per workflow (``pg_stat_database``).
* ``tasks``: the task layer. K workflows each fan out N/K no-op activities at
  once; activities per second = N / (last ActivityCompleted - first
  ActivityScheduled), both from the event log.
* ``latency``: the canonical workflow started at a steady, moderate rate. Activity
  dispatch latency = the activity body's clock time - the ``created_at`` of its
  ``ActivityScheduled`` event (the same machine's clock on both sides).
* ``signals``: the signal round trip at a steady, moderate rate. K workflows loop on
  ``ctx.wait_for_signal("ping")``; the client sends signals round-robin at a fixed
  rate (the sender notes each one's wall-clock send time). Per signal: *signal -> workflow
  code* = when the workflow code got the payload (first, live execution, not a
  replay) - the send time; *signal -> activity body* = when the no-op activity the
  workflow starts on it runs - the send time (the workflow acting on it, seen from
  outside). Both clocks are this process' ``time.time()``. ``--eager``: the client is given the
  in-process worker (``AsyncClient(eager_worker=)``), so a signal's transaction may hand the woken
  workflow task to it (docs/messages.md, "Eager signals").

The process runs on the event loop ``harvest worker`` would pick (``--event-loop``, default
auto: uvloop when it is installed).

Prints one JSON object (see bench/common.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from canonical import noop, three_steps
from common import (
    CLAIM_BATCH,
    CONCURRENCY,
    database_backends_cpu,
    emit,
    latency_summary,
    server_cpu_seconds,
    settle_stats,
    xact_commits,
)

from harvest import App, AsyncClient, Worker, activity, workflow
from harvest.worker.collector import tune_collector

try:
    from harvest.worker.event_loop import EVENT_LOOPS, choose_event_loop
except ImportError:  # an A/B's baseline library, older than the loop choice: fanout_ab.py runs
    # this script on both sides, so the baseline takes the choice from this checkout's own module
    # (it needs only harvest.core.errors, which every library has) and runs on the same loop.
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "_bench_event_loop",
        os.path.join(
            os.path.dirname(os.path.abspath(__file__)),
            "..",
            "harvest_py",
            "harvest",
            "worker",
            "event_loop.py",
        ),
    )
    _event_loop = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # (dataclasses look it up)
    _spec.loader.exec_module(_event_loop)
    EVENT_LOOPS, choose_event_loop = _event_loop.EVENT_LOOPS, _event_loop.choose_event_loop


STARTERS = 8
WORKER_OPTIONS = {
    "concurrency": CONCURRENCY,
    "claim_batch": CLAIM_BATCH,
    "poll_interval": 2.0,
    "scan_interval": 1.0,
    "cache_size": 10_000,
}

# (execution_id, step) -> wall-clock seconds when the activity body ran (latency mode only).
BODY_TIMES: dict[tuple[str, int], float] = {}
# (execution_id, signal number) -> wall-clock seconds (signals mode only).
SIGNAL_SEEN: dict[tuple[str, int], float] = {}
SIGNAL_ACTED: dict[tuple[str, int], float] = {}
SIGNAL_SENT: dict[tuple[str, int], float] = {}
SIGNAL_ACKED: dict[tuple[str, int], float] = {}


@activity
async def noop_timed(ctx, step: int) -> int:
    BODY_TIMES[(ctx.execution_id, step)] = time.time()
    return step


@workflow
async def three_steps_timed(ctx, n: int) -> int:
    a = await ctx.execute_activity(noop_timed, 1)
    b = await ctx.execute_activity(noop_timed, 2)
    c = await ctx.execute_activity(noop_timed, 3)
    return a + b + c + n


@workflow
async def fan_out(ctx, n: int) -> int:
    results = await asyncio.gather(*(ctx.execute_activity(noop, i) for i in range(n)))
    return len(results)


@activity
async def on_ping(ctx, execution_id: str, i: int) -> int:
    SIGNAL_ACTED.setdefault((execution_id, i), time.time())
    return i


@workflow
async def ping_loop(ctx, pings: int) -> int:
    for _ in range(pings):
        i = await ctx.wait_for_signal("ping", type_hint=int)
        if not ctx.is_replaying:
            SIGNAL_SEEN.setdefault((ctx.execution_id, i), time.time())
        await ctx.execute_activity(on_ping, ctx.execution_id, i)
    return pings


APP = App(
    workflows=[three_steps, three_steps_timed, fan_out, ping_loop], activities=[noop, noop_timed, on_ping]
)


async def _start_many(client: AsyncClient, wf, inputs: list[int]) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in inputs:
        queue.put_nowait(i)

    async def starter() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await client.start_workflow(wf, i)

    await asyncio.gather(*(starter() for _ in range(STARTERS)))


async def _wait_done(dsn: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while True:
            row = await (
                await conn.execute("SELECT count(*) FROM harvest.executions WHERE status <> 'RUNNING'")
            ).fetchone()
            if row[0] >= n:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"harvest: only {row[0]} of {n} runs finished in {timeout:.0f}s")
            await asyncio.sleep(0.05)


def _worker_ended(task: asyncio.Task) -> None:
    """A worker that dies mid-run must end the benchmark, not leave it waiting for runs."""
    if not task.cancelled() and task.exception() is not None:
        sys.stderr.write(f"harvest worker crashed: {task.exception()!r}\n")
        os._exit(3)


class InProcessWorker:
    def __init__(self, dsn: str):
        # What `harvest worker` does to its process once the App is imported (docs/operations.md),
        # so the bench measures what its users run.
        tune_collector()
        self.worker = Worker(APP, dsn, **WORKER_OPTIONS)
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> Worker:
        self.task = asyncio.create_task(self.worker.run())
        self.task.add_done_callback(_worker_ended)
        while self.worker.sql is None and not self.task.done():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # LISTEN is up
        if self.task.done():
            self.task.result()  # the worker refused to start (e.g. schema mismatch): say why
        return self.worker

    async def __aexit__(self, *exc: object) -> None:
        self.worker.request_stop()
        await self.task


def _statements_reset(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")


def _statements_top(dsn: str, n_workflows: int, limit: int = 12) -> list[dict]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 90), calls, total_exec_time,"
            " mean_exec_time FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            "   AND toplevel ORDER BY total_exec_time DESC LIMIT %s",
            (limit,),
        ).fetchall()
    return [
        {
            "query": q,
            "calls": c,
            "calls_per_workflow": round(c / n_workflows, 2),
            "total_ms": round(t, 1),
            "mean_ms": round(m, 3),
        }
        for q, c, t, m in rows
    ]


async def bench_workflows(dsn: str, n: int, timeout: float, statements: bool) -> dict:
    if statements:
        _statements_reset(dsn)
    commits_before = xact_commits(dsn)
    async with InProcessWorker(dsn) as worker:
        client = await AsyncClient.connect(dsn, pool_size=STARTERS, check_schema=False)
        try:
            # CPU from the moment the system is up (as dbos_bench.py: after DBOS.launch())
            # until every run has completed.
            cpu0, server0, db0 = time.process_time(), server_cpu_seconds(dsn), database_backends_cpu(dsn)
            wall0 = time.monotonic()
            await _start_many(client, three_steps, list(range(n)))
            start_wall = time.monotonic() - wall0
            await _wait_done(dsn, n, timeout)
            db1 = database_backends_cpu(dsn)
            cpu, server_cpu = time.process_time() - cpu0, server_cpu_seconds(dsn) - server0
            # This database's backends alone (the worker's and the client's pools): what a
            # side's drain costs the server when another runs beside it (python_cpu_ab.py).
            db_cpu = sum(now - db0.get(pid, 0.0) for pid, now in db1.items())
        finally:
            await client.close()
    settle_stats()
    commits = xact_commits(dsn) - commits_before
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT created_at, completed_at, status FROM harvest.executions").fetchall()
        events = conn.execute("SELECT count(*) FROM harvest.events").fetchone()[0]
        # Sessions the drain opened: each compiles the functions and plans its statements anew.
        (sessions,) = conn.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    completed = [r for r in rows if r[2] == "COMPLETED"]
    first = min(r[0] for r in rows)
    last = max(r[1] for r in completed)
    elapsed = (last - first).total_seconds()
    out = {
        "system": "harvest",
        "mode": "workflows",
        "n": n,
        "completed": len(completed),
        "elapsed_s": round(elapsed, 3),
        "throughput": round(len(completed) / elapsed, 1),
        "latency": latency_summary([(r[1] - r[0]).total_seconds() for r in completed]),
        "start_phase_s": round(start_wall, 3),
        "commits": commits,
        "commits_per_workflow": round(commits / n, 2),
        "sessions": sessions,
        "events_per_workflow": round(events / n, 2),
        "cpu": {"server_s": round(server_cpu, 3), "client_s": round(cpu, 3), "backends_s": round(db_cpu, 3)},
        "cache": {"hits": worker.cache.hits, "misses": worker.cache.misses},
        # How the steps ran: handed tasks skipped a claim; decisions ahead rode with
        # the result they decided on (worker/decide_ahead.py).
        "steps": {
            "handed_tasks": worker.handed_tasks,
            "decided_ahead": worker.decided_ahead,
            "result_batches": worker.completions.batches,
            # Tasks claimed inside result batches (complete_activities_with_claim), and the
            # decisions' batches: with result_batches, how the drain's commits split.
            "claimed_with_results": worker.completions.claimed,
            "decision_batches": worker.decisions.batches,
        },
        "worker_options": WORKER_OPTIONS,
        "starters": STARTERS,
    }
    if statements:
        out["top_statements"] = _statements_top(dsn, n)
    return out


async def bench_tasks(dsn: str, n: int, fan: int, timeout: float) -> dict:
    k = max(1, n // fan)
    async with InProcessWorker(dsn) as worker:
        client = await AsyncClient.connect(dsn, pool_size=4, check_schema=False)
        try:
            cpu0, server0, db0 = time.process_time(), server_cpu_seconds(dsn), database_backends_cpu(dsn)
            await _start_many(client, fan_out, [fan] * k)
            await _wait_done(dsn, k, timeout)
            db1 = database_backends_cpu(dsn)
            cpu, server_cpu = time.process_time() - cpu0, server_cpu_seconds(dsn) - server0
            # This database's backends alone (the worker's and the client's connections, open
            # throughout): what a side's drain costs the server when another runs beside it.
            db_cpu = sum(now - db0.get(pid, 0.0) for pid, now in db1.items())
        finally:
            await client.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        (first,) = conn.execute(
            "SELECT min(created_at) FROM harvest.events WHERE event_type = 'ActivityScheduled'"
        ).fetchone()
        last, done = conn.execute(
            "SELECT max(created_at), count(*) FROM harvest.events WHERE event_type = 'ActivityCompleted'"
        ).fetchone()
    elapsed = (last - first).total_seconds()
    return {
        "system": "harvest",
        "mode": "tasks",
        "n": k * fan,
        "workflows": k,
        "fan_out": fan,
        "completed": done,
        "elapsed_s": round(elapsed, 3),
        "throughput": round(done / elapsed, 1),
        # This process (worker, starters, the wait loop) and the server, per activity.
        "cpu": {
            "server_s": round(server_cpu, 3),
            "client_s": round(cpu, 3),
            "server_ms_per_activity": round(server_cpu * 1000 / (k * fan), 4),
            "worker_ms_per_activity": round(cpu * 1000 / (k * fan), 4),
            "backends_ms_per_activity": round(db_cpu * 1000 / (k * fan), 4),
        },
        "steps": {
            "handed_tasks": worker.handed_tasks,
            "decided_ahead": worker.decided_ahead,
            "result_batches": worker.completions.batches,
            "completed_tasks": worker.completed_tasks,
            "cache_misses": worker.cache.misses,
        },
        "worker_options": WORKER_OPTIONS,
    }


class _SteadyCpu:
    """CPU while the steady load runs (after the worker's start-up): this database's backends
    (``database_backends_cpu``: right even when another run shares the server, as
    ``latency_ab.py --together`` has it) and this process (worker and client), per run."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self.backends = database_backends_cpu(dsn)
        self.process = time.process_time()

    def per(self, n: int) -> dict[str, float]:
        process = time.process_time() - self.process
        after = database_backends_cpu(self.dsn)
        backends = sum(now - self.backends.get(pid, 0.0) for pid, now in after.items())
        return {"backends": round(backends * 1000 / n, 4), "process": round(process * 1000 / n, 4)}


async def bench_latency(dsn: str, rate: float, seconds: float, timeout: float) -> dict:
    n = max(1, int(rate * seconds))
    async with InProcessWorker(dsn):
        client = await AsyncClient.connect(dsn, pool_size=4, check_schema=False)
        try:
            cpu = _SteadyCpu(dsn)
            t0 = time.monotonic()
            for i in range(n):
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                asyncio.ensure_future(client.start_workflow(three_steps_timed, i))
            await _wait_done(dsn, n, timeout)
            steady = cpu.per(n)
        finally:
            await client.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        scheduled = conn.execute(
            "SELECT execution_id::text, (event_data->>'seq')::int, created_at FROM harvest.events"
            " WHERE event_type = 'ActivityScheduled'"
        ).fetchall()
        runs = conn.execute(
            "SELECT created_at, completed_at FROM harvest.executions WHERE status = 'COMPLETED'"
        ).fetchall()
    dispatch = []
    for execution_id, seq, created_at in scheduled:
        ran = BODY_TIMES.get((execution_id, seq))
        if ran is not None:
            dispatch.append(ran - created_at.timestamp())
    return {
        "system": "harvest",
        "mode": "latency",
        "rate_wf_per_s": rate,
        "n": n,
        "activity_rate_per_s": rate * 3,
        "dispatch": latency_summary(dispatch),
        "start_to_result": latency_summary([(b - a).total_seconds() for a, b in runs]),
        "cpu_ms_per_run": steady,
        "worker_options": WORKER_OPTIONS,
    }


async def _wait_for_events(dsn: str, event_type: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while True:
            row = await (
                await conn.execute("SELECT count(*) FROM harvest.events WHERE event_type = %s", (event_type,))
            ).fetchone()
            if row[0] >= n:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"harvest: only {row[0]} of {n} {event_type} events in {timeout:.0f}s")
            await asyncio.sleep(0.05)


async def bench_signals(
    dsn: str, rate: float, seconds: float, runs: int, timeout: float, eager: bool = False
) -> dict:
    n = max(runs, int(rate * seconds))
    n -= n % runs  # the same number of pings for every run
    per_run = n // runs
    async with InProcessWorker(dsn) as worker:
        client = await AsyncClient.connect(
            dsn, pool_size=4, check_schema=False, **({"eager_worker": worker} if eager else {})
        )
        try:
            handles = [await client.start_workflow(ping_loop, per_run + 1) for _ in range(runs)]
            # Every run has finished its first task and waits for a signal.
            await _wait_for_events(dsn, "WorkflowTaskCompleted", runs, timeout)
            await asyncio.sleep(0.5)
            # One unrecorded signal per run first: the pooled sessions plan their statements
            # (the first calls' planning was most of the p99 of 100 signals).
            await asyncio.gather(*(handle.signal("ping", -1) for handle in handles))
            await _wait_for_events(dsn, "ActivityCompleted", runs, timeout)

            async def send(handle, i: int) -> None:
                key = (handle.execution_id, i)
                SIGNAL_SENT[key] = time.time()
                await handle.signal("ping", i)
                SIGNAL_ACKED[key] = time.time()

            # (Most of the warm-up's commits flushed; a backend that committed within a second
            # of its last flush and then idles flushes up to 10 s later: a small bias, the same
            # on every side of an A/B, docs/performance.md "Signal storms, second cut".)
            await asyncio.sleep(1.2)
            commits_before = xact_commits(dsn)
            handed_before = worker.handed_tasks
            sends = []
            cpu = _SteadyCpu(dsn)
            t0 = time.monotonic()
            for k in range(n):
                delay = t0 + k / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                sends.append(asyncio.ensure_future(send(handles[k % runs], k // runs)))
            await asyncio.gather(*sends)
            await _wait_done(dsn, runs, timeout)
            steady = cpu.per(n)
            handed = worker.handed_tasks - handed_before
        finally:
            await client.close()
    settle_stats()
    # Every commit of the database from the first send to the worker's stop (the client's
    # signals, the worker's claims, decisions and results, idle looks), per signal.
    commits = xact_commits(dsn) - commits_before
    seen = [SIGNAL_SEEN[k] - sent for k, sent in SIGNAL_SENT.items() if k in SIGNAL_SEEN]
    acted = [SIGNAL_ACTED[k] - sent for k, sent in SIGNAL_SENT.items() if k in SIGNAL_ACTED]
    acked = [SIGNAL_ACKED[k] - sent for k, sent in SIGNAL_SENT.items() if k in SIGNAL_ACKED]
    return {
        "system": "harvest",
        "mode": "signals",
        "rate_signals_per_s": rate,
        "n": n,
        "runs": runs,
        "signals_per_run_per_s": round(rate / runs, 2),
        "round_trip": latency_summary(acted),
        "to_workflow_code": latency_summary(seen),
        "send_call": latency_summary(acked),
        "eager": eager,
        "eager_tasks": worker.eager_tasks if eager else 0,
        # A run's first task is a miss that replays nothing (its claim carries the history):
        # the misses past one a run are whole-history replays. A decision ahead the database
        # refused (a signal landed while the activity ran) leaves its run to be replayed,
        # unless the worker's storm rule kept the run's results on the plain path
        # (docs/performance.md, "Signal storms"; older checkouts count neither).
        "cache": {"hits": worker.cache.hits, "misses": worker.cache.misses},
        "replays": worker.cache.misses - runs,
        "decided_ahead": worker.decided_ahead,
        "refused_ahead": getattr(worker, "refused_ahead", None),
        "plain_by_storm_rule": getattr(worker, "plain_by_rule", None),
        "plain_results": PLAIN_RESULTS,
        "commits_per_signal": round(commits / n, 3),
        "handed_per_signal": round(handed / n, 3),
        "cpu_ms_per_run": steady,
        "worker_options": WORKER_OPTIONS,
    }


PLAIN_RESULTS = False


def _plain_results() -> None:
    """Every result goes the plain way: the worker's decision ahead answers None (as for a run
    its storm rule remembers; every checkout since deciding ahead calls it this way)."""
    global PLAIN_RESULTS
    from harvest.worker import activities

    async def no_decision(*args: Any, **kwargs: Any) -> None:
        return None

    activities.decide_ahead = no_decision  # type: ignore[assignment]
    PLAIN_RESULTS = True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--mode", choices=["workflows", "tasks", "latency", "signals"], required=True)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--fan", type=int, default=100, help="activities per workflow (tasks mode)")
    parser.add_argument(
        "--rate", type=float, default=20.0, help="workflows/s (latency mode) or signals/s (signals mode)"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="duration (latency and signals modes)")
    parser.add_argument("--runs", type=int, default=10, help="workflows receiving the signals (signals mode)")
    parser.add_argument(
        "--eager",
        action="store_true",
        help="signals mode: the client sends eager signals to the in-process worker (AsyncClient(eager_worker=))",
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--statements", action="store_true", help="add pg_stat_statements' top list")
    parser.add_argument("--profile", help="write a pyinstrument profile (text) to this path")
    parser.add_argument(
        "--no-metrics", action="store_true", help="Worker(metrics=False): the A/B of docs/observability.md"
    )
    parser.add_argument("--concurrency", type=int, help="Worker(concurrency), default bench/common.py's")
    parser.add_argument("--claim-batch", type=int, help="Worker(claim_batch), default bench/common.py's")
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="auto",
        help="the process' loop, as `harvest worker --event-loop` picks it (auto: uvloop when installed)",
    )
    parser.add_argument(
        "--plain-results",
        action="store_true",
        help="the worker decides on no result ahead (every result committed alone, its workflow task"
        " woken): the plain path a run takes in a signal storm (docs/performance.md, 'Signal storms')",
    )
    args = parser.parse_args()
    loop = choose_event_loop(args.event_loop)
    if args.plain_results:
        _plain_results()
    if args.concurrency:
        WORKER_OPTIONS["concurrency"] = args.concurrency
    if args.claim_batch:
        WORKER_OPTIONS["claim_batch"] = args.claim_batch
    if args.no_metrics:
        WORKER_OPTIONS["metrics"] = False
    logging.basicConfig(level=logging.ERROR)

    if args.mode == "workflows":
        coro = bench_workflows(args.dsn, args.n, args.timeout, args.statements)
    elif args.mode == "tasks":
        coro = bench_tasks(args.dsn, args.n, args.fan, args.timeout)
    elif args.mode == "signals":
        coro = bench_signals(args.dsn, args.rate, args.seconds, args.runs, args.timeout, args.eager)
    else:
        coro = bench_latency(args.dsn, args.rate, args.seconds, args.timeout)

    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="enabled", interval=0.001)
        profiler.start()
        result = loop.run(coro)
        profiler.stop()
        with open(args.profile, "w") as fh:
            fh.write(profiler.output_text(unicode=False, color=False, show_all=False))
        result["profile"] = args.profile
    else:
        result = loop.run(coro)
    result["event_loop"] = loop.name
    result["measured_at"] = datetime.now(UTC).isoformat()
    emit(result)


if __name__ == "__main__":
    main()
