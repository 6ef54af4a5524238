"""Held wake-ups on a real worker (docs/internals.md, "Held wake-ups").

A run whose decision leaves it waiting for all of its open activities at once (an
``asyncio.gather`` of them) sends ``hold_wakeups`` with it, and the database makes no workflow
task for a result while another of the run's activity tasks is open: a 100-activity gather takes
two decisions (the schedule and the close), not one per result batch. What acts on one result
(``as_completed``), a final failure and a signal still wake the run at once. (On the base the
decision counts are higher and ``executions.wake_hold`` does not exist; the wake-at-once tests
guard against a hold that delays a run.)
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg

from harvest import App, Client, RetryPolicy, activity, workflow
from harvest.core.errors import ActivityError
from harvest.testing import WorkflowReplayer

DSN: dict[str, str] = {}
PATIENCE = 20.0  # how long an activity below waits for what a wrongly held run would never do


@activity
async def noop(ctx: Any, i: int) -> int:
    await asyncio.sleep((i % 7) * 0.003)  # results spread over several batches
    return i


@activity(retry=RetryPolicy.none(), dead_letter=False)
async def fails(ctx: Any) -> None:
    raise RuntimeError("no")


def _run_status(execution_id: str) -> str:
    with psycopg.connect(DSN["db"], autocommit=True) as conn:
        (status,) = conn.execute(
            "SELECT status FROM harvest.executions WHERE id = %s", (execution_id,)
        ).fetchone()
    return str(status)


def _scheduled(execution_id: str) -> int:
    with psycopg.connect(DSN["db"], autocommit=True) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM harvest.events"
            " WHERE execution_id = %s AND event_type = 'ActivityScheduled'",
            (execution_id,),
        ).fetchone()
    return int(count)


@activity
async def waits_for_close(ctx: Any) -> str:
    """Returns once its run has ended (a run held too long never ends while this waits)."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        if await asyncio.to_thread(_run_status, ctx.execution_id) != "RUNNING":
            return "closed"
        await asyncio.sleep(0.05)
    return "timeout"


@activity
async def waits_for_a_third(ctx: Any) -> str:
    """Returns once its run has scheduled a third activity, which it does on another's result."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        if await asyncio.to_thread(_scheduled, ctx.execution_id) >= 3:
            return "saw it"
        await asyncio.sleep(0.05)
    return "timeout"


@workflow
async def gathers(ctx: Any, n: int) -> int:
    return sum(await asyncio.gather(*(ctx.execute_activity(noop, i) for i in range(n))))


@workflow
async def one_then_gathers(ctx: Any, n: int) -> int:
    first = await ctx.execute_activity(noop, 1000)
    return first + sum(await asyncio.gather(*(ctx.execute_activity(noop, i) for i in range(n))))


@workflow
async def acts_on_each(ctx: Any) -> list[Any]:
    out: list[Any] = []
    for next_done in asyncio.as_completed(
        [ctx.execute_activity(noop, 1), ctx.execute_activity(waits_for_a_third)]
    ):
        got = await next_done
        out.append(got)
        if got == 1:
            out.append(await ctx.execute_activity(noop, 2))
    return out


@workflow
async def gathers_one_that_fails(ctx: Any) -> str:
    try:
        await asyncio.gather(ctx.execute_activity(fails), ctx.execute_activity(waits_for_close))
    except ActivityError:
        return "failed early"
    return "all done"


@workflow
async def gathers_beside_a_signal(ctx: Any) -> str:
    work = asyncio.ensure_future(
        asyncio.gather(ctx.execute_activity(waits_for_close), ctx.execute_activity(waits_for_close))
    )
    await ctx.wait_for_signal("stop")
    work.cancel()
    return "stopped"


APP = App(
    workflows=[gathers, one_then_gathers, acts_on_each, gathers_one_that_fails, gathers_beside_a_signal],
    activities=[noop, fails, waits_for_close, waits_for_a_third],
)


def _history(execution_id: str) -> list[dict]:
    with psycopg.connect(DSN["db"]) as conn:
        rows = conn.execute(
            "SELECT event_id, event_type, event_data FROM harvest.events"
            " WHERE execution_id = %s ORDER BY event_id",
            (execution_id,),
        ).fetchall()
    return [{"event_id": i, "event_type": t, "event_data": d} for i, t, d in rows]


def _decisions(history: list[dict]) -> int:
    return sum(1 for e in history if e["event_type"] == "WorkflowTaskCompleted")


def _held(execution_id: str) -> bool:
    with psycopg.connect(DSN["db"], autocommit=True) as conn:
        (held,) = conn.execute(
            "SELECT wake_hold FROM harvest.executions WHERE id = %s", (execution_id,)
        ).fetchone()
    return bool(held)


def test_a_gather_of_100_activities_takes_two_decisions(db, start_worker):
    DSN["db"] = db
    worker = start_worker(APP, concurrency=20)
    with Client(db) as client:
        handles = [client.start_workflow(gathers, 100, workflow_id=f"gathers-{i}") for i in range(4)]
        handles.append(client.start_workflow(one_then_gathers, 50, workflow_id="one-then-gathers"))
        assert [h.result(timeout=60) for h in handles] == [4950] * 4 + [1000 + 1225]
    worker.stop()
    for handle in handles[:4]:
        history = _history(handle.execution_id)
        assert sum(1 for e in history if e["event_type"] == "ActivityCompleted") == 100
        assert _decisions(history) == 2, [
            e["event_type"] for e in history if e["event_type"] != "ActivityCompleted"
        ]
        WorkflowReplayer(APP).replay_or_raise(history)
    # The one result before the gather: a decision ahead (or a woken task) that schedules the
    # 50 and holds, then the close.
    history = _history(handles[4].execution_id)
    assert _decisions(history) == 3
    WorkflowReplayer(APP).replay_or_raise(history)


def test_as_completed_still_wakes_per_result(db, start_worker):
    DSN["db"] = db
    worker = start_worker(APP, concurrency=10)
    with Client(db) as client:
        handle = client.start_workflow(acts_on_each, workflow_id="acts-on-each")
        # The third activity is scheduled on the first result, while the second still waits.
        assert handle.result(timeout=60) == [1, 2, "saw it"]
    worker.stop()
    assert not _held(handle.execution_id)


def test_a_final_failure_wakes_a_held_gather_at_once(db, start_worker):
    DSN["db"] = db
    worker = start_worker(APP, concurrency=10)
    with Client(db) as client:
        handle = client.start_workflow(gathers_one_that_fails, workflow_id="fails-early")
        assert handle.result(timeout=60) == "failed early"
    worker.stop()
    assert _held(handle.execution_id)  # its first decision held its wake-ups
    kinds = [e["event_type"] for e in _history(handle.execution_id)]
    # The run ended on the failure, while its other activity still waited for that end.
    assert "ActivityFailed" in kinds and "ActivityCompleted" not in kinds


def test_a_signal_wakes_a_held_run(db, start_worker):
    DSN["db"] = db
    worker = start_worker(APP, concurrency=10)
    with Client(db) as client:
        handle = client.start_workflow(gathers_beside_a_signal, workflow_id="signalled")
        deadline = time.monotonic() + 30
        while not _held(handle.execution_id):
            assert time.monotonic() < deadline, "the run's first decision never held"
            time.sleep(0.05)
        handle.signal("stop")
        assert handle.result(timeout=60) == "stopped"
    worker.stop()
    kinds = [e["event_type"] for e in _history(handle.execution_id)]
    assert "SignalReceived" in kinds and "ActivityCompleted" not in kinds
