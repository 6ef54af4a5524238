"""Must NOT type-check: each line marked ``# expect-error: mypy=<code> pyright=<rule>`` is an error
in both checkers (tests/typing/check_types.py), and no other line is."""

from __future__ import annotations

import harvest
from harvest import ActivityContext, Client, WorkflowContext
from harvest.testing import WorkflowEnvironment


@harvest.activity
async def charge(ctx: ActivityContext, order_id: int) -> str:
    return str(order_id)


@harvest.activity
async def costed(ctx: ActivityContext) -> int:
    row: int = ctx.record_llm_call("model-a")  # expect-error: mypy=assignment pyright=reportAssignmentType
    return row


@harvest.activity
def reserve(ctx: ActivityContext, sku: str, count: int) -> list[int]:
    return [count]


@harvest.workflow
async def pay(ctx: WorkflowContext, amount: float) -> bool:
    await ctx.execute_activity(charge, "17")  # expect-error: mypy=arg-type pyright=reportArgumentType
    await ctx.execute_activity(reserve, "sku")  # expect-error: mypy=arg-type pyright=reportArgumentType
    await ctx.execute_activity(charge, 1, 2)  # expect-error: mypy=call-arg pyright=reportCallIssue
    await ctx.execute_activity(charge)  # expect-error: mypy=arg-type pyright=reportArgumentType
    n: int = await ctx.execute_activity(charge, 1)  # expect-error: mypy=arg-type pyright=reportAssignmentType
    await ctx.execute_child_workflow(pay, "ten")  # expect-error: mypy=arg-type pyright=reportArgumentType
    # The options are typed: a misspelt one, or one of the wrong type, by function or by name.
    run = ctx.execute_activity
    await run(charge, 1, start_to_clse=1)  # expect-error: mypy=call-overload pyright=reportCallIssue
    await run(charge, 1, priority="high")  # expect-error: mypy=call-overload pyright=reportCallIssue
    await run("charge", 1, retry=3)  # expect-error: mypy=call-overload pyright=reportCallIssue
    # A predicate is a plain function returning a bool, and its timeout a Duration.
    wait = ctx.wait_condition
    await wait(lambda: run(charge, 1))  # expect-error: mypy=arg-type pyright=reportArgumentType
    await wait(lambda: True, timeout=[5])  # expect-error: mypy=arg-type pyright=reportArgumentType
    return n > 0


@harvest.workflow  # expect-error: mypy=type-var pyright=reportArgumentType
def not_async(ctx: WorkflowContext) -> None:
    return None


def start(client: Client) -> str:
    client.start_workflow(pay, "ten")  # expect-error: mypy=arg-type pyright=reportArgumentType
    sws = client.signal_with_start
    sws(pay, "1", workflow_id="p", signal="s")  # expect-error: mypy=arg-type pyright=reportArgumentType
    handle = client.start_workflow(pay, 10.0)
    text: str = handle.result()  # expect-error: mypy=assignment pyright=reportAssignmentType
    handle.result(timeout=[5])  # expect-error: mypy=arg-type pyright=reportArgumentType
    client.list_workflows(order="newest")  # expect-error: mypy=arg-type pyright=reportArgumentType
    client.list_workflows("RUNNING")  # expect-error: mypy=call-arg pyright=reportCallIssue
    client.count_workflows(group_by="queue")  # expect-error: mypy=arg-type pyright=reportArgumentType
    return text


def test_kit(env: WorkflowEnvironment) -> None:
    # The test kit's names are typed too (not Any): a test's calls are checked like an app's.
    env.client.start_workflow(pay, "ten")  # expect-error: mypy=arg-type pyright=reportArgumentType
    env.sleep("1d", outage="yes")  # expect-error: mypy=arg-type pyright=reportArgumentType


class Rates:
    @harvest.activity
    def convert(self, ctx: ActivityContext, amount: float) -> float:
        return amount


@harvest.workflow
async def converts(ctx: WorkflowContext) -> None:
    rates = Rates()
    await ctx.execute_activity(rates.convert, "ten")  # expect-error: mypy=arg-type pyright=reportArgumentType


@harvest.query(name="no_workflow")  # expect-error: mypy=call-overload pyright=reportCallIssue
def orphan(ctx: WorkflowContext) -> str:
    return ""
