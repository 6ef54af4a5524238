"""SIGKILL a worker between the claim that woke it and the decision that would commit with it.

An idle worker woken for one workflow task keeps its claim's transaction open and commits the
claim with the task's decision (docs/internals.md, "A claim that decides"). Here the worker is
killed in between: the claim was never committed, so the task is pending again the moment the
connection drops (no lease to wait out), and another worker decides it; the activity runs once
and the history is what one worker would have written.
"""

from __future__ import annotations

import time

import pytest
from apps import wf_held_decision
from harness import check_decided_once, history, query, unlocked_workflow_task, wait_until, workflow_task

pytestmark = pytest.mark.chaos


def test_worker_killed_between_its_claim_and_the_decision_loses_nothing(chaos_db, workers, client, tmp_path):
    hold = tmp_path / "hold"
    hold.write_text("")
    a = workers.start(concurrency=2, env={"CHAOS_HOLD_DECISION": str(hold)})
    # Only a claim woken by a notification on an idle worker keeps its transaction open: start
    # the run once A sleeps, not while its first claims (which commit alone) may still find it.
    # The sleep mark is set just before the worker's last claim ahead of its wait, hence the
    # short settle after it.
    wait_until(
        lambda: query(chaos_db, "SELECT 1 FROM harvest.workers WHERE pid = %s AND sleeping", (a.pid,)),
        15,
        "worker A to be idle, waiting for a notification",
    )
    time.sleep(0.3)
    handle = client.start_workflow(wf_held_decision, "x")
    eid = handle.execution_id
    entered = tmp_path / "hold.entered"
    wait_until(entered.exists, 15, "the first workflow task to be decided (and held) on worker A")
    # The claim that handed it over is not committed: to everyone else the task is still
    # pending, never attempted, with no lease (the claim's row lock keeps other claims off it).
    assert workflow_task(chaos_db, eid) == {"status": "pending", "attempt": 0, "lease_owner": None}
    assert [e["event_type"] for e in history(chaos_db, eid)] == ["WorkflowStarted"]

    workers.kill(a)
    # Its connection is gone and the claim with it: no lease to wait out.
    task = wait_until(
        lambda: unlocked_workflow_task(chaos_db, eid), 10, "the killed worker's claim to roll back"
    )
    assert task == {"status": "pending", "attempt": 0, "lease_owner": None}

    hold.unlink()
    workers.start(concurrency=2)
    assert handle.result(timeout=30) == "x:ok"
    check_decided_once(chaos_db, eid)
