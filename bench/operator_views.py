"""An operator's views against months of history: fill a big database, then time every read.

    nice -n 10 python bench/operator_views.py --data /tmp/opviews --fill [--runs 2000000]
    nice -n 10 python bench/operator_views.py --data /tmp/opviews --sql      # the SQL API's reads
    nice -n 10 python bench/operator_views.py --data /tmp/opviews --explain NAME
    nice -n 10 python bench/operator_views.py --data /tmp/opviews --sql --index-attr priority
    nice -n 10 python bench/operator_views.py --data /tmp/opviews --prune '67 days'   # destructive

One embedded PostgreSQL on a kept data directory (each run starts it again; ``--drop`` deletes
it). The fill is set-based (INSERT ... SELECT over generate_series, a quarter of a million runs
per statement), with the secondary indexes of the filled tables dropped and built again after:

- ``--runs`` executions (2M by default) created over the last 90 days in id order (the ids'
  clock bytes are their creation times, as ``_new_execution_id`` makes them), over 200 workflow
  names (skewed: the last few hold about 1% each) and 50 queues; 87.5% COMPLETED, 10% FAILED,
  0.5% each CANCELLED, TERMINATED and TIMED_OUT, 1% CONTINUED_AS_NEW; one run in a hundred
  RUNNING with a failing workflow task (its row's last_failure: the failing filter's runs), the
  last day's every third run RUNNING with a pending activity, one in 5,000 older runs RUNNING on
  a far timer; one run in fifty a child of the run before it;
- a third of the runs carry search attributes (tenant out of 5,000, region out of 4; one in
  ten a number too);
- 2 or 3 events per live run; an ended run 3, or 6 with an activity (one in three), and 0 to 4
  more activities (3 events each): about 19.8M events;
- a dead letter for every FAILED run (200,000); 100,000 audit rows; 50 schedules with 20
  firings each.

``--prune MAX_AGE`` (after ``--sql``, or alone) sweeps the runs older than it as `harvest retention
run-now` does, batch by batch, while another connection starts a workflow every 20 ms: the
starts' times say what the sweep's locks cost them. It deletes the runs: run it last.

Every row follows the schema's rules (the executions' and events' rules are checked by the fill
itself: it runs with ``session_replication_role = replica``, which skips the row triggers and
the foreign keys, so it writes only rows that would pass them; the tasks and dead letters go
through their insert triggers). ``VACUUM ANALYZE`` at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

CHUNK = 250_000
NAMES = [f"wf_{n:03d}" for n in range(200)]
QUEUE_OF = "CASE WHEN g.i % 50 = 0 THEN 'default' ELSE 'q' || (g.i % 50) END"

# One row per run, everything the inserts need, computed from i alone (so a child can name
# its parent, run i - 1, by id).
RUNS = """
SELECT g.i,
       {id_of_i} AS id,
       CASE WHEN g.i % 50 = 1 AND g.i > 1 THEN {id_of_prev} END AS parent_id,
       'wf_' || lpad(floor(power(((g.i * 7919) % 1000) / 1000.0, 2) * 200)::int::text, 3, '0') AS workflow_name,
       'order-' || g.i AS workflow_id,
       {queue} AS queue,
       at.at,
       CASE WHEN g.i % 100 = 7 THEN 'RUNNING'
            WHEN g.i > %(n)s - %(recent)s AND g.i % 3 = 0 THEN 'RUNNING'
            WHEN g.i % 5000 = 0 THEN 'RUNNING'
            WHEN (g.i * 31) % 1000 < 100 THEN 'FAILED'
            WHEN (g.i * 31) % 1000 < 105 THEN 'CANCELLED'
            WHEN (g.i * 31) % 1000 < 110 THEN 'TERMINATED'
            WHEN (g.i * 31) % 1000 < 115 THEN 'TIMED_OUT'
            WHEN (g.i * 31) % 1000 < 125 THEN 'CONTINUED_AS_NEW'
            ELSE 'COMPLETED' END AS status,
       g.i % 3 = 0 AND g.i % 100 <> 7 AS with_activity,
       g.i % 100 = 7 AS failing,
       CASE WHEN g.i % 3 = 1 THEN jsonb_strip_nulls(jsonb_build_object(
                'tenant', 't-' || (g.i % 5000), 'region', (ARRAY['eu', 'us', 'ap', 'sa'])[g.i % 4 + 1],
                'priority', CASE WHEN g.i % 10 = 1 THEN g.i % 5 END))
            ELSE '{}'::jsonb END AS search_attributes
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g (i)
CROSS JOIN LATERAL (
    SELECT %(now)s::timestamptz - make_interval(secs => 90 * 86400.0 * (%(n)s - g.i) / %(n)s) AS at
) AS at
"""
ID = (
    "encode('\\x0000'::bytea || substring(int8send(harvest._id_clock_bits("
    "floor(date_part('epoch', {at}) * 1000)::bigint)) FROM 3 FOR 6)"
    " || substring(decode(md5(({i})::text), 'hex') FROM 1 FOR 8), 'hex')::uuid"
)
RUNS = RUNS.replace("{id_of_i}", ID.format(at="at.at", i="g.i")).replace(
    "{id_of_prev}",
    ID.format(
        at="(%(now)s::timestamptz - make_interval(secs => 90 * 86400.0 * (%(n)s - (g.i - 1)) / %(n)s))",
        i="g.i - 1",
    ),
)
RUNS = RUNS.replace("{queue}", QUEUE_OF)

FILL = (
    """
