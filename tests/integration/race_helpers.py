"""Forcing an interleaving of real sessions: wait until a session waits on a lock, and run a
call in a thread keeping what it returned or raised (the race tests of the integration suite).

A lock-order race test proves two transactions cannot wait on each other (SQLSTATE 40P01,
docs/internals.md "Lock order"). It cannot wait for chance: it forces the interleaving that
deadlocked before the fix it guards, and ``race_behind_a_held_lock`` is that choreography.

1. A holding session takes one lock and keeps its transaction open (``hold``: a run's row, a
   run's task rows, a flow key's row, a start lock, ...), so that the racers stop where the
   test wants them.
2. Each racer (a ``Racer``: a call on a session of its own, named) starts in turn, and the test
   goes on only once it waits on a lock (``waits_on`` says which one; the test fails, saying
   so, if it never does). Before the fix, the first racer stopped holding a lock the second
   needs, and the second then waited holding one the first would need next.
3. The holding session lets go (``let_go``: commit, by default); the first racer goes on into
   its next lock. Every racer must end within 20 s, none with an error (a 40P01 among them)
   unless the test says it may (``may_fail``).

To write one: set the runs up on ``conn``; name the lock that makes the first racer stop where
it deadlocked (``hold``), the two racers' calls and where each waits (a racer whose wait the
fix removes, so that it may end at once, is ``waits_only_before_the_fix``); assert on the
returned outcome (racer name -> what its call returned or raised). Then check the test fails
(40P01) with the old SQL of the fix put back: a race test that cannot fail proves nothing.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

LockHold = Callable[[psycopg.Connection], object]


def wait_until_blocked(conn: psycopg.Connection, application_name: str, waits_on: str = "a lock") -> None:
    """Until the session named ``application_name`` waits on a lock (10 s at most); ``waits_on``
    names the lock in the failure."""
    deadline = time.monotonic() + 10
    while not conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = %s"
        " AND datname = current_database() AND wait_event_type = 'Lock')",
        (application_name,),
    ).fetchone()[0]:  # type: ignore[index]  # one row
        assert time.monotonic() < deadline, f"{application_name} never waited on {waits_on}"
        time.sleep(0.01)


def wait_until_done_or_blocked(
    conn: psycopg.Connection, thread: threading.Thread, application_name: str, waits_on: str = "a lock"
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
        assert time.monotonic() < deadline, f"{application_name} neither finished nor waited on {waits_on}"
        time.sleep(0.01)


def in_thread(target: Callable[[], Any], outcome: dict[str, Any], key: str = "result") -> threading.Thread:
    """``target()`` on a daemon thread, started; ``outcome[key]`` is its result or exception
    once the thread is joined (the test's assertion names it)."""

    def run() -> None:
        try:
            outcome[key] = target()
        except BaseException as exc:
            outcome[key] = exc

    thread = threading.Thread(target=run, daemon=True, name=key)
    thread.start()
    return thread


def all_finished(outcome: dict[str, Any], *threads: threading.Thread) -> None:
    """Join ``threads`` (20 s each) and check each ended, none with an exception (a deadlock's
    40P01 among them): the end of every lock-order race."""
    for thread in threads:
        thread.join(20)
    assert not any(thread.is_alive() for thread in threads), [t.name for t in threads if t.is_alive()]
    assert not any(isinstance(o, BaseException) for o in outcome.values()), outcome


def session(db: str, name: str) -> psycopg.Connection:
    """A connection of its own to ``db``, autocommit, named ``name`` (its application_name,
    which the waits read): ``with session(db, "setup") as c: ...``."""
    return psycopg.connect(db, autocommit=True, application_name=name)


@dataclass(frozen=True)
class Racer:
    """One side of a lock-order race: ``call`` runs on a session of its own (``session``,
    application_name ``name``) and its result or exception is ``outcome[name]``; it must wait on
    a lock, ``waits_on`` (the failure names it), before the next racer starts."""

    name: str
    call: Callable[[psycopg.Connection], Any]
    waits_on: str
    waits_only_before_the_fix: bool = False  # the fix took this wait away: it may end at once
    may_fail: bool = False  # an error is an outcome the test judges (not a deadlock, it says)


def commit(holder: psycopg.Connection) -> None:
    holder.commit()


def race_behind_a_held_lock(
    db: str,
    conn: psycopg.Connection,
    hold: LockHold,
    *racers: Racer,
    let_go: LockHold = commit,
    end_within: float = 20,
) -> dict[str, Any]:
    """The lock-order race (the module's docstring): a holding session runs ``hold`` and keeps
    its transaction open; each racer starts in turn and is waited for on its lock (read on
    ``conn``); then ``let_go`` runs on the holding session (commit, by default; an error it
    raises is ``outcome["holder"]``). Every racer must end (``end_within`` s each) and none but a
    ``may_fail`` one with an error. Returns the outcome: racer name -> its result or exception."""
    outcome: dict[str, Any] = {}
    threads = []
    with psycopg.connect(db) as holder:
        hold(holder)
        for racer in racers:
            thread = in_thread(functools.partial(_on_own_session, db, racer), outcome, racer.name)
            threads.append(thread)
            if racer.waits_only_before_the_fix:
                wait_until_done_or_blocked(conn, thread, racer.name, racer.waits_on)
            else:
                wait_until_blocked(conn, racer.name, racer.waits_on)
        try:
            let_go(holder)
        except psycopg.Error as exc:
            outcome["holder"] = exc
        for thread in threads:
            thread.join(end_within)
    assert not any(thread.is_alive() for thread in threads), [t.name for t in threads if t.is_alive()]
    failures = {r.name for r in racers if not r.may_fail and isinstance(outcome[r.name], BaseException)}
    assert not failures and "holder" not in outcome, outcome
    return outcome


def _on_own_session(db: str, racer: Racer) -> Any:
    with session(db, racer.name) as c:
        return racer.call(c)


# What the holding session may hold (``hold``): the rows and keys the races stop on.


def run_row(run: str) -> LockHold:
    """The run's row of harvest.executions (its close, a group commit's item, a supersede)."""
    return lambda holder: holder.execute("SELECT 1 FROM harvest.executions WHERE id = %s FOR UPDATE", (run,))


def task_rows_of(run: str) -> LockHold:
    """The run's rows of harvest.tasks: closing the run (its tasks' delete) stops there, holding
    the run's row."""
    return lambda holder: holder.execute(
        "SELECT 1 FROM harvest.tasks WHERE execution_id = %s FOR UPDATE", (run,)
    )


def flow_key_row(kind: str, key: str) -> LockHold:
    """A flow key's row of harvest.flow_keys (made if missing): a quota'd or cancel_running
    start stops there, holding the key's advisory lock."""

    def hold(holder: psycopg.Connection) -> None:
        holder.execute(
            "INSERT INTO harvest.flow_keys (kind, key) VALUES (%s, %s) ON CONFLICT DO NOTHING", (kind, key)
        )
        holder.execute("SELECT 1 FROM harvest.flow_keys WHERE kind = %s AND key = %s FOR UPDATE", (kind, key))

    return hold


def start_lock(workflow_name: str, workflow_id: str) -> LockHold:
    """The start lock of (workflow_name, workflow_id) (harvest._lock_start_key)."""
    return lambda holder: holder.execute(
        "SELECT harvest._lock_start_key(%s, %s)", (workflow_name, workflow_id)
    )
