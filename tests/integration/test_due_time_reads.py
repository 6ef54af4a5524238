"""When a worker whose producers notify it reads the next due time (worker.py, _finished).

A task's end reads it again only when the end may have made a task due later (a timer, a
retry); a recorded result or a decision of activities and the run's end leaves the time read
before standing. The poll interval here is far longer than the timers, so a timer that no read
announced would fire a minute late and fail the test.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from harvest import App, Client, activity, workflow
from harvest.db import sqlapi


@activity
async def step(ctx, n: int) -> int:
    return n


@workflow
async def two_steps(ctx, n: int) -> int:
    a = await ctx.execute_activity(step, n)
    return a + await ctx.execute_activity(step, n)


@workflow
async def step_then_sleep(ctx, n: int) -> int:
    a = await ctx.execute_activity(step, n)
    await ctx.sleep(0.3)  # decided on the activity's result, ahead: the result's end reads the time
    return a


@workflow
async def sleep_first(ctx, n: int) -> int:
    await ctx.sleep(0.3)  # the first decision: the workflow task's end reads the time
    return await ctx.execute_activity(step, n)


APP = App(workflows=[two_steps, step_then_sleep, sleep_first], activities=[step])


def asleep(running: Any) -> None:
    """Wait until the worker's sleep mark is committed, so that a start made now notifies it
    and the worker takes the path these tests count (woken, not the look after its mark).

    A run's result reaches the client before the worker has gone back to sleep. (Before the
    queue's wake lock, a start made in that window could check for sleeping workers before the
    mark committed and commit after the worker's last look: no notification, and the start
    waited for the 60 s poll; seen once on a loaded machine. tests/integration/test_sleep_mark.py
    now forces that race.)"""
    deadline = time.monotonic() + 30
    while not running.worker.lanes[0].sleeping:
        assert time.monotonic() < deadline, "the worker did not go to sleep"
        time.sleep(0.01)


@pytest.fixture
def due_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    reads: list[int] = []
    real = sqlapi.AsyncSqlApi.next_due_at

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(sqlapi.AsyncSqlApi, "next_due_at", counted)
    return reads


def test_runs_of_activities_alone_read_the_due_time_no_more_often(
    db: str, start_worker, client: Client, due_reads: list[int]
) -> None:
    running = start_worker(APP, poll_interval=60.0)
    assert client.start_workflow(two_steps, 1).result(timeout=30) == 2
    before, ends_before = len(due_reads), running.worker._ends
    for i in range(5):
        asleep(running)
        assert client.start_workflow(two_steps, i).result(timeout=30) == 2 * i
    # Three task ends per run, none of which made anything due later: none asked for a read
    # (before this change each did: fifteen reads). The reads left are the idle loop's after
    # a claim that found nothing (its look after the sleep mark, a wake-up whose work another
    # commit had taken), one or two a run, more on a loaded machine.
    assert running.worker._ends == ends_before
    assert len(due_reads) - before < 15


@pytest.mark.parametrize("flow", [step_then_sleep, sleep_first])
def test_a_timer_a_task_end_made_fires_on_time_not_at_the_poll_interval(
    db: str, start_worker, client: Client, due_reads: list[int], flow: Any
) -> None:
    running = start_worker(APP, poll_interval=60.0)
    assert client.start_workflow(two_steps, 1).result(timeout=30) == 2
    asleep(running)  # the worker is asleep now, and is told of the start
    assert client.start_workflow(flow, 4).result(timeout=20) == 4


def test_a_task_failed_as_unknown_workflow_arms_no_wake_up_at_its_retry(
    db: str, start_worker, client: Client, due_reads: list[int]
) -> None:
    # A worker that lacks the run's workflow fails its task (UnknownWorkflow): it does not read
    # the next due time to claim the retry the moment it is due, which made the workers of the
    # old deploy win every claim in a rolling deploy (docs/failures.md, "A workflow no worker has").
    handle = client.start_workflow("not_in_app", 1)  # before any worker registered: taken
    running = start_worker(APP, poll_interval=60.0)
    deadline = time.monotonic() + 30
    while running.worker.completed_tasks < 1:
        assert time.monotonic() < deadline, "the worker did not fail the task"
        time.sleep(0.01)
    asleep(running)
    assert running.worker._ends == 0  # (before: 1, and a read of the due time that armed it)
    assert handle.describe()["status"] == "RUNNING"
