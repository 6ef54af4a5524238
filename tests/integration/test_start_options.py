"""Start options apart from workflow arguments (StartOptions), and handles by workflow_id, on
both clients (docs/workflows.md, "Starting a run" and "Handles")."""

from __future__ import annotations

import asyncio
import secrets
import warnings

import pytest

from harvest import App, AsyncClient, Client, StartOptions, workflow
from harvest.core.errors import ChildWorkflowError, InvalidArgument, NotFound


@workflow
async def ticket(ctx, title: str, priority: str = "low", workflow_id: str = "", queue: str = "") -> dict:
    return {"title": title, "priority": priority, "workflow_id": workflow_id, "queue": queue}


@workflow
async def configured(ctx, options: dict) -> dict:
    return options


@workflow
async def gate(ctx, n: int) -> int:
    return n + await ctx.wait_for_signal("go")


app = App(workflows=[ticket, configured, gate])


def test_with_options_every_keyword_argument_is_the_workflows(start_worker, client: Client):
    start_worker(app)
    handle = client.start_workflow(
        ticket,
        "printer",
        options=StartOptions(workflow_id="ticket-1", priority=5),
        priority="urgent",
        workflow_id="inner-id",
        queue="not-a-queue",
    )
    assert handle.workflow_id == "ticket-1"
    assert handle.result(timeout=10) == {
        "title": "printer",
        "priority": "urgent",
        "workflow_id": "inner-id",
        "queue": "not-a-queue",
    }
    row = handle.describe()
    assert (row["workflow_id"], row["queue"]) == ("ticket-1", "default")


def test_an_options_argument_that_is_not_start_options_is_the_workflows(start_worker, client: Client):
    start_worker(app)
    handle = client.start_workflow(configured, options={"verbose": True})
    assert handle.result(timeout=10) == {"verbose": True}


def test_keyword_start_options_still_work_and_warn_only_when_they_shadow_a_parameter(
    start_worker, client: Client
):
    start_worker(app)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = client.start_workflow(gate, 1, workflow_id="gate-legacy")  # gate has no such parameter
    assert plain.workflow_id == "gate-legacy"
    plain.signal("go", 1)
    assert plain.result(timeout=10) == 2
    with pytest.warns(
        DeprecationWarning, match=r"priority= went to the start, not to ticket's parameter"
    ) as seen:
        shadowed = client.start_workflow(ticket, "fax", priority=3)
    assert seen[0].filename == __file__  # it points at the call
    with pytest.warns(DeprecationWarning, match="task_queue= is deprecated") as seen:
        client.start_workflow(gate, 0, task_queue="default").cancel()
    assert seen[0].filename == __file__
    assert shadowed.result(timeout=10)["priority"] == "low"  # as before: the start took it


def test_start_options_replace_and_reuse(start_worker, client: Client):
    start_worker(app)
    base = StartOptions(reuse_policy="reject_duplicate")
    first = client.start_workflow(ticket, "a", options=base.replace(workflow_id="reuse-1"))
    second = client.start_workflow(ticket, "b", options=base.replace(workflow_id="reuse-2"))
    assert {first.result(timeout=10)["title"], second.result(timeout=10)["title"]} == {"a", "b"}


def test_get_handle_by_workflow_id_finds_the_current_run(start_worker, client: Client):
    start_worker(app)
    started = client.start_workflow(gate, 10, options=StartOptions(workflow_id="order-7"))
    handle = client.get_handle(workflow_id="order-7")
    assert handle.execution_id is None  # looked up at the first call
    handle.signal("go", 5)
    assert handle.execution_id == started.execution_id
    assert handle.result(timeout=10) == 15
    # Another workflow under the same business key: the name chooses.
    other = client.start_workflow(gate, 1, options=StartOptions(workflow_id="order-8"))
    client.start_workflow(ticket, "x", options=StartOptions(workflow_id="order-8")).result(timeout=10)
    with pytest.raises(InvalidArgument, match="workflow_id order-8 is used by several workflows"):
        client.get_handle(workflow_id="order-8").describe()
    again = client.get_handle(workflow_id="order-8", workflow=gate)
    assert str(again.describe()["id"]) == other.execution_id
    again.signal("go", 1)
    assert again.result(timeout=10) == 2
    with pytest.raises(NotFound, match="no run has workflow_id nope of workflow gate"):
        client.get_handle(workflow_id="nope", workflow="gate").describe()
    with pytest.raises(InvalidArgument, match="one of the two"):
        client.get_handle()
    with pytest.raises(InvalidArgument, match="one of the two"):
        client.get_handle(started.execution_id, workflow_id="order-7")


def test_the_asyncio_client_starts_and_finds_runs_the_same_way(start_worker, db: str):
    start_worker(app)

    async def main() -> tuple[dict, int]:
        async with await AsyncClient.connect(db) as client:
            handle = await client.start_workflow(
                ticket, "scanner", options=StartOptions(workflow_id="async-1"), priority="high"
            )
            first = await handle.result(timeout=10)
            await client.start_workflow(gate, 2, options=StartOptions(workflow_id="async-gate"))
            by_key = client.get_handle(workflow_id="async-gate", workflow=gate)
            await by_key.signal("go", 3)
            return first, await by_key.result(timeout=10)

    first, second = asyncio.run(main())
    assert first["priority"] == "high"
    assert second == 5


@workflow
async def long_child(ctx, n: int) -> str:
    try:
        await ctx.execute_child_workflow(gate, 1, workflow_id="k" * n)
    except ChildWorkflowError as exc:
        return f"{exc.status} {exc.error_type}: {exc.failure['message']}"
    return "started"


def test_a_key_over_the_index_limit_is_an_invalid_argument_not_a_server_error(
    start_worker, client: Client
) -> None:
    """A workflow_id, a workflow name or a queue past 1,000 bytes was the server's own
    ProgramLimitExceeded (an index entry over 2,704 bytes) on a start, and a child's made every
    retry of its parent's decision fail. Now an InvalidArgument naming it, and for a child a
    START_FAILED its parent's code can catch. (Random ids: repeated characters compress in the
    index and passed.)"""
    with pytest.raises(InvalidArgument, match=r"workflow_id is 3000 bytes, over the limit of 1000"):
        client.start_workflow(ticket, "t", options=StartOptions(workflow_id=secrets.token_hex(1500)))
    with pytest.raises(InvalidArgument, match=r"the task queue is 3000 bytes, over the limit of 1000"):
        client.start_workflow(ticket, "t", options=StartOptions(queue=secrets.token_hex(1500)))
    start_worker(App(workflows=[long_child, gate]))
    answer = client.start_workflow(long_child, 1001).result(timeout=30)
    assert answer == "START_FAILED InvalidArgument: workflow_id is 1001 bytes, over the limit of 1000"


@pytest.mark.parametrize("workflow", [gate, "gate"], ids=["by function", "by name"])
def test_a_misspelt_start_option_is_named_as_one(client: Client, workflow) -> None:
    """workflow_idd= went to the workflow's arguments and was refused as one ("unexpected
    keyword argument", or "keyword arguments need the function" by name), not naming the
    start option meant."""
    with pytest.raises(TypeError, match=r"'workflow_idd'.*did you mean the start option workflow_id=\?"):
        client.start_workflow(workflow, 1, workflow_idd="gate-1")
