"""What the background loops cost a big database: fill one with a task backlog, time every tick.

    nice -n 10 python bench/background_loops.py --data /tmp/bgloops --fill [--runs 500000] [--tasks 2000000]
    nice -n 10 python bench/background_loops.py --data /tmp/bgloops --sql       # every loop's statements
    nice -n 10 python bench/background_loops.py --data /tmp/bgloops --explain NAME

The loops that run whether anyone looks or not: the metrics sampler (every ``metrics_interval``,
15 s, on one process per database), the scanner's pass and the scheduler's tick (every
``scan_interval``, 1 s, on every worker that runs the scanner), the retention janitor's round
(every ``retention.interval``, 60 s), a worker's heartbeat (``heartbeat_interval``, 5 s), an
idle worker's due-time read, the query responder's poll (every ``poll_interval``, 2 s, and its
expiry every 5 s), a worker's boot, and ``/health/ready``.

The fill is ``bench/operator_views.py``'s (``--runs`` executions over 90 days, their events,
dead letters, audit rows, 50 schedules) and then a backlog: ``--tasks`` activity tasks spread
over the RUNNING runs (a fan-out of ~1,000 activities a run), on the runs' five queues (60% on
``default``), 87% claimable now, 10% retrying later (due within the hour), 3% claimed (running,
leased a week ahead: the scanner's tick expires none); one in five keyed by a concurrency key out of 500 tenants. Eight
workers poll every queue. ``VACUUM ANALYZE`` at the end.

Each statement is timed as its backend's CPU (user + system, from /proc: the server's work, not
the wait; no parallel workers, so that it is all the backend's) and as wall time, after one
warm-up; then per hour at its default interval (0: no interval of its own: an idle worker's due
time is read when it falls asleep, a boot's once).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from operator_views import arguments, build, explain, run, sql

TASK_INDEXES = """
SELECT i.relname, pg_get_indexdef(i.oid)
FROM pg_index AS x
JOIN pg_class AS i ON i.oid = x.indexrelid
JOIN pg_class AS t ON t.oid = x.indrelid
WHERE t.relnamespace = 'harvest'::regnamespace AND t.relname = 'tasks'
  AND NOT EXISTS (SELECT 1 FROM pg_constraint AS c WHERE c.conindid = x.indexrelid)
ORDER BY i.relname
"""
# k-th activity of the n-th RUNNING run; the rows follow the schema's rules (the derived columns
# the insert trigger would fill are written as it would: a keyed task's key and limit).
BACKLOG = """
INSERT INTO harvest.tasks (
    execution_id, kind, queue, priority, due_at, scheduled_at, seq, activity_name, input, options,
    status, attempt, fencing_token, lease_owner, lease_expires_at, started_at,
    concurrency_key, concurrency_limit, run_workflow_name, run_workflow_id
)
SELECT r.id, 'activity', r.queue, 0,
       CASE WHEN g.k % 10 = 9 THEN %(now)s::timestamptz + make_interval(secs => g.k % 3600 + 60)
            ELSE %(now)s::timestamptz - make_interval(secs => (%(per)s - g.k) * 0.05) END,
       %(now)s::timestamptz - interval '1 hour', 100 + g.k, 'ship', jsonb_build_object('n', g.k),
       CASE WHEN g.k % 5 = 0 THEN jsonb_build_object('concurrency_key', 'tenant', 'concurrency_limit', 5)
            ELSE '{}'::jsonb END,
       CASE WHEN g.k % 33 = 0 THEN 'running' ELSE 'pending' END,
       CASE WHEN g.k % 33 = 0 THEN 1 ELSE 0 END,
       CASE WHEN g.k % 33 = 0 THEN nextval('harvest.fencing_tokens') ELSE 0 END,
       CASE WHEN g.k % 33 = 0 THEN 'bench-worker-' || (g.k % 8) END,
       CASE WHEN g.k % 33 = 0 THEN %(now)s::timestamptz + interval '7 days' END,
       CASE WHEN g.k % 33 = 0 THEN %(now)s::timestamptz END,
       CASE WHEN g.k % 5 = 0 THEN 't-' || ((r.n * 7 + g.k) % 500) END,
       CASE WHEN g.k % 5 = 0 THEN 5 END,
       r.workflow_name, r.workflow_id
