"""A ``ctx`` call Harvest refuses (its options, durations, names, types) fails the workflow task,
not the run: the code is wrong and a deploy fixes it (docs/workflows.md, "Do not, inside a
workflow"). The workflow's own exceptions, and a payload the run's data made wrong, still fail
the run."""

from __future__ import annotations

import pytest
from history_builder import HistoryBuilder, new_run
from workflows_fixture import send_email

from harvest.core.codecs import ZlibCodec
from harvest.core.errors import InvalidArgument, PayloadError
from harvest.declare.definitions import App, activity, workflow
from harvest.runtime import IllegalWorkflowOperation, WorkflowCallError


def run(coro):
    import asyncio

    return asyncio.run(coro)


@activity
async def takes_int(ctx, n: int) -> int:
    return n


CALLS = {
    "bad duration": lambda ctx, v: ctx.sleep("1 hour"),
    "negative duration": lambda ctx, v: ctx.sleep(-1),
    "unknown option": lambda ctx, v: ctx.execute_activity(send_email, "a", no_such_option=1),
    "parameter as option": lambda ctx, v: ctx.execute_activity(send_email, to="a"),
    "bad retry": lambda ctx, v: ctx.execute_activity(send_email, "a", retry=3),
    "bad timeout": lambda ctx, v: ctx.execute_activity(send_email, "a", start_to_close="soon"),
    "not an activity": lambda ctx, v: ctx.execute_activity(print, "a"),
    "local unknown option": lambda ctx, v: ctx.execute_local_activity(send_email, "a", nope=1),
    "signal name type": lambda ctx, v: ctx.wait_for_signal(3),
    "child policy": lambda ctx, v: ctx.start_child_workflow("c", parent_close_policy="orphan"),
    "child not a workflow": lambda ctx, v: ctx.start_child_workflow(print),
    "external target": lambda ctx, v: ctx.signal_external_workflow(3.5, "go"),
}


@workflow
async def misuses(ctx, which: str, catch: bool) -> str:
    call = CALLS[which]
    if not catch:
        await call(ctx, None)
        return "went on"
    try:
        await call(ctx, None)
    except Exception as exc:  # the code swallows it: the task fails all the same
        return type(exc).__name__
    return "went on"


app = App(workflows=[misuses], activities=[send_email, takes_int])


@pytest.mark.parametrize("catch", [False, True], ids=["raised", "caught"])
@pytest.mark.parametrize("which", sorted(CALLS))
def test_a_refused_ctx_call_fails_the_task_not_the_run(which: str, catch: bool) -> None:
    history = HistoryBuilder("misuses", [which, catch])
    with pytest.raises(WorkflowCallError) as raised:
        run(new_run(app, misuses).advance(history.events))
    assert str(raised.value).startswith("ctx.")
    assert "its workflow task fails and is retried until a worker runs fixed code" in str(raised.value)
    # Treated as IllegalWorkflowOperation is (a NonDeterminismError: the worker fails the task).
    assert isinstance(raised.value, IllegalWorkflowOperation)


@workflow
async def own_errors(ctx, which: str) -> None:
    if which == "TypeError":
        raise TypeError("the workflow's own")
    if which == "ValueError":
        raise ValueError("the workflow's own")
    if which == "InvalidArgument":
        raise InvalidArgument("the workflow's own")
    if which == "payload":  # an argument its activity's hints refuse: the run's data
        await ctx.execute_activity(takes_int, "not an int")


@pytest.mark.parametrize("which", ["TypeError", "ValueError", "InvalidArgument", "payload"])
def test_the_workflows_own_errors_and_bad_payloads_still_fail_the_run(which: str) -> None:
    local = App(workflows=[own_errors], activities=[takes_int])
    act = run(new_run(local, own_errors).advance(HistoryBuilder("own_errors", [which]).events))
    failure = act.commands[-1]["failure"]
    assert act.commands[-1]["type"] == "fail_workflow"
    expected = PayloadError.__name__ if which == "payload" else which
    assert failure["error_type"] == expected


@workflow
async def fair(ctx, per_call: bool) -> None:
    if per_call:
        await ctx.execute_activity(send_email, "a", fairness_key="input")
    else:
        await ctx.execute_activity(send_email, "a")


def test_a_per_call_fairness_key_under_codecs_fails_the_task() -> None:
    """Codecs store the activity's input encoded: the key never resolves, the fairness never
    applies; the call is refused with the App's boot check's words."""
    local = App(workflows=[fair], activities=[send_email])
    with pytest.raises(WorkflowCallError, match=r"fairness_key 'input' reads the input, which the codecs"):
        run(new_run(local, fair, inputs_encoded=True).advance(HistoryBuilder("fair", [True]).events))
    # Without codecs it is scheduled with its key; under codecs without one, as before.
    act = run(new_run(local, fair).advance(HistoryBuilder("fair", [True]).events))
    assert act.commands[0]["options"]["fairness_key"] == "input"
    act = run(new_run(local, fair, inputs_encoded=True).advance(HistoryBuilder("fair", [False]).events))
    assert act.commands[0]["type"] == "schedule_activity"
    # By default the run reads the App's codecs.
    coded = App(workflows=[fair], activities=[send_email], codecs=[ZlibCodec()])
    with pytest.raises(WorkflowCallError, match="fairness_key"):
        run(new_run(coded, fair).advance(HistoryBuilder("fair", [True]).events))
