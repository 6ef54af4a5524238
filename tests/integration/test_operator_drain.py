"""A remote drain: the worker finishes its in-flight activities, claims nothing new, and ends stopped."""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
import pytest

from harvest import App, Client, activity, workflow
from harvest.db.sqlapi import AsyncSqlApi
from harvest.worker import worker as worker_module

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
    # Heartbeats 1 s apart: drain_worker calls a worker stale after two intervals without one,
    # and a loaded machine let 0.4 s pass (CI 67a: 'stale_worker', load 16-20).
    running = start_worker(app, heartbeat_interval=1.0, shutdown_grace=30)
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


@pytest.mark.parametrize("decides", [False, True], ids=["claim", "claim-that-decides"])
def test_a_claim_in_flight_when_the_drain_is_noticed_starts_nothing_it_claimed(
    db: str, start_worker, client: Client, monkeypatch, decides: bool
) -> None:
    """A claim that returns after the worker heard of its drain starts nothing: what it claimed
    goes back with nothing spent (release_task; a claim that decides is rolled back), so the
    drain claims nothing new. The claim is held in flight once the database has answered it,
    until the worker has noticed the drain."""
    held, release = threading.Event(), threading.Event()
    by_open_claim = []  # whether the claim held was one that decides (a woken claim; a poll's is plain)

    async def hold(rows: list, open_claim: bool = False) -> None:
        if rows and not held.is_set():  # the first claim that took something
            by_open_claim.append(open_claim)
            held.set()
            while not release.is_set():
                await asyncio.sleep(0.02)

    claim_tasks, claim_tasks_open = AsyncSqlApi.claim_tasks, worker_module.claim_tasks_open

    async def held_claim(self, *args, **kwargs):
        rows = await claim_tasks(self, *args, **kwargs)
        await hold(rows)
        return rows

    async def held_open_claim(*args, **kwargs):
        rows, claim = await claim_tasks_open(*args, **kwargs)
        await hold(rows, open_claim=True)
        return rows, claim

    monkeypatch.setattr(AsyncSqlApi, "claim_tasks", held_claim)
    monkeypatch.setattr(worker_module, "claim_tasks_open", held_open_claim)
    app = App(workflows=[runs_slow], activities=[slow])
    running = start_worker(app, heartbeat_interval=1.0, shutdown_grace=30)
    worker = running.worker
    worker.claim_decides = decides
    wait_until(worker.booted.is_set, what="the worker to boot")
    late = client.start_workflow(runs_slow, 3)
    wait_until(held.is_set, what="a claim holding the run's workflow task")
    with psycopg.connect(db, autocommit=True) as conn:
        drained = conn.execute(
            "SELECT harvest.drain_worker(%s, NULL, 'test')", (worker.worker_id,)
        ).fetchone()
        assert drained[0]["outcome"] == "accepted"
        wait_until(worker._stopping.is_set, what="the worker to notice the drain")
        release.set()  # the claim returns now, after the drain was noticed
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT status FROM harvest.workers WHERE id = %s", (worker.worker_id,)
                ).fetchone()[0]
                == "stopped"
            ),
            what="status stopped",
        )
        events = conn.execute(
            "SELECT event_type FROM harvest.events WHERE execution_id = %s ORDER BY event_id",
            (late.execution_id,),
        ).fetchall()
        assert events == [("WorkflowStarted",)], "the drained worker ran the task its late claim took"
        tasks = conn.execute(
            "SELECT kind, status, lease_owner, attempt FROM harvest.tasks WHERE execution_id = %s",
            (late.execution_id,),
        ).fetchall()
        # Handed back, unleased and due: a rolled back claim left no trace; release_task keeps a
        # workflow task's count of claims, as the stop's release does (an activity's attempt it
        # gives back). With claim_decides on, the claim is one that decides only when a wake-up
        # started it: on a loaded machine a poll's plain claim can take the task first (CI 66b).
        assert decides or not by_open_claim[0]
        assert tasks == [("workflow", "pending", None, 0 if by_open_claim[0] else 1)], "handed back"
    running._thread.join(20)
    assert not running._thread.is_alive()
    monkeypatch.undo()
    start_worker(app)  # another worker takes it at once
    gate.set()
    assert late.result(timeout=20) == 30
