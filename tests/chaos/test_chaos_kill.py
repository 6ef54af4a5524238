"""SIGKILL a worker mid-activity and mid-decision: the work moves on, nothing is applied twice."""

from __future__ import annotations

import signal

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


def test_a_frozen_decider_past_its_lease_is_refused(chaos_db, workers, client):
    """Not killed, frozen (SIGSTOP: a long GC pause, a suspended VM): a live worker keeps its
    workflow task's lease while it runs, but a frozen one cannot, so the lease expires, another
    worker redoes the task, and the frozen one's late commit fails when it wakes."""
    a = workers.start()
    handle = client.start_workflow(wf_decider, "sleep:3")
    wait_until(
        lambda: [r for r in runs(chaos_db, handle.execution_id) if r["kind"] == "local"],
        15,
        "the local activity to start inside the workflow task",
    )
    workers.kill(a, signal.SIGSTOP)
    try:
        b = workers.start()
        wait_until(
            lambda: len([r for r in runs(chaos_db, handle.execution_id) if r["kind"] == "local"]) == 2,
            20,
            "worker B to redo the workflow task once A's lease ran out",
        )
    finally:
        workers.kill(a, signal.SIGCONT)
    assert handle.result(timeout=25) == ["a:ok", "run2", "c:ok"]
    wait_until(lambda: "was refused" in workers.log(a), 15, "A's late commit to be refused")
    local = [r for r in runs(chaos_db, handle.execution_id) if r["kind"] == "local"]
    assert [(r["worker_pid"], r["result"]) for r in local] == [(a.pid, "run1"), (b.pid, "run2")]
    # The refused commit wrote nothing: the history is still exactly one clean run.
    check_history(history(chaos_db, handle.execution_id))


def test_a_slow_decider_keeps_its_lease(chaos_db, workers, client):
    """Slow, not frozen: a local activity of 3 s in a workflow task whose lease is 2 s. The
    worker extends the lease while it runs, so the task is decided once, by the worker that
    claimed it, with a second worker idle beside it."""
    workers.start()
    workers.start()
    handle = client.start_workflow(wf_decider, "sleep:3")
    assert handle.result(timeout=25) == ["a:ok", "run1", "c:ok"]
    local = [r for r in runs(chaos_db, handle.execution_id) if r["kind"] == "local"]
    assert [r["result"] for r in local] == ["run1"]
    assert "was refused" not in workers.all_logs()
    check_history(history(chaos_db, handle.execution_id))
