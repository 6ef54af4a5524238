"""The claim with every gate on, against a backlog of 1K to 10M pending tasks.

    nice -n 10 python bench/claim_gates.py [--depths 1000,10000,100000,1000000,10000000]
        [--rounds 200] [--explain] [--keep DIR] [--reuse DIR] [--out bench/results/claim_cost.json]

One embedded PostgreSQL (started by this process, so its backends inherit the
process' nice value), one database per depth. Each database is filled set-based
(INSERT ... SELECT over generate_series, a million rows per statement) with rows
shaped exactly as the real write path shapes them: an execution, its history and
its pending task per run, as start_workflow writes a run's first workflow task and
complete_workflow_task writes a scheduled activity (``FILL``; the options are the
ones ``ActivityDefinition.options_json`` builds, and the tasks' gate and claim-order
columns come from the real insert triggers). ``check_fill`` compares filled runs
against runs made by the real functions; tests/integration/test_claim_gates_fill.py
runs it.

Every gate is on in every database:

- four queues, all polled by the one claim, every one of them fair (fairness keys
  over 1,000 tenants on the capped, rate-limited and ``act_fair`` activities, so each
  claim of 50 visits 13 keys per queue and the cursor moves);
- priorities 0-9 on workflow and activity tasks, priority ageing on 15% of the tasks,
  due times spread over the last hour;
- per-key workflow concurrency (``bench_keyed``: ``defer``, 2 per tenant, 100 tenants
  already full) on 10% of the tasks;
- activity concurrency caps (ten activities of ``max_concurrent`` 20, one of them
  full) on 20%;
- a per-tenant rate limit (50/s, burst 10) on 15%.

Each sample is one ``claim_tasks(limit 50)`` over the four queues, timed by the
client; the claimed tasks are then released (back to pending, due now, their
workflow slots given back) in a second transaction, so the backlog keeps its size.
The depths alternate claim by claim (their order rotates every round), so drift
of the shared machine hits every depth alike. Every 20 rounds the queue tables of
every depth are vacuumed (untimed), as an autovacuum tuned for a queue table would
be: a claim and its release leave some 150 dead task rows. Prints the medians, the p90s and the
ratio to the first depth, and writes them (with the date and the machine) to
``--out``; ``bench/targets.py`` reads the ratio from there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from harvest.db import paths
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator
from harvest.declare.definitions import ActivityDefinition
from harvest.declare.flow_control import RateLimit

QUEUES = ["q0", "q1", "q2", "q3"]
BATCH = 50
WORKER = "bench-claimer"
DECIDER = "bench-decider"
TENANTS = 1000
POLICIES = {
    "workflows": {"bench_keyed": {"concurrency": {"key": "input.tenant", "limit": 2, "on_conflict": "defer"}}}
}


def _noop() -> None:  # the activities' body: only their options matter here
    return None


def activity_options() -> dict[str, dict[str, Any]]:
    """Each filled activity's options, as the worker's schedule_activity sends them."""
    # The gated activities are fair-keyed by tenant too: a deep claim's candidates are the
    # keys' heads, so without a key they would sit in the unkeyed group's few turns and
    # the claims past 1K would pass no gate (docs/performance.md, "Every gate on").
    defs = [
        ActivityDefinition(name=f"act_cap_{j}", fn=_noop, max_concurrent=20, fairness_key="input.tenant")
        for j in range(10)
    ]
    defs += [
        ActivityDefinition(
            name="act_rate",
            fn=_noop,
            rate_limit=RateLimit(rps=50, burst=10, key="input.tenant"),
            fairness_key="input.tenant",
        ),
        ActivityDefinition(name="act_age", fn=_noop, priority_aging_secs=60.0),
        ActivityDefinition(name="act_fair", fn=_noop, fairness_key="input.tenant"),
        ActivityDefinition(name="act_plain", fn=_noop),
    ]
    return {d.name: d.options_json() for d in defs}


# The run of row i of generate_series: its shape (i % 20), tenant, queue, priority and
# time. Shapes 0-1 are bench_keyed's first workflow task, 2-3 bench_wf's, 4-19 an
# activity scheduled by bench_wf's first decision: 4-7 act_cap_<j>, 8-10 act_rate,
# 11-13 act_age, 14-16 act_fair, 17-19 act_plain.
RUNS = """
SELECT g.i, harvest._new_execution_id(0) AS id,
       CASE WHEN g.i % 20 < 2 THEN 'bench_keyed' ELSE 'bench_wf' END AS workflow_name,
       %(prefix)s::text || g.i AS workflow_id,
       'q' || ((g.i / 20) % 4) AS queue,
       'tenant-' || lpad(((g.i * 37) % {tenants})::text, 4, '0') AS tenant,
       CASE WHEN g.i % 20 < 4 THEN 'workflow' ELSE 'activity' END AS kind,
       CASE WHEN g.i % 20 BETWEEN 4 AND 7 THEN 'act_cap_' || ((g.i / 20) % 10)
            WHEN g.i % 20 BETWEEN 8 AND 10 THEN 'act_rate'
            WHEN g.i % 20 BETWEEN 11 AND 13 THEN 'act_age'
            WHEN g.i % 20 BETWEEN 14 AND 16 THEN 'act_fair'
            WHEN g.i % 20 >= 17 THEN 'act_plain' END AS activity_name,
       (g.i / 7) % 10 AS priority,
       -- Due times over the last hour: in insertion order when span is given (as the write
       -- path makes them: a task is due when it is written), else scattered across it.
       %(now)s::timestamptz - CASE WHEN %(span)s::bigint > 0
                                   THEN make_interval(secs => 3600.0 * (%(span)s::bigint - g.i) / %(span)s::bigint)
                                   ELSE make_interval(secs => (g.i * 7) % 3600) END AS at
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g (i)
""".replace("{tenants}", str(TENANTS))

# One statement per chunk: the executions, their events and their tasks, each column
# as start_workflow (_start_insert, _append_event) and complete_workflow_task
# (_apply_decision, _decide_schedule_activity) write it. The insert triggers derive
# the tasks' gate and claim-order columns from the options, as for a real insert.
FILL = (
    """
