"""A worker whose registry row was deleted (worker retention prunes rows silent for longer
than worker_max_age: a long partition, a frozen VM) registers again at its next heartbeat,
with its workflow names, warns once, and keeps working (issue 12 leftover)."""

from __future__ import annotations

import logging
import time

import psycopg

from harvest import App, Client, workflow


@workflow
async def ping(ctx) -> str:
    return "pong"


def _wait_until(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _row(db: str, worker_id: str):
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT status, queues FROM harvest.workers WHERE id = %s", (worker_id,)
        ).fetchone()


def _names(db: str) -> list[tuple[str, str]]:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT queue, workflow_name FROM harvest.registered_workflows ORDER BY 1, 2"
        ).fetchall()


def test_a_worker_whose_row_was_deleted_registers_again(db: str, start_worker, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="harvest.worker")
    running = start_worker(App(workflows=[ping]), heartbeat_interval=0.2)
    worker_id = running.worker.worker_id
    _wait_until(lambda: _row(db, worker_id), what="the worker's registration")
    # (its workflow names follow its row, in a statement of their own)
    registered = _wait_until(lambda: _names(db), what="its workflow names")
    assert registered == [("default", "ping")]
    with psycopg.connect(db, autocommit=True) as conn:  # what a prune of the row leaves
        conn.execute("DELETE FROM harvest.workers WHERE id = %s", (worker_id,))
        conn.execute("DELETE FROM harvest.registered_workflows")
    assert _wait_until(lambda: _row(db, worker_id), what="the worker's new registration") == (
        "active",
        ["default"],
    )
    assert _wait_until(lambda: _names(db), what="its workflow names") == registered
    with Client(db) as client:  # a start of its workflow is accepted again, and runs
        assert client.start_workflow(ping).result(timeout=20) == "pong"
    warnings = [r for r in caplog.records if "no longer in the registry" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert running.error is None


def test_a_worker_whose_row_was_deleted_still_stops_cleanly(db: str, start_worker) -> None:
    running = start_worker(App(workflows=[ping]), heartbeat_interval=60)  # no heartbeat comes first
    worker_id = running.worker.worker_id
    _wait_until(lambda: _row(db, worker_id), what="the worker's registration")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DELETE FROM harvest.workers WHERE id = %s", (worker_id,))
    running.stop()  # raised NotFound from stop_worker before
    assert _row(db, worker_id) == ("stopped", ["default"])
