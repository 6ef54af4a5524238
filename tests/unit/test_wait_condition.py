"""``ctx.wait_condition``: the workflow waits on its own state, checked whenever its code is blocked.

Every ``Engine.task`` also replays the whole history cold and requires the same commands (replay
determinism at each step); the closed histories are replayed once more from scratch at the end.
"""

from __future__ import annotations

import asyncio

import pytest
from history_builder import Engine, HistoryBuilder, new_run
from workflows_fixture import send_email

from harvest import ConditionTimeout, query, update
from harvest.declare.definitions import App, workflow
from harvest.runtime import IllegalWorkflowOperation, WorkflowCallError


def run(coro):
    return asyncio.run(coro)


@workflow
async def gate(ctx) -> dict:
    ctx.state["open"] = False
    await ctx.wait_condition(lambda: ctx.state["open"])
    await ctx.drain_admitted_updates()
    return {"open": ctx.state["open"], "by": ctx.state.get("by")}


@update(workflow="gate")
def open_gate(ctx, by: str) -> str:
    ctx.state.update(open=True, by=by)
    return "opened"


@update(workflow="gate")
def touch(ctx) -> None:
    ctx.state["touched"] = True


@workflow
async def gate_with_timeout(ctx) -> dict:
    ctx.state["open"] = False
    try:
        await ctx.wait_condition(lambda: ctx.state["open"], timeout="1h")
    except ConditionTimeout as exc:
        mail = await ctx.execute_activity(send_email, "late")
        return {"timeout": str(exc), "mail": mail}
    await ctx.sleep(5)  # keeps running after the race: a late TimerFired must be harmless
    return {"open": True}


@update(workflow="gate_with_timeout", name="open_gate")
def open_timed_gate(ctx) -> None:
    ctx.state["open"] = True


@workflow
async def already_true(ctx) -> str:
    await ctx.wait_condition(lambda: True, timeout="1h")
    return "at once"


@workflow
async def on_activity(ctx) -> list:
    """The condition is set by the workflow's own task when an activity's result comes."""
    done: list[str] = []

    async def fetch() -> None:
        done.append((await ctx.execute_activity(send_email, "a"))["sent"])

    task = asyncio.create_task(fetch())
    await ctx.wait_condition(lambda: len(done) == 1)
    await task
    return done


@workflow
async def on_signals(ctx) -> int:
    """A predicate over what the run was delivered: two signals buffered, read in one go."""
    await ctx.wait_condition(lambda: ctx.pending_signals("item") >= 2)
    return ctx.pending_signals("item")


@workflow
async def handler_waits(ctx) -> str:
    """An update handler waits on state the main code sets."""
    ctx.state["ready"] = False
    await ctx.wait_for_signal("ready")
    ctx.state["ready"] = True
    await ctx.drain_admitted_updates()
    return "done"


@update(workflow="handler_waits")
async def when_ready(ctx) -> str:
    await ctx.wait_condition(lambda: ctx.state["ready"])
    return "was ready"


@workflow
async def raising(ctx) -> str:
    ctx.state["n"] = 0
    try:
        await ctx.wait_condition(lambda: 1 / ctx.state["n"] > 0)
    except Exception:  # caught or not, the task fails
        return "swallowed"
    return "never"


@workflow
async def raising_later(ctx) -> str:
    ctx.state["d"] = {}
    await ctx.wait_condition(lambda: ctx.state.get("poked", False) and ctx.state["d"]["k"] > 0)
    return "never"


@update(workflow="raising_later")
def poke(ctx) -> None:
    ctx.state["poked"] = True


@workflow
async def async_predicate(ctx) -> str:
    async def ready() -> bool:
        return True

    await ctx.wait_condition(ready)  # type: ignore[arg-type]
    return "never"


class Ambiguous:
    def __bool__(self) -> bool:
        raise ValueError("the truth value is ambiguous")


@workflow
async def ambiguous_predicate(ctx) -> str:
    await ctx.wait_condition(lambda: Ambiguous())  # type: ignore[arg-type,return-value]
    return "never"


@workflow
async def acting_predicate(ctx) -> str:
    await ctx.wait_condition(lambda: ctx.now().year > 2000)
    return "never"


@workflow
async def bad_timeout(ctx) -> str:
    await ctx.wait_condition(lambda: False, timeout="soon")
    return "never"


@workflow
async def queried(ctx) -> str:
    ctx.state["x"] = 0
    await ctx.wait_for_signal("go")
    return "went"


