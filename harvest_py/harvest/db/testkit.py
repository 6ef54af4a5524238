"""The database side of the test kit (harvest.testing): throwaway databases cloned from a
migrated template, and the shared test clock that time skipping moves.

The shared clock (migration 0035, docs/security.md "The clock"): a session whose
``harvest.fake_now`` is ``'shared'`` reads ``harvest.now()`` as ``now()`` plus
``harvest.engine_settings.test_clock_offset``, and only while the owner-only switch
``test_clock_allowed`` is on. Every connection the test kit opens (worker, client, clock) sets
that at connect time through the DSN, so one UPDATE by the owner moves all of them at once.
Only the schema owner or a superuser may write engine_settings: a low-privilege session that
sets ``harvest.fake_now`` moves nothing for anyone else, and nothing at all where the switch is
off (every production install).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, cast

import psycopg
from psycopg import conninfo, sql

from harvest.db import channels
from harvest.db.connection import connect, with_startup_options

__all__ = [
    "ClockState",
    "SharedClock",
    "Waits",
    "allow_test_clock",
    "clone_database",
    "create_database",
    "drop_database",
    "shared_clock_dsn",
]

SHARED = "shared"


def shared_clock_dsn(dsn: str) -> str:
    """``dsn`` with ``harvest.fake_now = 'shared'`` set on every connection made from it."""
    if "harvest.fake_now" in str(conninfo.conninfo_to_dict(dsn).get("options") or ""):
        return dsn
    return with_startup_options(dsn, f"-c harvest.fake_now={SHARED}")


def _admin(server_dsn: str) -> psycopg.Connection:
    return connect(server_dsn, autocommit=True)


def create_database(server_dsn: str, name: str, template: str | None = None) -> str:
    """Create database ``name`` (a clone of ``template`` when given; an older one of that
    name is dropped first) on the server ``server_dsn`` reaches; returns its DSN."""
    with _admin(server_dsn) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if template is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        else:
            clone_database(conn, name, template)
    return conninfo.make_conninfo(server_dsn, dbname=name)


def clone_database(admin: psycopg.Connection[Any], name: str, template: str) -> None:
    """CREATE DATABASE ``name`` as a copy of ``template`` on ``admin`` (an autocommit session
    allowed to create databases).

    On a server that does not flush to disk (``fsync = off``: the embedded test servers) from
    PostgreSQL 15 on, the clone copies the template's files (``STRATEGY FILE_COPY``): a clone of
    the migrated template (14 MB) cost the server ~28 ms of CPU, where the default (``WAL_LOG``)
    writes every page through the WAL for 55-70 ms. FILE_COPY checkpoints before and after the
    copy, which is cheap only where nothing is flushed; elsewhere the default stays."""
    statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
        sql.Identifier(name), sql.Identifier(template)
    )
    if _copies_files(admin):
        statement += sql.SQL(" STRATEGY FILE_COPY")
    admin.execute(statement)


def _copies_files(admin: psycopg.Connection[Any]) -> bool:
    """Whether clones on ``admin`` use FILE_COPY (clone_database): asked once per session (the
    test harness's clone threads make a clone a test on one session each)."""
    known = getattr(admin, "_harvest_copies_files", None)
    if known is None:
        row = (
            admin.execute("SELECT current_setting('fsync')").fetchone()
            if admin.info.server_version >= 150000
            else None
        )
        known = admin._harvest_copies_files = row is not None and row[0] == "off"  # type: ignore[attr-defined]
    return bool(known)


def drop_database(server_dsn: str, name: str) -> None:
    with _admin(server_dsn) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def allow_test_clock(dsn: str, allowed: bool = True) -> None:
    """Turn the owner-only test clock switch on (or off) in the database ``dsn`` names.
    Connect as the schema owner or a superuser: no harvest role may."""
    with _admin(dsn) as conn:
        conn.execute("UPDATE harvest.engine_settings SET test_clock_allowed = %s", (allowed,))


class ClockState(NamedTuple):
    """One look at a test database, for time skipping."""

    now: _dt.datetime  # the shared clock
    waiting: bool  # a client waits for the result of a running run (handle.result())
    busy: bool  # something can run now: a due or running task, an undelivered relay, a due schedule
    next_due: _dt.datetime | None  # when the next thing of a run becomes due (timer, backoff, deadline)
    schedules_due: bool = False  # a scheduler tick would fire a slot or start a buffered one now
    next_slot: _dt.datetime | None = None  # when the next schedule slot is due (its jitter included)


# What can run now, and when the next thing will. Timers and retry backoffs are pending tasks;
# a task's deadline_at, a run's timeouts and a deferred start's release are the scanner's.
# A running task (an activity or a decision in flight) is busy: its lease is not skipped past. A
# paused run's task is not work that can run, however overdue: it waits for the resume. A failed
# workflow task's retry is not skipped to: it fails on a bug of the workflow code, and skipping
# its backoff only spun it (hundreds of failed attempts a second, each logged).
# A pending task on a queue the worker does not poll (%(queues)s: the ones it polls; NULL: every
# queue) is not work either, nor a due time to skip to: nothing here will ever claim it (its
# timers included: a claim fires the timers of its queues). Its deadline still is (the scanner's).
# Schedules (only where a scheduler runs, %(schedules)s): one is due when its next slot (plus its
# jitter) has come or is not computed yet, and a buffered slot can start once its schedule has a
# free run; a paused one never is, nor one whose slots cannot be computed (%(uncomputable)s: a
# tick says so, and nothing would ever fire it). Their next slot is kept apart from the runs' next
# due time: a schedule fires for ever, so it is never on its own a reason to move the clock.
_STATE = """
WITH due_schedules AS (
    SELECT EXISTS (SELECT 1 FROM harvest.schedules AS s
                   WHERE %(schedules)s AND NOT s.paused AND s.name <> ALL (%(uncomputable)s::text[])
                     AND (s.next_due_at IS NULL OR s.next_due_at <= harvest.now()))
        OR EXISTS (SELECT 1 FROM harvest.schedules AS s
                   WHERE %(schedules)s AND NOT s.paused
                     AND EXISTS (SELECT 1 FROM harvest.schedule_firings AS f
                                 WHERE f.schedule_id = s.id AND f.status = 'buffered')
                     AND harvest._schedule_active_runs(s) < s.max_active_runs) AS due
)
SELECT harvest.now() AS now,
       EXISTS (SELECT 1 FROM harvest.result_waiters AS w
               JOIN harvest.executions AS e ON e.id = w.execution_id
               WHERE e.status = 'RUNNING') AS waiting,
       EXISTS (SELECT 1 FROM harvest.tasks AS t
               WHERE t.status = 'running'
                  OR (t.status = 'pending' AND t.due_at <= harvest.now()
                      AND (%(queues)s::text[] IS NULL OR t.queue = ANY (%(queues)s::text[]))))
       OR EXISTS (SELECT 1 FROM harvest.relays AS r WHERE NOT r.remote)
       OR (SELECT due FROM due_schedules) AS busy,
       least((SELECT min(t.due_at) FROM harvest.tasks AS t
              WHERE t.status = 'pending' AND NOT (t.kind = 'workflow' AND t.last_failure IS NOT NULL)
                AND (%(queues)s::text[] IS NULL OR t.queue = ANY (%(queues)s::text[]))),
             (SELECT min(t.deadline_at) FROM harvest.tasks AS t),
             (SELECT min(e.timeout_at) FROM harvest.executions AS e WHERE e.status = 'RUNNING'),
             (SELECT min(e.execution_timeout_at) FROM harvest.executions AS e WHERE e.status = 'RUNNING'),
             (SELECT min(p.release_at) FROM harvest.pending_starts AS p)) AS next_due,
       (SELECT due FROM due_schedules) AS schedules_due,
       (SELECT min(s.next_due_at) FROM harvest.schedules AS s
        WHERE %(schedules)s AND NOT s.paused AND s.next_due_at > harvest.now()) AS next_slot
"""


# The result waits of running runs, and a number that grows with every event any run appends
# (a stall lasts only while it stays put). The running children and activities of one run.
_WAITED = """
SELECT w.execution_id::text, w.waiter_id::text, e.workflow_name,
       (SELECT coalesce(sum(x.last_event_id), 0) FROM harvest.executions AS x) AS progress
FROM harvest.result_waiters AS w
JOIN harvest.executions AS e ON e.id = w.execution_id
WHERE e.status = 'RUNNING'
"""
_CHILDREN = """
SELECT c.id::text, c.workflow_name FROM harvest.executions AS c
WHERE c.parent_id = %s AND c.status = 'RUNNING' ORDER BY c.parent_seq, c.created_at
"""
_UNPOLLED = """
SELECT DISTINCT t.kind, t.activity_name, t.queue FROM harvest.tasks AS t
WHERE t.execution_id = %s AND t.status = 'pending' AND t.queue <> ALL (%s::text[])
ORDER BY t.queue, t.kind, t.activity_name
"""
_RUNNING_ACTIVITIES = """
SELECT t.activity_name, t.attempt FROM harvest.tasks AS t
WHERE t.execution_id = %s AND t.kind = 'activity' AND t.status = 'running' ORDER BY t.seq
"""


class Waits(NamedTuple):
    """The result waits on running runs: ``(execution_id, waiter_id, workflow_name)`` each,
    and the event count that tells a stall from progress."""

    progress: int
    waits: list[tuple[str, str, str]]


class SharedClock:
    """The shared test clock of one database, on a connection of its own (as the owner)."""

    def __init__(self, dsn: str):
        self.dsn = shared_clock_dsn(dsn)
        self._conn: Any = connect(self.dsn, autocommit=True)

    def close(self) -> None:
        self._conn.close()

    def now(self) -> _dt.datetime:
        return cast("_dt.datetime", self._conn.execute("SELECT harvest.now()").fetchone()[0])

    def offset(self) -> _dt.timedelta:
        return cast(
            "_dt.timedelta",
            self._conn.execute("SELECT test_clock_offset FROM harvest.engine_settings").fetchone()[0],
        )

    def set_offset(self, offset: _dt.timedelta, *, heartbeat: Sequence[str] = ()) -> None:
        """Set the clock to real time plus ``offset`` (a caller that moves it forward computes
        the offset first, so what it hands out, such as a worker's ``ctx.now()``, never lags
        the database); stamp the heartbeats of the workers ``heartbeat`` names at the new time in
        the same transaction: producers notify only workers whose last heartbeat is recent, and
        no scanner sees one silent past its lost_after across the jump (harvest.expire_lost_workers
        would take its tasks back)."""
        with self._conn.transaction():
            self._conn.execute("UPDATE harvest.engine_settings SET test_clock_offset = %s", (offset,))
            for worker_id in heartbeat:
                self._conn.execute("SELECT harvest.heartbeat_worker(%s)", (worker_id,))

    def state(
        self,
        *,
        schedules: bool = True,
        uncomputable: Iterable[str] = (),
        queues: Iterable[str] | None = None,
    ) -> ClockState:
        """``schedules``: whether a scheduler runs (else schedules are neither due nor ahead);
        ``uncomputable``: the schedules a tick could not compute, left out of what is due;
        ``queues``: the queues the worker polls (None: every queue), a pending task on another
        being neither work nor a due time."""
        params = {
            "schedules": schedules,
            "uncomputable": list(uncomputable),
            "queues": None if queues is None else list(queues),
        }
        row = self._conn.execute(_STATE, params).fetchone()
        return ClockState(*row)

    def schedule(self, name: str) -> dict[str, Any]:
        """The schedule ``name`` as harvest.get_schedule answers it, with its newest 1000
        firings (NotFound when there is none)."""
        from harvest.db.sqlapi import SqlApi

        return cast("dict[str, Any]", SqlApi(self._conn).get_schedule(name, 1000))

    def schedule_names(self) -> list[str]:
        return [
            r[0] for r in self._conn.execute("SELECT name FROM harvest.schedules ORDER BY name").fetchall()
        ]

    def waits(self) -> Waits:
        rows = self._conn.execute(_WAITED).fetchall()
        return Waits(int(rows[0][3]) if rows else 0, [(r[0], r[1], r[2]) for r in rows])

    def running_children(self, execution_id: str) -> list[tuple[str, str]]:
        return [(r[0], r[1]) for r in self._conn.execute(_CHILDREN, (execution_id,)).fetchall()]

    def unpolled_tasks(self, execution_id: str, polled: Iterable[str]) -> list[tuple[str, str | None, str]]:
        """The run's pending tasks on queues not in ``polled``: ``(kind, activity_name, queue)``."""
        rows = self._conn.execute(_UNPOLLED, (execution_id, list(polled))).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def running_activities(self, execution_id: str) -> list[tuple[str, int]]:
        return [(r[0], r[1]) for r in self._conn.execute(_RUNNING_ACTIVITIES, (execution_id,)).fetchall()]

    def stack(self, execution_id: str) -> dict[str, Any]:
        """What the run waits on (harvest.get_execution_stack), as a stuck wait reports it."""
        from harvest.db.sqlapi import SqlApi  # (the SQL API: only the stuck report needs it)

        return cast("dict[str, Any]", SqlApi(self._conn).get_execution_stack(execution_id, 10))

    def wake_result_waits(self, execution_id: str) -> None:
        """Wake the result waits on a run (they read it again), as its close would."""
        self._conn.execute("SELECT pg_notify(%s, %s)", (channels.DONE, execution_id))

    def scan(self) -> None:
        """One scanner pass at the clock's time (timeouts, deadlines, relays, deferred starts)."""
        self._conn.execute("SELECT harvest.scan(100)")
