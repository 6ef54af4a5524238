"""The audit log grows with the janitor's work, and an admin bounds it (docs/operations.md, "The
audit log"). A soak (steady load, execution retention on) found ``harvest.audit_log`` the one
table that only grew: each janitor batch that deletes runs writes a ``retention.run`` row, and
nothing deleted an audit row but the table's owner. ``harvest.prune_audit_log`` deletes the rows
older than an age, a batch at a time, as ``harvest_admin``."""

from __future__ import annotations

import psycopg

from harvest.db.sqlapi import SqlApi

BATCHES = 12


def _ended_runs(conn: psycopg.Connection, runs: int) -> None:
    """``runs`` completed runs that ended 40 days ago, past a 30-day window."""
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, completed_at)"
        " SELECT gen_random_uuid(), 'done', 'done-' || n, 'COMPLETED', now() - interval '50 days',"
        " now() - interval '40 days' FROM generate_series(1, %s) AS n",
        (runs,),
    )


def _audit_rows(conn: psycopg.Connection, operation: str) -> int:
    row = conn.execute("SELECT count(*) FROM harvest.audit_log WHERE operation = %s", (operation,)).fetchone()
    return int(row[0]) if row else 0


def test_the_janitors_audit_rows_grow_with_its_batches_and_prune_audit_log_bounds_them(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        sql = SqlApi(conn)
        conn.execute("SET harvest.fake_now = '2030-01-01 00:00:00+00'")
        for _ in range(BATCHES):  # a round of the janitor behind a steady load: a row a batch
            _ended_runs(conn, 3)
            assert sql.run_retention("30 days", 2)["deleted"] == 2
        assert _audit_rows(conn, "retention.run") == BATCHES
        conn.execute("SET harvest.fake_now = '2030-03-01 00:00:00+00'")
        first = sql.prune_audit_log("30 days", 5)
        assert (first["deleted"], first["remaining"]) == (5, BATCHES - 5)
        rest = sql.prune_audit_log("30 days")
        assert (rest["deleted"], rest["remaining"]) == (BATCHES - 5, 0)
        assert _audit_rows(conn, "retention.run") == 0
        assert _audit_rows(conn, "audit.prune") == 2  # each prune that deleted rows is on record
        assert sql.prune_audit_log("30 days")["deleted"] == 0
