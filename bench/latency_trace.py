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
    found = NAME.search(sql)
    return found.group(1) if found else sql[:30]


def instrument(tag: str) -> None:
    api = sqlapi.AsyncSqlApi
    for attr in ("_all", "_all_retrying"):
        real = getattr(api, attr)

        def traced(self: Any, sql: str, params: Any, _real: Any = real) -> Any:
            async def call() -> Any:
                EVENTS.append((CLOCK(), f"{tag}:{_name(sql)}>"))
                try:
                    return await _real(self, sql, params)
                finally:
                    EVENTS.append((CLOCK(), f"{tag}:{_name(sql)}<"))

            return call()

        setattr(api, attr, traced)
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
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.dsn, args.serve))
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
    if args.signals:
        timeline(EVENTS + worker_events, "C:signal", "W:activity body")
    else:
        timeline(EVENTS + worker_events)


if __name__ == "__main__":
    main()
