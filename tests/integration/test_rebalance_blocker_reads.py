"""What a rebalance's schedule_run blocker reads: the started firings of a run's workflow id.

``_migration_blockers`` asks, for each run a rebalance lists or moves, whether a started firing
carries its workflow id (a schedule counts its runs on its own shard). No index served
``schedule_firings`` by workflow id, so each probe read every firing, and the table keeps up to
1,000 a schedule: listing 1,000 candidates beside 100,000 started firings took 13-28 s. Migration
0105's ``schedule_firings_started`` makes it one probe.
"""

from __future__ import annotations

import psycopg

SCHEDULES = 20
FIRINGS = 500  # started firings a schedule: 10,000 in all
RUNS = 60  # plain RUNNING runs, each a candidate


def _firings_rows_read(conn: psycopg.Connection) -> int:
    """Rows this transaction read from schedule_firings: its sequential scans' rows and the entries
    its indexes returned."""
    (n,) = conn.execute(
        "SELECT pg_stat_get_xact_tuples_returned('harvest.schedule_firings'::regclass)"
        " + coalesce((SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid)) FROM pg_index AS i"
        "   WHERE i.indrelid = 'harvest.schedule_firings'::regclass), 0)"
    ).fetchone()
    return int(n)


def test_the_schedule_run_blocker_reads_a_runs_firings_not_every_firing(conn: psycopg.Connection) -> None:
    conn.execute(
        "INSERT INTO harvest.schedules (name, workflow_name, interval_secs, anchor_at, created_at,"
        " updated_at) SELECT 'every-' || g, 'report', 60, now(), now(), now()"
        " FROM generate_series(1, %s) AS g",
        (SCHEDULES,),
    )
    conn.execute(
        "INSERT INTO harvest.schedule_firings (schedule_id, slot_at, status, workflow_id, recorded_at)"
        " SELECT s.id, '2030-01-01'::timestamptz + f * interval '1 minute', 'started',"
        " 'sched:' || s.name || ':' || f, now()"
        " FROM harvest.schedules AS s, generate_series(1, %s) AS f",
        (FIRINGS,),
    )
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at)"
        " SELECT gen_random_uuid(), 'plain', 'plain-' || g, 'RUNNING', now()"
        " FROM generate_series(1, %s) AS g",
        (RUNS,),
    )
    # One run that is a started firing's: still blocked.
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at)"
        " VALUES (gen_random_uuid(), 'report', 'sched:every-3:7', 'RUNNING', now())"
    )
    conn.execute("ANALYZE harvest.schedule_firings")
    conn.execute("ANALYZE harvest.executions")
    with conn.transaction():
        before = _firings_rows_read(conn)
        rows = conn.execute(
            "SELECT workflow_id, blockers FROM harvest.list_migration_candidates(NULL, NULL, 1000)"
        ).fetchall()
        read = _firings_rows_read(conn) - before
    blockers = dict(rows)
    assert len(blockers) == RUNS + 1
    assert "schedule_run" in blockers["sched:every-3:7"]
    assert all("schedule_run" not in b for wid, b in blockers.items() if wid.startswith("plain-"))
    assert read <= 10 * (RUNS + 1), f"{read} firing rows read for {RUNS + 1} candidates"
