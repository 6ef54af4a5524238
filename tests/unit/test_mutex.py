"""ctx.mutex in the runtime: acquire/release markers, the MutexAcquired grant, cold == warm."""

from __future__ import annotations

import asyncio

import pytest
from history_builder import Engine, HistoryBuilder, new_run
from workflows_fixture import send_email

from harvest.core.errors import NonDeterminismError
from harvest.declare.definitions import App, workflow
from harvest.runtime import WorkflowCallError


def run(coro):
    return asyncio.run(coro)


@workflow
async def guarded(ctx, key: str) -> dict:
    async with ctx.mutex(key) as m:
        mail = await ctx.execute_activity(send_email, "inside")
        held = m.held
    after = await ctx.execute_activity(send_email, "after")
    return {"mail": mail, "held": held, "after": after}


@workflow
async def raises_inside(ctx) -> None:
    async with ctx.mutex("k"):
        raise ValueError("boom")


@workflow
async def re_entrant(ctx) -> None:
    async with ctx.mutex("k"), ctx.mutex("k"):
        pass


@workflow
async def two_keys(ctx) -> str:
    async with ctx.mutex("a"), ctx.mutex("b"):
        await ctx.sleep(1)
    return "ok"


app = App(workflows=[guarded, raises_inside, re_entrant, two_keys], activities=[send_email])


def engine(wf, input=None, **kw) -> Engine:
    return Engine(app, wf, input, resolver=lambda out: [], **kw)


def acquire(seq, key):
    return {"type": "record_marker", "seq": seq, "kind": "mutex_acquire", "value": {"key": key}}


def release(seq, key):
    return {"type": "record_marker", "seq": seq, "kind": "mutex_release", "value": {"key": key}}


def test_acquire_waits_for_the_grant_then_releases_on_exit():
    e = engine(guarded, ["K"])
    act = run(e.task())
    assert act.commands == [acquire(1, "K")] and not act.finished
    # Another run holds K: a task with no grant changes nothing.
    e.history.signal("noise")
    assert run(e.task()).commands == []
    e.history.mutex_acquired(1, "K")
    act = run(e.task())  # the engine checks a cold replay gives the same commands
    assert [c["type"] for c in act.commands] == ["schedule_activity"]
    assert act.commands[0]["seq"] == 2
    e.history.activity_completed(2, {"sent": "inside"})
    act = run(e.task())
    assert act.commands[0] == release(3, "K")
    assert act.commands[1]["type"] == "schedule_activity" and act.commands[1]["seq"] == 4
    e.history.activity_completed(4, {"sent": "after"})
    act = run(e.task())
    assert act.finished
    assert act.commands[-1]["result"] == {
        "mail": {"sent": "inside"},
        "held": True,
        "after": {"sent": "after"},
    }


def test_grant_in_the_same_batch_as_the_acquire_marker():
    e = engine(guarded, ["K"])
    run(e.task())
    e.history.mutex_acquired(1, "K")  # the SQL grants a free key in the acquiring transaction
    act = run(e.task())
    assert act.commands[0]["type"] == "schedule_activity"


def test_an_exception_inside_the_block_still_releases():
    e = engine(raises_inside)
    run(e.task())
    e.history.mutex_acquired(1, "k")
    act = run(e.task())
    assert act.commands[0] == release(2, "k")
    assert act.commands[1]["type"] == "fail_workflow" and act.finished


def test_cancel_while_waiting_withdraws_the_request():
    e = engine(guarded, ["K"])
    run(e.task())
    e.history.cancel_requested("stop")
    act = run(e.task())
    assert act.commands[0] == release(2, "K")
    assert act.commands[-1]["type"] == "cancel_workflow"


def test_grant_and_cancel_in_one_batch_release_the_granted_key():
    e = engine(guarded, ["K"])
    run(e.task())
    e.history.mutex_acquired(1, "K")
    e.history.cancel_requested("stop")
    act = run(e.task())
    assert act.commands[0] == release(2, "K")
    assert act.commands[-1]["type"] == "cancel_workflow"


def test_nested_keys_release_inner_first():
    e = engine(two_keys)
    assert run(e.task()).commands == [acquire(1, "a")]
    e.history.mutex_acquired(1, "a")
    assert run(e.task()).commands == [acquire(2, "b")]
    e.history.mutex_acquired(2, "b")
    assert run(e.task()).commands[0]["type"] == "start_timer"
    e.history.timer_fired(3)
    act = run(e.task())
    assert act.commands[:2] == [release(4, "b"), release(5, "a")]
    assert act.commands[-1] == {"type": "complete_workflow", "result": "ok"}


def test_the_same_key_twice_in_one_run_is_refused():
    e = engine(re_entrant)
    run(e.task())
    e.history.mutex_acquired(1, "k")
    # A bug of the workflow's code: its task fails (retried until fixed code runs), not the run.
    with pytest.raises(WorkflowCallError, match="not re-entrant"):
        run(e.task())


def test_a_replay_with_another_key_is_nondeterministic():
    history = HistoryBuilder("guarded", ["K"])
    history.complete_task(1, [acquire(1, "OTHER")])
    with pytest.raises(NonDeterminismError, match="mutex_acquire"):
        run(new_run(app, guarded).advance(list(history.events)))


def test_empty_key_is_refused():
    @workflow
    async def empty(ctx) -> None:
        async with ctx.mutex(""):
            pass

    with pytest.raises(WorkflowCallError, match=r"ctx\.mutex: key must be a non-empty string"):
        run(new_run(App(workflows=[empty]), empty).advance(HistoryBuilder("empty").events))
