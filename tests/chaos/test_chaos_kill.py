"""SIGKILL a worker mid-activity and mid-decision: the work moves on, nothing is applied twice."""

from __future__ import annotations

import pytest
from apps import wf_decider, wf_single
from harness import check_history, count_events, history, query, runs, wait_until

pytestmark = pytest.mark.chaos


def test_sigkill_mid_activity_retries_on_another_worker(chaos_db, workers, client):
    a = workers.start()
    handle = client.start_workflow(wf_single, "forever", 2.0, None)
    first = wait_until(lambda: runs(chaos_db, handle.execution_id), 15, "the first attempt to start")
    assert first[0]["worker_pid"] == a.pid and first[0]["attempt"] == 1

    workers.kill(a)  # SIGKILL while the attempt holds the task
    b = workers.start()

    assert handle.result(timeout=20) == "run2"
    done = runs(chaos_db, handle.execution_id)
    assert [(r["attempt"], r["worker_pid"], r["finished_at"] is not None) for r in done] == [
        (1, a.pid, False),
        (2, b.pid, True),
    ]
    assert len({r["idem_key"] for r in done}) == 1, "retries must share the idempotency key"

    events = history(chaos_db, handle.execution_id)
    check_history(events)
    assert count_events(events, "ActivityScheduled") == 1
    # (started_at: when the final attempt started, for the usage report)
    completed = [
        {k: v for k, v in e["event_data"].items() if k != "started_at"}
        for e in events
        if e["event_type"] == "ActivityCompleted"
    ]
    assert completed == [{"seq": 1, "result": "run2", "attempt": 2}]
    assert count_events(events, "WorkflowCompleted") == 1


def test_sigkill_mid_decision_applies_no_command_twice(chaos_db, workers, client):
    a = workers.start()
    handle = client.start_workflow(wf_decider, "forever")
    # The local activity runs inside the second workflow task: A holds that task now.
    wait_until(
        lambda: [r for r in runs(chaos_db, handle.execution_id) if r["kind"] == "local"],
        15,
        "the local activity to start inside the workflow task",
    )
    held = wait_until(
        lambda: query(
            chaos_db,
            "SELECT lease_owner FROM harvest.tasks WHERE execution_id = %s AND kind = 'workflow' "
            "AND status = 'running'",
            (handle.execution_id,),
        ),
        5,
        "the running workflow task",
    )
    assert str(a.pid) in held[0]["lease_owner"]
    before = history(chaos_db, handle.execution_id)

    workers.kill(a)
    # Nothing of the killed decision reached the history.
    assert history(chaos_db, handle.execution_id) == before
    b = workers.start()

    assert handle.result(timeout=20) == ["a:ok", "run2", "c:ok"]
    events = history(chaos_db, handle.execution_id)
    check_history(events)
    local = [r for r in runs(chaos_db, handle.execution_id) if r["kind"] == "local"]
    assert [(r["worker_pid"], r["finished_at"] is not None) for r in local] == [(a.pid, False), (b.pid, True)]
    markers = [e["event_data"] for e in events if e["event_type"] == "MarkerRecorded"]
    assert [m["kind"] for m in markers] == ["now", "local_activity"]
    assert markers[1]["value"] == {"name": "gated_local", "result": "run2"}
    # The regular activities each ran once: the kill hit neither.
    regular = [r for r in runs(chaos_db, handle.execution_id) if r["kind"] == "activity"]
    assert sorted(r["result"] for r in regular) == ["a:ok", "c:ok"]


def test_slow_decision_past_its_lease_is_refused(chaos_db, workers, client):
    """Not killed, only slow: the lease expires, another claim redoes the task, the late commit fails."""
    workers.start()
    workers.start()
    handle = client.start_workflow(wf_decider, "sleep:3")  # 3 s > workflow_lease of 2 s
    assert handle.result(timeout=25) == ["a:ok", "run2", "c:ok"]
    check_history(history(chaos_db, handle.execution_id))
    wait_until(lambda: "was refused" in workers.all_logs(), 10, "the late commit to be refused")
    local = [r for r in runs(chaos_db, handle.execution_id) if r["kind"] == "local"]
    assert [r["result"] for r in local] == ["run1", "run2"]  # the slow run did finish, late
    # The refused commit wrote nothing: the history is still exactly one clean run.
    check_history(history(chaos_db, handle.execution_id))
