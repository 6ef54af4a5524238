"""Exhausted activities park in the dead-letter queue; replay resumes, discard hands the failure on."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from test_generic_plans import Statement, nodes, plain_sql

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


# -- the listing's order is its index's ------------------------------------------------------

LISTING = Statement(
    "list_dead_letters",
    r"SELECT \* FROM harvest\.dead_letters AS d",
    {
        "p_activity_name": "text",
        "p_workflow_name": "text",
        "v_before": "timestamptz",
        "p_before_id": "bigint",
        "p_limit": "integer",
    },
)
# The bulk actions' selection (_select_dead_letters): oldest first, the same index backwards.
BULK = Statement(
    "_select_dead_letters",
    r"SELECT d\.id, d\.failed_at FROM harvest\.dead_letters AS d",
    {
        "p_activity_name": "text",
        "p_workflow_name": "text",
        "p_failed_after": "timestamptz",
        "p_failed_before": "timestamptz",
        "p_limit": "integer",
    },
    end=r"\) AS s;",
)
PAGES = {
    "the newest page": (LISTING, "NULL, NULL, NULL, NULL, 100"),
    "after a cursor": (LISTING, "NULL, NULL, '2030-01-01 00:00:00+00', 2000, 100"),
    "of one activity, after a cursor": (LISTING, "'a1', NULL, '2030-01-01 00:00:00+00', 2000, 100"),
    "of one workflow": (LISTING, "NULL, 'w1', NULL, NULL, 100"),
    "a bulk action's oldest of one activity": (BULK, "'a1', NULL, NULL, NULL, 100"),
    "a bulk action's oldest before a time": (BULK, "NULL, NULL, NULL, '2030-01-02 00:00:00+00', 100"),
}


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("page", list(PAGES))
def test_a_dead_letter_page_is_read_in_its_index_order_without_a_sort(
    conn: psycopg.Connection, page: str, plan_cache_mode: str
) -> None:
    """The listing orders by (failed_at DESC, id DESC), but its index was (failed_at DESC, id):
    every page sorted the rows of each failed_at it read (an Incremental Sort), so a burst of
    dead letters at one instant (one transaction's now) was read and sorted whole for each page.
    The indexes now hold the listing's order (and, backwards, the bulk actions')."""
    statement, values = PAGES[page]
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at)"
        " SELECT gen_random_uuid(), 'w' || g, 'id-' || g, '2030-01-01 00:00:00+00'"
        " FROM generate_series(0, 4) AS g"
    )
    # 5,000 dead letters in bursts of 500 at one instant, over 5 activities and workflows.
    conn.execute(
        "INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name, queue,"
        " attempts, failure, scheduled_at, failed_at)"
        " SELECT e.id, e.workflow_name, g, 'a' || (g % 5), 'default', 1, '{}', '2030-01-01 00:00:00+00',"
        " '2030-01-01 00:00:00+00'::timestamptz + (g / 500) * interval '1 hour'"
        " FROM generate_series(1, 5000) AS g"
        " JOIN harvest.executions AS e ON e.workflow_name = 'w' || (g % 5)"
    )
    conn.execute("ANALYZE harvest.dead_letters")
    sql = plain_sql(conn, statement)
    conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
    conn.execute(f"PREPARE page ({', '.join(statement.params.values())}) AS {sql}")
    (explained,) = conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE page ({values})").fetchone()
    plan = explained[0]["Plan"]
    kinds = [node["Node Type"] for node in nodes(plan)]
    assert "Sort" not in kinds and "Incremental Sort" not in kinds, (page, kinds)
    assert any(n.get("Relation Name") == "dead_letters" and "Index Name" in n for n in nodes(plan)), kinds
