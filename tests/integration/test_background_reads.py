"""What the reads of the background loops read over a backlog (docs/performance.md,
"The background loops over a 2M-task backlog"), counted in index entries and heap rows read
(the statistics views), not in time.

- The stranded-work gauge (functions/shards.sql, count_stranded_tasks), read by the metrics
  sampler every sample and by ``/health/ready`` with shard readiness on every probe: a backlog on
  a queue a live worker polls is not stranded, and is not read to say so (it read every
  claimable task, checked against the workers, per call).
- An idle worker's next due time (functions/claim.sql, next_due_at): a few probes, not a read of
  every task due later (it took min() over every pending task of its queues per idle pass).
- The metrics sampler's queue depths (functions/metrics.sql, _sample_queue_depths): exact up to a
  cap of pending tasks a queue, past it an estimate from a block sample, flagged; a deep backlog
  is read as each queue's head and the sample, not whole (a sample counted every task, grouped).
  get_metric_samples and get_shard_health take its defaults, a cap of 10,000 and 1,000 pages,
  and it counts a table of at most 1,000 pages whole; these tests pass smaller ones to a table of
  a few hundred (and the defaults to one of 3,000 pages, for `harvest shard health`).
"""

from __future__ import annotations

from typing import Any

import psycopg
from stats_helpers import rows_read

BACKLOG = 3000
DEEP = 20_000


def _tasks_read(conn: psycopg.Connection) -> int:
    """Index entries and sequentially read rows of harvest.tasks so far (flushed statistics)."""
    return rows_read(conn, "tasks")


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
        assert set(full) - set(ready) == {"queues", "dead_letters", "cross_shard_children", "owed_child_ends"}
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


def _depths(conn: psycopg.Connection, cap: int, sample_pages: int) -> dict[str, Any]:
    """_sample_queue_depths at the database's now (a fixed sample seed)."""
    row = conn.execute(
        "SELECT to_jsonb(d) FROM harvest._sample_queue_depths(harvest.now(), %s, %s, 1) AS d",
        [cap, sample_pages],
    ).fetchone()
    assert row is not None
    return row[0]


def _exact_depths(conn: psycopg.Connection) -> dict[str, Any]:
    """Every task read and grouped: the sampler's pass before the cap."""
    rows = conn.execute(
        "SELECT queue, kind, count(*) FILTER (WHERE status = 'pending' AND due_at <= harvest.now()),"
        " count(*) FILTER (WHERE status = 'pending' AND due_at > harvest.now()),"
        " count(*) FILTER (WHERE status = 'running'),"
        " extract(epoch FROM harvest.now() - min(due_at) FILTER (WHERE status = 'pending'"
        "                                                          AND due_at <= harvest.now()))"
        " FROM harvest.tasks WHERE kind <> 'timer' GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall()
    keyed = conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status = 'pending')"
        " FROM harvest.tasks WHERE kind = 'activity' AND concurrency_key IS NOT NULL"
    ).fetchone()
    timers = conn.execute("SELECT count(*) FROM harvest.tasks WHERE kind = 'timer'").fetchone()
    assert keyed is not None and timers is not None
    return {
        "queues": [
            {
                "queue": q,
                "kind": k,
                "claimable": c,
                "scheduled": s,
                "running": r,
                "oldest_claimable_secs": None if age is None else float(age),
                "estimated": False,
            }
            for q, k, c, s, r, age in rows
        ],
        "keyed_running": keyed[0],
        "keyed_pending": keyed[1],
        "keyed_pending_estimated": False,
        "timers": timers[0],
    }


