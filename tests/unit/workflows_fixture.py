"""Sample workflows and activities shared by the runtime tests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from harvest.core.errors import ActivityError
from harvest.declare.definitions import App, RetryPolicy, activity, workflow


@dataclass
class Order:
    order_id: str
    amount: int


@dataclass
class Receipt:
    order_id: str
    charged: int


@activity(start_to_close="30s", retry=RetryPolicy.exponential(max_attempts=5, initial="2s"))
async def charge(ctx, order: Order) -> Receipt:
    return Receipt(order.order_id, order.amount)


@activity
async def send_email(ctx, to: str) -> dict:
    return {"sent": to}


@activity(queue="reports")
def render(ctx, n: int) -> int:
    return n * 2


@workflow
async def sequential(ctx, order: Order) -> dict:
    receipt = await ctx.execute_activity(charge, order)
    mail = await ctx.execute_activity(send_email, f"{receipt.order_id}@example.com")
    return {"receipt": receipt, "mail": mail}


@workflow
async def fan_out(ctx, n: int) -> list:
    results = await asyncio.gather(*(ctx.execute_activity("render", i) for i in range(n)))
    total = await ctx.execute_activity(send_email, "sum")
    return [results, total]


@workflow
async def timers(ctx) -> str:
    await ctx.sleep("1h")
    await asyncio.gather(ctx.sleep(5), ctx.execute_activity(send_email, "a"))
    return "done"


SIDE_EFFECT_CALLS: list[int] = []


def read_config() -> dict:
    SIDE_EFFECT_CALLS.append(1)
    return {"cfg": 7}


@workflow
async def markers(ctx) -> dict:
    now = ctx.now()
    r = ctx.random()
    u = ctx.uuid4()
    s = ctx.side_effect(read_config)
    echo = await ctx.execute_activity(send_email, str(u))
    return {
        "now": now.isoformat(),
        "r": r,
        "u": str(u),
        "s": s,
        "echo": echo,
        "count": ctx.history_event_count(),
    }


@workflow
async def tolerant(ctx) -> str:
    try:
        await ctx.execute_activity(send_email, "x")
    except ActivityError as err:
        await ctx.execute_activity(send_email, "fallback")
        return f"recovered from {err.failure.error_type}"
    return "ok"


@workflow
async def racing(ctx) -> str:
    """asyncio.wait / shield / create_task inside workflow code."""
    a = asyncio.create_task(ctx.execute_activity(send_email, "a"))
    b = asyncio.ensure_future(ctx.execute_activity(send_email, "b"))
    done, pending = await asyncio.wait([a, b], return_when=asyncio.FIRST_COMPLETED)
    # iterate tasks in creation order: a set of tasks has no replayable order
    first = a.result() if a in done else b.result()
    rest = await asyncio.shield(b if a in done else a) if pending else None
    return f"{first['seq']}-{rest['seq'] if rest else None}"


app = App(
    workflows=[sequential, fan_out, timers, markers, tolerant, racing],
    activities=[charge, send_email, render],
)
