"""A result wait that runs out of time on a stuck run says why it is stuck, at the call.

`handle.result(timeout=...)` answered "workflow X is still running after 10s" whether the run
was simply slow or could never go on: an activity no worker registers, dead-lettered, or
workflow code whose task fails on every attempt (the reason only in a worker's log)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from operator_helpers import harvest
from outage_helpers import wait_until

from harvest import App, AsyncClient, Client, RetryPolicy, activity, workflow
from harvest.core.errors import TimeoutError_


@activity
def hello(ctx, name: str) -> str:
    return f"hello {name}"


@workflow
async def calls_a_misspelt_activity(ctx) -> str:
    return await ctx.execute_activity("helo", "x", retry=RetryPolicy(max_attempts=1))


@workflow
async def forgets_to_await(ctx) -> str:
    ctx.sleep("1h")  # the mistake
    return "done"


@workflow
async def waits_for_a_signal(ctx) -> str:
    return await ctx.wait_for_signal("go")


APP = App(workflows=[calls_a_misspelt_activity, forgets_to_await, waits_for_a_signal], activities=[hello])


def _count(db: str, sql: str, execution_id: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(sql, (execution_id,)).fetchone()
    return int(row[0]) if row else 0


def test_a_dead_lettered_activity_is_named_with_its_failure_and_the_remedy(db: str, start_worker) -> None:
    start_worker(APP)
    with Client(db) as client:
        handle = client.start_workflow(calls_a_misspelt_activity)
        wait_until(
            lambda: _count(
                db, "SELECT count(*) FROM harvest.dead_letters WHERE execution_id = %s", handle.execution_id
            ),
            "the activity dead-lettered",
        )
        with pytest.raises(TimeoutError_) as err:
            handle.result(timeout=0.2)
    message = str(err.value)
    assert "is still running after 0.2s" in message
    assert "activity 'helo'" in message and "dead-lettered" in message
    assert "ActivityNotRegistered" in message and "harvest dlq replay" in message
    assert "did you mean 'hello'?" in message  # the worker's App has a name close to it


def test_a_workflow_task_failing_on_every_attempt_is_quoted_on_both_clients(db: str, start_worker) -> None:
    start_worker(APP)
    with Client(db) as client:
        handle = client.start_workflow(forgets_to_await)
        wait_until(
            lambda: _count(
                db,
                "SELECT count(*) FROM harvest.tasks WHERE execution_id = %s AND last_failure IS NOT NULL",
                handle.execution_id,
            ),
            "the workflow task failed",
        )
        with pytest.raises(TimeoutError_) as err:
            handle.result(timeout=0.2)

    async def async_wait() -> str:
        async with await AsyncClient.connect(db) as aclient:
            with pytest.raises(TimeoutError_) as aerr:
                await aclient.get_handle(handle.execution_id).result(timeout=0.2)
        return str(aerr.value)

    for message in (str(err.value), asyncio.run(async_wait())):
        assert "its workflow task fails" in message, message
        assert (
            "IllegalWorkflowOperation" in message
            and "ctx.sleep(...)" in message
            and "never awaited" in message
        )

    stack = harvest(db, "workflow", "stack", handle.execution_id)
    assert "last failure: IllegalWorkflowOperation: ctx.sleep(...)" in stack.stdout, stack.stdout
    # The task on one line, `key value; key value`, without the padding of a table's keys.
    [task_line] = [line for line in stack.stdout.splitlines() if line.startswith("workflow task: ")]
    assert "; attempt " in task_line and "  " not in task_line, task_line


def test_a_timeout_given_as_a_duration_string_is_quoted_in_seconds(db: str, start_worker) -> None:
    """result(timeout="200ms") is accepted like any duration, but the message pasted the text
    after the number: "still running after 200mss" ("1s" gave "1ss")."""
    start_worker(APP)
    with Client(db) as client:
        handle = client.start_workflow(waits_for_a_signal)
        with pytest.raises(TimeoutError_, match=r"is still running after 0\.2s(; it waits for signal .*)?$"):
            handle.result(timeout="200ms")