WITH r AS MATERIALIZED ("""
    + RUNS
    + """),
x AS (
    SELECT r.*, jsonb_build_array(jsonb_build_object('order', r.i)) AS input,
           CASE WHEN r.status IN ('RUNNING', 'PAUSED') THEN NULL
                ELSE r.at + make_interval(secs => 1 + r.i % 600) END AS completed_at,
           CASE WHEN r.status = 'RUNNING' THEN (CASE WHEN r.with_activity THEN 3 ELSE 2 END)
                ELSE (CASE WHEN r.with_activity THEN 6 ELSE 3 END) + 3 * k.k END AS n_events,
           CASE WHEN r.with_activity THEN 5 ELSE 2 END AS base, k.k
    FROM r
    -- an ended run's further activities (none to four: five more events on average a run)
    CROSS JOIN LATERAL (SELECT CASE WHEN r.status = 'RUNNING' THEN 0 ELSE r.i % 5 END AS k) AS k
),
ex AS (
    INSERT INTO harvest.executions (
        id, workflow_name, workflow_id, status, queue, input, output, failure, search_attributes,
        parent_id, parent_seq, last_event_id, created_at, completed_at, history_bytes, decided_by,
        decided_through
    )
    SELECT x.id, x.workflow_name, x.workflow_id, x.status, x.queue, x.input,
           CASE WHEN x.status = 'COMPLETED' THEN '{"ok": true}'::jsonb END,
           CASE WHEN x.status = 'FAILED'
                THEN jsonb_build_object('error_type', 'ValueError', 'message', 'order ' || x.i || ' failed') END,
           x.search_attributes, x.parent_id, CASE WHEN x.parent_id IS NOT NULL THEN 1 END,
           x.n_events, x.at, x.completed_at, 180 * x.n_events, 'filler', x.n_events
    FROM x
    ORDER BY x.i
    RETURNING 1
),
ev AS (
    INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
    SELECT u.id, u.n, u.event_type, u.event_data, u.created_at FROM (
    SELECT x.i, x.id, e.n, e0.event_type, e0.event_data, x.at + make_interval(secs => e.n) AS created_at
    FROM x
    CROSS JOIN LATERAL (VALUES
        (1, 'WorkflowStarted', jsonb_build_object('workflow_name', x.workflow_name, 'workflow_id', x.workflow_id,
                                                  'input', x.input, 'task_queue', x.queue, 'parent_id', x.parent_id)),
        (2, 'WorkflowTaskCompleted', jsonb_build_object('through', 1, 'worker_id', 'filler')),
        (3, CASE WHEN x.with_activity THEN 'ActivityScheduled' END,
            jsonb_build_object('seq', 1, 'name', 'charge', 'input', x.input, 'queue', x.queue, 'options', '{}'::jsonb)),
        (4, CASE WHEN x.with_activity AND x.status <> 'RUNNING' THEN 'ActivityCompleted' END,
            jsonb_build_object('seq', 1, 'result', '{"charged": true}'::jsonb, 'attempt', 1,
                               'started_at', x.at + interval '3 seconds')),
        (5, CASE WHEN x.with_activity AND x.status <> 'RUNNING' THEN 'WorkflowTaskCompleted' END,
            jsonb_build_object('through', 4, 'worker_id', 'filler')),
        (6, CASE x.status WHEN 'COMPLETED' THEN 'WorkflowCompleted' WHEN 'FAILED' THEN 'WorkflowFailed'
                          WHEN 'CANCELLED' THEN 'WorkflowCancelled' WHEN 'TERMINATED' THEN 'WorkflowTerminated'
                          WHEN 'TIMED_OUT' THEN 'WorkflowTimedOut' WHEN 'CONTINUED_AS_NEW' THEN 'WorkflowContinuedAsNew'
                          END, '{}'::jsonb)
    ) AS e0 (n0, event_type, event_data)
    -- event ids are dense: the terminal event follows the ones before it
    CROSS JOIN LATERAL (SELECT CASE WHEN e0.n0 = 6 THEN x.n_events ELSE e0.n0 END AS n) AS e
    WHERE e0.event_type IS NOT NULL
    UNION ALL
    -- each further activity: scheduled, completed, and the workflow task that read its result,
    -- after the events above and before the terminal one
    SELECT x.i, x.id, x.base + 3 * (j.j - 1) + t.t,
           (ARRAY['ActivityScheduled', 'ActivityCompleted', 'WorkflowTaskCompleted'])[t.t],
           CASE t.t WHEN 1 THEN jsonb_build_object('seq', j.j + (x.base = 5)::int, 'name', 'ship', 'input', x.input, 'queue', x.queue,
                                                   'options', '{}'::jsonb)
                    WHEN 2 THEN jsonb_build_object('seq', j.j + (x.base = 5)::int, 'result', '{"shipped": true}'::jsonb, 'attempt', 1,
                                                   'started_at', x.at + make_interval(secs => x.base + 3 * j.j))
                    ELSE jsonb_build_object('through', x.base + 3 * (j.j - 1) + 2, 'worker_id', 'filler') END,
           x.at + make_interval(secs => x.base + 3 * (j.j - 1) + t.t)
    FROM x
    CROSS JOIN LATERAL generate_series(1, x.k) AS j (j)
    CROSS JOIN (VALUES (1), (2), (3)) AS t (t)
    ) AS u
    ORDER BY u.i, u.n
    RETURNING 1
)
SELECT (SELECT count(*) FROM ex), (SELECT count(*) FROM ev)
"""
)

# The running runs' pending work (through the tasks' insert trigger): an activity for a run
# that scheduled one, else a timer an hour on (the old runs' a year on).
TASKS = """
INSERT INTO harvest.tasks (
    execution_id, kind, queue, priority, due_at, scheduled_at, seq, activity_name, input, options,
    status, attempt, fencing_token, run_workflow_name, run_workflow_id
)
SELECT e.id, CASE WHEN e.last_event_id = 3 THEN 'activity' ELSE 'timer' END, e.queue, 0,
       CASE WHEN e.last_event_id = 3 THEN e.created_at
            WHEN e.created_at < %(now)s - interval '2 days' THEN %(now)s + interval '365 days'
            ELSE %(now)s + interval '1 hour' END,
       e.created_at, 1, CASE WHEN e.last_event_id = 3 THEN 'charge' END,
       CASE WHEN e.last_event_id = 3 THEN e.input END, '{}'::jsonb, 'pending', 0, 0,
       CASE WHEN e.last_event_id = 3 THEN e.workflow_name END, CASE WHEN e.last_event_id = 3 THEN e.workflow_id END
