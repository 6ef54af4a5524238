"""Schedules under real concurrency and hostile input (docs/schedules.md "Guarantees").

Two sessions on real connections race the schedule functions: one holds its transaction open,
the other is started in a thread and the test waits until Postgres says it is blocked on a lock
(pg_stat_activity), then lets the first commit. No sleep decides anything.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from harvest.core.errors import ScheduleAlreadyExists
from harvest.db.sqlapi import SqlApi

SPEC = {"name": "nightly", "workflow_name": "nightly_wf", "cron": "0 3 * * *", "timezone": "UTC"}


def _wait_until_blocked(conn: psycopg.Connection, application_name: str) -> None:
    """Until the session named ``application_name`` waits on a lock (10 s at most)."""
    deadline = time.monotonic() + 10
    while not conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = %s"
        " AND datname = current_database() AND wait_event_type = 'Lock')",
        (application_name,),
    ).fetchone()[0]:  # type: ignore[index]  # one row
        assert time.monotonic() < deadline, f"{application_name} never waited on a lock"
        time.sleep(0.01)


def _in_thread(target: Callable[[], Any], outcome: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        try:
            outcome["result"] = target()
        except BaseException as exc:  # the assertion names it
            outcome["result"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _race(db: str, conn: psycopg.Connection, first: str, second: str, args: Any) -> Any:
    """``first`` runs in an open transaction, ``second`` on another connection blocks behind it;
    the first commits and the second's outcome (a row, or the exception) is returned."""
    with (
        psycopg.connect(db, application_name="first") as one,
        psycopg.connect(db, application_name="second", autocommit=True) as two,
    ):
        one.execute(first, args)
        outcome: dict[str, Any] = {}
        thread = _in_thread(lambda: two.execute(second, args).fetchone(), outcome)
        _wait_until_blocked(conn, "second")
        one.commit()
        thread.join(10)
    return outcome["result"]


def test_two_workers_declaring_a_new_schedule_at_once_both_boot(db: str, conn: psycopg.Connection) -> None:
    """A rolling deploy: two workers' boots upsert the same new schedule at the same moment.
    The second waits for the first and finds the schedule there: nothing to change, no error
    (a unique violation here failed the second worker's start)."""
    declare = "SELECT harvest.declare_schedules(%s::jsonb)"
    got = _race(db, conn, declare, declare, (json.dumps([SPEC]),))
    assert got == (0,), got
    assert conn.execute("SELECT count(*) FROM harvest.schedules").fetchone() == (1,)


def test_two_operators_creating_one_name_at_once_the_second_is_told_it_exists(
    db: str, conn: psycopg.Connection
) -> None:
    """Two create_schedule calls of one name at once: the second answers HR014 (the API's
    409, 'update it, or delete it first'), as it does when it comes later, not a raw unique
    violation (a 500)."""
    create = "SELECT harvest.create_schedule(%s, 'nightly_wf', p_cron => '0 3 * * *')"
    got = _race(db, conn, create, create, ("nightly",))
    assert isinstance(got, psycopg.Error) and got.sqlstate == "HR014", repr(got)
    with pytest.raises(ScheduleAlreadyExists):
        SqlApi(conn).create_schedule("nightly", "nightly_wf", cron="0 3 * * *")
