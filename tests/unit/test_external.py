"""Signalling and cancelling another workflow: the commands, their outcomes, and replay."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from history_builder import Engine, HistoryBuilder, new_run

from harvest.core.errors import (
    ExternalWorkflowError,
    ExternalWorkflowNotFound,
    ExternalWorkflowNotRunning,
    ExternalWorkflowUnreachable,
    InvalidArgument,
    NonDeterminismError,
)
from harvest.declare.definitions import App, workflow
from harvest.runtime import ChildHandle, WorkflowCallError
from harvest.runtime.external import ExternalWorkflow, external_target

TARGET = "00000000-0000-4000-8000-0000000000aa"


def run(coro):
    return asyncio.run(coro)


@workflow
async def notifier(ctx, target: str) -> dict:
    await ctx.signal_external_workflow(target, "approve", {"by": ctx.workflow_id})
    await ctx.signal_external_workflow(ExternalWorkflow(workflow_id="order-7", workflow_name="order"), "ping")
    cancelled = await ctx.cancel_external_workflow(ExternalWorkflow(workflow_id="order-8"), "superseded")
    return {"cancelled": cancelled}


@workflow
async def tolerant(ctx, target: str) -> dict:
    outcomes = {}
    for action in ("signal", "cancel"):
        try:
            if action == "signal":
                outcomes[action] = await ctx.signal_external_workflow(target, "go")
            else:
                outcomes[action] = await ctx.cancel_external_workflow(target)
        except ExternalWorkflowError as err:
            outcomes[action] = [type(err).__name__, err.reason, err.execution_id]
    return outcomes


@workflow
async def concurrent(ctx) -> int:
    targets = [ExternalWorkflow(workflow_id=f"w-{i}") for i in range(3)]
    await asyncio.gather(*(ctx.signal_external_workflow(t, "tick", i) for i, t in enumerate(targets)))
    return 3


app = App(workflows=[notifier, tolerant, concurrent])


def test_the_commands_carry_the_target_the_name_and_the_payload():
    engine = Engine(app, notifier, [TARGET])
    final = run(engine.run_to_end())
    commands = [c for a in engine.activations for c in a.commands]
    assert commands[:3] == [
        {
            "type": "signal_external_workflow",
            "seq": 1,
            "execution_id": TARGET,
            "workflow_id": None,
            "workflow_name": None,
            "signal_name": "approve",
            "payload": {"by": "wf-1"},
        },
        {
            "type": "signal_external_workflow",
            "seq": 2,
            "execution_id": None,
            "workflow_id": "order-7",
            "workflow_name": "order",
            "signal_name": "ping",
            "payload": None,
        },
        {
            "type": "cancel_external_workflow",
            "seq": 3,
            "execution_id": None,
            "workflow_id": "order-8",
            "workflow_name": None,
            "reason": "superseded",
        },
    ]
    # Each awaits its outcome: one command per workflow task (the Engine checks cold == warm).
    assert [len(a.commands) for a in engine.activations] == [1, 1, 1, 1]
    assert final == {"type": "complete_workflow", "result": {"cancelled": True}}


def test_a_delivered_signal_returns_none_and_a_cancel_true():
    final = run(Engine(app, tolerant, [TARGET]).run_to_end())
    assert final["result"] == {"signal": None, "cancel": True}


def test_an_already_requested_cancel_returns_false():
    history = HistoryBuilder("tolerant", [TARGET])
    r = new_run(app, tolerant)
    act = run(r.advance(history.since(0)))
    history.complete_task(act.through, act.commands)
    history.external_delivered(1, "signal", TARGET)
    act = run(r.advance(history.since(act.through)))
    assert act.commands[0]["type"] == "cancel_external_workflow"
    history.complete_task(act.through, act.commands)
    history.external_delivered(2, "cancel", TARGET, already_requested=True)
    act = run(r.advance(history.since(act.through)))
    assert act.commands[-1]["result"] == {"signal": None, "cancel": False}


@pytest.mark.parametrize(
    ("reason", "error"),
    [
        ("not_found", ExternalWorkflowNotFound),
        ("not_running", ExternalWorkflowNotRunning),
        ("wrong_shard", ExternalWorkflowUnreachable),
        ("ambiguous", ExternalWorkflowError),
    ],
)
def test_a_failed_outcome_raises_a_typed_error_the_code_can_catch(reason, error):
    engine = Engine(app, tolerant, [TARGET], resolver=lambda out: [(c, ("fail", reason)) for c in out])
    final = run(engine.run_to_end())
    assert final["result"] == {
        "signal": [error.__name__, reason, TARGET],
        "cancel": [error.__name__, reason, TARGET],
    }


def test_an_uncaught_failure_fails_the_workflow_typed():
    engine = Engine(app, notifier, [TARGET], resolver=lambda out: [(c, ("fail", "not_found")) for c in out])
    final = run(engine.run_to_end())
    assert final["type"] == "fail_workflow"
    assert final["failure"]["error_type"] == "ExternalWorkflowNotFound"
    assert "it is not_found" in final["failure"]["message"]


def test_concurrent_signals_replay_in_any_outcome_order():
    engine = Engine(
        app, concurrent, resolver=lambda out: list(reversed([(c, ("result", None)) for c in out]))
    )
    final = run(engine.run_to_end())
    assert [c["seq"] for c in engine.activations[0].commands] == [1, 2, 3]
    assert final["result"] == 3


def test_replay_of_the_whole_history_matches_and_issues_nothing():
    engine = Engine(app, notifier, [TARGET])
    run(engine.run_to_end())
    fresh = new_run(app, notifier)
    fresh.replay_history(engine.history.events)  # raises on any mismatch
    assert fresh._new_commands == []


def _recorded(target_fields: dict, signal_name: str = "approve") -> HistoryBuilder:
    history = HistoryBuilder("notifier", [TARGET])
    history.complete_task(
        1,
        [
            {
                "type": "signal_external_workflow",
                "seq": 1,
                **target_fields,
                "signal_name": signal_name,
                "payload": {"by": "wf-1"},
            }
        ],
    )
    history.external_delivered(1, "signal", TARGET)
    return history


def test_replay_with_another_target_is_nondeterminism():
    other = "00000000-0000-4000-8000-0000000000bb"
    history = _recorded({"execution_id": other, "workflow_id": None, "workflow_name": None})
    with pytest.raises(NonDeterminismError) as err:
        run(new_run(app, notifier).advance(list(history.events)))
    assert f"signal_external_workflow 'approve' to execution {other}" in str(err.value)
    assert f"to execution {TARGET}" in str(err.value)


def test_replay_with_another_signal_name_is_nondeterminism():
    history = _recorded({"execution_id": TARGET, "workflow_id": None, "workflow_name": None}, "reject")
    with pytest.raises(NonDeterminismError, match="signal_external_workflow 'reject'"):
        run(new_run(app, notifier).advance(list(history.events)))


def test_replay_where_a_cancel_was_recorded_is_nondeterminism():
    history = HistoryBuilder("notifier", [TARGET])
    history.complete_task(
        1,
        [
            {
                "type": "cancel_external_workflow",
                "seq": 1,
                "execution_id": TARGET,
                "workflow_id": None,
                "workflow_name": None,
                "reason": None,
            }
        ],
    )
    with pytest.raises(NonDeterminismError, match=f"expected cancel_external_workflow of execution {TARGET}"):
        run(new_run(app, notifier).advance(list(history.events)))


def test_an_outcome_for_a_seq_the_code_does_not_await_is_nondeterminism():
    history = _recorded({"execution_id": TARGET, "workflow_id": None, "workflow_name": None})
    history.external_delivered(7, "cancel", TARGET)
    with pytest.raises(NonDeterminismError, match="resolves seq 7"):
        run(new_run(app, notifier).advance(list(history.events)))


def test_targets():
    assert external_target(TARGET) == ExternalWorkflow(execution_id=TARGET)
    assert external_target(uuid.UUID(TARGET)).execution_id == TARGET
    assert external_target(TARGET.upper()).execution_id == TARGET  # canonical, as the database prints it
    key = ExternalWorkflow(workflow_id="k", workflow_name="n")
    assert external_target(key) is key
    handle = ChildHandle(1, "child", None, None, None, lambda raw: raw)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"await handle\.started"):
        external_target(handle)
    handle.child_execution_id = TARGET
    assert external_target(handle).execution_id == TARGET
    with pytest.raises(InvalidArgument, match=r"ExternalWorkflow\(workflow_id='order-7'\)"):
        external_target("order-7")
    with pytest.raises(TypeError):
        external_target(42)
    with pytest.raises(InvalidArgument, match="exactly one"):
        ExternalWorkflow()
    with pytest.raises(InvalidArgument, match="exactly one"):
        ExternalWorkflow(execution_id=TARGET, workflow_id="k")
    with pytest.raises(InvalidArgument, match="goes with a workflow_id"):
        ExternalWorkflow(execution_id=TARGET, workflow_name="n")
    with pytest.raises(InvalidArgument, match="workflow_id must be"):
        ExternalWorkflow(workflow_id="")


@workflow
async def bad_calls(ctx, which: str) -> str:
    try:
        if which == "name":
            await ctx.signal_external_workflow(TARGET, "")
        elif which == "nul name":
            await ctx.signal_external_workflow(TARGET, "go\x00")
        elif which == "nul workflow_id":
            await ctx.signal_external_workflow(ExternalWorkflow(workflow_id="k\x00"), "go")
        elif which == "nul workflow_name":
            await ctx.cancel_external_workflow(ExternalWorkflow(workflow_id="k", workflow_name="\ud800"))
        else:
            await ctx.cancel_external_workflow(TARGET, reason=3)  # type: ignore[arg-type]
    except InvalidArgument as err:
        return str(err)
    return "no error"


@pytest.mark.parametrize(
    ("which", "message"),
    [
        # A NUL or a lone surrogate in a name: the database refused the whole decision (22P05),
        # the workflow task crashed its handler at every lease.
        ("nul name", "signal_name: 'go\\x00' holds a NUL"),
        ("nul workflow_id", "workflow_id: 'k\\x00' holds a NUL"),
        ("nul workflow_name", "workflow_name: '\\ud800' holds a lone surrogate"),
    ],
)
def test_bad_arguments_raise_before_any_command(which, message):
    history = HistoryBuilder("bad_calls", [which])
    act = run(new_run(App(workflows=[bad_calls]), bad_calls).advance(history.since(0)))
    assert act.commands == [{"type": "complete_workflow", "result": act.commands[0]["result"]}]
    assert message in act.commands[0]["result"]


@pytest.mark.parametrize(
    ("which", "message"),
    [
        ("name", "ctx.signal_external_workflow: signal_name must be"),
        ("reason", "ctx.cancel_external_workflow: reason must be"),
    ],
)
def test_a_wrong_call_fails_the_workflow_task_even_when_caught(which, message):
    """A call the method's own checks refuse is the code's bug: the task fails, retried until
    fixed code runs, though the workflow caught the error (it is not an InvalidArgument)."""
    history = HistoryBuilder("bad_calls", [which])
    with pytest.raises(WorkflowCallError, match=message):
        run(new_run(App(workflows=[bad_calls]), bad_calls).advance(history.since(0)))
