"""Worker memory per cached run, and the sticky cache bounded in bytes; no database.

N runs of the canonical workflow (bench/canonical.py: three no-op activities in sequence)
are stepped as a worker steps them (the start's decision committed, the first activity's
result read and the second activity scheduled) and put into a ``StickyCache``: the run a
worker keeps between two workflow tasks. ``tracemalloc`` measures the Python memory they
hold (traced after - before, garbage collected, / N) beside the cache's own estimate of them
(``cached_run_bytes``: a fixed cost plus the payloads fed to the run). The same for a run fed
a 10 KB result, where the payload outweighs the fixed cost. Then N runs go into a cache
bounded only by ``--max-bytes``: how many it keeps and the memory they hold.

Prints one JSON object (bench/common.py).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from canonical import noop, three_steps
from common import emit

from harvest import App, activity, workflow
from harvest.runtime import WorkflowRun
from harvest.worker.workflows import CACHED_RUN_BASE_BYTES, StickyCache


@activity
async def fetch(ctx: Any, i: int) -> str:
    return "x" * 10_000


@workflow
async def holds_result(ctx: Any, n: int) -> int:
    page = await ctx.execute_activity(fetch, 1)
    await ctx.execute_activity(noop, 2)
    return len(page) + n


APP = App(workflows=[three_steps, holds_result], activities=[noop, fetch])


async def cached_run(i: int, wf: Any, result: Callable[[int], Any]) -> WorkflowRun:
    """A run as a worker caches it: waiting on its second activity."""
    execution_id = f"00000000-0000-4000-8000-{i:012d}"
    run = WorkflowRun(APP, wf, execution_id, f"bench-{i}", "default")
    started = {
        "workflow_name": wf.__name__,
        "workflow_id": f"bench-{i}",
        "input": [i],
        "task_queue": "default",
    }
    first = await run.advance([{"event_id": 1, "event_type": "WorkflowStarted", "event_data": started}])
    run.recorded(1 + 1 + len(first.commands))  # the decision's own events, as the worker takes them
    seq = first.commands[0]["seq"]
    done = {"seq": seq, "result": result(i), "attempt": 1}  # its own object, as a fetch decodes it
    second = await run.advance(
        [{"event_id": run.last_event_id + 1, "event_type": "ActivityCompleted", "event_data": done}]
    )
    run.recorded(run.last_event_id + 1 + len(second.commands))
    assert run.settled and second.commands[0]["type"] == "schedule_activity"
    return run


async def measure(n: int, wf: Any, result: Callable[[int], Any], max_bytes: int | None) -> dict[str, Any]:
    cache = StickyCache(capacity=n, max_bytes=max_bytes)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        cache.put(f"run-{i}", await cached_run(i, wf, result))
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    kept = len(cache)
    out = {
        "runs": n,
        "kept": kept,
        "traced_bytes": held,
        "traced_bytes_per_run": round(held / kept) if kept else None,
        "estimate_bytes": cache.bytes,
        "estimate_bytes_per_run": round(cache.bytes / kept) if kept else None,
        "evictions": cache.evictions,
    }
    for run_id in list(cache.ids()):
        cache.drop(run_id)
    return out


async def bench(n: int, max_bytes: int) -> dict[str, Any]:
    canonical = await measure(n, three_steps, lambda i: 1, None)
    large = await measure(n, holds_result, lambda i: f"{i:010d}".ljust(10_000, "x"), None)
    bounded = await measure(n, three_steps, lambda i: 1, max_bytes)
    bounded["max_bytes"] = max_bytes
    return {
        "system": "harvest",
        "mode": "cache_memory",
        "base_bytes": CACHED_RUN_BASE_BYTES,
        "canonical": canonical,
        "result_10kb": large,
        "bounded": bounded,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2_000)
    parser.add_argument("--max-bytes", type=int, default=2 * 1024 * 1024)
    args = parser.parse_args()
    result = asyncio.run(bench(args.runs, args.max_bytes))
    result["measured_at"] = datetime.now(UTC).isoformat()
    emit(result)


if __name__ == "__main__":
    main()
