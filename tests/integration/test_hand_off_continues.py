"""A handler goes on with the first task its commit hands it, in its own asyncio task
(harvest/worker/worker.py, ``run_handed`` and ``_guard``): a sequential workflow's handed
activities run one after another in the asyncio task of the workflow task that scheduled the
first, with no asyncio task made per hand-off. What each writes is what a task of its own
writes (test_hand_off.py compares the histories with a claim-only run's), and a stop that
cancels a task run this way hands it back as it hands back any task in flight."""

from __future__ import annotations

import asyncio
import threading

import psycopg

from harvest import App, Client, activity, workflow
from harvest.worker import worker as worker_module

tasks_seen: list[asyncio.Task] = []  # (the tasks themselves: held, their ids cannot be reused)
blocked_started = threading.Event()


@activity
async def note_task(ctx, x: int) -> int:
    tasks_seen.append(asyncio.current_task())
    return x + 1


@activity
async def wait_forever(ctx, x: int) -> int:
    tasks_seen.append(asyncio.current_task())
    blocked_started.set()
    await asyncio.Event().wait()  # until the stop cancels it
    return x


@workflow
async def three_noted(ctx, x: int) -> int:
    x = await ctx.execute_activity(note_task, x)
    x = await ctx.execute_activity(note_task, x)
    return await ctx.execute_activity(note_task, x)


@workflow
async def noted_then_blocked(ctx, x: int) -> int:
    x = await ctx.execute_activity(note_task, x)
    return await ctx.execute_activity(wait_forever, x, start_to_close="1h")


def test_handed_activities_run_in_the_asyncio_task_of_the_handler_that_was_handed_them(
    db, start_worker, monkeypatch
):
    monkeypatch.setattr(worker_module, "HAND_OFF_CHAIN_SECS", 3600.0)  # (a loaded machine)
    tasks_seen.clear()
    worker = start_worker(App(workflows=[three_noted], activities=[note_task]))
    with Client(db) as client:
        assert client.start_workflow(three_noted, 1, workflow_id="noted").result(timeout=30) == 4
    worker.stop()
    assert worker.worker.handed_tasks == 3
    # The first activity runs in the workflow task's asyncio task, each next one in its
    # caller's: one asyncio task for the three (three of them before).
    assert len(tasks_seen) == 3
    assert tasks_seen[0] is tasks_seen[1] is tasks_seen[2]
    assert not worker.worker._inflight and not worker.worker._held


def test_a_stop_hands_back_a_task_its_caller_went_on_with(db, start_worker, monkeypatch):
    monkeypatch.setattr(worker_module, "HAND_OFF_CHAIN_SECS", 3600.0)
    tasks_seen.clear()
    blocked_started.clear()
    app = App(workflows=[noted_then_blocked], activities=[note_task, wait_forever])
    worker = start_worker(app, shutdown_grace=0.2)
    with Client(db) as client:
        handle = client.start_workflow(noted_then_blocked, 1, workflow_id="blocked")
        assert blocked_started.wait(30)
        worker.stop()
        # It ran in its caller's asyncio task, which the stop cancelled: its task is handed back
        # (pending, leased to nobody, the attempt not counted), nothing is left in flight.
        assert len(tasks_seen) == 2 and tasks_seen[0] is tasks_seen[1]
        assert not worker.worker._inflight and not worker.worker._held
        with psycopg.connect(db, autocommit=True) as conn:
            row = conn.execute(
                "SELECT status, lease_owner, attempt FROM harvest.tasks"
                " WHERE execution_id = %s AND activity_name = 'wait_forever'",
                (handle.execution_id,),
            ).fetchone()
        assert row == ("pending", None, 0)  # (release_task takes the attempt back)
