"""The workflows the dashboard tests run on a real worker: one of each thing a page shows."""

from __future__ import annotations

import asyncio
import threading

from harvest.errors import ActivityFailure

from harvest import App, activity, update, workflow

# Set at teardown: the held activity (a concurrency key's in-flight work) then finishes.
RELEASE = threading.Event()


@activity
async def hello(ctx, name: str) -> str:
    return f"hello {name}"


@activity
async def charge(ctx, amount: int) -> dict:
    raise ActivityFailure("CardDeclined", f"card declined for {amount}", non_retryable=True)


@activity(max_concurrent=1, concurrency_key="acme")
async def hold(ctx, n: int) -> int:
    while not RELEASE.is_set():
        await asyncio.sleep(0.05)
    return n


@workflow
async def greet(ctx, name: str) -> str:
    return await ctx.execute_activity(hello, name)


@workflow
async def approval(ctx, order: str) -> dict:
    await ctx.execute_activity(hello, order)
    approved = await ctx.wait_for_signal("approved", timeout="1h")
    return {"order": order, "approved": approved}


@update(workflow="approval")
async def note(ctx, text: str) -> str:
    """An update still running while the run waits: the page's "pending updates"."""
    await ctx.wait_for_signal("ack", timeout="1h")
    return text


@workflow
async def billing(ctx, amount: int) -> dict:
    return await ctx.execute_activity(charge, amount)


@workflow
async def family(ctx, name: str) -> str:
    await ctx.execute_child_workflow("approval", f"{name}-child")
    return "done"


@workflow
async def batch(ctx, n: int) -> int:
    return await ctx.execute_activity(hold, n)


app = App(
    workflows=[greet, approval, billing, family, batch], activities=[hello, charge, hold], updates=[note]
)
