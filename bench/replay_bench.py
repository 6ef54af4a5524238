"""Replay speed on a sticky-cache miss: a fresh WorkflowRun fed a long history, no database.

A workflow that calls one activity at a time writes three events per step
(``WorkflowTaskCompleted``, ``ActivityScheduled``, ``ActivityCompleted``). The
history is built the way the engine builds it: a warm run is stepped live and
its commands become events exactly as ``complete_workflow_task`` writes them
(docs/internals.md). Then a *fresh* run replays the whole history, which is what
a worker does on a cache miss. Events per second = events / replay time.

Two figures per size: ``runtime`` (events already decoded, as psycopg returns
jsonb) and ``with_json`` (each event's data parsed from JSON text first, an upper
bound on the decode work of the fetch), and the peak of the Python memory one more
(untimed) replay allocates (``tracemalloc``). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import tracemalloc
from datetime import UTC, datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit

from harvest import App, activity, workflow
from harvest.runtime import WorkflowRun


@activity
async def step(ctx, i: int) -> int:
    return i


@workflow
async def long_chain(ctx, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.execute_activity(step, i)
    return total


APP = App(workflows=[long_chain], activities=[step])
COMMAND_EVENT = {"schedule_activity": "ActivityScheduled", "complete_workflow": "WorkflowCompleted"}


def _event(events: list[dict], event_type: str, data: dict) -> None:
    events.append({"event_id": len(events) + 1, "event_type": event_type, "event_data": data})


async def build_history(target_events: int) -> list[dict]:
    """A running execution's history of at least target_events events."""
    steps = max(1, (target_events - 1) // 3)
    events: list[dict] = []
    _event(
        events,
        "WorkflowStarted",
        {
            "workflow_name": "long_chain",
            "workflow_id": "bench",
            "input": [steps + 10],
            "task_queue": "default",
        },
    )
    run = WorkflowRun(APP, long_chain, "exec-bench", "bench", "default")
    seen = 0
    while len(events) < target_events:
        activation = await run.advance(events[seen:])
        seen = len(events)
        _event(events, "WorkflowTaskCompleted", {"through": activation.through, "worker_id": "bench"})
        for cmd in activation.commands:
            data = {k: v for k, v in cmd.items() if k != "type"}
            _event(events, COMMAND_EVENT[cmd["type"]], data)
            if cmd["type"] == "schedule_activity":
                _event(
                    events, "ActivityCompleted", {"seq": cmd["seq"], "result": cmd["input"][0], "attempt": 1}
                )
    run.close()
    return events


async def replay_once(events: list[dict], decode_json: bool) -> tuple[float, int]:
    if decode_json:
        texts = [(e["event_id"], e["event_type"], json.dumps(e["event_data"])) for e in events]
        t0 = time.perf_counter()
        batch = [{"event_id": i, "event_type": t, "event_data": json.loads(d)} for i, t, d in texts]
    else:
        batch = [dict(e) for e in events]
        t0 = time.perf_counter()
    run = WorkflowRun(APP, long_chain, "exec-bench", "bench", "default")
    activation = await run.advance(batch)
    elapsed = time.perf_counter() - t0
    run.close()
    return elapsed, len(activation.commands)


async def bench(sizes: list[int], repeats: int) -> dict:
    results = []
    for size in sizes:
        events = await build_history(size)
        row = {"events": len(events)}
        for label, decode in (("runtime", False), ("with_json", True)):
            times = []
            for _ in range(repeats):
                elapsed, new_commands = await replay_once(events, decode)
                assert new_commands == 1, "a replay of a running history issues the next command"
                times.append(elapsed)
            best, median = min(times), sorted(times)[len(times) // 2]
            row[label] = {
                "median_s": round(median, 4),
                "best_s": round(best, 4),
                "events_per_s": round(len(events) / median),
            }
        # Memory, in one more replay (untimed: tracing slows it): the peak of the Python
        # allocations the replay makes, the history's own list excluded (it exists before).
        tracemalloc.start()
        await replay_once(events, False)
        row["memory_peak_mib"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
        tracemalloc.stop()
        results.append(row)
    return {"system": "harvest", "mode": "replay", "repeats": repeats, "sizes": results}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    result = asyncio.run(bench([int(s) for s in args.sizes.split(",")], args.repeats))
    result["measured_at"] = datetime.now(UTC).isoformat()
    emit(result)


if __name__ == "__main__":
    main()
