"""An activity called with an argument that does not fit its annotations (docs/activities.md,
"Payloads"): the workflow that holds the activity's function fails at the call, before anything
is scheduled, and the run's failure says which activity, parameter, type and value; a workflow
that calls it by a name it does not register reaches a worker, which fails the attempt once,
not retryable (every attempt would fail the same way), saying the same."""

from __future__ import annotations

import time

import pytest
from operator_helpers import harvest

from harvest import App, Client, RetryPolicy, activity, workflow
from harvest.core.errors import WorkflowFailed

SAYS = "parameter 'amount' of charge_cents (int): input[0]: expected int, got str 'abc'"


@activity(retry=RetryPolicy.exponential(max_attempts=5, initial="10ms"))
async def charge_cents(ctx, amount: int) -> int:
    return amount


@workflow
async def charges_text(ctx) -> int:
    return await ctx.execute_activity(charge_cents, "abc")


@workflow
async def charges_text_by_name(ctx) -> int:
    return await ctx.execute_activity("charge_cents", "abc", queue="cents")


def test_the_workflow_holding_the_activity_fails_at_the_call_and_says_why(db, start_worker) -> None:
    start_worker(App(workflows=[charges_text], activities=[charge_cents]))
    with Client(db) as client:
        handle = client.start_workflow(charges_text)
        with pytest.raises(WorkflowFailed) as failed:
            handle.result(timeout=30)
        assert failed.value.failure["error_type"] == "PayloadError"
        assert "activity charge_cents: " + SAYS in failed.value.failure["message"]
        assert "fix the arguments" in failed.value.failure["message"]
        assert not [e for e in handle.history() if e["event_type"] == "ActivityScheduled"]
    got = harvest(db, "workflow", "get", handle.execution_id, "--output", "json")
    assert got.returncode == 0, got.stderr
    assert SAYS in got.stdout and '"FAILED"' in got.stdout


def test_a_worker_fails_an_input_that_does_not_fit_once_without_retrying(db, start_worker) -> None:
    start_worker(App(workflows=[charges_text_by_name]))  # knows no charge_cents: cannot check
    start_worker(App(activities=[charge_cents]), queues=["cents"])
    with Client(db) as client:
        client.start_workflow(charges_text_by_name)
        deadline = time.monotonic() + 30
        dead: list = []
        while not dead and time.monotonic() < deadline:
            with client.sql() as sql:
                dead = sql.list_dead_letters(limit=10)
            time.sleep(0.05)
        assert dead, "no dead letter appeared"
        assert dead[0]["attempts"] == 1, "an input that does not fit was retried"
        failure = dead[0]["failure"]
        assert failure["error_type"] == "PayloadError" and failure["non_retryable"], failure
        assert SAYS in failure["message"] and "retrying cannot help" in failure["message"], failure
