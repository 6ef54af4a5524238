"""Queries and updates in the pure runtime: the registry, UpdateAccepted/UpdateCompleted replay
(warm == cold at every task), read-only queries and validators on replayed state."""

from __future__ import annotations

import asyncio

import pytest
from history_builder import Engine, HistoryBuilder, new_run
from workflows_fixture import Order, send_email

from harvest import describe_handlers, query, update
from harvest.core.errors import ConfigError, NonDeterminismError, NotFound
from harvest.declare.definitions import App, workflow
from harvest.runtime import IllegalWorkflowOperation
from harvest.runtime.messages import UnknownHandler


def run(coro):
    return asyncio.run(coro)


def check_decision(ctx, decision: str) -> None:
    if decision not in ("yes", "no"):
        raise ValueError(f"decision must be yes or no, not {decision!r}")
    if ctx.state.get("decided"):
        raise ValueError("already decided")


@workflow
async def approval(ctx, title: str) -> dict:
    ctx.state.update(title=title, status="waiting", decided=False)
    await ctx.wait_for_signal("finish")
    await ctx.drain_admitted_updates()
    return {"status": ctx.state["status"]}


@query(workflow="approval")
def status(ctx) -> str:
    return ctx.state["status"]


@query(workflow=approval, name="title_of")
def title(ctx, upper: bool) -> str:
    return ctx.state["title"].upper() if upper else ctx.state["title"]


@update(workflow="approval", validator=check_decision)
async def decide(ctx, decision: str) -> str:
    ctx.state["decided"] = True
    mail = await ctx.execute_activity(send_email, decision)
    ctx.state["status"] = decision
    return f"decided {decision}: {mail['sent']}"


@update(workflow="approval")
def rename(ctx, order: Order) -> Order:
    ctx.state["title"] = order.order_id
    return order


@workflow
async def imperative(ctx) -> list:
    items: list[str] = []
    ctx.register_query_handler("items", lambda ctx: list(items))
    ctx.register_query_handler("acts", lambda ctx: ctx.now())

    async def add(ctx, item: str) -> int:
        await ctx.sleep(1)
        items.append(item)
        return len(items)

    def no_empty(ctx, item: str) -> None:
        if not item:
            raise ValueError("empty item")

    ctx.register_update_handler("add", add, validator=no_empty)
    await ctx.wait_for_signal("done")
    await ctx.drain_admitted_updates()
    return items


@query(workflow="imperative")
async def waits(ctx) -> int:
    await asyncio.sleep(0)
    return 1


app = App(
    workflows=[approval, imperative],
    activities=[send_email],
    queries=[status, title, waits],
    updates=[decide, rename],
)


def engine(wf, input=None, history=None) -> Engine:
    return Engine(app, wf, input, history=history, resolver=lambda out: [])


# ---------------------------------------------------------------- registry and discovery
def test_handlers_are_listed_with_type_hints_and_validators():
    assert (
        describe_handlers(app, "approval")
        == app.handlers(approval)
        == {
            "workflow": "approval",
            "queries": [
                {"name": "status", "input_type_hint": None, "output_type_hint": "str"},
                {"name": "title_of", "input_type_hint": "bool", "output_type_hint": "str"},
            ],
            "updates": [
                {
                    "name": "decide",
                    "input_type_hint": "str",
                    "output_type_hint": "str",
                    "has_validator": True,
                },
                {
                    "name": "rename",
                    "input_type_hint": "Order",
                    "output_type_hint": "Order",
                    "has_validator": False,
                },
            ],
        }
    )
    # Imperative handlers live in a running instance only.
    assert app.handlers("imperative") == {
        "workflow": "imperative",
        "updates": [],
        "queries": [{"name": "waits", "input_type_hint": None, "output_type_hint": "int"}],
    }


def test_registry_refuses_mistakes():
    with pytest.raises(NotFound, match="nope"):
        app.handlers("nope")
    with pytest.raises(ConfigError, match="which this App does not register"):
        App(workflows=[imperative], queries=[status])
    with pytest.raises(TypeError, match="not decorated with @update"):
        App(workflows=[approval], updates=[status])
    with pytest.raises(TypeError, match="needs the workflow"):
        query(lambda ctx: 1)

    @query(workflow="approval", name="status")
    def other_status(ctx) -> str:
        return "x"

    with pytest.raises(ConfigError, match="duplicate query 'status'"):
        App(workflows=[approval], queries=[status, other_status])
    with pytest.raises(TypeError, match=r"takes \(ctx\) or \(ctx, arg\)"):
        update(workflow="approval")(lambda ctx, a, b: None)


# ---------------------------------------------------------------- updates in the workflow
def test_accepted_update_runs_its_handler_and_completes_once_warm_equals_cold():
    e = engine(approval, ["Budget"])
    assert run(e.task()).commands == []
    e.history.update_accepted("u1", "decide", "yes")
    act = run(e.task())  # the handler runs: it schedules its activity at seq 1
    assert [(c["type"], c["seq"]) for c in act.commands] == [("schedule_activity", 1)]
    # While the handler waits, the workflow is told to finish: it drains the update first.
    e.history.signal("finish")
    assert run(e.task()).commands == []
    e.history.activity_completed(1, {"sent": "yes"})
    act = run(e.task())
    assert act.finished
    assert act.commands == [
        {"type": "complete_update", "seq": 2, "update_id": "u1", "result": "decided yes: yes"},
        {"type": "complete_workflow", "result": {"status": "yes"}},
    ]
    kinds = [ev["event_type"] for ev in e.history.events]
    assert kinds.count("UpdateAccepted") == 1 and kinds.count("UpdateCompleted") == 1


