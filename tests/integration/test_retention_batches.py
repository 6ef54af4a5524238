"""The retention janitor's batches stay bounded as the backlog grows (docs/operations.md,
"Retention"): each call deletes at most its batch and reads a bounded number of runs."""

from __future__ import annotations

import psycopg

from harvest.db.sqlapi import SqlApi

BACKLOG = 25_000


def _backlog(conn: psycopg.Connection, runs: int) -> None:
    """``runs`` completed runs that ended 40 days ago, past a 30-day window."""
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, completed_at)"
        " SELECT gen_random_uuid(), 'backlog', 'backlog-' || n, 'COMPLETED', now() - interval '50 days',"
        " now() - interval '40 days' + n * interval '1 ms' FROM generate_series(1, %s) AS n",
        (runs,),
    )
    conn.execute("ANALYZE harvest.executions")


def _runs_read(conn: psycopg.Connection) -> int:
    """The rows of harvest.executions this transaction has read so far."""
    row = conn.execute(
        "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
        " WHERE relid = 'harvest.executions'::regclass"
    ).fetchone()
    return int(row[0]) if row else 0


def test_a_batch_reads_a_bounded_number_of_runs_whatever_the_backlog(db: str) -> None:
    """Each batch counted its whole backlog again for `remaining` (through a function call per
    run): 4 s a batch of 500 behind 300,000 runs, so a backlog took time quadratic in its size,
    and each batch held its 500 rows' locks that long. `remaining` is now counted up to 10,000."""
    with psycopg.connect(db, autocommit=True) as conn:
        _backlog(conn, BACKLOG)
        conn.execute("BEGIN")
        result = SqlApi(conn).run_retention("30 days", 100)
        read = _runs_read(conn)
        conn.execute("ROLLBACK")
    assert result["deleted"] == 100
    assert result["remaining"] == 10_000  # counted up to 10,000: at least that many are left
    assert read <= 10_000 + 3 * 100, read  # the count, the batch thrice (lock, re-check, delete); not 25,000


def test_a_batch_deletes_at_most_its_size_of_relay_receipts_through_their_index(db: str) -> None:
    """The receipts of relays applied for other shards past the window went in one unbounded
    DELETE on every batch, read by a scan of the whole table (no index on received_at): a
    janitor first run over months of receipts deleted them all in one transaction, and every
    batch after that scanned every receipt kept. They now go at most a batch at a time, found
    through relay_receipts_received (migration 0098)."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO harvest.relay_receipts (source_shard, relay_id, outcome, received_at)"
            " SELECT 1, n, 'delivered', now() - interval '40 days' FROM generate_series(1, 300) AS n"
        )
        SqlApi(conn).run_retention("30 days", 100)
        left = conn.execute("SELECT count(*) FROM harvest.relay_receipts").fetchone()
        indexed = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'harvest' AND tablename = 'relay_receipts'"
            " AND indexdef LIKE '%(received_at)%'"
        ).fetchone()
    assert left == (200,)
    assert indexed == (1,)


def test_ends_owed_to_a_retired_shard_are_released_through_their_index(db: str) -> None:
    """An operator's release of the cross-shard children's ends owed to a shard gone for good
    (release_owed_child_ends, migration 0101) reads the owed runs through executions_end_owed,
    a batch at a time: not the whole backlog of ended runs. The janitor keeps the owed runs and
    its batch stays bounded while they wait."""
    with psycopg.connect(db, autocommit=True) as conn:
        _backlog(conn, BACKLOG)
        conn.execute(
            "UPDATE harvest.executions SET end_owed_to_shard = 3"
            " WHERE id IN (SELECT id FROM harvest.executions ORDER BY completed_at LIMIT 50)"
        )
        conn.execute("ANALYZE harvest.executions")
        conn.execute("BEGIN")
        before = _runs_read(conn)  # (the marking's scan above, its counts not flushed yet)
        released = SqlApi(conn).release_owed_child_ends(3, 10, operator="ops")
        read = _runs_read(conn) - before
        conn.execute("ROLLBACK")
        conn.execute("BEGIN")
        before = _runs_read(conn)
        swept = SqlApi(conn).run_retention("30 days", 100)
        swept_read = _runs_read(conn) - before
        kept = conn.execute("SELECT count(*) FROM harvest.executions WHERE end_owed_to_shard = 3").fetchone()
        conn.execute("ROLLBACK")
    assert released == 10
    assert read <= 3 * 10, read  # the batch found, locked and updated; not 25,000
    assert swept["deleted"] == 100 and kept == (50,), "the owed runs (the oldest) are kept"
    assert swept_read <= 10_000 + 3 * 100 + 3 * 50, swept_read


def test_a_batch_does_not_read_the_ends_kept_for_a_parent_shard(db: str) -> None:
    """The runs whose ends are owed to a parent's shard are the oldest ended runs while that
    shard is away (the case they are kept for), and the janitor read them all on every batch,
    twice (the batch, the remaining count), through a call of _retention_keeps each: 40,000 of
    them made each batch of 500 read 91,500 runs and take 2 to 3 s, holding its locks. The
    janitor's reads now go through executions_retention, which holds no owed run (migration
    0102): a batch reads as many runs with them as without."""
    with psycopg.connect(db, autocommit=True) as conn:
        _backlog(conn, BACKLOG)
        conn.execute(
            "UPDATE harvest.executions SET end_owed_to_shard = 3"
            " WHERE id IN (SELECT id FROM harvest.executions ORDER BY completed_at LIMIT 20000)"
        )
        conn.execute("ANALYZE harvest.executions")
        conn.execute("BEGIN")
        before = _runs_read(conn)
        swept = SqlApi(conn).run_retention("30 days", 100)
        read = _runs_read(conn) - before
        conn.execute("ROLLBACK")
    assert swept["deleted"] == 100 and swept["remaining"] == 4_900
    assert read <= 5_000 + 3 * 100, read  # the 5,000 not owed (the count), the batch thrice; not 45,000


def test_status_last_run_deleted_is_the_sweeps_total_not_its_last_batchs(db: str) -> None:
    """``harvest retention run-now``'s sweep (three batches of 100 over 250 runs): the status's
    ``last_run_deleted`` held the last batch's 50; it is the sweep's 250 now, with
    ``last_run_remaining`` 0, and the next sweep (nothing to delete) starts again at 0."""
    from harvest.db.prunes import sweep_retention_steps
    from harvest.db.steps import run_steps

    with psycopg.connect(db, autocommit=True) as conn:
        _backlog(conn, 250)
        sql = SqlApi(conn)
        swept = run_steps(sweep_retention_steps("30 days", 100, 10, None), sql)
        assert (swept["deleted"], swept["batches"]) == (250, 3)
        status = sql.get_retention_status()
        assert (status["last_run_deleted"], status["last_run_remaining"]) == (250, 0)
        assert run_steps(sweep_retention_steps("30 days", 100, 10, None), sql)["deleted"] == 0
        assert sql.get_retention_status()["last_run_deleted"] == 0
