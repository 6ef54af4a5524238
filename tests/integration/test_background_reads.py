"""What the reads of the background loops read over a backlog (docs/performance.md,
"The background loops over a 2M-task backlog"), counted in index entries and heap rows read
(the statistics views), not in time.

- The stranded-work gauge (functions/shards.sql, count_stranded_tasks), read by the metrics
  sampler every sample and by ``/health/ready`` with shard readiness on every probe: a backlog on
  a queue a live worker polls is not stranded, and is not read to say so (it read every
  claimable task, checked against the workers, per call).
- An idle worker's next due time (functions/claim.sql, next_due_at): a few probes, not a read of
  every task due later (it took min() over every pending task of its queues per idle pass).
"""

from __future__ import annotations

import psycopg

BACKLOG = 3000


def _tasks_read(conn: psycopg.Connection) -> int:
    """Index entries and sequentially read rows of harvest.tasks so far (flushed statistics)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute(
        "SELECT (SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes"
        "        WHERE schemaname = 'harvest' AND relname = 'tasks')"
        "     + (SELECT coalesce(seq_tup_read, 0) FROM pg_stat_user_tables"
        "        WHERE schemaname = 'harvest' AND relname = 'tasks')"
    ).fetchone()
    assert row is not None
    return int(row[0])


def _start(conn: psycopg.Connection, queue: str) -> object:
    row = conn.execute(
        "SELECT execution_id FROM harvest.start_workflow('w', p_queue => %s)", [queue]
    ).fetchone()
    assert row is not None
    return row[0]


def _add_tasks(
    conn: psycopg.Connection,
    run: object,
    n: int,
    queue: str,
    due: str,
    *,
    kind: str = "activity",
    first: int = 1,
    priority: str = "0",
) -> None:
    """``n`` tasks of ``run`` on ``queue`` (seq ``first`` on), due at the SQL ``due`` (of g, 1..n)."""
    conn.execute(
        "INSERT INTO harvest.tasks"
        " (execution_id, kind, queue, priority, due_at, scheduled_at, seq, activity_name)"
        f" SELECT %s, %s, %s, {priority}, {due}, harvest.now(), %s + g - 1,"
        " CASE WHEN %s = 'activity' THEN 'a' END FROM generate_series(1, %s) AS g",
        [run, kind, queue, first, kind, n],
    )


def test_a_polled_backlog_is_not_read(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        run = _start(conn, "busy")
        _add_tasks(conn, run, BACKLOG, "busy", "harvest.now() - interval '1 minute'")
        _add_tasks(conn, run, 1, "orphan", "harvest.now() - interval '1 minute'", first=BACKLOG + 1)
        conn.execute("SELECT harvest.register_worker('w-busy', ARRAY['busy'], 'host', 1, 60, '{}')")
        conn.execute("ANALYZE harvest.tasks")
        before = _tasks_read(conn)
        stranded = conn.execute("SELECT queue, pending FROM harvest.count_stranded_tasks()").fetchall()
        read = _tasks_read(conn) - before
        assert stranded == [("orphan", 1)]
        # A probe or two per queue and the unpolled queue's own task: not the polled backlog.
        assert read < 50, f"count_stranded_tasks read {read} task rows for one stranded task"

        # The worker gone stale: the whole backlog is stranded, and counted.
        conn.execute("UPDATE harvest.workers SET last_heartbeat_at = harvest.now() - interval '1 hour'")
        stranded = conn.execute("SELECT queue, pending FROM harvest.count_stranded_tasks()").fetchall()
        assert stranded == [("busy", BACKLOG + 1), ("orphan", 1)]


def test_the_next_due_time_is_read_without_the_backlog(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        run = _start(conn, "other")
        # Retries due later over two priorities, and a timer due before them all.
        _add_tasks(
            conn, run, BACKLOG, "busy", "harvest.now() + make_interval(mins => 10 + g)", priority="g %% 2"
        )
        _add_tasks(
            conn, run, 1, "busy", "harvest.now() + interval '5 minutes'", kind="timer", first=BACKLOG + 1
        )
        conn.execute("ANALYZE harvest.tasks")
        timer, retry = conn.execute(
            "SELECT min(due_at) FILTER (WHERE kind = 'timer'), min(due_at) FILTER (WHERE kind = 'activity')"
            " FROM harvest.tasks WHERE queue = 'busy'"
        ).fetchone()  # type: ignore[misc]
        before = _tasks_read(conn)
        due = conn.execute("SELECT harvest.next_due_at(ARRAY['busy'])").fetchone()[0]  # type: ignore[index]
        read = _tasks_read(conn) - before
        assert due == timer
        assert read < 50, f"next_due_at read {read} task rows for the earliest of them"

        conn.execute("DELETE FROM harvest.tasks WHERE kind = 'timer' AND queue = 'busy'")
        due = conn.execute("SELECT harvest.next_due_at(ARRAY['busy'])").fetchone()[0]  # type: ignore[index]
        assert due == retry  # g = 1 (priority 1)


def test_the_readiness_facts_read_none_of_a_polled_backlog(db: str) -> None:
    """/health/ready with readiness.require_shard_readiness read get_shard_health on every probe:
    its per-queue counts read every task (0.43 s of CPU a probe over 2M). get_shard_readiness
    answers what the readiness gates on, the same facts, without reading the backlog."""
    with psycopg.connect(db, autocommit=True) as conn:
        run = _start(conn, "busy")
        _add_tasks(conn, run, BACKLOG, "busy", "harvest.now() - interval '1 minute'")
        conn.execute("SELECT harvest.register_worker('w-busy', ARRAY['busy', 'idle'], 'host', 1, 60, '{}')")
        conn.execute("SELECT harvest.register_worker('w-gone', ARRAY['lost'], 'host', 1, 60, '{}')")
        conn.execute("UPDATE harvest.workers SET status = 'stopped' WHERE id = 'w-gone'")
        conn.execute("ANALYZE harvest.tasks")
        before = _tasks_read(conn)
        ready = conn.execute("SELECT harvest.get_shard_readiness()").fetchone()[0]  # type: ignore[index]
        read = _tasks_read(conn) - before
        assert read < 50, f"get_shard_readiness read {read} task rows of a polled backlog"
        full = conn.execute("SELECT harvest.get_shard_health()").fetchone()[0]  # type: ignore[index]
        assert set(full) - set(ready) == {"queues", "dead_letters"}
        for key in ready:
            if key != "observed_at":
                assert ready[key] == full[key], key
        assert ready["unpolled_queues"] == ["lost"] and ready["stranded_pending"] == 0
        assert ready["workers"] == {"live": 1, "stale": 0, "draining": 0, "stopped": 1}
        busy = next(q for q in full["queues"] if q["queue"] == "busy")
        assert (busy["claimable"], busy["live_workers"]) == (BACKLOG + 1, 1)  # (and the run's workflow task)
        # p_queues: the declared queues, whatever the worker rows name
        declared = conn.execute("SELECT harvest.get_shard_readiness(ARRAY['busy', 'other'])").fetchone()[0]  # type: ignore[index]
        assert declared["unpolled_queues"] == ["other"]


def test_a_probe_of_a_shard_whose_functions_predate_the_readiness_read_reads_the_report(db: str) -> None:
    """A web process of this release probing a database whose functions are an older release's
    (no get_shard_readiness: a rolling deploy) answers from the whole report, as before, rather
    than an unreachable shard."""
    from harvest.shard.health import shard_health
    from harvest.shard.router import ShardRouter

    router = ShardRouter(readable=[0], writable=[0], default=0)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.register_worker('w', ARRAY['default'], 'h', 1, 60, '{}')")
        row = shard_health(router, {0: db}, pressure=False)["shards"][0]
        assert row["reason_codes"] == [] and row["pressure"] is None, row
        assert row["queue_coverage"] == {"declared": None, "unpolled": []}
        conn.execute("DROP FUNCTION harvest.get_shard_health")  # (its body calls the new one)
        conn.execute("DROP FUNCTION harvest.get_shard_readiness")
        conn.execute(
            "CREATE FUNCTION harvest.get_shard_health(p_queues text[] DEFAULT NULL) RETURNS jsonb"
            " LANGUAGE sql AS $$ SELECT jsonb_build_object('shard_id', 0, 'schema_version',"
            " harvest.schema_version(), 'observed_at', now(), 'workers', jsonb_build_object('live', 1,"
            " 'stale', 0, 'draining', 0, 'stopped', 0), 'queues', '[]'::jsonb, 'unpolled_queues',"
            " '[]'::jsonb, 'stranded', '[]'::jsonb, 'stranded_pending', 0, 'dead_letters', 0) $$"
        )
    row = shard_health(router, {0: db}, pressure=False)["shards"][0]
    assert row["reachable"] and "unreachable" not in row["reason_codes"], row
    assert row["workers"] == {"live": 1, "stale": 0, "draining": 0} and row["stranded_pending"] == 0
