"""A producer's check for sleeping workers and a worker's sleep mark (functions/core.sql
_notify_queue, functions/workers.sql set_worker_sleeping, worker.py Worker._idle).

A producer that checked before the mark was committed and commits after the worker's last
look for work sends no notification, and the look missed its task: before the queue's wake
lock, the task waited for the worker's poll interval (28 of 2,000 starts racing a one-slot
worker's sleep waited the full 2 s in a probe). The poll interval here is a minute, so a task
left to it fails the test.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from harvest import App, Client, activity, workflow
from harvest.db import sqlapi

gate = threading.Event()


@activity
def held(ctx, n: int) -> int:
    assert gate.wait(30), "the test did not open the gate"
    return n


@workflow
async def holds(ctx, n: int) -> int:
    return await ctx.execute_activity(held, n)


@workflow
async def quick(ctx, n: int) -> int:
    return n


APP = App(workflows=[holds, quick], activities=[held])


def _mark(conn: psycopg.Connection, worker_id: str) -> Any:
    return conn.execute("SELECT harvest.set_worker_sleeping(%s, true)", (worker_id,)).fetchone()[0]


def test_the_mark_answers_whether_a_producer_that_missed_it_has_committed(db: str, client: Client) -> None:
    with (
        psycopg.connect(db, autocommit=True) as listener,
        psycopg.connect(db, autocommit=True) as worker,
        psycopg.connect(db) as producer,
    ):
        listener.execute("LISTEN harvest_tasks")
        worker.execute("SELECT harvest.register_worker('w', ARRAY['default'], 'h', 1)")
        # The producer checks for a sleeping worker (none) and has not committed.
        client.start_workflow(quick, 1, connection=producer)
        assert _mark(worker, "w") is False  # marked, but that producer is still committing
        claim = "SELECT count(*) FROM harvest.claim_tasks('w', ARRAY['default'], 1)"
        assert worker.execute(claim).fetchone()[0] == 0  # the look now misses its task
        producer.commit()
        assert list(listener.notifies(timeout=0.3)) == []  # and it told no one
        assert _mark(worker, "w") is True  # asked again: it has committed
        assert worker.execute(claim).fetchone()[0] == 1  # the look after the answer finds it
        assert worker.execute("SELECT sleeping FROM harvest.workers WHERE id = 'w'").fetchone()[0] is True


def test_a_producer_that_finds_the_wake_lock_taken_notifies_without_checking(db: str, client: Client) -> None:
    """No worker is asleep, but a session holds the queue's wake lock (a worker's mark in that
    instant, or anyone's): the producer does not wait for it, and notifies."""
    with psycopg.connect(db, autocommit=True) as listener, psycopg.connect(db, autocommit=True) as other:
        listener.execute("LISTEN harvest_tasks")
        other.execute("SELECT harvest.register_worker('busy', ARRAY['default'], 'h', 1)")
        client.start_workflow(quick, 1)
        assert list(listener.notifies(timeout=0.3)) == []  # a busy worker: no notification
        other.execute("SELECT pg_advisory_lock(1463897925, hashtext('default') & 1023)")
        client.start_workflow(quick, 2)  # (returns: the producer did not wait)
        assert [n.payload for n in listener.notifies(timeout=0.5)] == ["default"]
        other.execute("SELECT pg_advisory_unlock(1463897925, hashtext('default') & 1023)")


@pytest.mark.parametrize(
    "isolation",
    [psycopg.IsolationLevel.REPEATABLE_READ, psycopg.IsolationLevel.SERIALIZABLE],
    ids=["repeatable-read", "serializable"],
)
def test_a_producer_reading_one_snapshot_notifies_without_checking(
    db: str, client: Client, isolation: psycopg.IsolationLevel
) -> None:
    """A caller's transaction that took its snapshot before the worker's mark committed: the
    mark is settled (no producer held the lock) and the worker's look finds nothing, then the
    start checks in the old snapshot, where no one is asleep. It must notify all the same."""
    with (
        psycopg.connect(db, autocommit=True) as listener,
        psycopg.connect(db, autocommit=True) as worker,
        psycopg.connect(db) as producer,
    ):
        producer.isolation_level = isolation
        listener.execute("LISTEN harvest_tasks")
        worker.execute("SELECT harvest.register_worker('w', ARRAY['default'], 'h', 1)")
        producer.execute("SELECT 1")  # the transaction's snapshot: no one asleep yet
        assert _mark(worker, "w") is True
        claim = "SELECT count(*) FROM harvest.claim_tasks('w', ARRAY['default'], 1)"
        assert worker.execute(claim).fetchone()[0] == 0
        client.start_workflow(quick, 1, connection=producer)
        producer.commit()
        assert [n.payload for n in listener.notifies(timeout=2)] == ["default"]


def test_the_mark_clears_with_nothing_to_wait_for(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn, psycopg.connect(db) as producer:
        conn.execute("SELECT harvest.register_worker('w', ARRAY['default'], 'h', 1)")
        producer.execute("SELECT pg_advisory_xact_lock_shared(1463897925, hashtext('default') & 1023)")
        clear = "SELECT harvest.set_worker_sleeping('w', false)"
        assert conn.execute(clear).fetchone()[0] is True
        assert _mark(conn, "missing") is True  # a worker not registered has no queue to wait on
        producer.rollback()


def test_a_start_in_a_transaction_open_while_the_worker_falls_asleep_runs_when_it_commits(
    db: str, start_worker, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker (one slot, so each claim saturates it and clears its mark) finishes its only
    run while a start in the caller's transaction is open: it marks itself asleep, looks for
    work and reads the next due time before that start commits. Without the wake lock it then
    slept for its poll interval; now it asks again until the start has committed, and looks."""
    gate.clear()
    looked_asleep = threading.Event()
    real = sqlapi.AsyncSqlApi.next_due_at

    async def due_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        due = await real(self, *args, **kwargs)
        if running.worker.lanes[0].sleeping is True and gate.is_set():
            looked_asleep.set()  # (after the look that follows the mark)
        return due

    monkeypatch.setattr(sqlapi.AsyncSqlApi, "next_due_at", due_read)
    running = start_worker(APP, poll_interval=60.0, concurrency=1)
    first = client.start_workflow(holds, 1)
    with psycopg.connect(db) as producer:
        # The worker is busy with the held activity (its mark cleared): the start's check finds
        # no one asleep, so it will not notify.
        assert _busy(running), "the worker did not take the held activity"
        second = client.start_workflow(quick, 2, connection=producer)
        gate.set()
        assert first.result(timeout=30) == 1
        assert looked_asleep.wait(30), "the worker did not fall asleep"
        producer.commit()
    assert second.result(timeout=20) == 2


def _busy(running: Any) -> bool:
    """Whether the worker came to hold one task with its mark cleared (within 30 s)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        worker = running.worker
        if worker.lanes and worker.lanes[0].sleeping is False and len(worker._inflight) == 1:
            return True
        time.sleep(0.01)
    return False
