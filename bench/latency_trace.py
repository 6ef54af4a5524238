"""Per-step timeline of the start -> result row (docs/performance.md).

Runs bench/remote_latency.py's setup (a worker in a child process, ``one_step`` started from this
one) one run at a time at ``--rate`` runs/s, and timestamps in both processes, on the one
system-wide monotonic clock: every ``AsyncSqlApi`` call (sent, answered), the worker's wake-ups
and the client's hub notifications. Prints, for the most common sequence of steps, the median
time of each step from the client's ``start_workflow`` (and the gap from the step before).
Not a benchmark (the timestamps cost a little); use it to see where a run waits.

``--execute``: the client waits as the row's bench does (bench/remote_latency.py's default:
``execute_workflow``, a start that marks its waiter, then one read after the close's
notification) instead of ``start_workflow`` then ``result()``.

``--signals``: the signal round trip instead (harvest_bench.py's ``signals`` row, but with the
worker in the child process): one run waits on ``ping`` signals, this process sends one at a
time, and a step ends when the worker runs the no-op activity the workflow starts on it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from canonical import noop
from remote_latency import one_step

from harvest import App, activity, workflow
from harvest.db import notify, sqlapi
from harvest.worker import worker as worker_module
from harvest.worker.event_loop import choose_event_loop

EVENTS: list[tuple[float, str]] = []
CLOCK = time.perf_counter  # CLOCK_MONOTONIC: one clock for both processes
NAME = re.compile(r"harvest\.(\w+)\s*\(")


@activity
async def pinged(ctx, i: int) -> int:
    EVENTS.append((CLOCK(), "W:activity body"))
    return i


@workflow
async def ping_loop(ctx, pings: int) -> int:
    """The signals trace's workflow: a no-op activity on each ``ping`` signal."""
    for _ in range(pings):
        i = await ctx.wait_for_signal("ping", type_hint=int)
        await ctx.execute_activity(pinged, i)
    return pings


APP = App(workflows=[one_step, ping_loop], activities=[noop, pinged])


def _name(sql: str) -> str:
    if "harvest.signal_workflow(" in sql:  # (its statement names list_awaited_signals first)
        return "signal_workflow"
    found = NAME.search(sql)
    return found.group(1) if found else sql[:30]


def instrument(tag: str) -> None:
    api = sqlapi.AsyncSqlApi
    # (_all only: _all_retrying sends through it.)
    real = api._all

    def traced(self: Any, sql: str, params: Any, *more: Any, **named: Any) -> Any:
        async def call() -> Any:
            EVENTS.append((CLOCK(), f"{tag}:{_name(sql)}>"))
            try:
                return await real(self, sql, params, *more, **named)
            finally:
                EVENTS.append((CLOCK(), f"{tag}:{_name(sql)}<"))

        return call()

    api._all = traced  # type: ignore[method-assign]
    # A claim that decides (worker.py, _claim_deciding): its claim and its decision, each
    # named as the call it carries.
    claim_open = worker_module.claim_tasks_open

    async def traced_claim_open(*args: Any, **kwargs: Any) -> Any:
        EVENTS.append((CLOCK(), f"{tag}:claim_tasks (open)>"))
        try:
            return await claim_open(*args, **kwargs)
        finally:
            EVENTS.append((CLOCK(), f"{tag}:claim_tasks (open)<"))

    worker_module.claim_tasks_open = traced_claim_open  # type: ignore[attr-defined]
    for method in ("decide", "commit"):
        real_method = getattr(sqlapi.OpenClaim, method)
        label = "complete_workflow_tasks (in the claim)" if method == "decide" else "claim commit"

        async def traced_method(self: Any, *args: Any, _real: Any = real_method, _label: str = label) -> Any:
            EVENTS.append((CLOCK(), f"{tag}:{_label}>"))
            try:
                return await _real(self, *args)
            finally:
                EVENTS.append((CLOCK(), f"{tag}:{_label}<"))

        setattr(sqlapi.OpenClaim, method, traced_method)
    wake = worker_module.Worker.wake

    def traced_wake(self: Any) -> None:
        EVENTS.append((CLOCK(), f"{tag}:woken"))
        wake(self)

    worker_module.Worker.wake = traced_wake  # type: ignore[method-assign]
    hub_wake = notify._Waiters.wake

    def traced_hub(self: Any, payload: str) -> None:
        EVENTS.append((CLOCK(), f"{tag}:hub notified"))
        hub_wake(self, payload)

    notify._Waiters.wake = traced_hub  # type: ignore[method-assign]


