"""A query, or an update with a validator, asked of a run that has not completed its first workflow
task (docs/messages.md, "Before the run's first workflow task"): its state does not exist yet, so
the request waits for that task, within the caller's timeout, and is then answered from the real
state; past the timeout the error says why the task has not completed. Real workers: a worker
killed holding the run's first workflow task is played by a claim made by hand (its lease runs
out, and a live worker takes the task after)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from harvest import App, Client, StartOptions, query, update, workflow
from harvest.core.errors import QueryFailed, QueryTimeout


@workflow(name="first_task_ledger")
async def ledger(ctx, owner: str) -> int:
    ctx.state.update(owner=owner, total=0)
    await ctx.wait_for_signal("close")
    await ctx.drain_admitted_updates()
    return ctx.state["total"]


@query(workflow="first_task_ledger")
def total(ctx) -> int:
    return ctx.state["total"]


def within_budget(ctx, amount: int) -> None:
    if ctx.state["total"] + amount > 100:
        raise ValueError("the budget is 100")


@update(workflow="first_task_ledger", validator=within_budget)
def spend(ctx, amount: int) -> int:
    ctx.state["total"] += amount
    return ctx.state["total"]


APP = App(workflows=[ledger], queries=[total], updates=[spend])


def hold_first_task(db: str, queue: str, lease_secs: float) -> None:
    """A worker that claims the run's first workflow task and dies (kill -9): nobody decides it
    until its lease runs out."""
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT kind FROM harvest.claim_tasks('killed-worker', ARRAY[%s], 1, %s)", (queue, lease_secs)
        ).fetchall()
    assert rows == [("workflow",)]


def first_task_done(db: str, execution_id: str) -> bool:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT EXISTS (SELECT 1 FROM harvest.events WHERE execution_id = %s"
            " AND event_type = 'WorkflowTaskCompleted')",
            (execution_id,),
        ).fetchone()[0]


def wait_for_request(db: str, execution_id: str, asking: threading.Thread, status: str) -> None:
    """Until the asking thread's request is in, with ``status``."""
    with psycopg.connect(db, autocommit=True) as conn:
        while not conn.execute(
            "SELECT EXISTS (SELECT 1 FROM harvest.query_requests WHERE execution_id = %s AND status = %s)",
            (execution_id, status),
        ).fetchone()[0]:
            assert asking.is_alive()
            asking.join(0.05)


def test_a_query_waits_for_the_first_workflow_task_held_by_a_dead_worker(
    db: str, client: Client, start_worker: Any
) -> None:
    handle = client.start_workflow(ledger, "ann", options=StartOptions(queue="ft_held"))
    hold_first_task(db, "ft_held", 2)
    start_worker(APP, queues=["ft_held"])
    # Before: the worker answered at once from an empty state, the handler's own KeyError.
    assert handle.query("total", timeout=30) == 0
    assert first_task_done(db, handle.execution_id)


def test_a_validator_waits_for_the_first_workflow_task_held_by_a_dead_worker(
    db: str, client: Client, start_worker: Any
) -> None:
    handle = client.start_workflow(ledger, "ann", options=StartOptions(queue="ft_held_update"))
    hold_first_task(db, "ft_held_update", 2)
    start_worker(APP, queues=["ft_held_update"])
    # Before: the validator read an empty state and the update was rejected with its KeyError.
    assert handle.update("spend", 30, timeout=30) == 30
    handle.signal("close")
    assert handle.result(timeout=30) == 30


def test_a_query_sent_before_any_worker_polls_is_answered_from_the_first_task(
    db: str, client: Client, start_worker: Any
) -> None:
    handle = client.start_workflow(ledger, "bob", options=StartOptions(queue="ft_unpolled"))
    answers: list[Any] = []
    asking = threading.Thread(target=lambda: answers.append(handle.query("total", timeout=30)))
    asking.start()
    wait_for_request(db, handle.execution_id, asking, "pending")  # in before any worker polls
    start_worker(APP, queues=["ft_unpolled"])
    asking.join(40)
    assert answers == [0]


def test_the_timeout_says_which_worker_holds_the_first_workflow_task(
    db: str, client: Client, start_worker: Any
) -> None:
    handle = client.start_workflow(ledger, "cy", options=StartOptions(queue="ft_stuck"))
    hold_first_task(db, "ft_stuck", 600)
    start_worker(APP, queues=["ft_stuck"])
    with pytest.raises(QueryTimeout) as raised:
        handle.query("total", timeout=2)
    message = str(raised.value)
    assert "has not completed its first workflow task" in message, message
    assert "'killed-worker' holds its workflow task, lease until" in message, message
    with pytest.raises(QueryTimeout) as raised:
        handle.update("spend", 5, timeout=2)
    assert "has not completed its first workflow task" in str(raised.value)
    # Parked, not claimed again and again: the requests wait out of every claim.
    with psycopg.connect(db, autocommit=True) as conn:
        statuses = conn.execute(
            "SELECT status, claimed_by FROM harvest.query_requests WHERE execution_id = %s ORDER BY id",
            (handle.execution_id,),
        ).fetchall()
    assert statuses == [("waiting", None), ("waiting", None)]


def test_a_run_terminated_before_its_first_task_answers_the_waiting_query(
    db: str, client: Client, start_worker: Any
) -> None:
    handle = client.start_workflow(ledger, "dee", options=StartOptions(queue="ft_ended"))
    hold_first_task(db, "ft_ended", 600)
    start_worker(APP, queues=["ft_ended"])
    answers: list[Any] = []

    def ask() -> None:
        try:
            answers.append(handle.query("total", timeout=30))
        except Exception as exc:
            answers.append(exc)

    asking = threading.Thread(target=ask)
    asking.start()
    wait_for_request(db, handle.execution_id, asking, "waiting")
    handle.terminate("gone")
    asking.join(40)
    # Answered at once from what the run has, not left to time out: the handler's error, and why.
    assert len(answers) == 1 and isinstance(answers[0], QueryFailed), answers
    assert "ended TERMINATED before completing its first workflow task" in str(answers[0])
