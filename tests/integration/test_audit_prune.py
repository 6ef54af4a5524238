"""The audit log grows with the janitor's work, and an admin bounds it (docs/operations.md, "The
audit log"). A soak (steady load, execution retention on) found ``harvest.audit_log`` the one
table that only grew: each janitor batch that deletes runs writes a ``retention.run`` row, and
nothing deleted an audit row but the table's owner. ``harvest.prune_audit_log`` deletes the rows
older than an age, a batch at a time, as ``harvest_admin``."""

from __future__ import annotations

import json

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


def test_harvest_audit_prune_with_shards_prunes_every_shard(two_shards: dict[int, str]) -> None:
    """`harvest audit prune` over SQL with [shards] counts (--dry-run), then prunes, each shard in
    turn, batch by batch to its end: the totals and each shard's answer, and no row older left on
    either database."""
    from click.testing import CliRunner

    from harvest.cli.main import main

    older = {0: 3, 1: 5}
    for shard, dsn in two_shards.items():
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO harvest.audit_log (at, actor, operation)"
                " SELECT now() - interval '400 days', 'tests', 'old.op' FROM generate_series(1, %s)",
                (older[shard],),
            )
            conn.execute("INSERT INTO harvest.audit_log (at, actor, operation) VALUES (now(), 't', 'new.op')")
    env = {
        "HARVEST_DATABASE_URL": "",
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in two_shards.items()},
    }
    prune = ["--output", "json", "audit", "prune", "--older-than", "30 days", "--batch-size", "2"]

    dry = CliRunner().invoke(main, [*prune, "--dry-run"], env=env, catch_exceptions=False)
    assert dry.exit_code == 0, dry.stderr
    counted = json.loads(dry.stdout)
    assert counted["older"] == 8
    assert [(r["shard_id"], r["older"]) for r in counted["shards"]] == [(0, 3), (1, 5)]

    done = CliRunner().invoke(main, prune, env=env, catch_exceptions=False)
    assert done.exit_code == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["deleted"], data["remaining"], data["unavailable_shards"]) == (8, 0, [])
    per_shard = [(r["shard_id"], r["deleted"], r["batches"]) for r in data["shards"]]
    assert per_shard == [(0, 3, 2), (1, 5, 3)]
    for dsn in two_shards.values():
        with psycopg.connect(dsn) as conn:
            assert (_audit_rows(conn, "old.op"), _audit_rows(conn, "new.op")) == (0, 1)
