"""A result waiter and a closing run that race (harvest.wait_for_result, functions/executions.sql).

A close deletes the waiters it can see and notifies harvest_done only when it found one. A waiter
marked while the close was in flight, which read the run as still running, was never woken: its
client slept until the next fallback re-read (5 s), measured as ~20% of start -> result calls in
bench/remote_latency.py. wait_for_result and the close now order the two on an advisory lock of
the run ('WAIT'): a waiter waits for a close that holds it and reads the run as closed, a mark
that commits first is seen by the close, and a close that finds a waiter marking right now (the
lock taken) notifies without waiting for it. The waiter takes no row lock, so it never holds up
the run's own decisions and results (a FOR SHARE on the run did, at every step of a run waited on).
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg


def _start(db: str) -> str:
    with psycopg.connect(db, autocommit=True) as conn:
        return str(
            conn.execute(
                "SELECT execution_id FROM harvest.start_workflow('wf', '[]', %s, 'q')", (f"r-{uuid.uuid4()}",)
            ).fetchone()[0]
        )


def test_a_waiter_that_races_a_close_in_flight_reads_the_run_as_closed(db: str) -> None:
    run = _start(db)
    answer: dict[str, object] = {}
    with psycopg.connect(db) as closer, psycopg.connect(db, autocommit=True) as waiter:
        closer.execute("SELECT harvest.terminate_workflow(%s, 'race')", (run,))  # uncommitted
        waiter_pid = waiter.info.backend_pid

        def wait() -> None:
            row = waiter.execute(
                "SELECT status FROM harvest.wait_for_result(%s, %s)", (run, str(uuid.uuid4()))
            ).fetchone()
            answer["status"] = row[0]

        thread = threading.Thread(target=wait)
        thread.start()
        with psycopg.connect(db, autocommit=True) as watcher:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                blocked = watcher.execute(
                    "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (waiter_pid,)
                ).fetchone()[0]
                if blocked or "status" in answer:
                    break
                time.sleep(0.02)
        assert "status" not in answer, "wait_for_result read the run before the close in flight ended"
        closer.commit()
        thread.join(10)
    assert answer == {"status": "TERMINATED"}
    with psycopg.connect(db, autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM harvest.result_waiters WHERE execution_id = %s", (run,))
        assert left.fetchone()[0] == 0  # a closed run marks no waiter


def test_a_waiter_marked_before_the_close_is_notified(db: str) -> None:
    run = _start(db)
    with psycopg.connect(db, autocommit=True) as listener, psycopg.connect(db, autocommit=True) as conn:
        listener.execute("LISTEN harvest_done")
        status = conn.execute(
            "SELECT status FROM harvest.wait_for_result(%s, %s)", (run, str(uuid.uuid4()))
        ).fetchone()[0]
        assert status == "RUNNING"
        conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (run,))
        woken = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
    assert woken == [run]


def test_a_waiter_marking_holds_up_no_step_of_the_run(db: str) -> None:
    run = _start(db)
    with psycopg.connect(db) as waiter, psycopg.connect(db, autocommit=True) as closer:
        # The mark is made and not committed yet: the waiter holds whatever wait_for_result took.
        status = waiter.execute(
            "SELECT status FROM harvest.wait_for_result(%s, %s)", (run, str(uuid.uuid4()))
        ).fetchone()[0]
        assert status == "RUNNING"
        # A row lock on the run would make this close wait for the waiter's commit (the
        # lock_timeout turns that wait into an error instead of a hang).
        closer.execute("SET lock_timeout = '10s'")
        closer.execute("SELECT harvest.terminate_workflow(%s, 'not held up')", (run,))
        waiter.rollback()
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT status FROM harvest.executions WHERE id = %s", (run,)).fetchone()[0] == (
            "TERMINATED"
        )


WAIT = "SELECT status FROM harvest.wait_for_result(%s, %s)"
MARKS = "SELECT count(*) FROM harvest.result_waiters WHERE waiter_id = %s"


def test_a_close_that_races_a_mark_in_flight_notifies_and_the_mark_goes_with_the_next_read(db: str) -> None:
    run, waiter_id = _start(db), str(uuid.uuid4())
    with (
        psycopg.connect(db, autocommit=True) as listener,
        psycopg.connect(db) as waiter,
        psycopg.connect(db, autocommit=True) as closer,
    ):
        listener.execute("LISTEN harvest_done")
        status = waiter.execute(WAIT, (run, waiter_id)).fetchone()
        assert status[0] == "RUNNING"  # marked, not committed: the close cannot see this mark
        closer.execute("SELECT harvest.terminate_workflow(%s, 'race')", (run,))
        woken = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
        assert woken == [run]  # notified all the same
        waiter.commit()  # the mark now lands on a closed run
        left = closer.execute(MARKS, (waiter_id,))
        assert left.fetchone()[0] == 1
        # The waiter's read after the notification answers, and takes its mark with it.
        again = closer.execute(WAIT, (run, waiter_id)).fetchone()
        assert again[0] == "TERMINATED"
        left = closer.execute(MARKS, (waiter_id,))
        assert left.fetchone()[0] == 0