@query(workflow="queried")
async def when_positive(ctx) -> str:
    await ctx.wait_condition(lambda: ctx.state["x"] > 0)
    return "positive"


@update(workflow="queried")
def spoil(ctx) -> None:
    ctx.state["x"] = None  # the query's predicate would now raise TypeError


@workflow
async def cancelled_wait(ctx) -> dict:
    ctx.state["open"] = False
    try:
        await ctx.wait_condition(lambda: ctx.state["open"], timeout="1h")
    except asyncio.CancelledError:
        del ctx.state["open"]  # (a KeyError if the given-up wait's predicate were evaluated again)
        await ctx.sleep(1)  # cleanup may still run commands
    return {"left": ctx._run.awaited_conditions()}


app = App(
    workflows=[
        gate,
        gate_with_timeout,
        already_true,
        on_activity,
        on_signals,
        handler_waits,
        raising,
        raising_later,
        async_predicate,
        ambiguous_predicate,
        acting_predicate,
        bad_timeout,
        queried,
        cancelled_wait,
    ],
    activities=[send_email],
    queries=[when_positive],
    updates=[open_gate, touch, open_timed_gate, when_ready, poke, spoil],
)


def engine(wf, **kw) -> Engine:
    return Engine(app, wf, resolver=lambda out: [], **kw)


def replays(e: Engine, wf) -> None:
    new_run(app, wf).replay_history(e.history.events)


def test_an_update_handler_sets_the_state_the_main_code_waits_on():
    e = engine(gate)
    assert run(e.task()).commands == []  # blocked: no timer, no command
    e.history.update_accepted("u0", "touch")  # a step that leaves the condition false
    act = run(e.task())
    assert [c["type"] for c in act.commands] == ["complete_update"] and not act.finished
    e.history.update_accepted("u1", "open_gate", "ann")
    act = run(e.task())
    assert act.finished
    assert act.commands == [
        {"type": "complete_update", "seq": 2, "update_id": "u1", "result": "opened"},
        {"type": "complete_workflow", "result": {"open": True, "by": "ann"}},
    ]
    replays(e, gate)


def test_true_at_once_returns_without_a_timer():
    e = engine(already_true)
    act = run(e.task())
    assert act.commands == [{"type": "complete_workflow", "result": "at once"}]


def test_the_condition_wins_and_cancels_its_timer():
    e = engine(gate_with_timeout)
    assert run(e.task()).commands == [{"type": "start_timer", "seq": 1, "duration": 3600}]
    e.history.update_accepted("u1", "open_gate")
    act = run(e.task())
    assert act.commands == [
        {"type": "complete_update", "seq": 2, "update_id": "u1", "result": None},
        {"type": "cancel_timer", "seq": 3, "timer_seq": 1},
        {"type": "start_timer", "seq": 4, "duration": 5},
    ]
    e.history.timer_fired(1)  # fired just before the cancel reached the database: ignored
    e.history.timer_fired(4)
    final = run(e.task())
    assert final.commands[-1] == {"type": "complete_workflow", "result": {"open": True}}
    replays(e, gate_with_timeout)


def test_the_timer_wins_and_raises_condition_timeout():
    e = engine(gate_with_timeout)
    run(e.task())
    e.history.timer_fired(1)
    act = run(e.task())
    assert [(c["type"], c["seq"]) for c in act.commands] == [("schedule_activity", 2)]
    e.history.activity_completed(2, {"sent": "late"})
    final = run(e.task())
    result = final.commands[-1]["result"]
    assert result["mail"] == {"sent": "late"}
    assert "3600s" in result["timeout"] and "gate_with_timeout.<locals>.<lambda>" in result["timeout"]
    assert issubclass(ConditionTimeout, TimeoutError)
    replays(e, gate_with_timeout)


@pytest.mark.parametrize("update_first", [True, False])
def test_the_condition_holding_in_the_step_its_timer_fired_in_wins(update_first):
    """Whatever the order of the two events in the batch: the predicate is checked once the
    step's code ran (the handler set the state), and the timer, already fired, is not cancelled."""
    e = engine(gate_with_timeout)
    run(e.task())
    if update_first:
        e.history.update_accepted("u1", "open_gate")
        e.history.timer_fired(1)
    else:
        e.history.timer_fired(1)
        e.history.update_accepted("u1", "open_gate")
    act = run(e.task())
    assert [c["type"] for c in act.commands] == ["complete_update", "start_timer"]
    replays(e, gate_with_timeout)


