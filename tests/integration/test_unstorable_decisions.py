"""A decision holding a string PostgreSQL cannot store (U+0000) in a child's start, a
continue-as-new or a signal to another workflow, on a real Postgres. The database refused
the whole decision (22P05) for a child's input, a child's workflow_id or a signal's name, so
the workflow task crashed its handler at every lease; now the run ends typed, as it does for
a continue-as-new's input or a signal's payload."""

from __future__ import annotations

import pytest

from harvest import App, Client, workflow
from harvest.core.errors import InvalidArgument, WorkflowFailed
from harvest.runtime.external import ExternalWorkflow


@workflow
async def echo_child(ctx, text: str) -> str:
    return text


@workflow
async def starts_a_nul_child(ctx, where: str) -> str:
    if where == "input":
        return await ctx.execute_child_workflow(echo_child, "a\x00b")
    try:
        await ctx.execute_child_workflow(echo_child, "x", workflow_id="id\x00")
    except InvalidArgument as exc:  # refused at the call: the parent's code may catch it
        return str(exc)
    return "started"


@workflow
async def continues_with_a_nul(ctx, text: str) -> str:
    if text == "first":
        ctx.continue_as_new("a\x00b")
    return text


@workflow
async def signals_a_nul(ctx, where: str) -> str:
    target = ExternalWorkflow(workflow_id="nobody")
    if where == "payload":
        await ctx.signal_external_workflow(target, "s", "a\x00b")
    else:
        await ctx.signal_external_workflow(target, "s\x00", 1)
    return "sent"


APP = App(workflows=[echo_child, starts_a_nul_child, continues_with_a_nul, signals_a_nul])


def test_a_child_input_holding_a_nul_ends_the_parent_typed(start_worker, client: Client) -> None:
    start_worker(APP)
    with pytest.raises(
        WorkflowFailed, match=r"PayloadError: the input of child workflow echo_child \(command 1\)"
    ):
        client.execute_workflow(starts_a_nul_child, "input", result_timeout=30)


def test_a_child_workflow_id_holding_a_nul_is_refused_at_the_call(start_worker, client: Client) -> None:
    start_worker(APP)
    answer = client.execute_workflow(starts_a_nul_child, "workflow_id", result_timeout=30)
    assert answer.startswith("workflow_id: 'id\\x00' holds a NUL character")


def test_a_continue_as_new_input_holding_a_nul_ends_the_run_typed(start_worker, client: Client) -> None:
    start_worker(APP)
    with pytest.raises(WorkflowFailed, match="PayloadError: the continue-as-new input of workflow"):
        client.execute_workflow(continues_with_a_nul, "first", result_timeout=30)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("payload", "PayloadError: the payload of signal s cannot be stored"),
        ("name", r"InvalidArgument: signal_external_workflow: signal_name: 's\\x00' holds a NUL"),
    ],
)
def test_a_signal_to_another_workflow_holding_a_nul_ends_the_run_typed(
    start_worker, client: Client, where: str, message: str
) -> None:
    start_worker(APP)
    with pytest.raises(WorkflowFailed, match=message):
        client.execute_workflow(signals_a_nul, where, result_timeout=30)
