"""Cancellation: CancelledError at the current await point, cleanup, then CANCELLED."""

from __future__ import annotations

import asyncio

from history_builder import Engine, HistoryBuilder, new_run
from workflows_fixture import send_email

from harvest.declare.definitions import App, workflow


def run(coro):
    return asyncio.run(coro)


@workflow
async def with_cleanup(ctx) -> str:
    try:
        await ctx.execute_activity(send_email, "work")
    except asyncio.CancelledError:
        assert ctx.is_cancel_requested()
        await ctx.execute_activity(send_email, "cleanup")
        raise
    return "done"


@workflow
async def shielded(ctx) -> str:
    try:
        await asyncio.gather(ctx.sleep("1d"), ctx.execute_activity(send_email, "a"))
    except asyncio.CancelledError:
        undo = await asyncio.shield(ctx.execute_activity(send_email, "undo"))
        return f"cleaned {undo['sent']}"
    return "finished"


@workflow
async def plain(ctx) -> str:
    await ctx.sleep("1h")
    return "slept"


@workflow
async def custom_details(ctx) -> str:
    try:
        await ctx.wait_for_signal("never")
    except asyncio.CancelledError:
        raise asyncio.CancelledError("cleaned up") from None
    return "unreachable"


@workflow
async def reports_flag(ctx) -> bool:
    await ctx.sleep(1)
    return ctx.is_cancel_requested()


app = App(workflows=[with_cleanup, shielded, plain, custom_details, reports_flag], activities=[send_email])


def engine(wf) -> Engine:
    return Engine(app, wf, resolver=lambda out: [])


def test_cancel_during_an_activity_runs_cleanup_then_cancels():
    e = engine(with_cleanup)
    first = run(e.task())
    assert [(c["seq"], c["input"]) for c in first.commands] == [(1, ["work"])]
    e.history.cancel_requested("customer gave up")
    second = run(e.task())
    assert not second.finished
    assert [(c["type"], c["seq"], c["input"]) for c in second.commands] == [
        ("schedule_activity", 2, ["cleanup"])
    ]
    e.history.activity_completed(1, {"sent": "work"})  # the cancelled wait's late result: moot
    e.history.activity_completed(2, {"sent": "cleanup"})
    final = run(e.task())
    assert final.finished
    assert final.commands == [{"type": "cancel_workflow", "details": "customer gave up"}]
    assert e.history.events[-1]["event_type"] == "WorkflowCancelled"


def test_cleanup_with_shield_and_a_normal_return_completes():
    e = engine(shielded)
    first = run(e.task())
    assert [c["type"] for c in first.commands] == ["start_timer", "schedule_activity"]
    e.history.cancel_requested()
    second = run(e.task())
    assert [(c["seq"], c["input"]) for c in second.commands] == [(3, ["undo"])]
    e.history.timer_fired(1)  # outcomes of the cancelled gather arrive later; no harm
    e.history.activity_completed(3, {"sent": "undo"})
    final = run(e.task())
    assert final.commands == [{"type": "complete_workflow", "result": "cleaned undo"}]


def test_uncaught_cancel_ends_the_workflow_at_once():
    e = engine(plain)
    run(e.task())
    e.history.cancel_requested("stop")
    act = run(e.task())
    assert act.finished and act.commands == [{"type": "cancel_workflow", "details": "stop"}]


def test_cancel_before_the_first_task():
    history = HistoryBuilder("plain")
    history.cancel_requested(None)
    act = run(new_run(app, plain).advance(history.events))
    assert act.commands == [{"type": "cancel_workflow", "details": None}]


def test_the_workflow_may_choose_the_details():
    e = engine(custom_details)
    run(e.task())
    e.history.cancel_requested("reason")
    assert run(e.task()).commands == [{"type": "cancel_workflow", "details": "cleaned up"}]


def test_a_second_cancel_request_is_ignored():
    e = engine(with_cleanup)
    run(e.task())
    e.history.cancel_requested("one")
    e.history.cancel_requested("two")
    act = run(e.task())
    assert [c["input"] for c in act.commands] == [["cleanup"]]


def test_is_cancel_requested_is_false_without_a_request():
    e = engine(reports_flag)
    run(e.task())
    e.history.timer_fired(1)
    assert run(e.task()).commands[-1] == {"type": "complete_workflow", "result": False}


def test_cancelled_error_without_a_request_still_fails_the_workflow():
    @workflow
    async def self_cancel(ctx) -> None:
        raise asyncio.CancelledError()

    act = run(new_run(None, self_cancel).advance(HistoryBuilder("self_cancel").events))
    assert act.commands[-1]["type"] == "fail_workflow"
    assert act.commands[-1]["failure"]["error_type"] == "CancelledError"