WITH r AS MATERIALIZED ("""
    + RUNS
    + """),
x AS (
    SELECT r.*, i.input, o.options,
           jsonb_build_object('workflow_name', r.workflow_name, 'workflow_id', r.workflow_id,
                              'input', i.input, 'task_queue', r.queue, 'parent_id', NULL) AS started,
           CASE WHEN r.kind = 'activity' THEN jsonb_build_object('through', 1, 'worker_id', %(decider)s::text) END AS decided,
           CASE WHEN r.kind = 'activity' THEN jsonb_build_object(
               'seq', 1, 'name', r.activity_name, 'input', i.input, 'queue', r.queue, 'options', o.options) END
               AS scheduled
    FROM r
    CROSS JOIN LATERAL (SELECT jsonb_build_array(jsonb_build_object('tenant', r.tenant)) AS input) AS i
    CROSS JOIN LATERAL (
        SELECT CASE WHEN r.kind = 'activity' THEN (%(options)s::jsonb -> r.activity_name)
                    || jsonb_build_object('priority', r.priority) END AS options
    ) AS o
),
ex AS (
    INSERT INTO harvest.executions (
        id, workflow_name, workflow_id, queue, input, search_attributes, parent_id, created_at,
        execution_timeout_at, timeout_at, concurrency_key, quota_key, run_timeout_secs,
        last_event_id, history_bytes, decided_by, decided_through
    )
    SELECT x.id, x.workflow_name, x.workflow_id, x.queue, x.input, '{}'::jsonb, NULL, x.at, NULL, NULL,
           CASE WHEN x.workflow_name = 'bench_keyed' THEN x.tenant END, NULL, NULL,
           CASE WHEN x.kind = 'activity' THEN 3 ELSE 1 END,
           harvest._event_bytes(x.started)
               + coalesce(harvest._event_bytes(x.decided) + harvest._event_bytes(x.scheduled), 0),
           -- (a decision of one schedule_activity is through its own event: _append_events)
           CASE WHEN x.kind = 'activity' THEN %(decider)s::text END, CASE WHEN x.kind = 'activity' THEN 3 END
    FROM x
    RETURNING 1
),
ev AS (
    INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
    -- WorkflowStarted; for an activity also the decision and its command
    SELECT x.id, e.n, e.event_type, e.event_data, x.at
    FROM x
    CROSS JOIN LATERAL (VALUES (1, 'WorkflowStarted', x.started), (2, 'WorkflowTaskCompleted', x.decided),
                               (3, 'ActivityScheduled', x.scheduled)) AS e (n, event_type, event_data)
    WHERE e.event_data IS NOT NULL
    ORDER BY x.i, e.n
    RETURNING 1
)
INSERT INTO harvest.tasks (
    execution_id, kind, queue, priority, due_at, scheduled_at, concurrency_key, concurrency_limit,
    seq, activity_name, input, options, deadline_at, status, attempt, started_at, lease_owner,
    fencing_token, lease_expires_at, run_workflow_name, run_workflow_id
)
SELECT x.id, x.kind, x.queue, x.priority, x.at, x.at,
       CASE WHEN x.workflow_name = 'bench_keyed' AND x.kind = 'workflow' THEN x.tenant END,
       CASE WHEN x.workflow_name = 'bench_keyed' AND x.kind = 'workflow' THEN 2 END,
       CASE WHEN x.kind = 'activity' THEN 1 END, x.activity_name,
       CASE WHEN x.kind = 'activity' THEN x.input END, coalesce(x.options, '{}'::jsonb),
       NULL, 'pending', 0, NULL, NULL, 0, NULL,
       CASE WHEN x.kind = 'activity' THEN x.workflow_name END, CASE WHEN x.kind = 'activity' THEN x.workflow_id END
