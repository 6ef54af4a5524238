"""A run's relays, read from an index (docs/performance.md, "A run's relays from an index"):
a move's quiescence check and the retention janitor's delete of its runs' relays probe
relays_target and relays_source, counted in rows read (the statistics views), not in time.

No index led with a relay's target or source (migration 0119): `_migration_blockers` (a
rebalance's candidates, begin_migration, the cutover) read every relay of the shard twice per
run, and the janitor's delete read every relay once per batch.
"""

from __future__ import annotations

import psycopg
from stats_helpers import rows_read

from harvest.db.sqlapi import SqlApi

OTHERS = 3000

# External signals between other runs, as a backlog of relays to another shard leaves them.
BACKLOG = """
INSERT INTO harvest.relays (target_execution_id, kind, payload, created_at, source_execution_id, source_seq,
                            target_shard, remote)
SELECT gen_random_uuid(), 'external_signal', '{}', now(), gen_random_uuid(), g, 1, true
FROM generate_series(1, %(n)s) AS g
"""


def _backlog(conn: psycopg.Connection) -> None:
    conn.execute(BACKLOG, {"n": OTHERS})
    conn.execute("ANALYZE harvest.relays")


def _run(conn: psycopg.Connection) -> object:
    row = conn.execute("SELECT execution_id FROM harvest.start_workflow('waits', p_queue => 'q')").fetchone()
    assert row is not None
    # Parked on a signal: no task, so nothing but a relay can block its move.
    conn.execute("DELETE FROM harvest.tasks WHERE execution_id = %s", [row[0]])
    return row[0]


def _blockers(conn: psycopg.Connection, run: object) -> tuple[list[str], int]:
    """The run's blockers as a rebalance lists them, and the relays that read."""
    before = rows_read(conn, "relays")
    row = conn.execute(
        "SELECT blockers FROM harvest.list_migration_candidates(NULL, %s, 1)", [run]
    ).fetchone()
    assert row is not None
    return row[0], rows_read(conn, "relays") - before


def test_a_moves_quiescence_check_probes_the_runs_relays(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        run = _run(conn)
        _backlog(conn)
        blockers, read = _blockers(conn, run)
        assert blockers == []
        assert read < 10, f"the quiescence check read {read} relays of {OTHERS} for a run with none"
        # A relay addressed to the run, then one it sent whose outcome is still to come back.
        addressed = conn.execute(
            "INSERT INTO harvest.relays (target_execution_id, kind, created_at)"
            " VALUES (%s, 'parent_closed', now())"
            " RETURNING id",
            [run],
        ).fetchone()
        blockers, read = _blockers(conn, run)
        assert blockers == ["relay_pending"] and read < 10, (blockers, read)
        conn.execute("DELETE FROM harvest.relays WHERE id = %s", [addressed[0] if addressed else None])
        conn.execute(
            "INSERT INTO harvest.relays (target_workflow_id, kind, created_at, source_execution_id,"
            " source_seq)"
            " VALUES ('elsewhere', 'external_signal', now(), %s, 7)",
            [run],
        )
        blockers, read = _blockers(conn, run)
        assert blockers == ["relay_pending"] and read < 10, (blockers, read)


def test_the_janitors_delete_of_its_runs_relays_probes_them(db: str) -> None:
    """A batch deletes the relays addressed to its runs (not an external signal's: its source
    still hears the outcome) by a probe each, not by a read of every relay."""
    with psycopg.connect(db, autocommit=True) as conn:
        run = _run(conn)
        conn.execute(
            "UPDATE harvest.executions SET status = 'COMPLETED', completed_at = now() - interval '40 days'"
            " WHERE id = %s",
            [run],
        )
        conn.execute(
            "INSERT INTO harvest.relays (target_execution_id, kind, created_at)"
            " VALUES (%s, 'child_closed', now())",
            [run],
        )
        _backlog(conn)
        before = rows_read(conn, "relays")
        assert SqlApi(conn).run_retention("30 days", 100)["deleted"] == 1
        read = rows_read(conn, "relays") - before
        assert read < 10, f"the janitor's batch read {read} relays of {OTHERS + 1} to delete its run's one"
        left = conn.execute(
            "SELECT count(*) FROM harvest.relays WHERE target_execution_id = %s", [run]
        ).fetchone()
        assert left == (0,)
