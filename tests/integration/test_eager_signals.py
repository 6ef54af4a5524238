"""Eager signals (functions/signals.sql signal_workflow_eager; docs/messages.md, "Eager signals").

An ``AsyncClient`` given the worker of its own process (``eager_worker=``) sends each signal with
``signal_workflow_eager``: the signal's transaction leases the run's woken workflow task to that
worker when the hand-off rules allow, and the worker runs it without a NOTIFY or a claim. The
history must be what an ordinary signal writes; where the rules forbid it, the signal is an
ordinary one.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from history_helpers import RUN_SPECIFIC, comparable_history

from harvest import App, AsyncClient, Worker, activity, workflow
from harvest.core.errors import InvalidArgument


@activity
async def double(ctx, i: int) -> int:
    return 2 * i


@workflow
async def pinged(ctx, pings: int) -> int:
    total = 0
    for _ in range(pings):
        i = await ctx.wait_for_signal("ping", type_hint=int)
        total += await ctx.execute_activity(double, i)
    return total


APP = App(workflows=[pinged], activities=[double])
SIGNAL_RUN_SPECIFIC = (*RUN_SPECIFIC, "signal_id")  # a signal's id differs between two runs too


async def _idle(db: str, execution_id: str, completed: int) -> None:
    """Until the run has ``completed`` activities and no task: it waits for its next signal."""
    deadline = time.monotonic() + 30
    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = await (
                await conn.execute(
                    "SELECT (SELECT count(*) FROM harvest.events WHERE execution_id = %(id)s"
                    "        AND event_type = 'ActivityCompleted'),"
                    "       (SELECT count(*) FROM harvest.tasks WHERE execution_id = %(id)s)",
                    {"id": execution_id},
                )
            ).fetchone()
            assert row is not None
            if row[0] >= completed and row[1] == 0:
                return
            await asyncio.sleep(0.02)
    raise AssertionError(f"run {execution_id} did not settle after {completed} activities")


async def _signal_three(db: str, eager: bool, **options: object) -> tuple[str, Worker]:
    worker = Worker(APP, db, **options)
    running = asyncio.create_task(worker.run())
    try:
        while not (worker.lanes[0].usable and worker.lanes[0].sleeping):
            await asyncio.sleep(0.01)
        async with await AsyncClient.connect(db, eager_worker=worker if eager else None) as client:
            handle = await client.start_workflow(pinged, 3, workflow_id=f"pinged-{eager}-{len(options)}")
            await _idle(db, handle.execution_id, 0)
            for i in range(3):
                event_id = await handle.signal("ping", i + 1)
                assert isinstance(event_id, int)
                await _idle(db, handle.execution_id, i + 1)
            assert await handle.result(timeout=30) == 12
        assert worker.free_slots() == worker.concurrency  # every promised slot given back
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, 30)
    return handle.execution_id, worker


def test_an_eager_signal_hands_the_woken_task_to_the_worker_and_writes_the_same_history(db: str) -> None:
    plain_run, plain = asyncio.run(_signal_three(db, False))
    eager_run, eager = asyncio.run(_signal_three(db, True))
    assert plain.eager_tasks == 0
    # Each signal found the run idle, decided last by this worker: each woken task was handed.
    assert eager.eager_tasks == 3
    assert comparable_history(db, eager_run, SIGNAL_RUN_SPECIFIC) == comparable_history(
        db, plain_run, SIGNAL_RUN_SPECIFIC
    )
    with psycopg.connect(db) as conn:
        leftovers = conn.execute("SELECT count(*) FROM harvest.tasks").fetchone()
    assert leftovers == (0,)


def test_a_worker_that_takes_no_hand_off_gets_an_ordinary_signal(db: str) -> None:
    run, worker = asyncio.run(_signal_three(db, True, hand_off=False))
    assert worker.eager_tasks == 0
    assert worker.eager_slot() is None
    assert comparable_history(db, run)[-1][0] == "WorkflowCompleted"


def test_a_full_worker_promises_no_slot(db: str) -> None:
    async def main() -> None:
        worker = Worker(APP, db, concurrency=1)
        lane = worker.lanes[0]
        lane.ready = True
        lane.sql = object()  # type: ignore[assignment]  # usable, never called
        assert worker.eager_slot() is None  # not running: no loop of its own yet
        worker._loop = asyncio.get_running_loop()
        slot = worker.eager_slot()
        assert slot == (worker.worker_id, worker.workflow_lease)
        assert worker.eager_slot() is None  # its one slot is promised
        worker.run_eager(None)
        assert worker.free_slots() == 1
        worker.request_stop()
        assert worker.eager_slot() is None  # stopping: no new work

    asyncio.run(main())


def test_a_worker_on_another_event_loop_gets_ordinary_signals(db: str, start_worker) -> None:
    running = start_worker(APP)  # its own loop, in a thread

    async def main() -> tuple[str, int]:
        while not (running.worker.lanes[0].usable and running.worker.lanes[0].sleeping):
            await asyncio.sleep(0.01)
        async with await AsyncClient.connect(db, eager_worker=running.worker) as client:
            handle = await client.start_workflow(pinged, 1, workflow_id="pinged-thread")
            await _idle(db, handle.execution_id, 0)
            await handle.signal("ping", 5)
            return handle.execution_id, await handle.result(timeout=30)

    run, result = asyncio.run(main())
    running.stop()
    assert result == 10
    assert running.worker.eager_tasks == 0
    assert running.worker.free_slots() == running.worker.concurrency
    assert comparable_history(db, run)[-1][0] == "WorkflowCompleted"


def test_eager_worker_needs_one_database() -> None:
    with pytest.raises(InvalidArgument, match="eager_worker"):
        AsyncClient(None, None, shards=object(), eager_worker=object())  # type: ignore[arg-type]
