"""A message that lands as the run ends (docs/messages.md): a signal or an update accepted while
the run's last workflow task is in flight is read by the run, not dropped by the close.

The last task is held in flight by a local activity (it runs inside the workflow task) that
waits until the test has landed its message; no sleeps."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from harvest import App, Client, activity, update, workflow

_entered = threading.Event()  # the last task's local activity is running
_release = threading.Event()  # the test has landed its message: the activity may return


@pytest.fixture(autouse=True)
def _fresh_events() -> Iterator[None]:
    _entered.clear()
    _release.clear()
    yield
    _release.set()  # (a failed test leaves no worker thread waiting)


@activity(local=True)
async def held_step(ctx) -> str:
    _entered.set()
    await asyncio.to_thread(_release.wait, 30)
    return "done"


@workflow
async def last_word(ctx) -> int:
    await ctx.wait_for_signal("go")
    await ctx.execute_local_activity(held_step)
    return ctx.pending_signals("late")


@workflow
async def rotor(ctx, generation: int = 0) -> int:
    ctx.state["generation"] = generation
    if generation == 0:
        await ctx.wait_for_signal("go")
        await ctx.execute_local_activity(held_step)
        await ctx.drain_admitted_updates()
        ctx.continue_as_new(1)
    await ctx.wait_for_signal("stop")
    await ctx.drain_admitted_updates()
    return generation


@update(workflow="rotor")
def hit(ctx) -> str:
    return f"handled by generation {ctx.state['generation']}"


APP = App(workflows=[last_word, rotor], activities=[held_step], updates=[hit])


def _until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _events(db: str, execution_id: str, event_type: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM harvest.events WHERE execution_id = %s AND event_type = %s",
            (execution_id, event_type),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_signal_sent_while_the_last_task_runs_is_read_by_the_run(
    start_worker, client: Client, db: str
) -> None:
    """The signal's sender was told it was taken; the close would have dropped it unread. The
    close is refused, and the run's next task reads it where the run was."""
    start_worker(APP)
    handle = client.start_workflow(last_word, workflow_id="last-word")
    handle.signal("go")
    assert _entered.wait(20), "the last task did not start"
    handle.signal("late")  # committed while the task that returns is in flight
    _release.set()
    assert handle.result(timeout=30) == 1
    assert _events(db, handle.execution_id, "WorkflowCompleted") == 1


def test_an_update_accepted_while_a_rotating_task_runs_is_handled_before_the_rotation(
    start_worker, client: Client, db: str
) -> None:
    """An update accepted while the task that continues the run as new is in flight: the
    rotation is refused, and the run's next task runs the handler (its drain waits for it)
    before it rotates. Before, neither run ran it and its caller got UpdateFailed."""
    start_worker(APP)
    handle = client.start_workflow(rotor, workflow_id="rotor")
    handle.signal("go")
    assert _entered.wait(20), "the rotating task did not start"
    answers: list[object] = []
    caller = threading.Thread(target=lambda: answers.append(_update(handle)))
    caller.start()
    _until(lambda: _events(db, handle.execution_id, "UpdateAccepted") == 1, "the update's acceptance")
    _release.set()
    caller.join(30)
    assert answers == ["handled by generation 0"]
    successor = client.get_handle(workflow_id="rotor", workflow=rotor)
    successor.signal("stop")
    assert successor.result(timeout=30) == 1
    assert _events(db, handle.execution_id, "UpdateCompleted") == 1


def _update(handle) -> object:
    try:
        return handle.update("hit", timeout=30)
    except Exception as exc:  # (the assertion names it)
        return exc


def test_a_cancel_requested_while_a_rotating_task_runs_reaches_the_run(
    start_worker, client: Client, db: str
) -> None:
    """A cancel request that lands while the task that continues the run as new is in flight:
    its caller was told the run will be cancelled, and a successor does not carry a cancel
    request. The rotation is refused, and the run's next task sees the request. Before, the run
    rotated and its successor ran on, never cancelled."""
    from harvest.core.errors import WorkflowCancelled

    start_worker(APP)
    handle = client.start_workflow(rotor, workflow_id="rotor-cancel")
    handle.signal("go")
    assert _entered.wait(20), "the rotating task did not start"
    assert handle.cancel("stop rotating") is True
    _release.set()
    with pytest.raises(WorkflowCancelled):
        handle.result(timeout=15)
    assert _events(db, handle.execution_id, "WorkflowContinuedAsNew") == 0