FROM (
    SELECT e.id, e.queue, e.workflow_name, e.workflow_id, row_number() OVER (ORDER BY e.created_at) AS n
    FROM harvest.executions AS e WHERE e.status = 'RUNNING'
) AS r
CROSS JOIN generate_series(1, %(per)s) AS g (k)
WHERE (r.n - 1) * %(per)s + g.k <= %(tasks)s
"""
QUEUES = ["default", "q1", "q2", "q3", "q4"]


def fill_backlog(dsn: str, tasks: int, say: Any = lambda line: print(line, flush=True)) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        running = conn.execute("SELECT count(*) FROM harvest.executions WHERE status = 'RUNNING'").fetchone()[
            0
        ]  # type: ignore[index]
        per = -(-tasks // running)
        started = time.monotonic()
        indexes = conn.execute(TASK_INDEXES).fetchall()
        for name, _definition in indexes:
            conn.execute(f"DROP INDEX harvest.{name}")
        conn.execute("SET session_replication_role = replica")
        conn.execute(sql(BACKLOG), {"now": now, "per": per, "tasks": tasks})
        conn.execute("SET session_replication_role = DEFAULT")
        say(f"  backlog: {tasks:,} tasks over {running:,} runs in {time.monotonic() - started:,.0f} s")
        conn.execute("SET maintenance_work_mem = '1GB'")
        for name, definition in indexes:
            t0 = time.monotonic()
            conn.execute(definition)
            say(f"  index {name}: {time.monotonic() - t0:,.1f} s")
        heartbeat_workers(conn, register=True)
        conn.execute("VACUUM ANALYZE harvest.tasks")
        conn.execute("VACUUM ANALYZE harvest.workers")
        say(f"  backlog done in {time.monotonic() - started:,.0f} s")


def heartbeat_workers(conn: psycopg.Connection[Any], register: bool = False) -> None:
    """Eight workers polling every queue, fresh (their heartbeats are the real clock's)."""
    for w in range(8):
        if register:
            conn.execute(
                "SELECT harvest.register_worker(%s, %s, 'bench', %s, 5)",
                [f"bench-worker-{w}", QUEUES, 1000 + w],
            )
        conn.execute("SELECT harvest.heartbeat_worker(%s)", [f"bench-worker-{w}"])


# (name, statement, runs per hour at the default intervals, whether it writes)
# A worker's loops are per worker (per shard it serves); the sampler and the janitor are one
# process's per database; /health/ready is per probe (a probe every 10 s assumed).
LOOPS: list[tuple[str, str, float, bool]] = [
    ("sampler: get_metric_samples(50)", "SELECT harvest.get_metric_samples(50)", 240, False),
    (
        "sampler: list_forced_closes",
        "SELECT * FROM harvest.list_forced_closes(now() - interval '20 seconds', NULL, now(), 1000)",
        240,
        False,
    ),
    ("scanner: scan(100)", "SELECT harvest.scan(100)", 3600, True),
    ("scanner: expire_tasks(100)", "SELECT * FROM harvest.expire_tasks(100)", 0, True),
    ("scanner: expire_workflows(100)", "SELECT harvest.expire_workflows(100)", 0, True),
    ("scanner: deliver_relays(100)", "SELECT harvest.deliver_relays(100)", 0, True),
    ("scanner: grant_mutexes(100)", "SELECT harvest.grant_mutexes(100)", 0, True),
    ("scanner: release_pending_starts(100)", "SELECT harvest.release_pending_starts(100)", 0, True),
    ("scheduler: start_buffered_firings", "SELECT harvest.start_buffered_firings(100)", 3600, True),
    ("scheduler: list_due_schedules", "SELECT * FROM harvest.list_due_schedules(100)", 3600, False),
    ("heartbeat: heartbeat_worker", "SELECT harvest.heartbeat_worker('bench-worker-0')", 720, True),
    (
        "queries: claim_query_requests",
        "SELECT * FROM harvest.claim_query_requests('bench-worker-0', %(queues)s, 16, 30)",
        1800,
        True,
    ),
    ("queries: expire_query_requests", "SELECT harvest.expire_query_requests(1000)", 720, True),
    ("idle: next_due_at (all queues)", "SELECT harvest.next_due_at(%(queues)s)", 0, False),
    ("idle: set_worker_sleeping", "SELECT harvest.set_worker_sleeping('bench-worker-0', true)", 0, True),
    ("retention: prune_workers", "SELECT harvest.prune_workers()", 60, True),
    ("retention: prune_flow_keys", "SELECT harvest.prune_flow_keys()", 60, True),
    (
        "retention: run_retention (500, 60 days)",
        "SELECT harvest.run_retention(interval '60 days', 500)",
        60,
        True,
    ),
    (
        "boot: register_worker",
        "SELECT harvest.register_worker('bench-boot', %(queues)s, 'bench', 1, 5)",
        0,
        True,
    ),
    (
        "boot: register_workflows",
        "SELECT harvest.register_workflows(%(queues)s, ARRAY['wf_00', 'wf_01'])",
        0,
        True,
    ),
    ("health: ready (versions)", "SELECT harvest.schema_version(), harvest.functions_version()", 360, False),
    ("health: ready (require_shard_readiness)", "SELECT harvest.get_shard_readiness(NULL)", 360, False),
    ("shard health: get_shard_health (CLI, admin)", "SELECT harvest.get_shard_health(NULL)", 0, False),
    ("health: count_stranded_tasks", "SELECT * FROM harvest.count_stranded_tasks()", 0, False),
]


def cpu_ms(pid: int) -> float:
    """A backend's user + system CPU so far, in ms (it runs on this machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def timed(
    conn: psycopg.Connection[Any], pid: int, statement: str, params: Any, write: bool
) -> tuple[float, float]:
    """The mean CPU and median wall ms of a statement's runs after a warm-up (five, or more to
    fill a second: the kernel counts CPU in 10 ms ticks); a write in a rolled-back transaction."""
    cpu = 0.0
    wall: list[float] = []
    n = 0
    while n < 6 or (n < 60 and sum(wall) < 1000):
        if write:
            conn.execute("BEGIN")
        c0, t0 = cpu_ms(pid), time.perf_counter()
        conn.execute(statement, params).fetchall()
        if n:  # (the first run warms the caches)
            wall.append((time.perf_counter() - t0) * 1000)
            cpu += cpu_ms(pid) - c0
        if write:
            conn.execute("ROLLBACK")
        n += 1
    return cpu / len(wall), statistics.median(wall)


def measure(
    dsn: str, args: argparse.Namespace, loops: list[tuple[str, str, float, bool]] | None = None
) -> None:
    """Time ``loops`` (this bench's LOOPS; bench/cross_shard_loops.py passes its own)."""
    params = {"queues": QUEUES}
    with psycopg.connect(dsn, autocommit=True) as conn:
        heartbeat_workers(conn)
        # No parallel workers: a statement's CPU is then all its backend's (what /proc shows).
        conn.execute("SET max_parallel_workers_per_gather = 0")
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        results = {}
        for name, statement, per_hour, write in LOOPS if loops is None else loops:
            wanted = args.explain or args.only
            if wanted and wanted not in name:
                continue
            if args.explain:
                print(f"== {name}\n" + explain(conn, notices, statement, params), flush=True)
                continue
            heartbeat_workers(conn)  # a live fleet's (stale after two 5 s heartbeats)
            cpu, wall = timed(conn, pid, statement, params, write)
            hour = cpu * per_hour / 1000
            results[name] = {
                "cpu_ms": round(cpu, 1),
                "wall_ms": round(wall, 2),
                "per_hour": per_hour,
                "cpu_s_per_hour": round(hour, 1),
            }
            print(
                f"{name:42s} {cpu:9.1f} ms cpu {wall:9.2f} ms wall {per_hour:6.0f}/h {hour:8.1f} s/h",
                flush=True,
            )
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


def main() -> None:
    parser = arguments(__doc__, 500_000, "loops' statements")
    parser.add_argument("--tasks", type=int, default=2_000_000)
    args = parser.parse_args()

    def fill(dsn: str) -> None:
        build(dsn, args.runs)
        fill_backlog(dsn, args.tasks)

    run(args, "loops", fill, measure)


if __name__ == "__main__":
    main()
