"""The workflows the dashboard tests run on a real worker: one of each thing a page shows."""

from __future__ import annotations

import asyncio
import threading

from harvest.errors import ActivityFailure

from harvest import App, Dag, Schedule, WorkflowSchedule, activity, update, workflow

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


# A DAG whose run fails part-way: extract succeeds, transform fails (a declined card), load is
# upstream_failed and page (one_failed) runs: the run view's graph shows each state. Its own
# schedule (kind dag) and a workflow schedule fire once a year, so no slot comes during a test.
nightly_etl = Dag(
    "nightly_etl",
    schedule=Schedule.cron("30 2 1 1 *"),
    max_active_runs=2,
    description="extract, transform, load; page on failure",
)
_extract = nightly_etl.task("extract", hello, args=["extract"])
_transform = nightly_etl.task("transform", charge, args=[42]).after(_extract)
_load = nightly_etl.task("load", hello, args=lambda conf, up: ["loaded"]).after(_transform)
nightly_etl.task("page", hello, args=["oncall"], trigger_rule="one_failed").after(_transform, _load)

app = App(
    workflows=[greet, approval, billing, family, batch],
    activities=[hello, charge, hold],
    updates=[note],
    dags=[nightly_etl],
    schedules=[
        WorkflowSchedule(
            "greet-yearly", Schedule.cron("0 3 1 1 *", tz="Europe/Paris"), workflow=greet, input="new year"
        )
    ],
)
