"""The ends of cross-shard children a shard keeps for their parents on other shards are
visible to an operator (issue #1263, docs/observability.md, docs/sharding.md "Operating it"):
per parent shard, how many ended children wait and how old the oldest is, in `retention
status` and as sampled gauges, so that a parent waiting on a child's end (its shard's pump
away) can be alerted on. The test clock fixes every age: no sleep."""

from __future__ import annotations

import psycopg
import psycopg.rows

from harvest.db.sqlapi import SqlApi
from harvest.telemetry.metrics import Metrics

NOW = "2030-01-01 00:10:00+00"


def _owed(conn: psycopg.Connection) -> None:
    """On this (child's) shard: two ended children owed to shard 3 (ended 10 and 5 minutes
    before NOW), one running child owed to shard 5, and an ended run owed to nobody."""
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, completed_at,"
        " end_owed_to_shard) VALUES"
        " (gen_random_uuid(), 'kid', 'k1', 'COMPLETED', '2030-01-01', '2030-01-01 00:00:00+00', 3),"
        " (gen_random_uuid(), 'kid', 'k2', 'FAILED', '2030-01-01', '2030-01-01 00:05:00+00', 3),"
        " (gen_random_uuid(), 'kid', 'k3', 'RUNNING', '2030-01-01', NULL, 5),"
        " (gen_random_uuid(), 'kid', 'k4', 'COMPLETED', '2030-01-01', '2030-01-01 00:00:00+00', NULL)"
    )
    conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (NOW,))


def test_the_metric_samples_name_the_ends_owed_per_parent_shard_and_their_oldest_age(db: str) -> None:
    """get_metric_samples had the cross-shard children of this shard's parents only (the
    parent's side): nothing said that ended children here wait for a parent's shard that does
    not come for them, so no alert could see a parent waiting on a child's end."""
    with psycopg.connect(db, autocommit=True) as conn:
        _owed(conn)
        samples = SqlApi(conn).get_metric_samples()
    assert samples["owed_child_ends"] == [
        {"parent_shard": 3, "ended": 2, "running": 0, "oldest_secs": 600},
        {"parent_shard": 5, "ended": 0, "running": 1, "oldest_secs": None},
    ]
    metrics = Metrics()
    metrics.apply_samples(samples)
    text = metrics.render().decode()
    assert 'harvest_cross_shard_child_ends_owed{parent_shard="3",shard="0"} 2.0' in text
    assert 'harvest_cross_shard_child_ends_owed{parent_shard="5",shard="0"} 0.0' in text
    assert 'harvest_cross_shard_child_ends_owed_oldest_age_seconds{parent_shard="3",shard="0"} 600.0' in text
    assert 'harvest_cross_shard_child_ends_owed_oldest_age_seconds{parent_shard="5",shard="0"} 0.0' in text

    # Released (or delivered), a parent shard's series goes with the next sample.
    metrics.apply_samples({**samples, "owed_child_ends": samples["owed_child_ends"][1:]})
    assert 'parent_shard="3"' not in metrics.render().decode()


def test_retention_status_names_the_ends_owed_per_parent_shard(db: str) -> None:
    """`retention status` counted the owed ends as one number: which shard they wait for (the
    one an admin may release, if it is gone for good) needed a query by hand."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.row_factory = psycopg.rows.dict_row
        _owed(conn)
        status = SqlApi(conn).get_retention_status()
    assert status["owed_child_ends"] == 2
    by_shard = [
        {k: v for k, v in r.items() if k != "oldest_completed_at"} for r in status["owed_child_ends_by_shard"]
    ]
    assert by_shard == [
        {"parent_shard": 3, "ended": 2, "running": 0},
        {"parent_shard": 5, "ended": 0, "running": 1},
    ]
    assert status["owed_child_ends_by_shard"][0]["oldest_completed_at"].startswith("2030-01-01T00:00:00")
    assert status["owed_child_ends_by_shard"][1]["oldest_completed_at"] is None


def test_the_pumps_steps_on_cross_shard_children_are_counted_per_outcome() -> None:
    """The pump's report of its children's steps (started, settled, released for a retry) was
    read by no metric: `harvest_relay_pump_total` counts relays only, so a pump that moved no
    child (every step released: a child's shard away) looked like a pump with nothing to do."""
    metrics = Metrics()
    metrics.children_stepped({"started": 2, "settled": 1, "released": 3})
    metrics.children_stepped({"released": 1})
    text = metrics.render().decode()
    assert 'harvest_cross_shard_child_total{outcome="started"} 2.0' in text
    assert 'harvest_cross_shard_child_total{outcome="settled"} 1.0' in text
    assert 'harvest_cross_shard_child_total{outcome="released"} 4.0' in text


def test_the_owed_ends_are_read_through_their_index_whatever_the_backlog(db: str) -> None:
    """The sampler reads the owed ends on every sample (every 15 s): through executions_end_owed,
    which holds the owed runs only, not by a scan of every run the shard keeps."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at,"
            " completed_at, end_owed_to_shard) SELECT gen_random_uuid(), 'backlog', 'b-' || n, 'COMPLETED',"
            " now(), now(), CASE WHEN n <= 40 THEN 3 END FROM generate_series(1, 20000) AS n"
        )
        conn.execute("ANALYZE harvest.executions")
        conn.execute("BEGIN")
        owed = conn.execute("SELECT parent_shard, ended FROM harvest._owed_child_ends()").fetchall()
        read = conn.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
            " WHERE relid = 'harvest.executions'::regclass"
        ).fetchone()[0]
        conn.execute("ROLLBACK")
    assert owed == [(3, 40)]
    assert read <= 40, read