FROM harvest.executions AS e
WHERE e.status = 'RUNNING' AND substring(e.workflow_id FROM 7)::bigint % 100 <> 7
ORDER BY e.created_at
"""
# The failing runs (one in a hundred, RUNNING): a workflow task retrying after its decision
# failed, its last failure on its row as fail_workflow_task writes it.
FAILING = """
INSERT INTO harvest.tasks (
    execution_id, kind, queue, priority, due_at, scheduled_at, options, status, attempt, fencing_token,
    last_failure
)
SELECT e.id, 'workflow', e.queue, 0, %(now)s + interval '5 minutes', e.created_at, '{}'::jsonb, 'pending',
       7, 7, jsonb_build_object('error_type', 'KeyError', 'message', 'order missing',
                                'failing_since', e.created_at + interval '2 seconds')
FROM harvest.executions AS e
WHERE e.status = 'RUNNING' AND substring(e.workflow_id FROM 7)::bigint % 100 = 7
ORDER BY e.created_at
"""
DEAD_LETTERS = """
INSERT INTO harvest.dead_letters (
    execution_id, workflow_name, seq, activity_name, queue, input, options, attempts, failure,
    scheduled_at, failed_at, kind
)
SELECT e.id, e.workflow_name, 1, (ARRAY['charge', 'ship', 'notify'])[abs(hashtext(e.workflow_id)) % 3 + 1],
       e.queue, e.input, '{}'::jsonb, 3, e.failure, e.created_at, e.completed_at, 'activity'
FROM harvest.executions AS e
WHERE e.status = 'FAILED'
ORDER BY e.completed_at
"""
AUDIT = """
INSERT INTO harvest.audit_log (at, actor, operation, target, details, source)
SELECT %(now)s::timestamptz - make_interval(secs => 90 * 86400.0 * (100000 - g.i) / 100000),
       'operator-' || (g.i % 7), (ARRAY['workflow.cancel', 'workflow.terminate', 'dead_letter.replay',
                                        'schedule.pause', 'retention.run'])[g.i % 5 + 1],
       'order-' || g.i, '{}'::jsonb, 'cli'
FROM generate_series(1, 100000) AS g (i)
"""
# The filled tables' indexes that no constraint owns, dropped before the fill and built after.
DEFERRABLE_INDEXES = """
SELECT i.relname, pg_get_indexdef(i.oid)
FROM pg_index AS x
JOIN pg_class AS i ON i.oid = x.indexrelid
JOIN pg_class AS t ON t.oid = x.indrelid
WHERE t.relnamespace = 'harvest'::regnamespace AND t.relname IN ('executions', 'events')
  AND NOT EXISTS (SELECT 1 FROM pg_constraint AS c WHERE c.conindid = x.indexrelid)
