"""`harvest worker drain --deadline`: the drained worker stops at the deadline even with work still in
flight, and releases that work at once for another worker."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
from operator_helpers import harvest

from harvest import App, Client, activity, workflow

gate = threading.Event()
started: list[int] = []


@activity(start_to_close="120s")
async def stuck(ctx, n: int) -> int:
    started.append(n)
    while not gate.is_set():
        await asyncio.sleep(0.02)
    return n


@workflow
async def runs_stuck(ctx, n: int) -> int:
    return await ctx.execute_activity(stuck, n)


def wait_until(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_drain_deadline_stops_the_worker_and_releases_in_flight_work(
    db: str, start_worker, client: Client
) -> None:
    gate.clear()
    started.clear()
    app = App(workflows=[runs_stuck], activities=[stuck])
    # A long shutdown grace: only the deadline can end this drain early.
    # Heartbeats 1 s apart: drain_worker calls a worker stale after two intervals without one,
    # and a loaded machine let 0.4 s pass (CI 67a: 'stale_worker', load 16-20).
    running = start_worker(app, heartbeat_interval=1.0, shutdown_grace=120)
    worker_id = running.worker.worker_id
    handle = client.start_workflow(runs_stuck, 1)
    wait_until(lambda: started == [1], what="the activity to be in flight")

    # Far enough ahead that the CLI's own start on a loaded machine does not reach it (the
    # command refuses a deadline in the past), near enough that only it can end the drain.
    deadline = (datetime.now(UTC) + timedelta(seconds=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
    began = time.monotonic()
    r = harvest(
        db,
        "worker",
        "drain",
        worker_id,
        "--deadline",
        deadline,
        "--operator-id",
        "oncall",
        "--output",
        "json",
    )
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert answer["outcome"] == "accepted" and answer["in_flight"] == 1
    assert datetime.fromisoformat(answer["drain_deadline"]) == datetime.fromisoformat(deadline)

    with psycopg.connect(db, autocommit=True) as conn:
        wait_until(
            lambda: (
                conn.execute("SELECT status FROM harvest.workers WHERE id = %s", (worker_id,)).fetchone()[0]
                == "stopped"
            ),
            timeout=30,
            what="the worker to stop",
        )
        took = time.monotonic() - began
        assert took < 15, f"the drain took {took:.1f}s: the deadline was not enforced"
        # The activity never finished: it was handed back, unowned, for another worker.
        rows = conn.execute(
            "SELECT kind, status, lease_owner FROM harvest.tasks WHERE execution_id = %s",
            (handle.execution_id,),
        ).fetchall()
        assert rows == [("activity", "pending", None)]
    running._thread.join(20)
    assert not running._thread.is_alive()
    gate.set()
    start_worker(app)  # a replacement worker finishes the released work
    assert handle.result(timeout=30) == 1
