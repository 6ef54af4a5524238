"""What the cross-shard loops and an operator's exact counts cost a big shard: bench/background_loops.py's
fill, plus the cross-shard rows a shard of a sharded deployment carries, each statement timed.

    nice -n 10 python bench/background_loops.py --data /tmp/bgloops --fill        # (once)
    nice -n 10 python bench/cross_shard_loops.py --data /tmp/bgloops --fill-cross-shard   # (once, 3 s)
    nice -n 10 python bench/cross_shard_loops.py --data /tmp/bgloops --sql
    nice -n 10 python bench/cross_shard_loops.py --data /tmp/bgloops --explain NAME

``--fill-cross-shard`` adds to the ``loops`` database (its 500,000 runs, 1,950 of them RUNNING):

- 100,000 remote relays (external signals by execution id to shard 1) all backing off, as a
  shard down for a while leaves them (``release_relay``'s ``claimed_until`` an hour ahead here,
  so that none comes due during the timing: the pump's claim finds nothing to take);
- 100,000 cross-shard children running on shard 1, their parents the RUNNING runs, every row's
  poll lease run out (the pump reads a running child again once its ``poll_secs`` lease ends);
- a ``shard_migrations`` record for each of the 498,000 other runs (a big shard rebalanced to
  shard 1: completed), 49 of them failed and 20 cut over and stalled (what ``harvest shard rebalance-resume`` and the worker's
  resume scanner settle).

Each statement is timed as background_loops.py times it (the backend's CPU after a warm-up; a
write in a transaction rolled back). The rows: the relay pump's two claims (once per scanner
tick on each worker of a sharded deployment), the resume scanner's claim (every
``rebalance_resume_interval``) and ``rebalance-resume``'s reads (once), a move's quiescence check
(a rebalance's candidates, each move's start and cutover), the retention janitor's batch, and the exact counts an
operator waits on (``harvest workflow count``, ``GET /workflows/count``, the dashboard's chips) and
a list by a range test on a search attribute few runs carry.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from background_loops import measure
from operator_views import arguments, run, sql

# g.i's run: the RUNNING runs in turn (a relay's source, a child's parent).
PARENTS = """
JOIN (SELECT e.id, row_number() OVER (ORDER BY e.id) - 1 AS k FROM harvest.executions AS e
      WHERE e.status = 'RUNNING') AS r ON r.k = g.i % %(running)s"""
RELAYS = """
INSERT INTO harvest.relays (
    target_execution_id, kind, payload, created_at, source_execution_id, source_seq, target_shard, remote,
    claimed_until, attempts, last_error
)
SELECT gen_random_uuid(), 'external_signal', jsonb_build_object('signal_name', 'go', 'payload', g.i),
       %(now)s::timestamptz - make_interval(secs => (%(n)s - g.i) * 0.01), r.id, 1000 + g.i, 1, true,
       %(now)s::timestamptz + interval '1 hour', 6, 'shard 1: unreachable'
FROM generate_series(1, %(n)s) AS g (i)
"""
CHILDREN = """
INSERT INTO harvest.cross_shard_children (
    child_execution_id, parent_execution_id, parent_seq, target_shard, workflow_name, workflow_id, queue, input,
    parent_close_policy, status, next_attempt_at, created_at
)
SELECT gen_random_uuid(), r.id, 1000 + g.i, 1, 'child', 'child-' || g.i, 'default', '[]'::jsonb, 'terminate',
       'running', %(now)s::timestamptz - make_interval(secs => g.i % 60),
       %(now)s::timestamptz - make_interval(secs => (%(n)s - g.i) * 0.5)
FROM generate_series(1, %(n)s) AS g (i)
"""
RELAYS, CHILDREN = RELAYS.rstrip() + PARENTS, CHILDREN.rstrip() + PARENTS
MIGRATIONS = """
INSERT INTO harvest.shard_migrations (
    execution_id, workflow_name, workflow_id, source_shard, target_shard, phase, attempts, last_error,
    created_at, updated_at
)
SELECT e.id, e.workflow_name, e.workflow_id, 0, 1,
       CASE WHEN g.i %% 10000 = 0 THEN 'failed' WHEN g.i %% 25000 = 1 THEN 'cut_over' ELSE 'completed' END,
       1, CASE WHEN g.i %% 10000 = 0 THEN 'verification failed' END,
       %(now)s::timestamptz - make_interval(secs => (%(n)s - g.i) * 0.1),
       %(now)s::timestamptz - make_interval(secs => (%(n)s - g.i) * 0.1)
FROM (SELECT e.*, row_number() OVER (ORDER BY e.created_at) AS i FROM harvest.executions AS e
      WHERE e.status <> 'RUNNING') AS e