async def serve(dsn: str, out: str) -> None:
    from harvest_bench import WORKER_OPTIONS

    from harvest import Worker

    instrument("W")
    worker = Worker(APP, dsn, **WORKER_OPTIONS)
    task = asyncio.create_task(worker.run())
    while worker.sql is None and not task.done():
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    worker.request_stop()
    await task
    with open(out, "w") as f:
        json.dump(EVENTS, f)


async def measure(dsn: str, n: int, rate: float, execute: bool = False) -> None:
    from harvest import AsyncClient

    instrument("C")
    client = await AsyncClient.connect(dsn, pool_size=4, check_schema=False)
    for i in range(5):  # warm-up
        await (await client.start_workflow(one_step, i)).result(timeout=60)
    EVENTS.clear()
    server = await server_stats(dsn) if SERVER_ON else None
    t0 = time.monotonic()
    for i in range(n):  # one at a time
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        EVENTS.append((CLOCK(), "C:start_workflow"))
        if execute:
            await client.execute_workflow(one_step, i, result_timeout=60)
        else:
            handle = await client.start_workflow(one_step, i)
            await handle.result(timeout=60)
        EVENTS.append((CLOCK(), "C:result returned"))
    if server is not None:
        SERVER_SPLIT.update(diff_stats(server, await server_stats(dsn), n))
    await client.close()


async def measure_signals(dsn: str, n: int, rate: float) -> None:
    """``n`` signals to one ``ping_loop`` run, one at a time at ``rate``/s (each well after the
    workflow acted on the one before: a round trip is a few tens of ms at most)."""
    from harvest import AsyncClient

    instrument("C")
    client = await AsyncClient.connect(dsn, pool_size=4, check_schema=False)
    handle = await client.start_workflow(ping_loop, n + 5)
    for i in range(5):  # warm-up
        await handle.signal("ping", i)
        await asyncio.sleep(0.1)
    EVENTS.clear()
    t0 = time.monotonic()
    for i in range(n):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        EVENTS.append((CLOCK(), "C:signal"))
        await handle.signal("ping", i)
    await handle.result(timeout=60)
    await client.close()


# --server: the server's own part of each call, from pg_stat_statements (mean execution of the
# path's five statements, top level) and pg_stat_io (the WAL flushes of the commits, with
# track_wal_io_timing on); filled by measure() when SERVER_ON.
SERVER_ON = False
SERVER_SPLIT: dict[str, float] = {}
PATH_CALLS = {  # a statement's text -> the call it is on the path
    "harvest.start_workflows(": "start_workflows",
    "harvest.claim_tasks(": "claim_tasks",
    "harvest.complete_workflow_tasks(": "complete_workflow_tasks",
    "harvest.complete_activities(": "complete_activities",
    "harvest.wait_for_result(": "wait_for_result",
}


