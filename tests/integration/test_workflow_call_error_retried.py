"""A ``ctx`` call Harvest refuses (``ctx.sleep("1 hour")``) fails the workflow task, retried until
fixed code runs; the run is untouched and completes once a worker runs the corrected code."""

from __future__ import annotations

from history_helpers import workflow_task_failure

from harvest import App, Client, workflow


@workflow(name="naps")
async def naps_v1(ctx) -> str:
    await ctx.sleep("1 hour")  # not a duration Harvest parses ("1h" is)
    return "slept"


@workflow(name="naps")
async def naps_v2(ctx) -> str:
    await ctx.sleep("10ms")
    return "fixed"


def test_a_bad_duration_fails_the_task_and_fixed_code_completes_the_run(
    db: str, start_worker, client: Client
) -> None:
    v1 = start_worker(App(workflows=[naps_v1]), cache_size=0)
    handle = client.start_workflow("naps", workflow_id="naps")
    failure = workflow_task_failure(db, handle.execution_id)
    assert failure["error_type"] == "WorkflowCallError"
    assert "ctx.sleep: duration: cannot parse '1 hour'" in failure["message"]
    assert "retried until a worker runs fixed code" in failure["message"]
    assert "Traceback" in failure["traceback"] and "naps_v1" in failure["traceback"]
    # The run is untouched: still running, nothing but its start in the history.
    assert handle.describe()["status"] == "RUNNING"
    assert [e["event_type"] for e in handle.history()] == ["WorkflowStarted"]

    v1.stop()
    start_worker(App(workflows=[naps_v2]), cache_size=0)
    assert handle.result(timeout=30) == "fixed"
    assert "WorkflowFailed" not in [e["event_type"] for e in handle.history()]
