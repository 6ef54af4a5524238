"""What a statement read, from the statistics views and auto_explain: for tests that count rows
and check plans, not time."""

from __future__ import annotations

from typing import Any

import psycopg


def rows_read(conn: psycopg.Connection, table: str) -> int:
    """Index entries and sequentially read rows of ``harvest.<table>`` so far, by every session
    (this one's statistics flushed first): the difference around a statement is what it read."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute(
        "SELECT (SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes"
        "        WHERE schemaname = 'harvest' AND relname = %(t)s)"
        "     + (SELECT coalesce(seq_tup_read, 0) FROM pg_stat_user_tables"
        "        WHERE schemaname = 'harvest' AND relname = %(t)s)",
        {"t": table},
    ).fetchone()
    assert row is not None
    return int(row[0])


def nested_plans(conn: psycopg.Connection, sql: str, params: Any = None) -> tuple[list[tuple], list[str]]:
    """Run sql; its rows, and the plans of every statement it ran, nested ones (a function's)
    included: auto_explain's, each sent as a NOTICE."""
    plans: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        plans.append(diag.message_primary or "")

    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET auto_explain.log_level = notice")
    conn.add_notice_handler(keep)
    try:
        rows = conn.execute(sql, params).fetchall()
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("SET auto_explain.log_min_duration = -1")
    return rows, plans