async def server_stats(dsn: str) -> dict[str, tuple[float, float]]:
    """{call: (calls, total execution ms)} for the path's statements in this database, and
    ``wal flush`` (fsyncs, their ms) of the client backends, so far."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        rows = await (
            await conn.execute(
                "SELECT s.query, s.calls, s.total_exec_time FROM pg_stat_statements AS s"
                " JOIN pg_database AS d ON d.oid = s.dbid WHERE d.datname = current_database()"
            )
        ).fetchall()
        wal = await (
            await conn.execute(
                "SELECT coalesce(sum(fsyncs), 0), coalesce(sum(fsync_time), 0) FROM pg_stat_io"
                " WHERE object = 'wal' AND backend_type = 'client backend'"
            )
        ).fetchone()
    found: dict[str, tuple[float, float]] = {"wal flush": (float(wal[0]), float(wal[1]))}
    for query, calls, total in rows:
        for text, call in PATH_CALLS.items():
            if text in query:
                had = found.get(call, (0.0, 0.0))
                found[call] = (had[0] + calls, had[1] + total)
    return found


def diff_stats(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], n: int
) -> dict[str, float]:
    """Per call: its mean execution (ms); ``wal flush``: flushes per run and ms each."""
    out: dict[str, float] = {}
    for call, (calls, total) in after.items():
        calls -= before.get(call, (0.0, 0.0))[0]
        total -= before.get(call, (0.0, 0.0))[1]
        if call == "wal flush":
            out["wal flushes per run"] = calls / n
            out["wal flush ms each"] = total / calls if calls else 0.0
        elif calls:
            out[call] = total / calls
    return out


# The hops of the start -> result path (--execute or start then result()), each from its first
# step to its second; the server's part (--server) is the calls' execution within them.
HOPS = (
    ("client: the call -> start sent (encode, the start batcher)", "C:start_workflow", "C:start_workflows>"),
    ("start: execute, commit, NOTIFY relayed, worker woken", "C:start_workflows>", "W:woken"),
    ("worker: woken -> claim sent", "W:woken", "W:claim_tasks (open)>"),
    ("claim (open transaction)", "W:claim_tasks (open)>", "W:claim_tasks (open)<"),
    (
        "worker: replay, decide -> decision sent",
        "W:claim_tasks (open)<",
        "W:complete_workflow_tasks (in the claim)>",
    ),
    (
        "decision + handed activity, commit",
        "W:complete_workflow_tasks (in the claim)>",
        "W:complete_workflow_tasks (in the claim)<",
    ),
    (
        "worker: activity body, result -> sent",
        "W:complete_workflow_tasks (in the claim)<",
        "W:complete_activities>",
    ),
    (
        "result + close, commit, NOTIFY relayed to the client's hub",
        "W:complete_activities>",
        "C:hub notified",
    ),
    ("client: hub notified -> read sent", "C:hub notified", "C:wait_for_result>"),
    ("read of the ended run", "C:wait_for_result>", "C:wait_for_result<"),
    ("client: read -> result() returns", "C:wait_for_result<", "C:result returned"),
)
HOP_SERVER = {
    "start: execute, commit, NOTIFY relayed, worker woken": "start_workflows",
    "claim (open transaction)": "claim_tasks",
    "decision + handed activity, commit": "complete_workflow_tasks",
    "result + close, commit, NOTIFY relayed to the client's hub": "complete_activities",
    "read of the ended run": "wait_for_result",
}


def hop_table(events: list[tuple[float, str]]) -> None:
    """Each hop's median over the runs that have both its steps (first occurrence in a run)."""
    runs: list[dict[str, float]] = []
    for t, what in sorted(events):
        if what == "C:start_workflow":
            runs.append({})
        if runs and what not in runs[-1]:
            runs[-1][what] = t
    print("hop medians, ms (per hop over every run; server: the call's mean execution, --server):")
    total = 0.0
    for label, first, second in HOPS:
        took = [(run[second] - run[first]) * 1000 for run in runs if first in run and second in run]
        if not took:
            continue
        median = statistics.median(took)
        total += median
        server = SERVER_SPLIT.get(HOP_SERVER.get(label, ""))
        extra = f"   server {server:5.2f}" if server is not None else ""
        print(f"{median:8.2f}{extra}  {label}")
    print(f"{total:8.2f}  the hops' medians summed")
    if SERVER_SPLIT:
        print(
            f"WAL flushes per run {SERVER_SPLIT.get('wal flushes per run', 0):.2f},"
            f" {SERVER_SPLIT.get('wal flush ms each', 0):.3f} ms each"
        )


