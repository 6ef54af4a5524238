"""SIGKILL a worker between the claim that woke it and the decision that would commit with it.

An idle worker woken for one workflow task keeps its claim's transaction open and commits the
claim with the task's decision (docs/internals.md, "A claim that decides"). Here the worker is
killed in between: the claim was never committed, so the task is pending again the moment the
connection drops (no lease to wait out), and another worker decides it; the activity runs once
and the history is what one worker would have written.
"""

from __future__ import annotations

import pytest
from apps import wf_held_decision
from harness import (
    check_decided_once,
    history,
    hold_in_an_open_claim,
    unlocked_workflow_task,
    wait_until,
    workflow_task,
)

pytestmark = pytest.mark.chaos


def test_worker_killed_between_its_claim_and_the_decision_loses_nothing(chaos_db, workers, client, tmp_path):
    hold = tmp_path / "hold"
    hold.write_text("")
    a, handle = hold_in_an_open_claim(
        workers, hold, lambda: client.start_workflow(wf_held_decision, "x"), concurrency=2
    )
    eid = handle.execution_id
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
    assert handle.result(timeout=90) == "x:ok"  # (a bound on a hang: a worker starts slowly at load 15)
    check_decided_once(chaos_db, eid)
