"""Exhausted activities park in the dead-letter queue; replay resumes, discard hands the failure on."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from harvest import App, Client, RetryPolicy, activity, workflow
from harvest.core.errors import WorkflowFailed, WorkflowNotRunning

state = {"healthy": False}


@activity(retry=RetryPolicy.exponential(max_attempts=2, initial="10ms"))
async def call_upstream(ctx, n: int) -> int:
    if not state["healthy"]:
        raise ConnectionError("upstream returned 503")
    return n + 1


@workflow
async def uses_upstream(ctx, n: int) -> int:
    return await ctx.execute_activity(call_upstream, n)


def wait_for_dead_letter(client: Client, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with client.sql() as sql:
            rows = sql.list_dead_letters(limit=10)
        if rows:
            return rows[0]
        time.sleep(0.05)
    raise AssertionError("no dead letter appeared")


@pytest.fixture(autouse=True)
def unhealthy():
    state["healthy"] = False
    return


def test_exhausted_activity_is_parked_and_replay_resumes(start_worker, client: Client) -> None:
    start_worker(App(workflows=[uses_upstream], activities=[call_upstream]))
    handle = client.start_workflow(uses_upstream, 1)
    dead = wait_for_dead_letter(client)
    assert dead["activity_name"] == "call_upstream"
    assert dead["attempts"] == 2
    assert dead["failure"]["error_type"] == "ConnectionError"
    assert handle.describe()["status"] == "RUNNING"  # the workflow keeps waiting

    state["healthy"] = True
    with client.sql() as sql:
        sql.replay_dead_letter(dead["id"])
        assert sql.list_dead_letters() == []
    assert handle.result(timeout=20) == 2


def test_discard_delivers_the_failure_to_the_workflow(start_worker, client: Client) -> None:
    start_worker(App(workflows=[uses_upstream], activities=[call_upstream]))
    handle = client.start_workflow(uses_upstream, 1)
    dead = wait_for_dead_letter(client)
    with client.sql() as sql:
        sql.discard_dead_letter(dead["id"])
    with pytest.raises(WorkflowFailed) as info:
        handle.result(timeout=20)
    assert info.value.failure["error_type"] == "ConnectionError"


def test_replay_refused_when_the_run_is_gone(start_worker, client: Client) -> None:
    start_worker(App(workflows=[uses_upstream], activities=[call_upstream]))
    handle = client.start_workflow(uses_upstream, 1)
    dead = wait_for_dead_letter(client)
    handle.terminate("no longer needed")
    with client.sql() as sql, pytest.raises(WorkflowNotRunning, match="TERMINATED"):
        sql.replay_dead_letter(dead["id"])


seen_attempts: list[int] = []


@activity(retry=RetryPolicy.exponential(max_attempts=2, initial="10ms"))
async def counted_upstream(ctx, n: int) -> int:
    seen_attempts.append(ctx.attempt())
    if not state["healthy"]:
        raise ConnectionError("upstream returned 503")
    return n + 1


@workflow
async def uses_counted_upstream(ctx, n: int) -> int:
    return await ctx.execute_activity(counted_upstream, n)


def test_a_replay_gives_a_fresh_budget_and_the_attempts_keep_counting(start_worker, client: Client) -> None:
    """A replay restarted the attempt at 1: the usage report (activity_executions, from the
    outcome's attempt) lost every dead-lettered attempt, an attempt-scoped key came back, and
    a second dead letter said 2 attempts after 4. The budget is fresh (max_attempts more
    attempts per replay: an operator's decision), and the count goes on."""
    seen_attempts.clear()
    start_worker(App(workflows=[uses_counted_upstream], activities=[counted_upstream]))
    handle = client.start_workflow(uses_counted_upstream, 1)
    first = wait_for_dead_letter(client)
    assert first["attempts"] == 2
    with client.sql() as sql:
        sql.replay_dead_letter(first["id"])
    second = wait_for_dead_letter(client)  # still unhealthy: two more attempts, then parked again
    assert second["id"] != first["id"] and second["attempts"] == 4
    state["healthy"] = True
    with client.sql() as sql:
        sql.replay_dead_letter(second["id"])
    assert handle.result(timeout=20) == 2
    assert seen_attempts == [1, 2, 3, 4, 5]
    outcome = next(e for e in handle.history() if e["event_type"] == "ActivityCompleted")
    assert outcome["event_data"]["attempt"] == 5
    now = datetime.now(UTC)
    with client.sql() as sql:
        (usage,) = sql.count_usage(now - timedelta(hours=1), now + timedelta(hours=1))
    assert usage["activity_executions"] == 5, usage