FROM x
ORDER BY x.i
"""
)

# Work already in flight, made by the same fill (workflow ids 'hold-<i>') and leased
# as a claim leases it: 20 running act_cap_0 attempts (that cap is full) and two
# admitted bench_keyed runs (a running workflow task and its slot) for each of the
# first 100 tenants (their key is full). The rest of the hold fill is deleted.
HOLD_FILL = 4000
HOLD = """
WITH cap AS (
    SELECT t.id FROM harvest.tasks AS t JOIN harvest.executions AS e ON e.id = t.execution_id
    WHERE e.workflow_id LIKE 'hold-%%' AND t.activity_name = 'act_cap_0' ORDER BY t.id LIMIT 20
),
keyed AS (
    SELECT t.id FROM (
        SELECT t.id, row_number() OVER (PARTITION BY t.concurrency_key ORDER BY t.id) AS n
        FROM harvest.tasks AS t JOIN harvest.executions AS e ON e.id = t.execution_id
        WHERE e.workflow_id LIKE 'hold-%%' AND t.kind = 'workflow' AND t.concurrency_key < 'tenant-0100'
    ) AS t WHERE t.n <= 2
),
held AS (
    UPDATE harvest.tasks AS t
    SET status = 'running', attempt = 1, started_at = %(now)s, lease_owner = 'bench-holder',
        fencing_token = nextval('harvest.fencing_tokens'), lease_expires_at = %(now)s + interval '1 day'
    WHERE t.id IN (SELECT id FROM cap UNION ALL SELECT id FROM keyed)
    RETURNING t.execution_id, t.kind, t.concurrency_key
)
INSERT INTO harvest.workflow_slots (execution_id, concurrency_key, workflow_name, admitted_at)
SELECT h.execution_id, h.concurrency_key, 'bench_keyed', %(now)s FROM held AS h WHERE h.kind = 'workflow'
"""
DROP_UNHELD = """
DELETE FROM harvest.executions AS e
WHERE e.workflow_id LIKE 'hold-%%'
  AND NOT EXISTS (SELECT 1 FROM harvest.tasks AS t WHERE t.execution_id = e.id AND t.status = 'running')
"""

# From this depth on, build() builds the secondary indexes after the fill.
BULK = 1_000_000
# The indexes of the filled tables that no constraint owns (the primary keys stay: the
# foreign keys are checked against them), with their definitions.
DEFERRABLE_INDEXES = """
SELECT i.relname, pg_get_indexdef(i.oid)
FROM pg_index AS x
JOIN pg_class AS i ON i.oid = x.indexrelid
JOIN pg_class AS t ON t.oid = x.indrelid
WHERE t.relnamespace = 'harvest'::regnamespace AND t.relname IN ('tasks', 'executions', 'events')
  AND NOT EXISTS (SELECT 1 FROM pg_constraint AS c WHERE c.conindid = x.indexrelid)
