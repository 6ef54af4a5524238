"""Forcing an interleaving of real sessions: wait until a session waits on a lock, and run a
call in a thread keeping what it returned or raised (the race tests of the integration suite)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg


def wait_until_blocked(conn: psycopg.Connection, application_name: str) -> None:
    """Until the session named ``application_name`` waits on a lock (10 s at most)."""
    deadline = time.monotonic() + 10
    while not conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = %s"
        " AND datname = current_database() AND wait_event_type = 'Lock')",
        (application_name,),
    ).fetchone()[0]:  # type: ignore[index]  # one row
        assert time.monotonic() < deadline, f"{application_name} never waited on a lock"
        time.sleep(0.01)


def wait_until_done_or_blocked(
    conn: psycopg.Connection, thread: threading.Thread, application_name: str
) -> None:
    """Until ``thread`` has finished or the session named ``application_name`` waits on a lock
    (10 s at most): for a call that waits only before a fix."""
    deadline = time.monotonic() + 10
    while (
        thread.is_alive()
        and not conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = %s"
            " AND datname = current_database() AND wait_event_type = 'Lock')",
            (application_name,),
        ).fetchone()[0]  # type: ignore[index]  # one row
    ):
        assert time.monotonic() < deadline, f"{application_name} neither finished nor waited on a lock"
        time.sleep(0.01)


def in_thread(target: Callable[[], Any], outcome: dict[str, Any], key: str = "result") -> threading.Thread:
    """``target()`` on a daemon thread, started; ``outcome[key]`` is its result or exception
    once the thread is joined (the test's assertion names it)."""

    def run() -> None:
        try:
            outcome[key] = target()
        except BaseException as exc:
            outcome[key] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def all_finished(outcome: dict[str, Any], *threads: threading.Thread) -> None:
    """Join ``threads`` (20 s each) and check each ended, none with an exception (a deadlock's
    40P01 among them): the end of every lock-order race."""
    for thread in threads:
        thread.join(20)
    assert not any(thread.is_alive() for thread in threads), [t.name for t in threads if t.is_alive()]
    assert not any(isinstance(o, BaseException) for o in outcome.values()), outcome
