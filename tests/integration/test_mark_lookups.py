"""The per-call deletes of a result waiter's mark and an event stream listener's row find
their rows through an index, however many other marks the table holds: a result wait that
ends (stop_waiting_for_result) or a stream that stops (stop_event_stream) is one index probe,
not a scan of every client's marks. Counted by the table's scan counters of the transaction
(pg_stat_xact_user_tables), not timed."""

from __future__ import annotations

import uuid

import psycopg

MARKS = 50_000


def _scans(conn: psycopg.Connection, table: str) -> tuple[int, int]:
    row = conn.execute(
        "SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables"
        " WHERE schemaname = 'harvest' AND relname = %s",
        (table,),
    ).fetchone()
    return (0, 0) if row is None else (row[0], row[1])


def _scans_of(conn: psycopg.Connection, table: str, statement: str, params: tuple) -> tuple[int, int]:
    """(sequential scans, index scans) of table that one statement made, in a transaction."""
    with conn.transaction():
        seq_before, idx_before = _scans(conn, table)
        conn.execute(statement, params)
        seq_after, idx_after = _scans(conn, table)
    return seq_after - seq_before, idx_after - idx_before


def test_stop_waiting_for_result_probes_an_index_among_many_marks(conn: psycopg.Connection) -> None:
    conn.execute(
        "INSERT INTO harvest.result_waiters (execution_id, waiter_id, since)"
        " SELECT gen_random_uuid(), gen_random_uuid(), now() FROM generate_series(1, %s)",
        (MARKS,),
    )
    waiter = str(uuid.uuid4())
    conn.execute(
        "INSERT INTO harvest.result_waiters (execution_id, waiter_id, since)"
        " VALUES (gen_random_uuid(), %s, now())",
        (waiter,),
    )
    conn.execute("ANALYZE harvest.result_waiters")
    seq, idx = _scans_of(conn, "result_waiters", "SELECT harvest.stop_waiting_for_result(%s)", (waiter,))
    assert (seq, idx) == (0, 1), f"{seq} sequential and {idx} index scans of {MARKS + 1} marks"
    assert conn.execute("SELECT count(*) FROM harvest.result_waiters").fetchone()[0] == MARKS


def test_stop_event_stream_probes_an_index_among_many_listeners(conn: psycopg.Connection) -> None:
    conn.execute(
        "INSERT INTO harvest.event_stream_listeners (listener_id, heartbeat_at)"
        " SELECT 'host:' || i, now() FROM generate_series(1, %s) AS i",
        (MARKS,),
    )
    conn.execute("ANALYZE harvest.event_stream_listeners")
    seq, idx = _scans_of(conn, "event_stream_listeners", "SELECT harvest.stop_event_stream(%s)", ("host:7",))
    assert (seq, idx) == (0, 1), f"{seq} sequential and {idx} index scans of {MARKS} listeners"