ORDER BY i.relname
"""


def sql(statement: str) -> str:
    """A statement with psycopg's placeholders: the SQL's own % doubled."""
    return statement.replace(" % ", " %% ")


def server(data: Path, fill: bool = False) -> EmbeddedPostgres:
    settings = {
        "shared_buffers": "1GB",
        "max_wal_size": "8GB",
        "checkpoint_timeout": "30min",
        "work_mem": "4MB",
    }
    if fill:
        settings.update({"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"})
    pg = EmbeddedPostgres(base_dir=data, settings=settings)
    pg.start()
    return pg


def build(dsn: str, runs: int, say: Any = lambda line: print(line, flush=True)) -> None:
    Migrator(dsn).run()
    with psycopg.connect(dsn, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        started = time.monotonic()
        indexes = conn.execute(DEFERRABLE_INDEXES).fetchall()
        for name, _definition in indexes:
            conn.execute(f"DROP INDEX harvest.{name}")
        conn.execute("SET session_replication_role = replica")
        recent = runs // 90  # about the last day's runs
        for lo in range(1, runs + 1, CHUNK):
            hi = min(runs, lo + CHUNK - 1)
            params = {"lo": lo, "hi": hi, "n": runs, "now": now, "recent": recent}
            made = conn.execute(sql(FILL), params).fetchone()
            say(f"  runs {lo:,}..{hi:,}: {made} in {time.monotonic() - started:,.0f} s")
        conn.execute("SET session_replication_role = DEFAULT")
        conn.execute("SET maintenance_work_mem = '1GB'")
        for name, definition in indexes:
            t0 = time.monotonic()
            conn.execute(definition)
            say(f"  index {name}: {time.monotonic() - t0:,.1f} s")
        conn.execute(sql(TASKS), {"now": now})
        conn.execute(sql(FAILING), {"now": now})
        conn.execute(DEAD_LETTERS)
        conn.execute(sql(AUDIT), {"now": now})
        for s in range(50):
            conn.execute(
                "SELECT harvest.create_schedule(%s, %s, %s, p_queue => 'default')",
                [f"nightly-{s}", NAMES[s % 20], "0 3 * * *"],
            )
        say(f"  filled in {time.monotonic() - started:,.0f} s; vacuum analyze")
        conn.execute("VACUUM ANALYZE")
        say(f"  done in {time.monotonic() - started:,.0f} s")


# What an operator's views read, by name: each the statement its route, page or command runs
# (the HTTP API's and the dashboard's reads and the CLI's are the same SQL API calls). {mid}
# is a cursor half way down the list (a deep page costs what any page after a cursor costs).
LIST = "SELECT * FROM harvest.list_executions({args})"
VIEWS: list[tuple[str, str]] = [
    ("list: newest 50", LIST.format(args="p_page_size => 50")),
    ("list: oldest 50 (asc)", LIST.format(args="p_page_size => 50, p_order => 'asc'")),
    ("list: deep page (cursor)", LIST.format(args="p_page_size => 50, p_cursor => %(mid)s")),
    ("list: status RUNNING", LIST.format(args="p_status => 'RUNNING'")),
    ("list: status RUNNING, deep", LIST.format(args="p_status => 'RUNNING', p_cursor => %(mid)s")),
    ("list: status FAILED", LIST.format(args="p_status => 'FAILED'")),
    ("list: status FAILED, deep", LIST.format(args="p_status => 'FAILED', p_cursor => %(mid)s")),
    ("list: status PAUSED (none)", LIST.format(args="p_status => 'PAUSED'")),
    ("list: status FAILED,TIMED_OUT", LIST.format(args="p_status => 'FAILED,TIMED_OUT'")),
    ("list: workflow_name (0.5%)", LIST.format(args="p_workflow_name => 'wf_100'")),
    (
        "list: workflow_name (0.5%), deep",
        LIST.format(args="p_workflow_name => 'wf_100', p_cursor => %(mid)s"),
    ),
    ("list: workflow_name + FAILED", LIST.format(args="p_workflow_name => 'wf_199', p_status => 'FAILED'")),
    ("list: workflow_name + RUNNING", LIST.format(args="p_workflow_name => 'wf_199', p_status => 'RUNNING'")),
    (
        "list: name + FAILED, asc",
        LIST.format(args="p_workflow_name => 'wf_199', p_status => 'FAILED', p_order => 'asc'"),
    ),
    (
        "list: one day, 30 days ago",
        LIST.format(
            args="p_created_after => now() - interval '31 days', p_created_before => now() - interval '30 days'"
        ),
    ),
    ("list: attr tenant=t-42", LIST.format(args="p_search_attributes => ARRAY['tenant=t-42']")),
    ("list: attr region=eu", LIST.format(args="p_search_attributes => ARRAY['region=eu']")),
    (
        "list: attr region=eu, deep",
        LIST.format(args="p_search_attributes => ARRAY['region=eu'], p_cursor => %(mid)s"),
    ),
    ("list: attr priority>=3", LIST.format(args="p_search_attributes => ARRAY['priority>=3']")),
    ("list: attr priority>=1 (all pass)", LIST.format(args="p_search_attributes => ARRAY['priority>=1']")),
    ("list: filter priority > 2", LIST.format(args="p_filter => 'priority > 2'")),
    ("list: attr tenant=nobody", LIST.format(args="p_search_attributes => ARRAY['tenant=nobody']")),
    ("list: filter tenant OR tenant", LIST.format(args="p_filter => 'tenant = t-42 OR tenant = t-43'")),
    (
        "list: filter region IN + FAILED",
        LIST.format(args="p_filter => 'region IN (eu, us) AND status = FAILED'"),
    ),
    (
        "list: attr tenant + FAILED",
        LIST.format(args="p_search_attributes => ARRAY['tenant=t-41'], p_status => 'FAILED'"),
    ),
    ("count: by status, exact", "SELECT * FROM harvest.count_executions('status')"),
    (
        "count: dashboard chips (p_limit 10000)",
        "SELECT * FROM harvest.count_executions('status', p_limit => 10000)",
    ),
    (
        "count: chips, attr region=eu",
        (
            "SELECT * FROM harvest.count_executions('status', "
            "p_search_attributes => ARRAY['region=eu'], p_limit => 10000)"
        ),
    ),
    (
        "count: chips, workflow_name",
        "SELECT * FROM harvest.count_executions('status', p_workflow_name => 'wf_100', p_limit => 10000)",
    ),
    ("count: by workflow_name", "SELECT * FROM harvest.count_executions('workflow_name')"),
    ("count: all", "SELECT * FROM harvest.count_executions('all')"),
    (
        "count: by status, workflow_name",
        "SELECT * FROM harvest.count_executions('status', p_workflow_name => 'wf_100')",
    ),
    (
        "count: by status, attr region=eu",
        "SELECT * FROM harvest.count_executions('status', p_search_attributes => ARRAY['region=eu'])",
    ),
    (
        "count: by status, attr priority>=3",
        "SELECT * FROM harvest.count_executions('status', p_search_attributes => ARRAY['priority>=3'])",
    ),
    (
        "count: by status, filter priority > 2",
        "SELECT * FROM harvest.count_executions('status', p_filter => 'priority > 2')",
    ),
    (
        "count: by status, attr tenant",
        "SELECT * FROM harvest.count_executions('status', p_search_attributes => ARRAY['tenant=t-42'])",
    ),
    (
        "count: by status, one day",
        "SELECT * FROM harvest.count_executions('status', p_created_after => now() - interval '1 day')",
    ),
    # The faces added since stop 65 (the dashboard's runs page is a list and its bounded status
    # chips with the same filters; the CLI's list/count and the Python client's list are the
    # same calls).
    ("list: failing (pill)", LIST.format(args="p_failing => true")),
    ("list: failing, deep", LIST.format(args="p_failing => true, p_cursor => %(mid)s")),
    ("list: not failing", LIST.format(args="p_failing => false")),
    ("list: failing + RUNNING", LIST.format(args="p_failing => true, p_status => 'RUNNING'")),
    ("list: failing + name", LIST.format(args="p_failing => true, p_workflow_name => 'wf_199'")),
    ("list: workflow_id", LIST.format(args="p_workflow_id => 'order-1000007'")),
    (
        "list: workflow_id + FAILED",
        LIST.format(args="p_workflow_id => 'order-1000007', p_status => 'FAILED'"),
    ),
    ("list: workflow_id (none)", LIST.format(args="p_workflow_id => 'order-nobody'")),
    (
        "list: last 7 days + FAILED",
        LIST.format(args="p_created_after => now() - interval '7 days', p_status => 'FAILED'"),
    ),
    (
        "list: 30..31 days ago + name",
        LIST.format(
            args="p_created_after => now() - interval '31 days', p_created_before => now() - interval '30 days',"
            " p_workflow_name => 'wf_199'"
        ),
    ),
    (
        "list: queue-heavy name + FAILED, 200",
        LIST.format(args="p_workflow_name => 'wf_199', p_status => 'FAILED', p_page_size => 200"),
    ),
    ("list: client page 1000", LIST.format(args="p_page_size => 1000")),
    (
        "list: export page by name (1000)",
        LIST.format(args="p_workflow_name => 'wf_100', p_page_size => 1000"),
    ),
    ("list: attr priority 2..3 (range)", LIST.format(args="p_filter => 'priority >= 2 AND priority <= 3'")),
    (
        "list: attr region=eu + FAILED + 7d",
        LIST.format(
            args="p_search_attributes => ARRAY['region=eu'], p_status => 'FAILED', p_created_after => now() - interval '7 days'"
        ),
    ),
    (
        "count: chips, failing",
        "SELECT * FROM harvest.count_executions('status', p_failing => true, p_limit => 10000)",
    ),
    (
        "count: chips, not failing",
        "SELECT * FROM harvest.count_executions('status', p_failing => false, p_limit => 10000)",
    ),
    (
        "count: chips, workflow_id",
        "SELECT * FROM harvest.count_executions('status', p_workflow_id => 'order-1000007', p_limit => 10000)",
    ),
    (
        "count: chips, status FAILED",
        "SELECT * FROM harvest.count_executions('status', p_status => 'FAILED', p_limit => 10000)",
    ),
    (
        "count: chips, last 7 days",
        "SELECT * FROM harvest.count_executions('status', p_created_after => now() - interval '7 days', p_limit => 10000)",
    ),
    (
        "count: chips, attr tenant",
        "SELECT * FROM harvest.count_executions('status', p_search_attributes => ARRAY['tenant=t-42'], p_limit => 10000)",
    ),
    (
        "count: chips, attr priority>=3",
        "SELECT * FROM harvest.count_executions('status', p_filter => 'priority >= 3', p_limit => 10000)",
    ),
    ("count: CLI exact, failing", "SELECT * FROM harvest.count_executions('status', p_failing => true)"),
    (
        "count: CLI exact, workflow_id",
        "SELECT * FROM harvest.count_executions('all', p_workflow_id => 'order-1000007')",
    ),
    (
        "count: CLI exact, FAILED by name",
        "SELECT * FROM harvest.count_executions('workflow_name', p_status => 'FAILED')",
    ),
    (
        "batch: cancel preview, name + RUNNING",
        "SELECT harvest.cancel_workflows(p_status => 'RUNNING', p_workflow_name => 'wf_199', p_dry_run => true)",
    ),
    (
        "batch: cancel preview, failing",
        "SELECT harvest.cancel_workflows(p_failing => true, p_dry_run => true)",
    ),
    (
        "batch: cancel preview, workflow_id",
        "SELECT harvest.cancel_workflows(p_workflow_id => 'order-1000007', p_dry_run => true)",
    ),
    (
        "batch: terminate preview, attr + RUNNING",
        "SELECT harvest.terminate_workflows(p_status => 'RUNNING', p_search_attributes => ARRAY['region=eu'], p_dry_run => true)",
    ),
    (
        "versions: history-before, no marker",
        "SELECT * FROM harvest.count_versions('some-change', -1, 'active', NULL, now() - interval '1 day')",
    ),
    (
        "versions: history-before, all versions",
        "SELECT * FROM harvest.count_versions('some-change', NULL, 'active', NULL, now() - interval '1 day')",
    ),
    (
        "versions: history-before, one name",
        "SELECT * FROM harvest.count_versions('some-change', -1, 'active', 'wf_199', now() - interval '1 day')",
    ),
    ("versions: terminal", "SELECT * FROM harvest.count_versions('some-change', NULL, 'terminal')"),
    ("dlq: count by activity", "SELECT * FROM harvest.count_dead_letters('activity')"),
    ("dlq: count by workflow", "SELECT * FROM harvest.count_dead_letters('workflow')"),
    ("dlq: count by error_type", "SELECT * FROM harvest.count_dead_letters('error_type')"),
    ("dlq: page by id cursor", "SELECT * FROM harvest.list_dead_letters(100, NULL, NULL, %(dlq_mid)s)"),
    (
        "dlq: page by activity, deep",
        "SELECT * FROM harvest.list_dead_letters(100, 'ship', NULL, %(dlq_mid)s)",
    ),
    ("schedules: page 2", "SELECT * FROM harvest.list_schedules(NULL, 'nightly-25', 20, NULL)"),
    ("schedules: paused", "SELECT * FROM harvest.list_schedules(NULL, NULL, 50, true)"),
    ("schedules: misses", "SELECT * FROM harvest.count_schedule_misses(now() - interval '7 days')"),
    ("starts: held back (list_pending_starts)", "SELECT * FROM harvest.list_pending_starts()"),
    ("run: get_execution", "SELECT * FROM harvest.get_execution(%(parent)s)"),
    ("run: history page", "SELECT * FROM harvest.get_history_page(%(parent)s)"),
    ("run: stack", "SELECT harvest.get_execution_stack(%(running)s, 100)"),
    ("run: children page", "SELECT * FROM harvest.list_children(%(parent)s, NULL, 1, NULL, NULL, 50)"),
    ("run: by workflow_id", "SELECT * FROM harvest.get_execution_by_workflow_id('order-1000000')"),
    ("dlq: list 100", "SELECT * FROM harvest.list_dead_letters(100)"),
    ("dlq: list by activity", "SELECT * FROM harvest.list_dead_letters(100, 'ship')"),
    ("dlq: list by workflow", "SELECT * FROM harvest.list_dead_letters(100, NULL, 'wf_199')"),
    (
        "dlq: deep page",
        "SELECT * FROM harvest.list_dead_letters(100, NULL, NULL, NULL, now() - interval '45 days')",
    ),
    ("dlq: count all (page load)", "SELECT * FROM harvest.count_dead_letters('all')"),
    ("schedules: list", "SELECT * FROM harvest.list_schedules(NULL, NULL, 50, NULL)"),
    ("schedules: get", "SELECT * FROM harvest.get_schedule('nightly-1')"),
    ("workers: list", "SELECT * FROM harvest.list_workers(NULL, NULL, NULL, 50)"),
    ("audit: list 100", "SELECT * FROM harvest.list_audit_log(100)"),
    ("health: shard health", "SELECT harvest.get_shard_health(NULL)"),
    ("metrics: sampler", "SELECT harvest.get_metric_samples(50)"),
    (
        "metrics: forced closes",
        "SELECT * FROM harvest.list_forced_closes(now() - interval '1 hour', NULL, now(), 1000)",
    ),
    ("usage: 1h", "SELECT * FROM harvest.count_usage(now() - interval '1 hour', now())"),
    (
        "usage: 24h (dashboard default)",
        "SELECT * FROM harvest.count_usage(now() - interval '24 hours', now())",
    ),
    ("usage: 7d", "SELECT * FROM harvest.count_usage(now() - interval '7 days', now())"),
    (
        "usage: 24h by tenant",
        "SELECT * FROM harvest.count_usage(now() - interval '24 hours', now(), 'search_attr:tenant')",
    ),
    (
        "usage: a day 60 days ago",
        "SELECT * FROM harvest.count_usage(now() - interval '61 days', now() - interval '60 days')",
    ),
    ("versions: count_versions", "SELECT * FROM harvest.count_versions('some-change')"),
    ("retention: status", "SELECT harvest.get_retention_status()"),
]
# Writes, each timed in a transaction rolled back.
WRITES: list[tuple[str, str]] = [
    ("retention: janitor batch (500, 60 days)", "SELECT harvest.run_retention(interval '60 days', 500)"),
    (
        "schedules: backfill 30 slots",
        (
            "SELECT harvest.backfill_schedule('nightly-1', ARRAY(SELECT date_trunc('day', now()) + interval '3 hours'"
            " - make_interval(days => g)"
            " FROM generate_series(1, 30) AS g (g)))"
        ),
    ),
    ("workers: lost-worker sweep (100)", "SELECT * FROM harvest.expire_lost_workers(100)"),
    (
        "batch: cancel 50 by name + RUNNING",
        "SELECT harvest.cancel_workflows(p_status => 'RUNNING', p_workflow_name => 'wf_199', p_limit => 50)",
    ),
]


def setup(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    mid = conn.execute(
        "SELECT harvest._encode_cursor(created_at, id) FROM harvest.executions"
        " ORDER BY created_at DESC, id DESC OFFSET (SELECT count(*) / 2 FROM harvest.executions) LIMIT 1"
    ).fetchone()[0]  # type: ignore[index]
    parent = conn.execute(
        "SELECT parent_id FROM harvest.executions WHERE parent_id IS NOT NULL ORDER BY created_at DESC LIMIT 1"
    ).fetchone()[0]  # type: ignore[index]
    running = conn.execute(
        "SELECT id FROM harvest.executions WHERE status = 'RUNNING' ORDER BY created_at DESC LIMIT 1"
    ).fetchone()[0]  # type: ignore[index]
    dlq_mid = conn.execute(
        "SELECT id FROM harvest.dead_letters ORDER BY id DESC OFFSET (SELECT count(*) / 2 FROM harvest.dead_letters)"
        " LIMIT 1"
    ).fetchone()[0]  # type: ignore[index]
    return {"mid": mid, "parent": parent, "running": running, "dlq_mid": dlq_mid}


def timed(conn: psycopg.Connection[Any], statement: str, params: Any = None, repeat: int = 5) -> float:
    """The median of repeat runs (after one warm-up), in ms."""
    conn.execute(statement, params).fetchall()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        conn.execute(statement, params).fetchall()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def explain(conn: psycopg.Connection[Any], notices: list[str], statement: str, params: Any) -> str:
    """The plans of the statements inside the functions a statement calls, as auto_explain
    reports them to the client (``notices``: the connection's notice handler's list), in a
    transaction rolled back."""
    notices.clear()
    conn.execute("LOAD 'auto_explain'")
    for setting in (
        "log_min_duration = 0",
        "log_analyze = on",
        "log_buffers = on",
        "log_nested_statements = on",
        "log_level = notice",
    ):
        conn.execute(f"SET auto_explain.{setting}")
    conn.execute("BEGIN")
    conn.execute(statement, params).fetchall()
    conn.execute("ROLLBACK")
    conn.execute("SET auto_explain.log_min_duration = -1")
    return "\n".join(notices)


def index_attribute(conn: psycopg.Connection[Any], key: str, kind: str) -> None:
    """An operator's index on a search attribute's typed value, with statistics on it, as
    `harvest search-attr index` makes it (docs/operations.md, "Indexing a search attribute for
    range tests"), if it is not there."""
    from harvest.db.search_indexes import ensure_index

    ensure_index(conn, key, kind, print)


def measure(dsn: str, args: argparse.Namespace) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for key in args.index_attr:
            index_attribute(conn, key, "number")
        params = setup(conn)
        results = {}
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        for name, statement in VIEWS + WRITES:
            wanted = args.explain or args.only
            if wanted and wanted not in name:
                continue
            write = (name, statement) in WRITES
            if args.explain:
                print(f"== {name}\n" + explain(conn, notices, statement, params), flush=True)
                continue
            if write:
                samples = []
                for _ in range(3):
                    conn.execute("BEGIN")
                    t0 = time.perf_counter()
                    conn.execute(statement, params).fetchall()
                    samples.append((time.perf_counter() - t0) * 1000)
                    conn.execute("ROLLBACK")
                ms = statistics.median(samples)
            else:
                ms = timed(conn, statement, params)
            rows = len(conn.execute(statement, params).fetchall()) if not write else 1
            results[name] = {"ms": round(ms, 2), "rows": rows}
            print(f"{name:45s} {ms:10.2f} ms {rows:6d} rows", flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


def prune(dsn: str, max_age: str, batch_size: int) -> dict[str, Any]:
    """The retention sweep of the runs older than ``max_age`` as `harvest retention run-now`
    makes it (one transaction a batch of ``batch_size``, until none remain), while another
    connection starts a workflow every 20 ms: each start's time says whether a batch's locks
    hold starts up. Destructive (the runs are gone): run it last."""
    import threading

    stop = threading.Event()
    starts: list[float] = []

    def starter() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '30s'")
            n = 0
            while not stop.is_set():
                n += 1
                t0 = time.perf_counter()
                conn.execute(
                    "SELECT harvest.start_workflow(%s, '[]'::jsonb, %s, 'q1')",
                    [NAMES[n % 200], f"prune-start-{n}"],
                )
                starts.append((time.perf_counter() - t0) * 1000)
                time.sleep(0.02)

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT harvest.set_retention(%s::interval, %s)", [max_age, batch_size])
        t0 = time.perf_counter()  # (`harvest retention status`, and run-now's progress bar)
        status = conn.execute("SELECT harvest.get_retention_status() -> 'eligible'").fetchone()[0]  # type: ignore[index]
        status_ms = (time.perf_counter() - t0) * 1000
        thread = threading.Thread(target=starter, daemon=True)
        thread.start()
        time.sleep(2)
        baseline = list(starts)
        batches: list[float] = []
        deleted = 0
        began = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            done = conn.execute("SELECT harvest.run_retention()").fetchone()[0]  # type: ignore[index]
            batches.append((time.perf_counter() - t0) * 1000)
            deleted += done["deleted"]
            if not done["remaining"] or not done["deleted"]:
                break
        total = time.perf_counter() - began
        during = starts[len(baseline) :]
        stop.set()
        thread.join()

    def pct(xs: list[float], q: float) -> float:
        return round(sorted(xs)[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else 0.0

    out = {
        "eligible": status,
        "status_ms": round(status_ms, 1),
        "deleted": deleted,
        "seconds": round(total, 1),
        "batches": len(batches),
        "batch_ms_p50": pct(batches, 0.5),
        "batch_ms_max": pct(batches, 1.0),
        "start_ms_before_p50": pct(baseline, 0.5),
        "starts_during": len(during),
        "start_ms_p50": pct(during, 0.5),
        "start_ms_p99": pct(during, 0.99),
        "start_ms_max": pct(during, 1.0),
    }
    print(json.dumps(out), flush=True)
    return out


def arguments(doc: str, runs: int, what: str) -> argparse.ArgumentParser:
    """The options of a bench over a kept, filled server (this one's and background_loops')."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the server's kept data directory")
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--fill", action="store_true")
    parser.add_argument("--serve", action="store_true", help="start the server, print its DSN, wait")
    parser.add_argument("--sql", action="store_true", help=f"time every one of the {what}")
    parser.add_argument("--only", default=None, help=f"only the {what} whose name holds this")
    parser.add_argument(
        "--explain", default=None, help=f"EXPLAIN (ANALYZE, BUFFERS) the {what} whose name holds this"
    )
    parser.add_argument("--out", default=None, help="write the timings here as JSON")
    return parser


def run(args: argparse.Namespace, name: str, fill: Any, measure: Any) -> None:
    """Start the kept server of ``--data``; ``--fill`` creates database ``name`` and ``fill(dsn)``s
    it; ``--sql``/``--explain`` migrate it with this checkout and ``measure(dsn, args)``;
    ``--serve`` prints its DSN and waits."""
    pg = server(Path(args.data), fill=args.fill)
    dsn = pg.dsn_for(name)
    try:
        if args.fill:
            with psycopg.connect(pg.dsn, autocommit=True) as admin:
                admin.execute(f"CREATE DATABASE {name}")
            fill(dsn)
        if args.sql or args.explain or getattr(args, "prune", None):
            Migrator(dsn).run()  # this checkout's migrations and functions
            measure(dsn, args)
        if args.serve:
            print(dsn, flush=True)
            while True:
                time.sleep(3600)
    finally:
        pg.stop()


def main() -> None:
    parser = arguments(__doc__, 2_000_000, "views")
    parser.add_argument(
        "--index-attr",
        action="append",
        default=[],
        metavar="KEY",
        help="first index this number search attribute as an operator may (kept: DROP INDEX to undo)",
    )
    parser.add_argument(
        "--prune",
        default=None,
        metavar="MAX_AGE",
        help="then sweep the runs older than this (e.g. '67 days') with starts alongside (destructive)",
    )
    parser.add_argument("--prune-batch", type=int, default=500, help="the sweep's batch size")
    args = parser.parse_args()

    def views(dsn: str, args: argparse.Namespace) -> None:
        if args.sql or args.explain:
            measure(dsn, args)
        if args.prune:
            prune(dsn, args.prune, args.prune_batch)

    run(args, "views", lambda dsn: build(dsn, args.runs), views)


if __name__ == "__main__":
    main()
