"""The worker service's App: render a report (slow, real work in a thread), then publish it.

Run it with ``harvest worker --config examples/standalone_worker/harvest.toml
examples.standalone_worker.app:app``. A real service imports its own modules here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from harvest import ActivityContext, App, RetryPolicy, WorkflowContext, activity, workflow

QUEUE = "reports"


@dataclass
class ReportRequest:
    report_id: str
    out_dir: str
    work_seconds: float = 1.0


@activity(start_to_close="5m", heartbeat_timeout="30s", retry=RetryPolicy.exponential(max_attempts=3))
def render(ctx: ActivityContext, request: ReportRequest) -> str:
    """Render the report into ``out_dir``: a ``.started`` file at once, the report once the work
    is done (seconds of it, heartbeating). A drain lets this finish; a kill would retry it."""
    out = Path(request.out_dir)
    out.mkdir(parents=True, exist_ok=True)  # the client names it; this worker's machine may not have it yet
    (out / f"{request.report_id}.started").write_text(f"attempt {ctx.attempt()}\n")
    finish = time.monotonic() + request.work_seconds
    while time.monotonic() < finish:
        ctx.heartbeat()
        time.sleep(min(0.1, max(0.0, finish - time.monotonic())))
    path = out / f"{request.report_id}.report"
    path.write_text(f"report {request.report_id}\n")
    return str(path)


@activity(start_to_close="30s")
def publish(ctx: ActivityContext, path: str) -> str:
    """Publish the rendered report (here: answer where it is)."""
    return f"published {Path(path).name}"


@workflow(queue=QUEUE)
async def report(ctx: WorkflowContext, request: ReportRequest) -> str:
    path: str = await ctx.execute_activity(render, request)
    published: str = await ctx.execute_activity(publish, path)
    return published


app = App(workflows=[report], activities=[render, publish])