def test_update_failure_and_decoding_are_recorded():
    e = engine(approval, ["Budget"])
    run(e.task())
    e.history.update_accepted("u1", "rename", {"order_id": "A-1", "amount": 3})
    e.history.update_accepted("u2", "rename", {"order_id": "A-2"})  # missing field: fails
    act = run(e.task())
    assert act.commands[0] == {
        "type": "complete_update",
        "seq": 1,
        "update_id": "u1",
        "result": {"order_id": "A-1", "amount": 3},
    }
    assert act.commands[1]["update_id"] == "u2"
    assert act.commands[1]["failure"]["error_type"] == "PayloadError"
    e.history.signal("finish")
    assert run(e.task()).finished


def test_unknown_update_fails_at_the_end_of_its_step():
    e = engine(approval, ["Budget"])
    run(e.task())
    e.history.update_accepted("u9", "nope")
    act = run(e.task())
    assert len(act.commands) == 1
    command = act.commands[0]
    assert command["type"] == "complete_update" and command["update_id"] == "u9"
    assert command["failure"]["error_type"] == "UnknownUpdate"
    assert "no update handler 'nope'" in command["failure"]["message"]


def test_update_before_the_first_task_waits_for_the_imperative_handler():
    history = HistoryBuilder("imperative")
    history.update_accepted("u1", "add", "a")  # update_with_start: before any task
    e = engine(imperative, history=history)
    act = run(e.task())  # the body registers "add" on its way to blocking: the update runs
    assert act.commands == [{"type": "start_timer", "seq": 1, "duration": 1}]
    e.history.timer_fired(1)
    e.history.update_accepted("u2", "add", "b")
    act = run(e.task())
    # The timer fired first (lower event id): u1 completes, then u2 starts its timer.
    assert act.commands == [
        {"type": "complete_update", "seq": 2, "update_id": "u1", "result": 1},
        {"type": "start_timer", "seq": 3, "duration": 1},
    ]
    e.history.signal("done")
    e.history.timer_fired(3)
    act = run(e.task())
    assert act.commands == [
        {"type": "complete_update", "seq": 4, "update_id": "u2", "result": 2},
        {"type": "complete_workflow", "result": ["a", "b"]},
    ]


def test_a_replay_that_no_longer_completes_the_update_is_non_determinism():
    history = HistoryBuilder("approval", ["Budget"])
    history.complete_task(1, [])
    history.update_accepted("u1", "rename", {"order_id": "A-1", "amount": 3})
    history.complete_task(3, [{"type": "complete_update", "seq": 1, "update_id": "other", "result": None}])
    with pytest.raises(NonDeterminismError, match="complete_update of update 'other'"):
        new_run(app, approval).replay_history(history.events)


# ---------------------------------------------------------------- queries and validators (read-only)
def replayed(wf, history: HistoryBuilder):
    r = new_run(app, wf)
    r.replay_history(history.events)
    return r


def test_query_answers_from_replayed_state_and_cached_state_alike():
    e = engine(approval, ["Budget"])
    run(e.task())
    e.history.update_accepted("u1", "decide", "no")
    run(e.task())
    e.history.activity_completed(1, {"sent": "no"})
    run(e.task())
    warm = e.run
    cold = replayed(approval, e.history)
    for r in (warm, cold):
        assert r.handlers.answer_query("status", None) == "no"
        assert r.handlers.answer_query("title_of", True) == "BUDGET"
        with pytest.raises(
            UnknownHandler,
            match="no query handler 'nope'; known: "
            r"\['status', 'title_of'\]",
        ):
            r.handlers.answer_query("nope", None)
        with pytest.raises(ValueError, match="already decided"):
            r.handlers.validate_update("decide", "yes")
        r.handlers.validate_update("rename", {"order_id": "B", "amount": 1})
        assert not r.handlers.tainted


def test_validator_sees_the_state_and_the_argument():
    history = HistoryBuilder("approval", ["Budget"])
    history.complete_task(1, [])
    r = replayed(approval, history)
    r.handlers.validate_update("decide", "yes")
    with pytest.raises(ValueError, match="must be yes or no"):
        r.handlers.validate_update("decide", "maybe")
    with pytest.raises(UnknownHandler):
        r.handlers.validate_update("nope", None)


def test_queries_cannot_act_or_wait_and_leave_the_run_unchanged():
    e = engine(imperative)
    run(e.task())
    e.history.update_accepted("u1", "add", "a")
    run(e.task())
    r = e.run
    assert r.handlers.answer_query("items", None) == []
    seq = r._seq
    with pytest.raises(IllegalWorkflowOperation, match="queries and validators only read"):
        r.handlers.answer_query("acts", None)  # ctx.now() would record a marker
    assert r._seq == seq and r.handlers.tainted
    with pytest.raises(IllegalWorkflowOperation, match="cannot wait"):
        r.handlers.answer_query("waits", None)
    with pytest.raises(ValueError, match="empty item"):
        r.handlers.validate_update("add", "")
    # The run itself goes on unharmed.
    e.history.timer_fired(1)
    e.history.signal("done")
    act = run(e.task())
    assert act.commands[-1] == {"type": "complete_workflow", "result": ["a"]}


def test_async_query_that_does_not_wait_is_fine():
    async def fine(ctx) -> int:
        return 7

    e = engine(imperative)
    run(e.task())
    e.run.ctx.register_query_handler("fine", fine)
    assert e.run.handlers.answer_query("fine", None) == 7


def test_raw_json_answers_without_hints():
    e = engine(imperative)
    run(e.task())
    e.run.ctx.register_query_handler("echo", lambda ctx, arg: {"got": arg})
    assert e.run.handlers.answer_query("echo", [1, {"a": None}]) == {"got": [1, {"a": None}]}