ORDER BY i.relname
"""

CLAIM = "SELECT task_id, kind, execution_id FROM harvest.claim_tasks(%(worker)s, %(queues)s, %(limit)s)"
# Give the batch back: pending again, due now (behind the rest of its priority), as
# before the claim; an admitted run's slot is given back with it.
RELEASE = """
WITH back AS (
    UPDATE harvest.tasks AS t
    SET status = 'pending', attempt = t.attempt - 1, started_at = NULL, lease_owner = NULL,
        lease_expires_at = NULL, heartbeat_at = NULL, due_at = now()
    FROM unnest(%(ids)s::bigint[]) AS c (id)
    WHERE t.id = c.id AND t.lease_owner = %(worker)s
    RETURNING t.execution_id
)
DELETE FROM harvest.workflow_slots AS s USING back WHERE s.execution_id = back.execution_id
"""


def sql(statement: str) -> str:
    """A statement with psycopg's placeholders: the SQL's own % doubled."""
    return statement.replace(" % ", " %% ")


def fill(
    conn: psycopg.Connection[Any],
    lo: int,
    hi: int,
    prefix: str,
    now: Any,
    chunk: int = 1_000_000,
    span: int = 0,
) -> None:
    options = json.dumps(activity_options())
    for start in range(lo, hi + 1, chunk):
        end = min(hi, start + chunk - 1)
        params = {
            "lo": start,
            "hi": end,
            "prefix": prefix,
            "now": now,
            "options": options,
            "decider": DECIDER,
            "span": span,
        }
        with conn.transaction():
            conn.execute(sql(FILL), params)


def build(dsn: str, depth: int, say: Any = print, due: str = "scattered") -> None:
    """Migrate and fill one database: depth pending tasks, the held work, then ANALYZE."""
    Migrator(dsn).run()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT harvest.declare_flow_policies(%s::jsonb)", [json.dumps(POLICIES)])
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        started = time.monotonic()
        # A deep fill drops the secondary indexes of the three tables it writes and builds
        # them again afterwards, each from its own definition (the schema stays as migrated):
        # one sort per index instead of a random insert per row.
        indexes = [] if depth < BULK else conn.execute(DEFERRABLE_INDEXES).fetchall()
        for name, _definition in indexes:
            conn.execute(f"DROP INDEX harvest.{name}")
        fill(conn, 1, depth, "b", now, span=depth if due == "time" else 0)
        if indexes:
            say(f"  {depth:,} rows in {time.monotonic() - started:,.0f} s; building {len(indexes)} indexes")
            conn.execute("SET maintenance_work_mem = '1GB'")
            for _name, definition in indexes:
                conn.execute(definition)
        fill(conn, 1, HOLD_FILL, "hold-", now)
        with conn.transaction():
            conn.execute(sql(HOLD), {"now": now})
            conn.execute(sql(DROP_UNHELD))
        say(f"  filled {depth:,} pending in {time.monotonic() - started:,.0f} s; vacuum analyze")
        for table in ("tasks", "executions", "events", "workflow_slots"):
            conn.execute(f"VACUUM ANALYZE harvest.{table}")


# What check_fill compares: every column but the ids, the times and the workflow id.
_EXECUTION = "to_jsonb(e) - ARRAY['id', 'workflow_id', 'created_at'] - 'last_event_id'"
_COMPARE = """
SELECT (SELECT {execution} || jsonb_build_object('last_event_id', e.last_event_id)
        FROM harvest.executions AS e WHERE e.id = %(id)s),
       (SELECT jsonb_agg(to_jsonb(ev) - ARRAY['execution_id', 'created_at', 'global_id'] ORDER BY ev.event_id)
        FROM harvest.events AS ev WHERE ev.execution_id = %(id)s),
       (SELECT jsonb_agg(to_jsonb(t) - ARRAY['id', 'execution_id', 'due_at', 'scheduled_at'] ORDER BY t.id)
        FROM harvest.tasks AS t WHERE t.execution_id = %(id)s)
