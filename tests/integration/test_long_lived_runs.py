"""Runs that live for months under the test clock (docs/workflows.md, "What a long-lived run
costs"): a subscription that continues as new every cycle, and what retention does with its
chain once it has ended."""

from __future__ import annotations

import psycopg

from harvest import ActivityContext, App, WorkflowContext, activity, workflow
from harvest.db.sqlapi import SqlApi
from harvest.testing import WorkflowEnvironment

CYCLES = 40


@activity
def charge(ctx: ActivityContext, cycle: int) -> int:
    return cycle


@workflow
async def subscription(ctx: WorkflowContext, cycle: int = 0) -> int:
    """A charge every 30 days, one run a cycle."""
    if cycle >= CYCLES:
        return cycle
    await ctx.sleep("30d")
    await ctx.execute_activity(charge, cycle)
    return ctx.continue_as_new(cycle + 1)


app = App(workflows=[subscription], activities=[charge])


def _runs(dsn: str, workflow_id: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE workflow_id = %s", (workflow_id,)
        ).fetchone()
    return int(row[0]) if row else 0


def test_an_ended_chain_goes_in_one_retention_batch() -> None:
    """Retention keeps a chain's runs while a later run of it is here and deleted them from the
    last back, one run a batch: an ended chain of 5,000 runs took 5,001 batches (341 s), each
    reading the chain's kept runs again. A batch now takes the runs before each run it deletes,
    so a 41-run chain of real rotations goes in one batch, with its events and tasks."""
    with WorkflowEnvironment(app) as env:
        handle = env.client.start_workflow(subscription, workflow_id="sub-7")
        assert handle.result(timeout=60) == CYCLES  # 40 cycles of 30 days, followed down the chain
        assert _runs(env.dsn, "sub-7") == CYCLES + 1
        with psycopg.connect(env.dsn, autocommit=True) as conn:
            api = SqlApi(conn)
            api.set_retention_settings(max_age="30 days")
            env.sleep("31d", outage=True)
            first = api.run_retention()
            events = conn.execute(
                "SELECT count(*) FROM harvest.events WHERE execution_id = %s", (handle.execution_id,)
            ).fetchone()
        assert (first["deleted"], first["remaining"]) == (CYCLES + 1, 0), first
        assert _runs(env.dsn, "sub-7") == 0
        assert events == (0,)
