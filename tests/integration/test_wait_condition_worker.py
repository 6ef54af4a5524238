"""ctx.wait_condition with a real worker: an update handler sets the state the main code waits
on, and a worker started after the first stopped (no cached run: a replay) resumes the wait."""

from __future__ import annotations

import psycopg
import pytest

from harvest import App, Client, ConditionTimeout, update, workflow
from harvest.core.errors import TimeoutError_
from harvest.testing import WorkflowEnvironment


@workflow
async def entity(ctx, generation: int) -> dict:
    ctx.state.update(rotate=False, seen=0)
    await ctx.wait_condition(lambda: ctx.state["rotate"], timeout="1d")
    await ctx.drain_admitted_updates()
    return {"generation": generation, "seen": ctx.state["seen"]}


@update(workflow="entity")
def bump(ctx) -> int:
    ctx.state["seen"] += 1
    return int(ctx.state["seen"])


@update(workflow="entity")
def rotate(ctx) -> str:
    ctx.state["rotate"] = True
    return "rotating"


app = App(workflows=[entity], updates=[bump, rotate])


def _kinds(dsn: str, execution_id: str) -> list[str]:
    """The run's event types, in order."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT event_type FROM harvest.events WHERE execution_id = %s ORDER BY event_id", (execution_id,)
        ).fetchall()
    return [row[0] for row in rows]


def test_an_update_sets_the_state_the_main_code_waits_on_across_a_worker_restart(
    db, start_worker, client: Client
) -> None:
    first = start_worker(app)
    handle = client.start_workflow(entity, 1)
    assert handle.update("bump", timeout=30) == 1  # a step that leaves the condition false
    first.stop()  # the run is blocked in its wait; its cached state goes with the worker

    start_worker(app)  # a cold worker: it replays the history to take the next steps
    assert handle.update("bump", timeout=30) == 2
    assert handle.update("rotate", timeout=30) == "rotating"
    assert handle.result(timeout=30) == {"generation": 1, "seen": 2}

    kinds = _kinds(db, handle.execution_id)
    # One timer for the one wait, cancelled when the condition held; never fired.
    assert kinds.count("TimerStarted") == 1 and kinds.count("TimerCancelled") == 1
    assert "TimerFired" not in kinds and kinds[-1] == "WorkflowCompleted"


@workflow
async def gate(ctx) -> str:
    ctx.state["open"] = False
    try:
        await ctx.wait_condition(lambda: ctx.state["open"], timeout="1d")
    except ConditionTimeout as exc:
        return f"expired: {exc.timeout:g}s"
    return "opened"


@update(workflow="gate", name="open")
def open_gate(ctx) -> None:
    ctx.state["open"] = True


def test_the_durable_timer_ends_the_wait_with_condition_timeout() -> None:
    """No update within the day: the timer fires (the test clock skips the day) and the wait
    raises ConditionTimeout, which the code catches."""
    with WorkflowEnvironment(App(workflows=[gate], updates=[open_gate])) as env:
        handle = env.client.start_workflow(gate)
        assert handle.result(timeout=60) == "expired: 86400s"
        kinds = _kinds(env.dsn, handle.execution_id)
    assert kinds.count("TimerFired") == 1 and "TimerCancelled" not in kinds


@workflow
async def never_opened(ctx) -> None:
    await ctx.wait_condition(lambda: ctx.state.get("open", False))


def test_a_result_wait_on_a_run_stuck_in_a_condition_says_so() -> None:
    """The test kit's stuck report names the condition a run waits in (it named nothing)."""
    app = App(workflows=[never_opened])
    with WorkflowEnvironment(app, stuck_after="200ms") as env:
        handle = env.client.start_workflow(never_opened)
        with pytest.raises(
            TimeoutError_,
            match=r"never_opened: waits in ctx\.wait_condition on never_opened\.<locals>\.<lambda>",
        ):
            handle.result(timeout=20)