""".replace("{execution}", _EXECUTION)


def check_fill(conn: psycopg.Connection[Any], rows: range = range(1, 21)) -> list[str]:
    """Make runs i in rows through the real functions (start_workflow, then for an activity
    claim_tasks and complete_workflow_task scheduling it), fill the same i, and compare the
    rows (the workflow id aside). Run on an empty migrated database; returns the differences."""
    conn.execute("SELECT harvest.declare_flow_policies(%s::jsonb)", [json.dumps(POLICIES)])
    options = activity_options()
    now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    problems = []
    for i in rows:
        run = conn.execute(
            sql(RUNS) + " LIMIT 1", {"lo": i, "hi": i, "prefix": "real-", "now": now, "span": 0}
        ).fetchone()
        assert run is not None
        _, _, workflow_name, workflow_id, queue, tenant, kind, activity_name, priority, _ = run
        input_ = json.dumps([{"tenant": tenant}])
        real_id = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow(%s, %s::jsonb, %s, %s, p_priority => %s)",
            [workflow_name, input_, workflow_id, queue, priority if kind == "workflow" else 0],
        ).fetchone()[0]  # type: ignore[index]
        if kind == "activity":
            task = conn.execute(
                "SELECT task_id, fencing_token FROM harvest.claim_tasks(%s, %s, 1)", [DECIDER, [queue]]
            ).fetchone()
            assert task is not None
            command = {
                "type": "schedule_activity",
                "seq": 1,
                "name": activity_name,
                "input": [{"tenant": tenant}],
                "options": {**options[activity_name], "priority": priority},
            }
            conn.execute(
                "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s::jsonb, %s)",
                [task[0], task[1], json.dumps([command]), DECIDER],
            )
        fill(conn, i, i, "fill-", now)
        fill_id = conn.execute(
            "SELECT id FROM harvest.executions WHERE workflow_id = %s", [f"fill-{i}"]
        ).fetchone()[0]  # type: ignore[index]
        real = conn.execute(_COMPARE, {"id": real_id}).fetchone()
        filled = conn.execute(_COMPARE, {"id": fill_id}).fetchone()
        real_text = json.dumps(real, sort_keys=True, default=str).replace(workflow_id, "WID")
        fill_text = json.dumps(filled, sort_keys=True, default=str).replace(f"fill-{i}", "WID")
        if real_text != fill_text:
            problems.append(
                f"row {i} ({kind} {activity_name or workflow_name}):\n  real {real_text}\n  fill {fill_text}"
            )
        # Leave no claimable work behind for the next row's claim.
        conn.execute("DELETE FROM harvest.executions WHERE id IN (%s, %s)", [real_id, fill_id])
    return problems


def claim_once(conn: psycopg.Connection[Any]) -> tuple[float, int]:
    """One claim of a batch (timed), then its release; returns (ms, tasks claimed)."""
    start = time.perf_counter()
    rows = conn.execute(CLAIM, {"worker": WORKER, "queues": QUEUES, "limit": BATCH}).fetchall()
    ms = (time.perf_counter() - start) * 1000
    if rows:
        conn.execute(sql(RELEASE), {"ids": [r[0] for r in rows], "worker": WORKER})
    return ms, len(rows)


def claim_buffers(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """The shared buffers one claim touches, every statement inside it counted (EXPLAIN's
    top node includes the function's own statements), and how many of them were read from
    outside the pool: (touched, read). Rolled back, so nothing needs releasing. The count
    is the claim's work in pages, which the machine's caches do not change."""
    with conn.transaction(force_rollback=True):
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, TIMING off, FORMAT JSON) " + CLAIM,
            {"worker": WORKER, "queues": QUEUES, "limit": BATCH},
        ).fetchone()
    plan = row[0][0]["Plan"]  # type: ignore[index]
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"], plan["Shared Read Blocks"]


def gate_calls(conn: psycopg.Connection[Any]) -> int:
    """How many times this database ran harvest._admit_candidates (track_functions),
    this session's counts flushed first."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")  # the flush happens at the end of a statement
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
        "WHERE schemaname = 'harvest' AND funcname = '_admit_candidates'"
    ).fetchone()
    return int(row[0]) if row else 0


