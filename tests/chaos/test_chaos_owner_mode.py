"""Owner mode (functions/owners.sql) with real worker processes: SIGKILL the owner of a partition
mid-decision; the partition is acquired by the other worker once the lease runs out, every run
finishes exactly once, every history replays, and no epoch's decisions come from two workers."""

from __future__ import annotations

from collections import defaultdict

import pytest
from apps import app, churn_expected, wf_churn, wf_decider
from harness import check_all_histories, history, query, runs, wait_until

from harvest.core.ids import partition_of
from harvest.testing import WorkflowReplayer

pytestmark = pytest.mark.chaos

OWNER_LEASE_SECS = 2.0  # the workers heartbeat (and renew) every second


def _worker_id(dsn: str, pid: int) -> str:
    return query(dsn, "SELECT id FROM harvest.workers WHERE pid = %s", (pid,))[0]["id"]


def _owner(dsn: str, workflow_id: str) -> dict:
    return query(
        dsn,
        "SELECT worker_id, epoch, lease_expires_at FROM harvest.partition_owners WHERE partition_id = %s",
        (partition_of(workflow_id),),
    )[0]


def test_sigkill_the_owner_mid_decision_the_partition_is_acquired_again(chaos_db, workers, client):
    query(chaos_db, "SELECT harvest.set_owner_mode(true, %s, 'chaos')", (OWNER_LEASE_SECS,))
    # A's workflow task must outlive the setup below (B's start, eight starts, B's first
    # partition), which took over 2 s on a loaded machine: nothing extends a workflow task's
    # lease while its local activity runs (docs/activities.md), so at the harness's 2 s A's
    # own scanner released the task and A ran the local activity again before the kill.
    a = workers.start(workflow_lease=8.0)
    decider = client.start_workflow(wf_decider, "forever", workflow_id="decider")
    # A holds the decider's second workflow task (its local activity blocks in it) and its partition.
    wait_until(
        lambda: [r for r in runs(chaos_db, decider.execution_id) if r["kind"] == "local"],
        15,
        "the local activity to start inside the workflow task",
    )
    a_id = _worker_id(chaos_db, a.pid)
    held = _owner(chaos_db, "decider")
    assert held["worker_id"] == a_id
    b = workers.start()
    b_id = _worker_id(chaos_db, b.pid)
    churn = [client.start_workflow(wf_churn, n, workflow_id=f"churn-{n}") for n in range(8)]
    wait_until(
        lambda: query(chaos_db, "SELECT 1 FROM harvest.partition_owners WHERE worker_id = %s", (b_id,)),
        15,
        "worker B to own a partition",
    )

    workers.kill(a)  # SIGKILL: no release of its tasks or owner rows
    assert [h.result(timeout=40) for h in churn] == [churn_expected(n) for n in range(8)]
    assert decider.result(timeout=40) == ["a:ok", "run2", "c:ok"]

    # The decider's partition was acquired again, by B, with the epoch moved on.
    now = _owner(chaos_db, "decider")
    assert now["worker_id"] == b_id and now["epoch"] > held["epoch"]
    events = history(chaos_db, decider.execution_id)
    last = [e["event_data"] for e in events if e["event_type"] == "WorkflowTaskCompleted"][-1]
    assert last["worker_id"] == b_id and last["owner_epoch"] > held["epoch"]
    local = [r for r in runs(chaos_db, decider.execution_id) if r["kind"] == "local"]
    assert [(r["worker_pid"], r["finished_at"] is not None) for r in local] == [(a.pid, False), (b.pid, True)]

    # Every run finished exactly once and replays; an epoch's decisions come from one worker.
    assert check_all_histories(chaos_db) == 9
    markers = query(
        chaos_db,
        "SELECT e.workflow_id, ev.event_data FROM harvest.events AS ev "
        "JOIN harvest.executions AS e ON e.id = ev.execution_id "
        "WHERE ev.event_type = 'WorkflowTaskCompleted'",
    )
    deciders: dict[tuple[int, int], set[str]] = defaultdict(set)
    for m in markers:
        deciders[(partition_of(m["workflow_id"]), m["event_data"]["owner_epoch"])].add(
            m["event_data"]["worker_id"]
        )
    assert all(len(who) == 1 for who in deciders.values()), deciders
    for execution_id in [decider.execution_id, *(h.execution_id for h in churn)]:
        WorkflowReplayer(app).replay_or_raise(history(chaos_db, execution_id))
