"""Registered workflow names: a start of a name no worker registered on its queue is refused up
front, and a run whose workflow no claiming worker has fails typed after a bounded number of
attempts instead of retrying forever."""

from __future__ import annotations

import time

import psycopg
import pytest
from operator_helpers import harvest

from harvest import App, Client, workflow
from harvest.core.errors import UnknownWorkflow, WorkflowFailed
from harvest.worker import workflows as worker_workflows


@workflow
async def greet(ctx, name: str) -> str:
    return f"hello {name}"


@workflow(name="billing.invoice")
async def invoice(ctx) -> int:
    return 1


@workflow(name="ghost")
async def ghost(ctx, n: int) -> int:
    return n + 1


def wait_until(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def registered(db: str) -> list[tuple[str, str]]:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT queue, workflow_name FROM harvest.registered_workflows ORDER BY 1, 2"
        ).fetchall()


def executions(db: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM harvest.executions").fetchone()[0]


def test_a_start_of_a_name_no_worker_registered_is_refused(db: str, start_worker, client: Client) -> None:
    # Before any worker registers, a start is taken (a client may deploy before its workers).
    early = client.start_workflow("greet", "early")
    start_worker(App(workflows=[greet, invoice]), queues=["default", "eu"])
    expected = [
        ("default", "billing.invoice"),
        ("default", "greet"),
        ("eu", "billing.invoice"),
        ("eu", "greet"),
    ]
    wait_until(lambda: registered(db) == expected, what="the worker to register its workflow names")
    assert early.result(timeout=20) == "hello early"
    before = executions(db)

    with pytest.raises(UnknownWorkflow) as refused:
        client.start_workflow("greeet", "typo", queue="eu")
    assert (refused.value.workflow_name, refused.value.queue) == ("greeet", "eu")
    assert refused.value.registered == ["billing.invoice", "greet"]

    r = harvest(db, "workflow", "start", "greeet", "--input-json", '["x"]')
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0] == (
        'error: workflow "greeet" is not registered on queue "default" '
        "(registered there: billing.invoice, greet): check the name and the queue, "
        "or start a worker whose App registers the workflow"
    )
    assert executions(db) == before  # nothing written

    # A registered name (dots and all) is taken on either queue.
    r = harvest(db, "workflow", "start", "billing.invoice", "--queue", "eu", "--output", "json")
    assert r.returncode == 0, r.stderr
    assert executions(db) == before + 1


def test_a_run_no_claiming_worker_has_fails_typed_after_bounded_attempts(
    db: str, start_worker, client: Client, monkeypatch
) -> None:
    # Started before any worker registered (so not refused), then only a worker without it polls.
    handle = client.start_workflow("ghost", 1, workflow_id="ghost-1")
    monkeypatch.setattr(worker_workflows, "WORKFLOW_TASK_RETRY_SECS", 0.01)  # the backoff, not the bound
    start_worker(App(workflows=[greet]), poll_interval=0.05)
    with pytest.raises(WorkflowFailed) as failed:
        handle.result(timeout=30)
    failure = failed.value.failure
    assert (failure["error_type"], failure["reason"], failure["non_retryable"]) == (
        "UnknownWorkflow",
        "unknown_workflow",
        True,
    )
    assert failure["details"]["attempts"] == 10
    assert failure["details"]["worker_registered"] == ["greet"]
    with psycopg.connect(db, autocommit=True) as conn:
        dead = conn.execute(
            "SELECT kind, workflow_name, attempts, failure ->> 'reason' FROM harvest.dead_letters "
            "WHERE execution_id = %s",
            (handle.execution_id,),
        ).fetchall()
    assert dead == [("workflow", "ghost", 10, "unknown_workflow")]


def task_attempt(db: str, execution_id: str) -> tuple[str, int | None]:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT e.status, t.attempt FROM harvest.executions AS e "
            "LEFT JOIN harvest.tasks AS t ON t.execution_id = e.id AND t.kind = 'workflow' WHERE e.id = %s",
            (execution_id,),
        ).fetchone()


def test_in_a_rolling_deploy_the_run_waits_for_a_live_worker_that_has_not_tried_it(
    db: str, start_worker, client: Client, monkeypatch
) -> None:
    # A new workflow's run, started before its deploy's worker claims: the old worker (without
    # it) wins every claim of the retry, past the bound, while the new one is live on the queue
    # (its row registered, its claims not yet begun); the run must wait for it, not fail.
    handle = client.start_workflow("ghost", 1, workflow_id="ghost-roll")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.register_worker('new-deploy', ARRAY['default'], 'host', 1, 3600)")
    monkeypatch.setattr(worker_workflows, "WORKFLOW_TASK_RETRY_SECS", 0.01)
    start_worker(App(workflows=[greet]), poll_interval=0.05)

    def past_the_bound() -> tuple[str, int | None] | None:
        status, attempt = task_attempt(db, handle.execution_id)
        return (status, attempt) if status != "RUNNING" or (attempt or 0) >= 12 else None

    state = wait_until(past_the_bound, what="the old worker to fail the task twelve times")
    assert state[0] == "RUNNING", state  # (before the fix: FAILED at the tenth attempt)
    start_worker(App(workflows=[greet, ghost]), worker_id="new-deploy", poll_interval=0.05)
    assert handle.result(timeout=30) == 2