def vacuum(conn: psycopg.Connection[Any]) -> None:
    """VACUUM the tables a claim and its release churn, as an autovacuum tuned for a queue
    would: each claim and release leaves some 150 dead task rows, and at 1,000 pending the
    default autovacuum (a look a minute) lets them outnumber the live ones tens of times."""
    for table in ("tasks", "rate_limit_buckets", "workflow_slots", "fair_queues"):
        conn.execute(f"VACUUM harvest.{table}")


def explain_claim(conn: psycopg.Connection[Any]) -> str:
    """The plans of every statement one claim runs (auto_explain, nested statements), rolled back."""
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    try:
        conn.execute("LOAD 'auto_explain'")
        for setting, value in [
            ("auto_explain.log_min_duration", "0"),
            ("auto_explain.log_analyze", "on"),
            ("auto_explain.log_buffers", "on"),
            ("auto_explain.log_timing", "on"),
            ("auto_explain.log_nested_statements", "on"),
            ("auto_explain.log_level", "notice"),
            ("client_min_messages", "notice"),
        ]:
            conn.execute(f"SET {setting} = {value}")
        with conn.transaction(force_rollback=True):
            conn.execute(CLAIM, {"worker": WORKER, "queues": QUEUES, "limit": BATCH}).fetchall()
    finally:
        conn.execute("RESET ALL")
    return "\n\n".join(notices)


