"""continue-as-new: a terminal command, and a replay-stable should_continue_as_new."""

from __future__ import annotations

import asyncio

import pytest
from history_builder import Engine, HistoryBuilder, new_run
from workflows_fixture import Order, render

from harvest.core.errors import InvalidArgument
from harvest.declare.definitions import App, workflow
from harvest.runtime import ContinueAsNew


def run(coro):
    return asyncio.run(coro)


@workflow
async def paginate(ctx, cursor: int, seen: list[int]) -> dict:
    page = await ctx.execute_activity(render, cursor)
    suggested = ctx.should_continue_as_new()
    await ctx.sleep(1)  # the decision is acted on in a later task
    if suggested:
        ctx.continue_as_new(cursor + 1, [*seen, page])
    return {"done": [*seen, page], "events": ctx.history_event_count()}


@workflow
async def swallow_attempt(ctx, order: Order) -> str:
    try:
        await ctx.continue_as_new(Order(order.order_id, order.amount + 1))
    except Exception:
        return "swallowed"
    return "unreachable"


app = App(workflows=[paginate, swallow_attempt], activities=[render])


def pages(out):
    return [(c, ("fire",) if c["type"] == "start_timer" else ("result", c["input"][0] * 10)) for c in out]


def test_continue_as_new_is_a_terminal_command_with_encoded_input():
    e = Engine(app, paginate, [4, [1, 2]], resolver=pages, continue_as_new_threshold=3)
    final = run(e.run_to_end())
    assert final == {"type": "continue_as_new", "input": [5, [1, 2, 40]], "signals": []}
    marker = e.activations[1].commands[0]
    assert marker == {"type": "record_marker", "seq": 2, "kind": "continue_as_new_suggested", "value": True}
    assert e.history.events[-1]["event_type"] == "WorkflowContinuedAsNew"


def test_below_the_threshold_the_workflow_just_completes():
    e = Engine(app, paginate, [0, []], resolver=pages)  # default threshold: 10_000
    final = run(e.run_to_end())
    assert final["type"] == "complete_workflow" and final["result"]["done"] == [0]
    markers = [c for a in e.activations for c in a.commands if c["type"] == "record_marker"]
    assert markers == [
        {"type": "record_marker", "seq": 2, "kind": "continue_as_new_suggested", "value": False}
    ]


@pytest.mark.parametrize(("recorded_with", "replayed_with"), [(3, 10_000), (10_000, 0)])
def test_replay_reads_the_recorded_suggestion_not_the_threshold(recorded_with, replayed_with):
    e = Engine(app, paginate, [1, []], resolver=pages, continue_as_new_threshold=recorded_with)
    final = run(e.run_to_end())
    # the closed history replays to the same end whatever the replaying threshold says
    new_run(app, paginate, continue_as_new_threshold=replayed_with).replay_history(e.history.events)
    # and a replay of the open history (last task dropped) recomputes the same ending
    assert e.history.events[-2]["event_type"] == "WorkflowTaskCompleted"
    act = run(new_run(app, paginate, continue_as_new_threshold=replayed_with).advance(e.history.events[:-2]))
    assert act.commands[-1] == final


def test_continue_as_new_is_not_swallowed_by_except_exception():
    history = HistoryBuilder("swallow_attempt", [{"order_id": "o", "amount": 1}])
    act = run(new_run(app, swallow_attempt).advance(history.events))
    assert act.commands == [
        {"type": "continue_as_new", "input": [{"order_id": "o", "amount": 2}], "signals": []}
    ]
    assert issubclass(ContinueAsNew, BaseException) and not issubclass(ContinueAsNew, Exception)


def test_threshold_is_validated():
    with pytest.raises(InvalidArgument):
        new_run(app, paginate, continue_as_new_threshold=-1)
