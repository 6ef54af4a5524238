"""An activity completed elsewhere by its task token survives its worker's SIGKILL: the token
completes it once, the workflow finishes on another worker, nothing runs twice."""

from __future__ import annotations

import pytest
from apps import wf_external
from harness import check_history, count_events, history, query, runs, wait_until

from harvest.core.errors import StaleTask

pytestmark = pytest.mark.chaos


def test_sigkill_after_complete_async_then_completion_by_token(chaos_db, workers, client):
    a = workers.start()
    handle = client.start_workflow(wf_external, "order-7")
    started = wait_until(
        lambda: [r for r in runs(chaos_db, handle.execution_id) if r["kind"] == "external"],
        15,
        "the activity to hand out its task token",
    )
    token = started[0]["mode"]
    # The worker let go of the task (detach_activity) before it dies: held by no worker.
    wait_until(
        lambda: query(
            chaos_db,
            "SELECT 1 FROM harvest.tasks WHERE execution_id = %s AND kind = 'activity' "
            "AND status = 'running' AND lease_owner IS NULL",
            (handle.execution_id,),
        ),
        10,
        "the worker to detach the activity",
    )
    workers.kill(a)

    # Any process completes it by the token, at most once.
    assert client.complete_activity(token, "shipped") == "completed"
    assert client.complete_activity(token, "shipped") == "already_completed"
    with pytest.raises(StaleTask, match="another result"):
        client.complete_activity(token, "lost")

    workers.start()
    assert handle.result(timeout=20) == "order-7:shipped"
    events = history(chaos_db, handle.execution_id)
    check_history(events)
    assert count_events(events, "ActivityCompleted") == 1
    completed = [e["event_data"] for e in events if e["event_type"] == "ActivityCompleted"]
    assert completed == [{"seq": 1, "result": "shipped", "attempt": 1}]
    # The activity body ran once: the kill and the new worker ran it no second time.
    assert len([r for r in runs(chaos_db, handle.execution_id) if r["kind"] == "external"]) == 1
