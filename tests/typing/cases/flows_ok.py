"""Must type-check: arguments and results flow from the decorated functions."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, assert_type

import harvest
from harvest import (
    ActivityContext,
    App,
    AsyncClient,
    Client,
    LocalActivityContext,
    WorkflowContext,
    WorkflowHandle,
)
from harvest.client import Children, Page
from harvest.core.receipts import SignalReceipt
from harvest.testing import ActivityCall, ReplayResult, WorkflowEnvironment, WorkflowReplayer


@dataclass
class Order:
    id: int
    total: float


@harvest.activity
async def charge(ctx: ActivityContext, order: Order, retries: int = 3) -> str:
    return f"charged {order.id}"


@harvest.activity(start_to_close="10s")
def reserve(ctx: ActivityContext, sku: str) -> list[int]:
    return [1, 2]


@harvest.activity(local=True)
def stamp(ctx: Any) -> float:
    return 1.0


@harvest.activity(heartbeat_timeout="30s")
async def summarize(ctx: ActivityContext, text: str) -> int:
    assert_type(ctx.heartbeat({"done": 1}), bool)
    assert_type(await ctx.aheartbeat(), bool)
    assert_type(ctx.record_llm_call("model-a", 10, 2, cost_usd_micros=300), int | None)
    row = await ctx.arecord_llm_call("model-a", input_tokens=10, latency_ms=40)
    assert_type(row, int)
    return row


@harvest.activity(local=True)
async def stamp_inline(ctx: LocalActivityContext) -> bool:
    assert_type(await ctx.aheartbeat(), bool)
    assert_type(ctx.heartbeat(), bool)
    assert_type(ctx.workflow_id, str | None)
    return ctx.cancel_requested


@harvest.workflow
async def child(ctx: WorkflowContext, n: int) -> dict[str, int]:
    return {"n": n}


@harvest.workflow(queue="orders")
async def checkout(ctx: WorkflowContext, order: Order) -> bool:
    receipt = await ctx.execute_activity(charge, order)
    assert_type(receipt, str)
    again = await ctx.execute_activity(charge, order, 5, start_to_close="1m")
    assert_type(again, str)
    slots = await ctx.execute_activity(reserve, "sku-1")
    assert_type(slots, list[int])
    assert_type(await ctx.execute_local_activity(stamp), float)
    by_name = await ctx.execute_activity("charge", order)
    assert_type(by_name, Any)
    result = await ctx.execute_child_workflow(child, 3, workflow_id="c-1")
    assert_type(result, dict[str, int])
    handle = await ctx.start_child_workflow(child, 4)
    assert_type(handle, harvest.ChildHandle[dict[str, int]])
    assert_type(await handle.result(), dict[str, int])
    assert_type(await handle, dict[str, int])
    assert_type(ctx.side_effect(lambda: 7), int)
    assert_type(await ctx.wait_for_signal("approved", type_hint=bool), bool)
    assert_type(await ctx.wait_condition(lambda: bool(ctx.state.get("go"))), None)
    await ctx.wait_condition(lambda: receipt != "", timeout=datetime.timedelta(hours=1))
    await ctx.wait_condition(lambda: True, "1h")
    assert_type(ctx.now().year, int)
    return bool(receipt) and bool(slots)


def call_directly(ctx: ActivityContext) -> None:
    # The decorators give the function back: it is still callable (and testable) as written.
    assert_type(reserve(ctx, "sku-1"), list[int])


def start(client: Client) -> bool:
    handle = client.start_workflow(checkout, Order(1, 9.5))
    assert_type(handle, WorkflowHandle[bool])
    options = harvest.StartOptions(workflow_id="order-1")
    assert_type(client.start_workflow(checkout, Order(2, 1.0), options=options).result(), bool)
    by_name = client.start_workflow("checkout", {"id": 1, "total": 2.0})
    assert_type(by_name, WorkflowHandle[Any])
    found = client.get_handle(workflow_id="order-1", workflow=checkout)
    assert_type(found, WorkflowHandle[bool])
    assert_type(client.get_handle("0190-...").result(), Any)
    assert_type(client.get_handle("0190-...", checkout), WorkflowHandle[bool])
    signalled = client.signal_with_start(checkout, Order(3, 1.0), workflow_id="order-3", signal="go")
    assert_type(signalled, WorkflowHandle[bool])
    # A signal's answer: its event id (an int, as before) that says whether a wait asked for it.
    receipt = handle.signal("go", 1)
    assert_type(receipt, SignalReceipt)
    assert_type(receipt.awaited, bool)
    assert_type(receipt.awaited_signals, tuple[str, ...])
    assert_type(receipt.event_id, int)
    assert_type(receipt + 0, int)
    updated, outcome = client.update_with_start(checkout, Order(4, 1.0), workflow_id="o-4", update="approve")
    assert_type(updated, WorkflowHandle[bool])
    assert_type(outcome, Any)
    # An update's id (the caller's, else the one minted, as the API's 200 and 202 carry it): its
    # handle, once recorded; the result without it.
    accepted = handle.update("approve", 1, wait="accepted")
    assert_type(accepted, harvest.UpdateHandle)
    assert_type(accepted.update_id, str)
    assert_type(accepted.execution_id, str)
    assert_type(handle.update("approve", 1), Any)
    # Every wait's timeout takes what a duration is (seconds, "5s", a timedelta), typed so.
    handle.result(timeout="5s")
    handle.result(timeout=datetime.timedelta(seconds=5))
    client.execute_workflow(checkout, Order(6, 1.0), result_timeout="1m")
    patience: harvest.Duration = "2s"  # (the public name of what they take)
    handle.result(timeout=patience)
    return handle.result(timeout=5)


def list_and_count(client: Client) -> int:
    # The runs over every shard: an iterator of rows, a page with its cursor, the counts.
    for row in client.list_workflows(workflow_name="checkout", state="RUNNING,PAUSED", order="asc"):
        assert_type(row, dict[str, Any])
    page = client.list_workflows_page(search_attributes=["tenant=acme"], page_size=100)
    assert_type(page, Page)
    assert_type(page.next_cursor, str | None)
    assert_type(page.unavailable_shards, list[int])
    counts = client.count_workflows(group_by="all", failing=True)
    kids = client.get_handle("0190-...").children_page(page_size=10)
    assert_type(kids, Children)
    assert_type(kids.truncated, bool | None)
    return sum(row["executions"] for row in counts)


async def list_and_count_async(client: AsyncClient) -> list[dict[str, Any]]:
    rows = [row async for row in client.list_workflows(filter="tenant = acme", page_size=10)]
    assert_type(await client.list_workflows_page(cursor=None), Page)
    assert_type(await client.count_workflows(group_by="workflow_name"), Page)
    return rows


async def start_async(client: AsyncClient) -> dict[str, int]:
    handle = await client.start_workflow(child, 3)
    assert_type(handle, harvest.AsyncWorkflowHandle[dict[str, int]])
    found = client.get_handle(workflow_id="c-3", workflow=child)
    assert_type(await found.result(), dict[str, int])
    await handle.result(timeout="250ms")
    assert_type(await handle.signal("go"), SignalReceipt)
    accepted = await handle.update("approve", wait="accepted")
    assert_type(accepted.update_id, str)
    assert_type(await handle.update("approve"), Any)
    return await handle.result()


app = App(workflows=[checkout, child], activities=[charge, reserve, stamp])


def test_kit() -> None:
    # harvest.testing resolves its names lazily; a checker still sees their types.
    with WorkflowEnvironment(app) as env:
        assert_type(env, WorkflowEnvironment)
        assert_type(env.client.start_workflow(checkout, Order(5, 1.0)).result(), bool)
        assert_type(env.activity_calls("charge"), list[ActivityCall])
    assert_type(WorkflowReplayer(app).replay([]), ReplayResult)


class Rates:
    def __init__(self, rate: float) -> None:
        self.rate = rate

    @harvest.activity
    def convert(self, ctx: ActivityContext, amount: float) -> float:
        return amount * self.rate


RATES = Rates(2.0)


@harvest.workflow
async def converts(ctx: WorkflowContext, amount: float) -> float:
    # An instance's @activity method, bound: checked like a function, `self` left out.
    return assert_type(await ctx.execute_activity(RATES.convert, amount), float)


# @query and @update give the handler back with its own signature (under mypy --strict
# they were untyped decorators: "Untyped decorator makes function untyped").
def _positive(ctx: WorkflowContext, amount: int) -> None:
    if amount <= 0:
        raise ValueError("amount must be positive")


@harvest.query(workflow=checkout)
def order_status(ctx: WorkflowContext) -> str:
    return "open"


@harvest.update(workflow="checkout", name="top_up", validator=_positive)
async def top_up(ctx: WorkflowContext, amount: int) -> int:
    return amount


async def handlers_keep_their_signatures(ctx: WorkflowContext) -> None:
    assert_type(order_status(ctx), str)
    assert_type(await top_up(ctx, 5), int)


# RetryPolicy takes what docs/activities.md shows: max_interval=None (its default), a duration in
# any form, any iterable of error type names (the fields were typed float and list[str] only).
RETRIES = [
    harvest.RetryPolicy(
        max_attempts=3, initial_interval=1.0, backoff=2.0, max_interval=None, non_retryable_errors=[]
    ),
    harvest.RetryPolicy(initial_interval="1s", max_interval=datetime.timedelta(minutes=5)),
    harvest.RetryPolicy.exponential(
        initial=datetime.timedelta(seconds=1), maximum="1d", non_retryable_errors=("X",)
    ),
]
assert_type(RETRIES[0].max_interval, float)
