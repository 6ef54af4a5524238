"""The App the synthetic incident drills run (scripts/alert_drills.py,
docs/runbooks/synthetic-incident-drills.md): an activity that always fails, and a workflow
for a queue a drill leaves without a worker."""

from __future__ import annotations

from harvest import App, RetryPolicy, activity, workflow


@activity(queue="drill", retry=RetryPolicy.none())
async def drill_broken(ctx) -> None:
    raise ConnectionError("drill: upstream returned 503")


@workflow(queue="drill")
async def drill_fails(ctx) -> None:
    await ctx.execute_activity(drill_broken)


@workflow(queue="drill_other")
async def drill_waits(ctx) -> None:
    return None


app = App(workflows=[drill_fails, drill_waits], activities=[drill_broken])
