"""A schedule's audit rows keep its input's size, never the input (functions/schedules.sql,
harvest._schedule_audit): a schedule's input is stored as declared, never encoded, and the
audit log outlives the schedule, erasure and retention. Migration 0131 rewrites the rows an
earlier release wrote with the input in them, as the function writes them now."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

MIGRATION = Path(__file__).parents[2] / "migrations" / "0131_schedule_audit_inputs.sql"
SECRET = [{"ssn": "078-05-1120", "name": "frank"}]


def _audit(conn: psycopg.Connection, operation: str, details: dict) -> None:
    conn.execute(
        "INSERT INTO harvest.audit_log (at, actor, operation, target, details)"
        " VALUES (now(), current_user, %s, 'monthly', %s)",
        (operation, Jsonb(details)),
    )


def test_a_schedules_audit_rows_keep_the_inputs_size_and_the_migration_rewrites_older_ones(
    conn: psycopg.Connection,
) -> None:
    made = conn.execute(
        "SELECT harvest.create_schedule('monthly', 'wf', p_interval_secs => 60, p_input => %s,"
        " p_allow_unregistered => true)",
        (Jsonb(SECRET),),
    ).fetchone()[0]
    assert made["input"] == SECRET  # the schedule keeps it: it starts its runs with it
    conn.execute("SELECT harvest.update_schedule('monthly', %s)", (Jsonb({"input": SECRET}),))
    size = {"redacted": True, "bytes": len(json.dumps(SECRET).encode())}
    now = conn.execute(
        "SELECT details FROM harvest.audit_log WHERE target = 'monthly' ORDER BY id"
    ).fetchall()
    assert [row[0].get("input") or row[0]["changes"]["input"] for row in now] == [size, size], now
    # As an earlier release wrote them: the input itself.
    conn.execute("DELETE FROM harvest.audit_log WHERE target = 'monthly'")
    _audit(conn, "schedule.create", {"name": "monthly", "input": SECRET, "interval_secs": 60})
    _audit(conn, "schedule.update", {"changes": {"input": SECRET, "cron": None}})
    _audit(conn, "schedule.declare_superseded", {"spec": {"input": SECRET}, "kept": {"input": [2]}})
    _audit(conn, "schedule.update", {"changes": {"interval_secs": 30}})
    for _ in range(2):  # re-runnable: a rewritten row stays as it is
        conn.execute(MIGRATION.read_text())
        rows = [
            r[0]
            for r in conn.execute(
                "SELECT details FROM harvest.audit_log WHERE target = 'monthly' ORDER BY id"
            )
        ]
        assert rows == [
            {"name": "monthly", "input": size, "interval_secs": 60},
            {"changes": {"input": size, "cron": None}},
            {"spec": {"input": size}, "kept": {"input": {"redacted": True, "bytes": 3}}},
            {"changes": {"interval_secs": 30}},
        ], rows
    assert "078-05" not in json.dumps(rows)
