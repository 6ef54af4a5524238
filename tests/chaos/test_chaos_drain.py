"""SIGTERM: a draining worker hands its unfinished task back at once, not after a lease expiry."""

from __future__ import annotations

import signal
import time

import pytest
from apps import wf_single
from harness import check_history, history, query, runs, wait_until

pytestmark = pytest.mark.chaos


def test_sigterm_releases_in_flight_activity_to_another_worker(chaos_db, workers, client):
    a = workers.start(shutdown_grace=0.5)
    # start_to_close 30 s: a lease expiry would take far longer than this test allows.
    handle = client.start_workflow(wf_single, "forever", 30.0, None)
    wait_until(lambda: runs(chaos_db, handle.execution_id), 15, "the first run to start on A")
    b = workers.start()

    began = time.monotonic()
    workers.kill(a, signal.SIGTERM)
    assert a.wait(timeout=10) == 0, workers.log(a)
    assert handle.result(timeout=10) == "run2"
    elapsed = time.monotonic() - began
    assert elapsed < 8, f"the hand-over took {elapsed:.1f}s: it waited for the lease"

    done = runs(chaos_db, handle.execution_id)
    assert [(r["worker_pid"], r["finished_at"] is not None) for r in done] == [(a.pid, False), (b.pid, True)]
    # A release is not a failed attempt: the retry still counts as attempt 1.
    assert [r["attempt"] for r in done] == [1, 1]
    events = history(chaos_db, handle.execution_id)
    check_history(events)
    # (started_at: when the final attempt started, for the usage report)
    completed = [
        {k: v for k, v in e["event_data"].items() if k != "started_at"}
        for e in events
        if e["event_type"] == "ActivityCompleted"
    ]
    assert completed == [{"seq": 1, "result": "run2", "attempt": 1}]
    [row] = query(chaos_db, "SELECT status FROM harvest.workers WHERE pid = %s", (a.pid,))
    assert row["status"] == "stopped"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_worker_is_draining_until_its_in_flight_work_is_done(chaos_db, workers, client, sig):
    # The spec's Draining: received SIGTERM, waiting for in-flight tasks to complete.
    a = workers.start(shutdown_grace=20.0)
    handle = client.start_workflow(wf_single, "sleep:2", 30.0, None)
    wait_until(lambda: runs(chaos_db, handle.execution_id), 15, "the activity to start")

    def registry() -> str:
        return query(chaos_db, "SELECT status FROM harvest.workers WHERE pid = %s", (a.pid,))[0]["status"]

    workers.kill(a, sig)
    wait_until(lambda: registry() == "draining", 5, "the worker to record that it is draining")
    # ... while its activity is still in flight.
    [run] = runs(chaos_db, handle.execution_id)
    assert run["finished_at"] is None, "the activity finished before the worker said it was draining"
    assert a.wait(timeout=20) == 0, workers.log(a)
    assert registry() == "stopped"
    # The in-flight activity was finished and recorded, not released.
    [run] = runs(chaos_db, handle.execution_id)
    assert (run["worker_pid"], run["result"]) == (a.pid, "run1")
    completed = [
        {k: v for k, v in e["event_data"].items() if k != "started_at"}
        for e in history(chaos_db, handle.execution_id)
        if e["event_type"] == "ActivityCompleted"
    ]
    assert completed == [{"seq": 1, "result": "run1", "attempt": 1}]
