"""Signals: buffered per name in arrival order, raced against a durable timeout."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from history_builder import Engine, HistoryBuilder, new_run
from workflows_fixture import Order, send_email

from harvest.core.errors import InvalidArgument, SignalTimeout
from harvest.declare.definitions import App, workflow
from harvest.runtime import WorkflowCallError


def run(coro):
    return asyncio.run(coro)


@workflow
async def two_approvals(ctx) -> dict:
    first = await ctx.wait_for_signal("approve")
    second = await ctx.wait_for_signal("approve")
    return {
        "first": first,
        "second": second,
        "left": ctx.pending_signals(),
        "left_approve": ctx.pending_signals("approve"),
    }


@workflow
async def typed(ctx) -> str:
    order = await ctx.wait_for_signal("order", type_hint=Order)
    assert isinstance(order, Order)
    return f"{order.order_id}:{order.amount}"


@workflow
async def wait_or_timeout(ctx) -> dict:
    try:
        value = await ctx.wait_for_signal("go", timeout="1h")
    except SignalTimeout as exc:
        mail = await ctx.execute_activity(send_email, "late")
        return {"timeout": str(exc), "mail": mail, "buffered": ctx.pending_signals("go")}
    await ctx.sleep(5)  # keeps running after the race: a late TimerFired must be harmless
    return {"got": value, "buffered": ctx.pending_signals("go")}


@workflow
async def two_waiters(ctx) -> list:
    return list(
        await asyncio.gather(ctx.wait_for_signal("s"), ctx.wait_for_signal("s"), ctx.wait_for_signal("t"))
    )


app = App(workflows=[two_approvals, typed, wait_or_timeout, two_waiters], activities=[send_email])


def engine(wf, history=None, **kw) -> Engine:
    return Engine(app, wf, history=history, resolver=lambda out: [], **kw)


def test_signal_buffered_before_the_wait_is_returned_at_once():
    history = HistoryBuilder("two_approvals")
    history.signal("approve", 1)  # e.g. signal_with_start: before the first task
    history.signal("approve", 2)
    history.signal("other", "x")
    e = engine(two_approvals, history)
    act = run(e.task())
    assert act.finished
    assert act.commands == [
        {"type": "complete_workflow", "result": {"first": 1, "second": 2, "left": 1, "left_approve": 0}}
    ]


def test_signals_are_delivered_in_arrival_order_across_tasks():
    e = engine(two_approvals)
    act = run(e.task())
    assert act.commands == [] and not act.finished  # blocked, nothing to tell the database
    e.history.signal("approve", "a")
    e.history.signal("other", "x")
    e.history.signal("approve", "b")
    e.history.signal("approve", "c")
    act = run(e.task())  # cold replay == warm run is checked by the engine
    assert act.commands[-1]["result"] == {"first": "a", "second": "b", "left": 2, "left_approve": 1}


def test_one_signal_per_task_wakes_the_waiter_each_time():
    e = engine(two_approvals)
    run(e.task())
    e.history.signal("approve", 1)
    assert run(e.task()).commands == []
    e.history.signal("approve", 2)
    assert run(e.task()).commands[-1]["result"]["second"] == 2


def test_signal_payload_is_decoded_by_type_hint():
    e = engine(typed)
    run(e.task())
    e.history.signal("order", {"order_id": "o-7", "amount": 3})
    assert run(e.task()).commands[-1] == {"type": "complete_workflow", "result": "o-7:3"}


def test_concurrent_waiters_are_served_first_come_first_served():
    e = engine(two_waiters)
    run(e.task())
    e.history.signal("s", 1)
    e.history.signal("t", "t1")
    e.history.signal("s", 2)
    assert run(e.task()).commands[-1]["result"] == [1, 2, "t1"]


def test_signal_wins_the_race_and_cancels_the_timer():
    e = engine(wait_or_timeout)
    first = run(e.task())
    assert first.commands == [{"type": "start_timer", "seq": 1, "duration": 3600}]
    e.history.signal("go", 42)
    second = run(e.task())
    assert second.commands == [
        {"type": "cancel_timer", "seq": 2, "timer_seq": 1},
        {"type": "start_timer", "seq": 3, "duration": 5},
    ]
    assert [ev["event_type"] for ev in e.history.events[-2:]] == ["TimerCancelled", "TimerStarted"]
    e.history.timer_fired(1)  # fired just before the cancel reached the database: ignored
    e.history.timer_fired(3)
    final = run(e.task())
    assert final.commands[-1] == {"type": "complete_workflow", "result": {"got": 42, "buffered": 0}}


def test_timer_wins_the_race_and_raises_signal_timeout():
    e = engine(wait_or_timeout)
    run(e.task())
    e.history.timer_fired(1)
    act = run(e.task())
    assert [(c["type"], c["seq"]) for c in act.commands] == [("schedule_activity", 2)]
    e.history.signal("go", "too late")  # the loser: stays buffered
    e.history.activity_completed(2, {"sent": "late"})
    final = run(e.task())
    result = final.commands[-1]["result"]
    assert result["buffered"] == 1 and result["mail"] == {"sent": "late"}
    assert "'go'" in result["timeout"] and "3600s" in result["timeout"]


@pytest.mark.parametrize("signal_first", [True, False])
def test_signal_and_timer_in_one_batch_first_event_wins(signal_first):
    e = engine(wait_or_timeout)
    run(e.task())
    if signal_first:
        e.history.signal("go", 1)
        e.history.timer_fired(1)
    else:
        e.history.timer_fired(1)
        e.history.signal("go", 1)
    act = run(e.task())
    if signal_first:  # the timer already fired: nothing to cancel
        assert act.commands == [{"type": "start_timer", "seq": 2, "duration": 5}]
    else:
        assert [c["type"] for c in act.commands] == ["schedule_activity"]


def test_replay_gives_the_same_signal_outcome_whatever_arrives_later():
    e = engine(wait_or_timeout)
    run(e.task())
    e.history.signal("go", "x")
    run(e.task())
    e.history.signal("go", "ignored")  # after the wait: buffered on both paths
    e.history.timer_fired(3)
    final = run(e.task())
    assert final.commands[-1]["result"] == {"got": "x", "buffered": 1}
    # the closed history replays to the same end (WorkflowCompleted) from scratch
    new_run(app, wait_or_timeout).replay_history(e.history.events)


def test_wait_for_signal_validates_its_arguments():
    @workflow
    async def bad_timeout(ctx) -> None:
        await ctx.wait_for_signal("x", timeout="soon")

    with pytest.raises(WorkflowCallError, match=r"ctx\.wait_for_signal: timeout: cannot parse 'soon'"):
        run(new_run(None, bad_timeout).advance(HistoryBuilder("bad_timeout").events))
    assert issubclass(SignalTimeout, TimeoutError)
    assert InvalidArgument


@workflow
async def cancellable_wait(ctx) -> dict:
    with contextlib.suppress(asyncio.CancelledError):
        await ctx.wait_for_signal("s")
    return {"buffered": ctx.pending_signals("s"), "next": await ctx.wait_for_signal("s")}


def test_a_signal_delivered_to_a_cancelled_wait_is_not_lost():
    local = App(workflows=[cancellable_wait])
    e = Engine(local, cancellable_wait, resolver=lambda out: [])
    run(e.task())
    e.history.signal("s", "first")  # reaches the waiter...
    e.history.cancel_requested()  # ...which is cancelled before it can run
    act = run(e.task())
    assert act.commands[-1]["result"] == {"buffered": 1, "next": "first"}


def test_a_signal_after_the_wait_was_cancelled_is_buffered():
    local = App(workflows=[cancellable_wait])
    e = Engine(local, cancellable_wait, resolver=lambda out: [])
    run(e.task())
    e.history.cancel_requested()
    assert run(e.task()).commands == []  # now waiting again
    e.history.signal("s", "second")
    assert run(e.task()).commands[-1]["result"] == {"buffered": 0, "next": "second"}


def test_a_signal_timeout_names_the_signals_of_other_names_left_unread():
    """`handle.signal("aproved")` to a run that waits for "approved" was buffered without a
    word, and the wait's SignalTimeout said only that "approved" never came."""
    e = engine(wait_or_timeout)
    run(e.task())
    e.history.signal("Go", "approved")  # the sender's misspelling
    e.history.signal("Go", "approved again")
    run(e.task())
    e.history.timer_fired(1)
    act = run(e.task())
    e.history.activity_completed(2, {"sent": "late"})
    final = run(e.task())
    message = final.commands[-1]["result"]["timeout"]
    assert "no signal 'go' arrived within 3600s" in message
    assert "'Go' (2)" in message and "misspelt" in message, message
    assert act.commands  # (the timeout branch ran)


def test_a_signal_timeout_with_nothing_else_buffered_says_only_that():
    e = engine(wait_or_timeout)
    run(e.task())
    e.history.timer_fired(1)
    run(e.task())
    e.history.activity_completed(2, {"sent": "late"})
    final = run(e.task())
    assert final.commands[-1]["result"]["timeout"] == "no signal 'go' arrived within 3600s"


def test_a_signal_receipt_says_when_no_wait_asked_for_it() -> None:
    """The CLI's line and the dashboard's notice say it in the same words (one place)."""
    from harvest.core.receipts import SignalReceipt

    stray = SignalReceipt(7, "aprove", ("approve", "reject"))
    assert int(stray) == 7 and not stray.awaited
    assert stray.not_awaited == "not awaited: the run waits for approve, reject (the signal is buffered)"
    assert SignalReceipt(8, "approve", ("approve",)).not_awaited is None  # awaited
    assert SignalReceipt(9, "approve").not_awaited is None  # the run waits on no signal