def _commit() -> str:
    """The commit of the checkout whose SQL functions were measured (the harvest package
    imported), or "" outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=paths.functions_dir(), capture_output=True, text=True
        )
    except OSError:
        return ""
    return head.stdout.strip()


def machine() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "host": platform.node(),
        "cpu": model,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", default="1000,10000,100000,1000000,10000000")
    parser.add_argument("--rounds", type=int, default=200, help="claims per depth")
    parser.add_argument(
        "--vacuum-every",
        type=int,
        default=20,
        help="VACUUM the queue tables of every depth every this many rounds (untimed)",
    )
    parser.add_argument(
        "--due",
        choices=["scattered", "time"],
        default="scattered",
        help="due times scattered over the last hour regardless of insertion order (the worst case "
        "for a claim's locality), or in insertion order as the write path makes them",
    )
    parser.add_argument("--explain", action="store_true", help="print the plans of a claim at each depth")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "claim_cost.json"))
    parser.add_argument(
        "--data",
        default=None,
        help="keep the server's data here and reuse the databases a previous run filled",
    )
    parser.add_argument("--fill-only", action="store_true", help="fill the databases and stop (with --data)")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    prefix = "claim_" if args.due == "scattered" else "claim_time_"
    started = time.monotonic()
    settings = {"shared_buffers": "512MB", "max_wal_size": "8GB", "checkpoint_timeout": "30min"}
    data = Path(args.data) if args.data else None
    # With --data the databases outlive the run, not the server: an embedded server stops with
    # the process that started it, so each run starts one on the kept data directory (which
    # EmbeddedPostgres makes the first time: as root it must be the service user's own).
    server = EmbeddedPostgres(base_dir=data, settings=settings)
    server.start()
    conns: dict[int, psycopg.Connection[Any]] = {}
    try:
        fill_secs: dict[int, float | None] = {}
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            version = admin.execute("SELECT version()").fetchone()[0]  # type: ignore[index]
            present = {
                r[0] for r in admin.execute("SELECT datname FROM pg_database WHERE datname LIKE 'claim_%'")
            }
        for depth in depths:
            if f"{prefix}{depth}" in present:  # filled by an earlier run: bring its functions up to date
                Migrator(server.dsn_for(f"{prefix}{depth}")).run()
                fill_secs[depth] = None
                continue
            print(f"filling {depth:,}", flush=True)
            t0 = time.monotonic()
            with psycopg.connect(server.dsn, autocommit=True) as admin:
                admin.execute(f"CREATE DATABASE {prefix}{depth}_filling")
            build(server.dsn_for(f"{prefix}{depth}_filling"), depth, due=args.due)
            with psycopg.connect(server.dsn, autocommit=True) as admin:
                admin.execute(f"ALTER DATABASE {prefix}{depth}_filling RENAME TO {prefix}{depth}")
            fill_secs[depth] = round(time.monotonic() - t0, 1)
        if args.fill_only:
            return
        for depth in depths:
            conns[depth] = psycopg.connect(server.dsn_for(f"{prefix}{depth}"), autocommit=True)
            conns[depth].execute("SET track_functions = 'pl'")
            for _ in range(5):  # warm the session's plans and the index heads
                claim_once(conns[depth])
        admissions = {d: gate_calls(conns[d]) for d in depths}
        samples: dict[int, list[float]] = {d: [] for d in depths}
        claimed: dict[int, list[int]] = {d: [] for d in depths}
        buffers: dict[int, list[tuple[int, int]]] = {d: [] for d in depths}
        for r in range(args.rounds):
            if r % args.vacuum_every == 0:
                for depth in depths:
                    vacuum(conns[depth])
            shift = r % len(depths)
            for depth in depths[shift:] + depths[:shift]:
                ms, n = claim_once(conns[depth])
                samples[depth].append(ms)
                claimed[depth].append(n)
                if r % 10 == 5:  # untimed: one claim in ten counted in pages as well
                    buffers[depth].append(claim_buffers(conns[depth]))
        admissions = {d: gate_calls(conns[d]) - admissions[d] for d in depths}
        plans = {d: explain_claim(conns[d]) for d in depths} if args.explain else {}
    finally:
        for c in conns.values():
            c.close()
        server.stop()  # (with --data its data directory stays)
    base = statistics.median(samples[depths[0]])
    base_pages = statistics.median(b[0] for b in buffers[depths[0]]) if buffers[depths[0]] else 0
    rows = []
    for depth in depths:
        s = sorted(samples[depth])
        median = statistics.median(s)
        rows.append(
            {
                "pending": depth,
                "median_ms": round(median, 3),
                "p90_ms": round(s[int(len(s) * 0.9)], 3),
                "ratio_to_first": round(median / base, 3),
                "claimed_median": statistics.median(claimed[depth]),
                # The share of claims that went through the admission gates (_admit_candidates):
                # a claim whose candidates carry no gate takes the default path.
                "gated_share": round(admissions[depth] / (len(s) + len(buffers[depth])), 3),
                # Shared buffers a claim touches (median of one claim in ten) and of them read
                # from outside the pool: the claim's work, which the caches do not change.
                "buffers_median": statistics.median(b[0] for b in buffers[depth]) if buffers[depth] else None,
                "buffers_read_median": statistics.median(b[1] for b in buffers[depth])
                if buffers[depth]
                else None,
                "buffers_ratio_to_first": round(
                    statistics.median(b[0] for b in buffers[depth]) / base_pages, 3
                )
                if buffers[depth] and base_pages
                else None,
                "samples": len(s),
                "fill_s": fill_secs[depth],
            }
        )
    print(
        f"\n| claim (limit {BATCH}, 4 queues, every gate on) | median | p90 | tasks claimed | gated claims "
        f"| vs {depths[0]:,} | buffers (read) | buffers vs {depths[0]:,} |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        pages = (
            f"{row['buffers_median']:g} ({row['buffers_read_median']:g}) | {row['buffers_ratio_to_first']:.2f}x"
            if row["buffers_median"] is not None
            else "- | -"
        )
        print(
            f"| {row['pending']:,} pending | {row['median_ms']:.2f} ms | {row['p90_ms']:.2f} ms | "
            f"{row['claimed_median']:g} | {row['gated_share']:.0%} | {row['ratio_to_first']:.2f}x | {pages} |"
        )
    for depth, plan in plans.items():
        print(f"\n-- the statements of one claim at {depth:,} pending\n{plan}")
    result = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine(), "postgres": version},
        "commit": _commit(),
        # The nice level it ran at (os.nice(0) reads it), not the one the docs suggest.
        "command": f"nice -n {os.nice(0)} python bench/claim_gates.py --depths "
        + args.depths
        + f" --rounds {args.rounds}",
        "minutes": round((time.monotonic() - started) / 60, 1),
        "batch": BATCH,
        "due": args.due,
        "queues": QUEUES,
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
