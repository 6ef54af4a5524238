"""Claim cost against pending backlog depth: the default claim and with each gate on.

    python bench/claim_cost.py [--depths 1000,10000,100000] [--dsn postgresql://...] [--explain]

Without --dsn an embedded Postgres is started. For each depth a fresh database is
migrated and filled with that many pending workflow tasks on one queue (plain, or
carrying a concurrency key whose cap is full, or a rate key whose bucket is
empty, or ageing (priority_aging_secs, priorities 0-9, due over the last hour),
or fairness-keyed over 50 tenant keys); then claim_tasks(limit 10) is timed
inside a transaction that is rolled back, so every sample sees the same backlog.
Prints a markdown table (median ms) and, with --explain, the EXPLAIN (ANALYZE,
BUFFERS) of the statements behind the mode. One gate at a time on one queue; every
gate at once on four queues, up to 10M pending, is bench/claim_gates.py (issue 20's row).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import psycopg

from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

FILL = """
INSERT INTO harvest.executions (id, workflow_name, workflow_id, queue, created_at)
SELECT harvest._new_execution_id(0), 'bench', 'b' || g, 'bq', now() FROM generate_series(1, %(n)s) AS g
"""
FILL_TASKS = """
INSERT INTO harvest.tasks (execution_id, kind, queue, due_at, scheduled_at, concurrency_key,
                           concurrency_limit, rate_key, activity_name, options, priority, input)
SELECT e.id, CASE WHEN %(mode)s = 'default' THEN 'workflow' ELSE 'activity' END, 'bq',
       CASE WHEN %(mode)s = 'aging' THEN now() - random() * interval '1 hour' ELSE now() END, now(),
       CASE WHEN %(mode)s = 'cap' THEN 'k' END, CASE WHEN %(mode)s = 'cap' THEN 1 END,
       CASE WHEN %(mode)s = 'rate' THEN 'rate:act' END, 'act',
       CASE WHEN %(mode)s = 'rate' THEN '{"rate_limit": {"rps": 0.001, "burst": 1}}'::jsonb
            WHEN %(mode)s = 'aging' THEN '{"priority_aging_secs": 60}'::jsonb
            WHEN %(mode)s = 'fair' THEN '{"fairness_key": "input"}'::jsonb
            ELSE '{}'::jsonb END,
       CASE WHEN %(mode)s = 'aging' THEN (random() * 9)::integer ELSE 0 END,
       CASE WHEN %(mode)s = 'fair' THEN jsonb_build_array('tenant-' || (row_number() OVER () %% 50)) END
FROM harvest.executions AS e
"""
WINDOW = """
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
SELECT t.id, (t.concurrency_key IS NOT NULL OR t.rate_key IS NOT NULL)
FROM harvest.tasks AS t
WHERE t.queue = 'bq' AND t.status = 'pending' AND t.kind <> 'timer' AND t.due_at <= now()
ORDER BY t.priority DESC, t.due_at, t.id LIMIT 56
"""
# The two probes every claim adds: does the queue hold ageing or fairness-keyed work?
PROBES = """
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
SELECT EXISTS (
    SELECT 1 FROM harvest.tasks AS t
    WHERE t.queue = ANY(ARRAY['bq']) AND t.status = 'pending' AND t.kind <> 'timer'
      AND t.priority_aging_secs IS NOT NULL
) OR EXISTS (
    SELECT 1 FROM harvest.tasks AS t
    WHERE t.queue = ANY(ARRAY['bq']) AND t.status = 'pending' AND t.kind <> 'timer'
      AND t.fairness_key IS NOT NULL
)
"""
# The ageing window and the candidate ordering (the whole of _order_candidates for one queue).
ORDER = """
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
SELECT * FROM harvest._order_candidates(ARRAY['bq'], now(), 56, 10)
"""
AGING_WINDOW = """
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
SELECT t.id FROM harvest.tasks AS t
WHERE t.queue = 'bq' AND t.status = 'pending' AND t.kind <> 'timer'
  AND t.priority_aging_secs IS NOT NULL AND t.due_at <= now()
ORDER BY t.due_at, t.id LIMIT 56
"""
FAIR_KEY_HEAD = """
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
SELECT t.id FROM harvest.tasks AS t
WHERE t.queue = 'bq' AND t.fairness_key = 'tenant-7' AND t.status = 'pending'
  AND t.kind <> 'timer' AND t.due_at <= now()
ORDER BY t.priority DESC, t.due_at, t.id LIMIT 2
"""
EXPLAINS = {
    "default": [WINDOW, PROBES],
    "cap": [WINDOW],
    "rate": [WINDOW],
    "aging": [AGING_WINDOW, ORDER],
    "fair": [FAIR_KEY_HEAD, ORDER],
}


def measure(admin_dsn: str, dsn_for, depth: int, mode: str, samples: int, explain: bool) -> float:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = dsn_for(name)
    try:
        Migrator(dsn).run()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(FILL, {"n": depth})
            conn.execute(FILL_TASKS, {"mode": mode})
            if mode == "cap":  # the key's one slot is taken
                conn.execute(
                    "UPDATE harvest.tasks SET status = 'running', lease_expires_at = now() + "
                    "interval '1 h' WHERE id = (SELECT min(id) FROM harvest.tasks)"
                )
            if mode == "rate":  # the bucket is empty
                conn.execute(
                    "INSERT INTO harvest.rate_limit_buckets (bucket_key, activity_name, rps, burst, "
                    "tokens, refilled_at) VALUES ('rate:act', 'act', 0.001, 1, 0, now())"
                )
            conn.execute("VACUUM ANALYZE harvest.tasks")
            times = []
            for _ in range(samples):
                with conn.transaction(force_rollback=True):
                    start = time.perf_counter()
                    conn.execute("SELECT * FROM harvest.claim_tasks('bench', ARRAY['bq'], 10)").fetchall()
                    times.append((time.perf_counter() - start) * 1000)
            if explain:
                for statement in EXPLAINS[mode]:
                    with conn.transaction(force_rollback=True):
                        plan = "\n".join(r[0] for r in conn.execute(statement).fetchall())
                    print(
                        f"\n-- {mode}, {depth} rows{statement.strip().splitlines()[1][:60]!r}\n{plan}",
                        flush=True,
                    )
        return statistics.median(times)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--depths", default="1000,10000,100000")
    parser.add_argument("--modes", default="default,cap,rate,aging,fair")
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    modes = args.modes.split(",")
    server = None
    if args.dsn:
        admin_dsn = args.dsn
        base = args.dsn.rsplit("/", 1)[0]

        def dsn_for(name: str) -> str:
            return f"{base}/{name}"
    else:
        server = EmbeddedPostgres()
        admin_dsn = server.start()
        dsn_for = server.dsn_for
    try:
        rows = {
            mode: [measure(admin_dsn, dsn_for, d, mode, args.samples, args.explain) for d in depths]
            for mode in modes
        }
    finally:
        if server is not None:
            server.stop()
    print("\n| claim (limit 10) | " + " | ".join(f"{d:,} pending" for d in depths) + " |")
    print("| --- |" + " --- |" * len(depths))
    for mode, values in rows.items():
        print(f"| {mode} | " + " | ".join(f"{v:.2f} ms" for v in values) + " |")


if __name__ == "__main__":
    main()
