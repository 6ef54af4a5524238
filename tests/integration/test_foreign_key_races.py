"""A run's events and tasks never outlive it, whoever writes them and whatever runs at once.

The rule is the foreign keys `events_execution_fkey` and `tasks_execution_fkey` (ON DELETE
CASCADE). Their checks are the fan-out's largest single cost, and a statement-level check with
a trigger cascade was built to replace them (docs/performance.md, "Foreign-key checks,
priced"): it passed the READ COMMITTED races below and failed the REPEATABLE READ one (it
left an orphan). These tests hold any replacement to the foreign key's behaviour,
with two real sessions and a plain INSERT by the owner (the writer no function guards).
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from race_helpers import Racer, race_behind_a_held_lock

CHILDREN = {
    "events": (
        "INSERT INTO harvest.events (execution_id, event_id, event_type, created_at)"
        " VALUES (%s, 1000, 'WorkflowTaskCompleted', now())"
    ),
    "tasks": (
        "INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, seq, scheduled_at)"
        " VALUES (%s, 'timer', 'default', now() + interval '1 hour', 1000, now())"
    ),
}


def _orphans(conn: psycopg.Connection, table: str) -> int:
    row = conn.execute(
        f"SELECT count(*) FROM harvest.{table} AS c"
        " WHERE NOT EXISTS (SELECT 1 FROM harvest.executions AS x WHERE x.id = c.execution_id)"
    ).fetchone()
    assert row is not None
    return int(row[0])


def _run(conn: psycopg.Connection) -> str:
    row = conn.execute("SELECT execution_id FROM harvest.start_workflow('wf')").fetchone()
    assert row is not None
    return str(row[0])


def _inserting(table: str, run_id: str) -> Callable[[psycopg.Connection], None]:
    """An insert of a ``table`` row of the run (the holder's, left uncommitted, or a racer's)."""

    def insert(c: psycopg.Connection) -> None:
        c.execute(CHILDREN[table], (run_id,))

    return insert


def _deleting(run_id: str) -> Callable[[psycopg.Connection], None]:
    """A delete of the run (the holder's, left uncommitted, or a racer's)."""

    def delete(c: psycopg.Connection) -> None:
        c.execute("DELETE FROM harvest.executions WHERE id = %s", (run_id,))

    return delete


@pytest.mark.parametrize("table", sorted(CHILDREN))
def test_a_delete_waiting_on_an_insert_cascades_to_the_new_row(
    db: str, conn: psycopg.Connection, table: str
) -> None:
    run_id = _run(conn)
    outcome = race_behind_a_held_lock(
        db,
        conn,
        _inserting(table, run_id),
        Racer("deleter", _deleting(run_id), waits_on="the run's row, key-share locked by the insert"),
        end_within=10,
    )
    assert outcome["deleter"] is None
    assert _orphans(conn, table) == 0


@pytest.mark.parametrize("table", sorted(CHILDREN))
def test_an_insert_waiting_on_a_delete_fails(db: str, conn: psycopg.Connection, table: str) -> None:
    run_id = _run(conn)
    outcome = race_behind_a_held_lock(
        db,
        conn,
        _deleting(run_id),
        Racer("inserter", _inserting(table, run_id), waits_on="the run's row, deleted", may_fail=True),
        end_within=10,
    )
    assert isinstance(outcome["inserter"], psycopg.errors.ForeignKeyViolation)
    assert _orphans(conn, table) == 0


@pytest.mark.parametrize("table", sorted(CHILDREN))
def test_a_repeatable_read_delete_cannot_miss_a_row_committed_after_its_snapshot(
    db: str, conn: psycopg.Connection, table: str
) -> None:
    """The cascade looks with the newest snapshot: a row its transaction cannot see fails the
    delete instead of being left behind."""
    run_id = _run(conn)
    with psycopg.connect(db) as deleter, psycopg.connect(db) as inserter:
        deleter.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        deleter.execute("SELECT count(*) FROM harvest.executions")  # its snapshot
        inserter.execute(CHILDREN[table], (run_id,))
        inserter.commit()
        with pytest.raises(psycopg.errors.SerializationFailure):
            deleter.execute("DELETE FROM harvest.executions WHERE id = %s", (run_id,))
    assert _orphans(conn, table) == 0