def _pages(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT pg_relation_size('harvest.tasks') / 8192").fetchone()
    assert row is not None
    return int(row[0])


def test_the_depths_below_the_cap_are_the_exact_counts_they_were(db: str) -> None:
    """A small backlog of every kind of row: claimable and scheduled on two priorities, running,
    keyed, workflow tasks, pending and paused timers, a paused run's tasks. Read as the capped
    path reads it (each queue's head, the running and paused rows, the timers' index; no sample:
    nothing is past the cap) or whole (a table smaller than the sample), the depths are the
    grouped count's, marked exact; get_metric_samples says so too."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SET harvest.fake_now = '2030-01-01 00:00:00+00'")  # one now for every read
        run = _start(conn, "a")
        _add_tasks(conn, run, 40, "a", "harvest.now() - make_interval(secs => g)", priority="g %% 2")
        _add_tasks(conn, run, 7, "a", "harvest.now() + make_interval(mins => g)", first=100)
        _add_tasks(conn, run, 5, "b", "harvest.now() - interval '1 minute'", first=200)
        _add_tasks(conn, run, 3, "b", "harvest.now() + interval '1 hour'", kind="timer", first=300)
        conn.execute(
            "UPDATE harvest.tasks SET status = 'running', lease_owner = 'w', lease_expires_at = harvest.now()"
            " + interval '1 minute' WHERE queue = 'b' AND kind = 'activity' AND seq < 203"
        )
        conn.execute("UPDATE harvest.tasks SET concurrency_key = 'k' WHERE queue = 'a' AND seq % 3 = 0")
        _start(conn, "c")  # a workflow task on c
        paused = _start(conn, "p")
        _add_tasks(conn, paused, 4, "p", "harvest.now() - interval '1 minute'")
        _add_tasks(conn, paused, 2, "p", "harvest.now() + interval '1 day'", kind="timer", first=10)
        conn.execute("SELECT harvest.pause_workflow(%s)", [paused])  # its pending tasks go 'paused'
        conn.execute("ANALYZE harvest.tasks")
        exact = _exact_depths(conn)
        assert {(q["queue"], q["kind"]) for q in exact["queues"]} >= {("a", "activity"), ("p", "activity")}
        assert _depths(conn, 1000, 0) == exact  # the capped path, nothing past the cap
        assert _depths(conn, 1000, _pages(conn)) == exact  # the table counted whole
        (samples,) = conn.execute("SELECT harvest.get_metric_samples()").fetchone()  # type: ignore[misc]
        assert samples["queues"] == exact["queues"] and samples["timers_pending"] == exact["timers"]
        assert samples["other_keys"]["pending_estimated"] is False


def _deep(conn: psycopg.Connection) -> None:
    """DEEP tasks on queue deep (three in four due, in two priorities; one in five keyed), 300 on
    queue small, and the grouped count's answer."""
    run = _start(conn, "other")
    _add_tasks(
        conn,
        run,
        DEEP,
        "deep",
        "harvest.now() + CASE WHEN g %% 4 = 0 THEN interval '1 hour' ELSE -make_interval(secs => g) END",
        priority="g %% 2",
    )
    conn.execute("UPDATE harvest.tasks SET concurrency_key = 'k' WHERE queue = 'deep' AND seq % 5 = 0")
    _add_tasks(conn, run, 300, "small", "harvest.now() - interval '1 minute'", first=DEEP + 1)
    conn.execute("VACUUM ANALYZE harvest.tasks")


def test_past_the_cap_a_queue_depth_is_a_flagged_estimate_within_its_tolerance(db: str) -> None:
    """Below the cap a queue is exact; past it, its claimable and scheduled are a block sample's,
    scaled, and say so; its oldest claimable wait stays exact. The tolerance: the estimate is the
    sampled blocks' rows scaled by the fraction of blocks read, unbiased, whose error shrinks with
    the blocks read (docs/observability.md gives 2,000 pages' figures over a 2M-task backlog);
    here half the table's ~300 blocks are read and the seed is fixed, within 20 %."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SET harvest.fake_now = '2030-01-01 00:00:00+00'")  # one now for every read
        _deep(conn)
        exact = {(q["queue"], q["kind"]): q for q in _exact_depths(conn)["queues"]}
        cap = 1000
        got = _depths(conn, cap, _pages(conn) // 2)
        rows = {(q["queue"], q["kind"]): q for q in got["queues"]}
        assert rows[("small", "activity")] == exact[("small", "activity")]  # below the cap: exact
        deep, truth = rows[("deep", "activity")], exact[("deep", "activity")]
        assert deep["estimated"] is True
        assert deep["running"] == truth["running"] == 0
        assert deep["oldest_claimable_secs"] == truth["oldest_claimable_secs"]
        for field in ("claimable", "scheduled"):
            error = abs(deep[field] - truth[field])
            assert deep[field] > 0 and error <= 0.2 * truth[field], (field, deep, truth)
        assert got["keyed_pending_estimated"] is True  # DEEP / 5 keyed, past the cap
        assert abs(got["keyed_pending"] - DEEP / 5) <= 0.2 * DEEP / 5, got
        # The cap one above the queue: exact again.
        got = _depths(conn, DEEP + 300, _pages(conn) // 2)
        assert {(q["queue"], q["kind"]): q for q in got["queues"]} == exact
        assert (got["keyed_pending"], got["keyed_pending_estimated"]) == (DEEP // 5, False)


def test_a_deep_backlog_is_read_as_its_queues_heads_and_a_sample_not_whole(db: str) -> None:
    """Counting the depths read every task (DEEP + 300 here): now each queue's head up to the cap,
    the keyed activities up to the cap, and a twentieth of the table's blocks."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SET harvest.fake_now = '2030-01-01 00:00:00+00'")  # one now for every read
        _deep(conn)
        cap, pages = 1000, _pages(conn)
        before = _tasks_read(conn)
        got = _depths(conn, cap, pages // 20)
        read = _tasks_read(conn) - before
        estimated = {q["queue"]: q["estimated"] for q in got["queues"]}
        assert estimated == {"deep": True, "small": False, "other": False}  # (other: its run's workflow task)
        # heads (cap + 1 and 300), the keyed count (cap + 1 entries, and the running ones it
        # passes), a twentieth of the rows, a few probes
        bound = 3 * cap + 300 + (DEEP + 300) // 20 + 200
        assert read < bound, f"{read} task rows read for {DEEP + 300} tasks"


def test_shard_health_counts_a_deep_backlog_as_the_sampler_does(db: str) -> None:
    """`harvest shard health`'s per-queue work counted every task (0.4 s of CPU over 2M): it is
    the sampler's count now (_sample_queue_depths at its defaults, a cap of 10,000 pending tasks
    a queue and about 1,000 pages), summed per queue: a queue past the cap is an estimate that
    says so, one below it exact, the oldest claimable exact either way, and the backlog is read
    as each queue's head and a sample. (A table of three times the sample's 1,000 pages: 200,000
    tasks, on queues a live worker polls: an unpolled queue's claimable tasks are counted whole
    as stranded work.)"""
    deep = 200_000
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SET harvest.fake_now = '2030-01-01 00:00:00+00'")  # one now for every read
        run = _start(conn, "other")
        _add_tasks(
            conn,
            run,
            deep,
            "deep",
            "harvest.now() + CASE WHEN g %% 4 = 0 THEN interval '1 hour' ELSE -make_interval(secs => g) END",
        )
        _add_tasks(conn, run, 300, "small", "harvest.now() - interval '1 minute'", first=deep + 1)
        conn.execute(
            "SELECT harvest.register_worker('w', ARRAY['deep', 'small', 'other'], 'host', 1, 60, '{}')"
        )
        conn.execute("VACUUM ANALYZE harvest.tasks")
        assert _pages(conn) > 3000
        before = _tasks_read(conn)
        (health,) = conn.execute("SELECT harvest.get_shard_health()").fetchone()  # type: ignore[misc]
        read = _tasks_read(conn) - before
        queues = {q["queue"]: q for q in health["queues"]}
        assert queues["small"] == {
            "queue": "small",
            "live_workers": 1,
            "pending": 300,
            "claimable": 300,
            "running": 0,
            "oldest_claimable_at": "2029-12-31T23:59:00+00:00",
            "estimated": False,
        }
        big = queues["deep"]
        assert big["estimated"] is True and big["running"] == 0
        assert big["oldest_claimable_at"] == "2029-12-29T16:26:41+00:00"  # g = 199,999: exact
        for field, truth in (("pending", deep), ("claimable", deep * 3 // 4)):
            assert abs(big[field] - truth) <= 0.2 * truth, (field, big)
        # heads (10,001 and 300), about 1,000 of the table's 3,000 pages, a few probes
        assert read < deep // 2, f"{read} task rows read for {deep + 300} tasks"
    # The report says so: the shard's pressure, and its text (~ and the queue named).
    from harvest.cli.shard import _render
    from harvest.shard.health import shard_health
    from harvest.shard.router import ShardRouter

    report = shard_health(ShardRouter(readable=[0], writable=[0], default=0), {0: db})
    assert report["shards"][0]["pressure"]["estimated"] is True
    text = _render(report)
    assert f"~{report['shards'][0]['pressure']['pending']}" in text
    assert "shard 0: ~ pending is an estimate: queue(s) 'deep' past 10,000 pending tasks" in text, text
