"""get_retention_status asks _retention_keeps only of the runs it may keep.

`harvest retention status`, `retention set` and `retention run-now` (its progress bar) count
the runs a sweep would delete. The count called _retention_keeps (a hold, a chain, an owed end:
a function with subqueries, never inlined) for every one of them, about 15 us a call: 13-25 s
for the 814,000 runs of a 30-day window over 2M (docs/performance.md). A run it
keeps has a hold, CONTINUED_AS_NEW or an owed end, so the count asks it of those runs alone;
the counts are unchanged (pgtap/retention.sql: a held run, a chain, an owed end).
"""

from __future__ import annotations

import psycopg

KEEPS = "'harvest._retention_keeps(uuid, text, jsonb, integer)'::regprocedure"


def ended_runs(conn: psycopg.Connection, n: int) -> list[str]:
    """n runs terminated 40 days ago."""
    ids = []
    for i in range(n):
        row = conn.execute(
            "SELECT s.execution_id FROM harvest.start_workflow('rs_wf', '[]'::jsonb, %s, 'rs_q') AS s",
            (f"rs-{i}",),
        ).fetchone()
        assert row is not None
        ids.append(row[0])
        conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (row[0],))
    conn.execute(
        "UPDATE harvest.executions SET completed_at = now() - interval '40 days' WHERE id = ANY(%s::uuid[])",
        (ids,),
    )
    return ids


def eligible_and_calls(conn: psycopg.Connection) -> tuple[int, int]:
    """The status's eligible count, and how many times it called _retention_keeps."""
    before = conn.execute(f"SELECT coalesce(pg_stat_get_xact_function_calls({KEEPS}), 0)").fetchone()
    row = conn.execute("SELECT (harvest.get_retention_status() ->> 'eligible')::int").fetchone()
    after = conn.execute(f"SELECT coalesce(pg_stat_get_xact_function_calls({KEEPS}), 0)").fetchone()
    assert row is not None and before is not None and after is not None
    return row[0], after[0] - before[0]


def test_the_status_counts_the_runs_nothing_keeps_without_asking_each(conn: psycopg.Connection) -> None:
    conn.execute("SET track_functions = 'all'")
    ids = ended_runs(conn, 6)
    conn.execute("SELECT harvest.set_retention('30 days')")
    assert eligible_and_calls(conn) == (6, 0)
    # A held run is asked about, and kept: the count is what it was.
    conn.execute("SELECT harvest.set_legal_hold(%s, 'case 1', 'legal')", (ids[0],))
    assert eligible_and_calls(conn) == (5, 1)
    conn.execute("SELECT harvest.release_legal_hold(%s, 'legal')", (ids[0],))
    assert eligible_and_calls(conn) == (6, 0)