def timeline(
    events: list[tuple[float, str]], first: str = "C:start_workflow", last: str = "C:result returned"
) -> None:
    runs: list[list[tuple[float, str]]] = []
    for t, what in sorted(events):
        if what == first:
            runs.append([])
        if runs:
            runs[-1].append((t, what))
    sequences: collections.Counter[tuple[str, ...]] = collections.Counter()
    at: dict[str, list[float]] = collections.defaultdict(list)
    took = []
    each: list[tuple[float, dict[str, float]]] = []  # (the run's time, its steps' times)
    for run in runs:
        end = min((t for t, what in run if what == last), default=None)
        if end is None:
            continue
        took.append((end - run[0][0]) * 1000)
        seen: collections.Counter[str] = collections.Counter()
        steps = []
        times: dict[str, float] = {}
        for t, what in run:
            if t > end:
                continue
            seen[what] += 1
            step = what if seen[what] == 1 else f"{what} #{seen[what]}"
            steps.append(step)
            at[step].append((t - run[0][0]) * 1000)
            times[step] = (t - run[0][0]) * 1000
        sequences[tuple(steps)] += 1
        each.append((took[-1], times))
    steps, count = sequences.most_common(1)[0]
    ranked = sorted(took)
    print(
        f"{len(took)} runs, {first} -> {last} p50 {statistics.median(took):.2f} ms,"
        f" p90 {ranked[int(0.9 * (len(ranked) - 1))]:.2f}, p99 {ranked[int(0.99 * (len(ranked) - 1))]:.2f};"
        " steps in the most common order"
    )
    print(f"({count} runs) as medians from {first}, ms (C: client, W: worker; > sent, < answered);")
    print("then the same medians over the slowest tenth of the runs (every order):")
    slow = [times for _, times in sorted(each, key=lambda run: run[0])[-max(1, len(each) // 10) :]]
    before = slow_before = 0.0
    for step in steps:
        median = statistics.median(at[step])
        slow_at = [times[step] for times in slow if step in times]
        slow_median = statistics.median(slow_at) if slow_at else float("nan")
        print(
            f"{median:8.2f}  {median - before:+7.2f}   {slow_median:8.2f}  {slow_median - slow_before:+7.2f}  {step}"
        )
        before, slow_before = median, slow_median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--signals", action="store_true", help="the signal round trip instead")
    parser.add_argument(
        "--execute",
        action="store_true",
        help="execute_workflow (the row's client path) for start then result()",
    )
    parser.add_argument(
        "--server",
        action="store_true",
        help="the server's part of each call (pg_stat_statements, pg_stat_io: a private server"
        " with pg_stat_statements loaded and track_wal_io_timing on)",
    )
    parser.add_argument("--dump", help="also write every event, both processes, as JSON to this file")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.server:
        global SERVER_ON
        SERVER_ON = True
    if args.serve:  # on the loop remote_latency.py's worker runs on (uvloop when installed)
        choose_event_loop("auto").run(serve(args.dsn, args.serve))
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "worker.json")
        child = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--dsn", args.dsn, "--serve", out],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if child.stdout is None or child.stdout.readline().strip() != "ready":
            raise SystemExit(f"the worker process did not start ({child.wait()})")
        try:
            if args.signals:
                asyncio.run(measure_signals(args.dsn, args.runs, args.rate))
            else:
                asyncio.run(measure(args.dsn, args.runs, args.rate, args.execute))
        finally:
            if child.stdin is not None:
                child.stdin.close()
            child.wait(timeout=60)
        with open(out) as f:
            worker_events = [(t, what) for t, what in json.load(f)]
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump(sorted(EVENTS + worker_events), f)
    if args.signals:
        timeline(EVENTS + worker_events, "C:signal", "W:activity body")
    else:
        timeline(EVENTS + worker_events)
        hop_table(EVENTS + worker_events)


if __name__ == "__main__":
    main()
