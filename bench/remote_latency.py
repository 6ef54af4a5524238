"""Start -> result from another process, under steady load.

A worker runs in a child process (``--serve``: an in-process ``Worker`` with the bench's
settings, as harvest_bench.py). This process starts a one-activity workflow
(``canonical.one_step``) at a steady rate with an ``AsyncClient`` and awaits each run's
``handle.result()``; the figure per run is the wall clock from just before
``start_workflow`` to the return of ``result()`` (which LISTENs for the run's end),
both on this process' clock; by default the pair is ``execute_workflow`` (a start that marks
its waiter in its own transaction; ``--wait result`` for start then ``result()``). The runs overlap as their rate and latency make them.
``--client sync``: the same with the synchronous ``Client``, each run in a thread of its own
(``start_workflow`` then ``result()``).
Prints one JSON object (see bench/common.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from canonical import noop, one_step
from common import database_backends_cpu, emit, latency_summary

from harvest import App, AsyncClient, Client, Worker
from harvest.worker.event_loop import choose_event_loop

APP = App(workflows=[one_step], activities=[noop])


async def serve(dsn: str) -> None:
    from harvest_bench import WORKER_OPTIONS

    worker = Worker(APP, dsn, **WORKER_OPTIONS)
    task = asyncio.create_task(worker.run())
    while worker.sql is None and not task.done():
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # LISTEN is up
    if task.done():
        task.result()
    print("ready", flush=True)
    cpu = time.process_time()
    # Until the parent closes our stdin.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    print(f"cpu {time.process_time() - cpu:.4f}", flush=True)  # this process' CPU while measured
    worker.request_stop()
    await task


async def measure(dsn: str, rate: float, seconds: float, warmup: int, wait: str) -> dict:
    client = await AsyncClient.connect(dsn, pool_size=4, check_schema=False)
    took: list[float] = []

    async def one(i: int, record: bool) -> None:
        t0 = time.perf_counter()
        if wait == "execute":  # the start marks its waiter (AsyncClient.execute_workflow)
            await client.execute_workflow(one_step, i, result_timeout=60)
        else:
            await (await client.start_workflow(one_step, i)).result(timeout=60)
        if record:
            took.append(time.perf_counter() - t0)

    try:
        for i in range(warmup):  # connections and the worker's caches warm, not recorded
            await one(i, False)
        n = max(1, int(rate * seconds))
        runs = []
        before = database_backends_cpu(dsn)
        t0 = time.monotonic()
        for i in range(n):
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            runs.append(asyncio.ensure_future(one(i, True)))
        await asyncio.gather(*runs)
        after = database_backends_cpu(dsn)
    finally:
        await client.close()
    # This database's backends while the measured runs ran (right even when another run
    # shares the server, as latency_ab.py --together has it), per run.
    backends = sum(now - before.get(pid, 0.0) for pid, now in after.items()) * 1000 / n
    return {
        "system": "harvest",
        "mode": "remote_start_to_result",
        "workflow": "one_step (one no-op activity)",
        "rate_wf_per_s": rate,
        "n": n,
        "start_to_result": latency_summary(took),
        "backends_ms_per_run": round(backends, 4),
        # Runs whose result came after a second: result() waits on NOTIFY and re-reads the
        # run every 5 s, so these are wake-ups it missed (docs/benchmarks.md).
        "over_1s": sum(1 for t in took if t > 1.0),
    }


def measure_sync(dsn: str, rate: float, seconds: float, warmup: int, wait: str) -> dict:
    from concurrent.futures import ThreadPoolExecutor

    client = Client(dsn, pool_size=4, check_schema=False)
    took: list[float] = []

    def one(i: int, record: bool) -> None:
        t0 = time.perf_counter()
        if wait == "execute":
            client.execute_workflow(one_step, i, result_timeout=60)
        else:
            client.start_workflow(one_step, i).result(timeout=60)
        if record:
            took.append(time.perf_counter() - t0)

    try:
        for i in range(warmup):
            one(i, False)
        n = max(1, int(rate * seconds))
        with ThreadPoolExecutor(16) as pool:
            runs = []
            t0 = time.monotonic()
            for i in range(n):
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                runs.append(pool.submit(one, i, True))
            for run in runs:
                run.result()
    finally:
        client.close()
    return {
        "system": "harvest",
        "mode": "remote_start_to_result_sync",
        "workflow": "one_step (one no-op activity), synchronous Client",
        "rate_wf_per_s": rate,
        "n": n,
        "start_to_result": latency_summary(took),
        "over_1s": sum(1 for t in took if t > 1.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--serve", action="store_true", help="run the worker (the child process)")
    parser.add_argument("--rate", type=float, default=20.0, help="workflows started per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--client", choices=("async", "sync"), default="async")
    parser.add_argument(
        "--client-loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="the async client's event loop (the worker's is uvloop when installed, as `harvest worker`'s)",
    )
    parser.add_argument(
        "--wait",
        choices=("execute", "result"),
        default="execute",
        help="execute_workflow (the start marks its waiter; default) or start_workflow then result()",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.serve:  # the worker process, on the loop `harvest worker` picks (uvloop when installed)
        choose_event_loop("auto").run(serve(args.dsn))
        return
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--dsn", args.dsn, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    cpu = time.process_time()
    try:
        if child.stdout.readline().strip() != "ready":
            raise SystemExit(f"the worker process did not start ({child.wait()})")
        if args.client == "sync":
            result = measure_sync(args.dsn, args.rate, args.seconds, args.warmup, args.wait)
        else:
            loop = choose_event_loop(args.client_loop)
            result = loop.run(measure(args.dsn, args.rate, args.seconds, args.warmup, args.wait))
            result["client_loop"] = loop.name
    finally:
        child.stdin.close()
        worker_cpu = child.stdout.readline().split()
        child.wait(timeout=60)
    # Python CPU of each process per run (warm-up included): the worker's and this client's.
    n = result["n"] + args.warmup
    result["cpu_ms_per_run"] = {
        "client": round((time.process_time() - cpu) * 1000 / n, 3),
        "worker": round(float(worker_cpu[1]) * 1000 / n, 3) if len(worker_cpu) == 2 else None,
    }
    result["measured_at"] = datetime.now(UTC).isoformat()
    emit(result)


if __name__ == "__main__":
    main()
