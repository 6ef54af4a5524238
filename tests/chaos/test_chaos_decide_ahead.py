"""SIGKILL a worker while its decision ahead waits to commit.

A worker that decides a run's next step on an activity's result sends the result and
the decision in one statement (docs/internals.md, "Deciding ahead"). The test holds
the execution's row lock so that statement waits, kills the worker there, then lets
the statement either finish (its backend commits on its own: the worker is gone but
its statement was already sent) or end with its backend terminated. Either way the
result and the decision land together or not at all, and another worker finishes the
run with every step applied once.
"""

from __future__ import annotations

import psycopg
import pytest
from apps import app, wf_ahead
from harness import check_history, history, query, runs, wait_until

from harvest.testing import WorkflowReplayer

pytestmark = pytest.mark.chaos


def _waiting_completion(dsn: str) -> int | None:
    """The backend whose complete_activities waits on a lock, if there is one."""
    rows = query(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND query LIKE '%complete_activities%'",
    )
    return rows[0]["pid"] if rows else None


def _backend_alive(dsn: str, pid: int) -> bool:
    return bool(query(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)))


@pytest.mark.parametrize("outcome", ["commits", "aborts"])
def test_worker_killed_while_its_decision_ahead_waits_to_commit(chaos_db, workers, client, outcome):
    a = workers.start(concurrency=2)
    a_id = query(chaos_db, "SELECT id FROM harvest.workers WHERE pid = %s", (a.pid,))[0]["id"]
    handle = client.start_workflow(wf_ahead, "sleep:0.5")
    eid = handle.execution_id
    wait_until(lambda: runs(chaos_db, eid), 15, "the gated activity to start")

    with psycopg.connect(chaos_db) as blocker:
        blocker.execute("SELECT 1 FROM harvest.executions WHERE id = %s FOR UPDATE", (eid,))
        backend = wait_until(
            lambda: _waiting_completion(chaos_db),
            10,
            "the result and its decision to wait on the execution's row lock",
        )
        before = history(chaos_db, eid)
        assert [e["event_type"] for e in before] == [
            "WorkflowStarted",
            "WorkflowTaskCompleted",
            "ActivityScheduled",
        ]
        workers.kill(a)
        if outcome == "aborts":
            query(chaos_db, "SELECT pg_terminate_backend(%s)", (backend,))
            wait_until(lambda: not _backend_alive(chaos_db, backend), 10, "the backend to end")
        blocker.commit()  # releases the row lock

    if outcome == "commits":
        # The orphaned statement runs to its end and commits the result with the decision.
        wait_until(lambda: not _backend_alive(chaos_db, backend), 10, "the orphaned statement")
        after = history(chaos_db, eid)
        assert after[: len(before)] == before
        assert [(e["event_type"], e["event_data"].get("seq")) for e in after[len(before) :]] == [
            ("ActivityCompleted", 1),
            ("WorkflowTaskCompleted", None),
            ("ActivityScheduled", 2),
        ]
        assert after[4]["event_data"] == {"through": 4, "worker_id": a_id}, (
            "the step was not decided ahead by the killed worker"
        )
        # The next activity was handed to the dead worker; it waits out that lease.
        expected_first = "run1"
    else:
        assert history(chaos_db, eid) == before, "a terminated statement wrote to the history"
        expected_first = "run2"  # the gated activity's lease runs out and it runs again

    workers.start(concurrency=2)
    assert handle.result(timeout=30) == [expected_first, "b:ok", "c:ok"]
    events = history(chaos_db, eid)
    check_history(events)
    WorkflowReplayer(app).replay_or_raise(events)
    done = runs(chaos_db, eid)
    by_seq = {seq: [r for r in done if r["seq"] == seq] for seq in (1, 2, 3)}
    assert [r["result"] for r in by_seq[1]] == (["run1"] if outcome == "commits" else ["run1", "run2"])
    assert all(r["worker_pid"] == a.pid for r in by_seq[1][:1])
    assert len(by_seq[2]) == len(by_seq[3]) == 1, "a quick activity ran twice"
    assert all(r["worker_pid"] != a.pid for r in by_seq[2] + by_seq[3])
    # (started_at: when the final attempt started, for the usage report)
    completed = [
        {k: v for k, v in e["event_data"].items() if k != "started_at"}
        for e in events
        if e["event_type"] == "ActivityCompleted"
    ]
    assert completed[0] == {"seq": 1, "result": expected_first, "attempt": 1 if outcome == "commits" else 2}
