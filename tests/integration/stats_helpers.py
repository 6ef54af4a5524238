"""What a statement read, from the statistics views: for tests that count rows, not time."""

from __future__ import annotations

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