CROSS JOIN LATERAL (SELECT e.i) AS g (i)
WHERE g.i <= %(n)s
"""


def fill_cross_shard(dsn: str, n: int = 100_000, say: Any = lambda line: print(line, flush=True)) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        running = conn.execute("SELECT count(*) FROM harvest.executions WHERE status = 'RUNNING'").fetchone()[
            0
        ]  # type: ignore[index]
        started = time.monotonic()
        conn.execute("SET session_replication_role = replica")  # (the rows follow the schema's rules)
        params = {"now": now, "n": n, "running": running}
        conn.execute(sql(RELAYS), params)
        conn.execute(sql(CHILDREN), params)
        conn.execute(MIGRATIONS, {"now": now, "n": 500_000})
        conn.execute("SET session_replication_role = DEFAULT")
        for table in ("relays", "cross_shard_children", "shard_migrations"):
            conn.execute(f"VACUUM ANALYZE harvest.{table}")
        say(f"  cross-shard rows in {time.monotonic() - started:,.0f} s")


# (name, statement, runs per hour at the default intervals (0: on demand), whether it writes); the pump's
# claims are per worker that runs the scanner in a sharded deployment, the resume scanner's per worker.
STATEMENTS: list[tuple[str, str, float, bool]] = [
    (
        "pump: claim_remote_relays(100), none due",
        "SELECT * FROM harvest.claim_remote_relays(100, 30)",
        3600,
        True,
    ),
    (
        "pump: claim_cross_shard_children(100)",
        "SELECT * FROM harvest.claim_cross_shard_children(100, 1)",
        3600,
        True,
    ),
    (
        "resume scanner: claim_stalled_migrations",
        "SELECT * FROM harvest.claim_stalled_migrations(30, ARRAY[1], 10)",
        720,
        True,
    ),
    (
        "rebalance: list_migration_candidates(100)",
        "SELECT * FROM harvest.list_migration_candidates(NULL, NULL, 100)",
        0,
        False,
    ),
    (
        "rebalance: a move's quiescence check (_migration_blockers)",
        (
            "SELECT harvest._migration_blockers(e) FROM harvest.executions AS e"
            " WHERE e.id = (SELECT q.id FROM harvest.executions AS q WHERE q.status = 'RUNNING'"
            " ORDER BY q.created_at, q.id LIMIT 1)"
        ),
        0,
        False,
    ),
    (
        "retention: run_retention (500, 60 days)",
        "SELECT harvest.run_retention(interval '60 days', 500)",
        60,
        True,
    ),
    (
        "rebalance-resume: list_migrations(open)",
        "SELECT * FROM harvest.list_migrations(ARRAY['open'], 10000)",
        0,
        False,
    ),
    (
        "rebalance-resume: list_migrations(failed)",
        "SELECT * FROM harvest.list_migrations(ARRAY['failed'], 1000)",
        0,
        False,
    ),
    ("sampler: get_metric_samples(50)", "SELECT harvest.get_metric_samples(50)", 240, False),
    ("sampler: get_metric_samples(0), no keys", "SELECT harvest.get_metric_samples(0)", 240, False),
    (
        "sampler: the in-flight keys (its first read)",
        (
            "SELECT count(*) FROM (SELECT t.concurrency_key FROM harvest.tasks AS t WHERE t.status = 'running'"
            " AND t.concurrency_key IS NOT NULL AND t.kind = 'activity' LIMIT 10001) AS f"
        ),
        240,
        False,
    ),
    (
        "sampler: _busiest_concurrency_keys(NULL, 50)",
        "SELECT * FROM harvest._busiest_concurrency_keys(NULL, 50)",
        240,
        False,
    ),
    ("count: by status, exact", "SELECT * FROM harvest.count_executions('status')", 0, False),
    (
        "count: CLI default (every state named)",
        (
            "SELECT * FROM harvest.count_executions('status', 'RUNNING,PAUSED,COMPLETED,FAILED,CANCELLED,"
            "TERMINATED,TIMED_OUT,CONTINUED_AS_NEW,MIGRATING')"
        ),
        0,
        False,
    ),
    ("count: all", "SELECT * FROM harvest.count_executions('all')", 0, False),
    ("count: by workflow_name", "SELECT * FROM harvest.count_executions('workflow_name')", 0, False),
    (
        "count: by status, workflow_name",
        "SELECT * FROM harvest.count_executions('status', p_workflow_name => 'wf_10')",
        0,
        False,
    ),
    (
        "count: by status, attr region=eu",
        "SELECT * FROM harvest.count_executions('status', p_search_attributes => ARRAY['region=eu'])",
        0,
        False,
    ),
    (
        "count: chips (p_limit 10000)",
        "SELECT * FROM harvest.count_executions('status', p_limit => 10000)",
        0,
        False,
    ),
    (
        "count: chips, attr region=eu",
        (
            "SELECT * FROM harvest.count_executions('status', p_search_attributes => ARRAY['region=eu'],"
            " p_limit => 10000)"
        ),
        0,
        False,
    ),
    (
        "list: attr priority>=3",
        "SELECT * FROM harvest.list_executions(p_search_attributes => ARRAY['priority>=3'])",
        0,
        False,
    ),
    (
        "list: attr priority>=3, 50",
        "SELECT * FROM harvest.list_executions(p_search_attributes => ARRAY['priority>=3'], p_page_size => 50)",
        0,
        False,
    ),
]


def main() -> None:
    parser = arguments(__doc__, 500_000, "statements")
    parser.add_argument("--fill-cross-shard", action="store_true", help="add the cross-shard rows to 'loops'")
    args = parser.parse_args()
    assert not args.fill, "fill with bench/background_loops.py --fill first"

    def measure_or_fill(dsn: str, args: argparse.Namespace) -> None:
        if args.fill_cross_shard:
            fill_cross_shard(dsn)
        if args.sql or args.explain:
            measure(dsn, args, STATEMENTS)

    if args.fill_cross_shard and not (args.sql or args.explain):
        args.sql = True
        args.only = "\0"  # (fill only)
    run(args, "loops", None, measure_or_fill)


if __name__ == "__main__":
    main()