def test_an_activity_result_that_sets_the_state_wakes_the_wait():
    e = engine(on_activity)
    act = run(e.task())
    assert [(c["type"], c["seq"]) for c in act.commands] == [("schedule_activity", 1)]
    e.history.activity_completed(1, {"sent": "a"})
    assert run(e.task()).commands == [{"type": "complete_workflow", "result": ["a"]}]


def test_signals_delivered_in_one_step_are_seen_together():
    e = engine(on_signals)
    run(e.task())
    e.history.signal("item", 1)
    assert run(e.task()).commands == []  # one is not enough
    e.history.signal("item", 2)
    e.history.signal("item", 3)
    assert run(e.task()).commands == [{"type": "complete_workflow", "result": 3}]


def test_an_update_handler_waits_on_state_the_main_code_sets():
    e = engine(handler_waits)
    run(e.task())
    e.history.update_accepted("u1", "when_ready")
    assert run(e.task()).commands == []  # the handler waits
    e.history.signal("ready")
    act = run(e.task())
    assert act.commands == [
        {"type": "complete_update", "seq": 1, "update_id": "u1", "result": "was ready"},
        {"type": "complete_workflow", "result": "done"},
    ]
    replays(e, handler_waits)


def test_a_predicate_that_raises_fails_the_workflow_task_even_when_caught():
    with pytest.raises(
        WorkflowCallError, match=r"ctx\.wait_condition: its predicate .*raised ZeroDivisionError"
    ):
        run(new_run(app, raising).advance(HistoryBuilder("raising").events))


def test_a_predicate_that_raises_at_a_later_check_fails_the_workflow_task():
    e = engine(raising_later)
    run(e.task())
    e.history.update_accepted("u1", "poke")
    with pytest.raises(
        WorkflowCallError, match=r"its predicate raising_later.<locals>.<lambda> raised KeyError"
    ):
        run(e.run.advance(e.history.since(e.seen)))
    # A cold run of the same history fails the same way, and writes nothing.
    with pytest.raises(WorkflowCallError, match="raised KeyError"):
        run(new_run(app, raising_later).advance(list(e.history.events)))


@pytest.mark.parametrize(
    ("wf", "message"),
    [
        (async_predicate, r"returned coroutine .*not an async def"),
        (ambiguous_predicate, r"raised ValueError: the truth value is ambiguous"),
        (acting_predicate, r"raised IllegalWorkflowOperation: the predicate .* only reads state"),
        (bad_timeout, r"ctx\.wait_condition: timeout: cannot parse 'soon'"),
    ],
)
def test_wrong_calls_fail_the_workflow_task(wf, message):
    name = wf.__harvest_workflow__.name
    with pytest.raises(WorkflowCallError, match=message):
        run(new_run(app, wf).advance(HistoryBuilder(name).events))


def test_a_replay_of_a_changed_predicate_outcome_is_a_mismatch():
    """Code whose condition now holds where the history's did not issues other commands: the
    replay says so instead of going on (determinism is checked, not assumed)."""

    @workflow(name="gate_with_timeout")
    async def changed(ctx) -> dict:
        await ctx.wait_condition(lambda: True, timeout="1h")  # true at once: no timer any more
        await ctx.sleep(5)
        return {"open": True}

    e = engine(gate_with_timeout)
    run(e.task())
    e.history.update_accepted("u1", "open_gate")
    run(e.task())
    with pytest.raises(Exception, match="non-determinism"):
        new_run(App(workflows=[changed], updates=[open_timed_gate]), changed).replay_history(e.history.events)


def test_a_query_that_tries_to_wait_is_refused_and_leaves_no_wait_behind():
    """A query cannot wait: its wait is refused, and its predicate is never evaluated again (one
    that would now raise must not fail the run's next step)."""
    e = engine(queried)
    run(e.task())
    with pytest.raises(IllegalWorkflowOperation, match="cannot wait"):
        e.run.handlers.answer_query("when_positive", None)
    assert e.run.awaited_conditions() == []
    e.history.update_accepted("u1", "spoil")
    e.history.signal("go")
    assert run(e.task()).commands[-1] == {"type": "complete_workflow", "result": "went"}


def test_a_cancelled_wait_is_given_up():
    e = engine(cancelled_wait)
    assert [c["type"] for c in run(e.task()).commands] == ["start_timer"]
    e.history.cancel_requested()
    act = run(e.task())
    assert act.commands == [{"type": "start_timer", "seq": 2, "duration": 1}]
    e.history.timer_fired(2)
    assert run(e.task()).commands[-1] == {"type": "complete_workflow", "result": {"left": []}}
