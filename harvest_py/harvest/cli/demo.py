"""The workflow `harvest dev` runs: two activities, a retry and a durable timer."""

from __future__ import annotations

from typing import Any

from harvest.declare.definitions import App, RetryPolicy, activity, workflow
from harvest.runtime import WorkflowContext
from harvest.worker import ActivityContext


@activity(start_to_close="10s", retry=RetryPolicy.exponential(max_attempts=3, initial="200ms"))
async def fetch_greeting(ctx: ActivityContext, name: str) -> str:
    # The first attempt always fails, to show a retry with backoff.
    if ctx.attempt() == 1:
        raise ConnectionError("flaky upstream (the demo fails every first attempt)")
    return f"Hello, {name}!"


@activity(start_to_close="10s")
def record_visit(ctx: ActivityContext, name: str) -> dict[str, Any]:
    # A plain def runs in the worker's thread pool.
    return {"name": name, "idempotency_key": str(ctx.idempotency_key())}


@workflow
async def greet(ctx: WorkflowContext, name: str) -> dict[str, Any]:
    greeting = await ctx.execute_activity(fetch_greeting, name)
    await ctx.sleep("2s")
    visit = await ctx.execute_activity(record_visit, name)
    return {"greeting": greeting, "visit": visit, "finished_at": ctx.now().isoformat()}


app = App(workflows=[greet], activities=[fetch_greeting, record_visit])
