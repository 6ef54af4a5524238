"""A remote drain: the worker finishes its in-flight activities, claims nothing new, and ends stopped."""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg

from harvest import App, Client, activity, workflow

gate = threading.Event()
started: list[int] = []


@activity(start_to_close="60s")
async def slow(ctx, n: int) -> int:
    started.append(n)
    while not gate.is_set():
        await asyncio.sleep(0.02)
    return n * 10


@workflow
async def runs_slow(ctx, n: int) -> int:
    return await ctx.execute_activity(slow, n)


def wait_until(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_drain_finishes_in_flight_claims_nothing_new_and_stops(db: str, start_worker, client: Client) -> None:
    gate.clear()
    started.clear()
    app = App(workflows=[runs_slow], activities=[slow])
    running = start_worker(app, heartbeat_interval=0.2, shutdown_grace=30)
    worker_id = running.worker.worker_id
    handles = [client.start_workflow(runs_slow, n) for n in (1, 2)]
    wait_until(lambda: len(started) == 2, what="two activities in flight")

    with psycopg.connect(db, autocommit=True) as conn:
        result = conn.execute("SELECT harvest.drain_worker(%s, NULL, 'test')", (worker_id,)).fetchone()[0]
        assert result["outcome"] == "accepted" and result["in_flight"] == 2
        # The worker hears it on its next heartbeat and stops claiming.
        wait_until(
            lambda: running.worker._stopping is not None and running.worker._stopping.is_set(),
            what="the worker to notice the drain",
        )
        # A claim already in flight when it noticed may still claim (worker.py, _claims): under
        # load one took the late run's task (CI 65e). The late run starts once none is in flight.
        wait_until(
            lambda: running.worker.claim_loop is not None and running.worker.claim_loop.done(),
            what="the worker's claim loop to end",
        )
        late = client.start_workflow(runs_slow, 3)
        time.sleep(0.5)
        gate.set()  # let the in-flight activities finish
        # The in-flight activities complete (their results are recorded) ...
        for h in handles:
            wait_until(
                lambda h=h: any(e["event_type"] == "ActivityCompleted" for e in h.history()),
                what="the in-flight activity to complete",
            )
        wait_until(
            lambda: (
                conn.execute("SELECT status FROM harvest.workers WHERE id = %s", (worker_id,)).fetchone()[0]
                == "stopped"
            ),
            what="status stopped",
        )
        # Nothing new was claimed: the late run's workflow task is still pending, unowned.
        assert sorted(started) == [1, 2]  # in either order: each run decides on its own
        late_tasks = conn.execute(
            "SELECT kind, status, lease_owner FROM harvest.tasks WHERE execution_id = %s",
            (late.execution_id,),
        ).fetchall()
        assert late_tasks == [("workflow", "pending", None)]
        # ... and the follow-up workflow tasks wait for another worker.
        for h in handles:
            assert h.describe()["status"] == "RUNNING"
        audit = conn.execute("SELECT operation, target, operator_id FROM harvest.audit_log").fetchall()
        assert audit == [("worker.drain", worker_id, "test")]
    running._thread.join(20)
    assert not running._thread.is_alive()
    # A replacement worker picks up everything the drained one left.
    start_worker(app)
    assert [h.result(timeout=20) for h in [*handles, late]] == [10, 20, 30]
