"""Nothing a session can set changes what Harvest stores or answers (docs/security.md,
"Session settings").

The Postgres roles are the permission model, so a setting any login may SET (a number's or a
time's output format, the time zone, string-literal parsing, the planner's switches, a search
path with look-alike functions, operators and temp tables) must not change what an entry point
writes for everyone else, nor what it answers. ``scenario()`` drives one representative run of
the public SQL API (workers, flow policies and overrides, pending starts, retention, schedules
and backfills, runs with activities, retries, heartbeats, timers, signals, updates, timeouts,
LLM usage, legal holds, tokens, owner mode, drains, DAGs, metrics, usage, event streams, the
workflow list and its filters) on the engine's test clock, once in a session with the server's
defaults and once in a fresh session that SET every value of one of the ``HOSTILE_SETTINGS*``
first (the settings act the same whatever the login's role, so the session is the owner's:
it can reach every entry point). Then every harvest table and every call's answer must be the
same, up to the random ids and the few wall-clock columns (``UNCOMPARED``). Answers are read
in binary, which no output setting touches, so a difference is in the values themselves; a
time inside JSON compares as its instant (its offset follows the session's zone, as any
timestamptz the server prints does).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from harvest.db.pools import open_async_pool, open_pool
from harvest.db.sqlapi import AsyncSqlApi, SqlApi, claim_tasks_open

CLOCK = "2030-01-02 03:04:05.5+00"

# Settings any login may SET (PGC_USERSET), each at a value that changes a conversion, a plan,
# or a name's lookup. (lc_messages, session_replication_role and the like are superuser-only.)
HOSTILE_SETTINGS = {
    "extra_float_digits": "-15",
    "DateStyle": "SQL, DMY",
    "IntervalStyle": "sql_standard",
    "TimeZone": "Pacific/Apia",
    "bytea_output": "escape",
    "lc_numeric": "C",
    "lc_monetary": "C",
    "lc_time": "C",
    "default_transaction_isolation": "serializable",
    "standard_conforming_strings": "off",
    "transform_null_equals": "on",
    "array_nulls": "off",
    "timezone_abbreviations": "India",
    "default_text_search_config": "pg_catalog.simple",
    "enable_seqscan": "off",
    "enable_indexscan": "off",
    "enable_bitmapscan": "off",
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
    "enable_sort": "off",
    "enable_hashagg": "off",
    "enable_material": "off",
    "enable_partition_pruning": "off",
    "constraint_exclusion": "off",
    "work_mem": "64kB",
    "jit": "on",
    "jit_above_cost": "0",
    "plan_cache_mode": "force_generic_plan",
    "gin_fuzzy_search_limit": "1",
    # (Plans in parallel and joins in the written order: debug_parallel_query, 16 and later,
    # found nothing either.)
    "parallel_setup_cost": "0",
    "parallel_tuple_cost": "0",
    "min_parallel_table_scan_size": "0",
    "join_collapse_limit": "1",
    "from_collapse_limit": "1",
    "geqo_threshold": "2",
    "search_path": "evil, pg_catalog, public, pg_temp",
}
# Second values for the settings whose other spellings format differently.
HOSTILE_SETTINGS_2 = {
    **HOSTILE_SETTINGS,
    "extra_float_digits": "3",
    "DateStyle": "Postgres, MDY",
    "IntervalStyle": "iso_8601",
    "TimeZone": "<+0530>-05:30",
    "enable_seqscan": "on",
    "enable_indexscan": "on",
    "enable_bitmapscan": "on",
    "enable_nestloop": "off",
    "plan_cache_mode": "force_custom_plan",
    "search_path": "pg_temp, evil, public",
}

# Third: a zone whose abbreviation the default abbreviation set reads as another zone's
# (Asia/Kolkata prints IST, which the Default set reads as Israel's +02), in a DateStyle that
# prints abbreviations.
HOSTILE_SETTINGS_3 = {
    **HOSTILE_SETTINGS,
    "extra_float_digits": "0",
    "DateStyle": "Postgres, DMY",
    "IntervalStyle": "postgres_verbose",
    "TimeZone": "Asia/Kolkata",
    "timezone_abbreviations": "Default",
    "search_path": "evil, pg_catalog",
}

# Look-alikes a low-privilege login can make in a schema it owns (and in pg_temp): a clock
# frozen in 1999, an equality that is always true, arithmetic that lies. An entry point with
# the pinned search_path never sees them.
LOOK_ALIKES = """
CREATE SCHEMA IF NOT EXISTS evil;
CREATE OR REPLACE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql
    AS $$ SELECT '1999-01-01'::timestamptz $$;
CREATE OR REPLACE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql
    AS $$ SELECT '1999-01-01'::timestamptz $$;
CREATE OR REPLACE FUNCTION evil.gen_random_uuid() RETURNS uuid LANGUAGE sql
    AS $$ SELECT '00000000-0000-0000-0000-000000000000'::uuid $$;
CREATE OR REPLACE FUNCTION evil.coalesce_text(text, text) RETURNS text LANGUAGE sql AS $$ SELECT 'evil' $$;
CREATE OR REPLACE FUNCTION evil.always(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
CREATE OR REPLACE FUNCTION evil.always_j(jsonb, jsonb) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
CREATE OR REPLACE FUNCTION evil.plus(integer, integer) RETURNS integer LANGUAGE sql AS $$ SELECT 42 $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always);
CREATE OPERATOR evil.= (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = evil.always_j);
CREATE OPERATOR evil.+ (LEFTARG = integer, RIGHTARG = integer, FUNCTION = evil.plus);
CREATE OR REPLACE FUNCTION pg_temp.now() RETURNS timestamptz LANGUAGE sql
    AS $$ SELECT '1999-01-01'::timestamptz $$;
CREATE TEMP TABLE IF NOT EXISTS executions (id uuid);
CREATE TEMP TABLE IF NOT EXISTS tasks (id bigint);
"""

DAG = {
    "dag_name": "nightly",
    "queue": "dq",
    "schedule": None,
    "max_active_runs": 2,
    "tasks": [{"id": "a", "upstream": []}, {"id": "b", "upstream": ["a"]}],
}


def _one(conn: psycopg.Connection, sql: str, params: Any = None) -> list[tuple]:
    with conn.cursor(binary=True) as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description is not None else []


def scenario(conn: psycopg.Connection) -> list[tuple[str, Any]]:
    """Drive the public SQL API through one of everything that stores a number, a time, an
    interval or a converted text; answers in call order, read in binary."""
    answers: list[tuple[str, Any]] = []

    def call(label: str, sql: str, params: Any = None) -> list[tuple]:
        try:
            rows = _one(conn, sql, params)
        except psycopg.Error as exc:
            rows = [("error", exc.sqlstate, str(exc.diag.message_primary))]
        answers.append((label, rows))
        return rows

    conn.execute(f"SET harvest.fake_now = '{CLOCK}'")
    call(
        "register_worker",
        "SELECT harvest.register_worker('w1', ARRAY['default', 'aq', 'tq'], 'host', 1, 2.5, %s)",
        (Jsonb({"weight": 1.5, "at": "2030-01-02T03:04:05Z"}),),
    )
    call("heartbeat_worker", "SELECT harvest.heartbeat_worker('w1')")
    call(
        "declare_flow_policies",
        "SELECT harvest.declare_flow_policies(%s)",
        (
            Jsonb(
                {
                    "workflows": {
                        "tw": {"throttle": {"rps": 0.25, "burst": 1.5}},
                        "cw": {"concurrency": {"limit": 1, "key": "input.0"}},
                        "qw": {"quota": {"key": "input.0", "limit": 2, "per_secs": 90.5}},
                    },
                    "activities": {"act": {"rate_limit": {"rps": 2.5, "burst": 3.5}}},
                }
            ),
        ),
    )
    call("set_rate_limit_override", "SELECT * FROM harvest.set_rate_limit_override('act', 1.25, 2.5, 90.5)")
    call("get_rate_limit", "SELECT * FROM harvest.get_rate_limit('act')")
    call(
        "set_start_throttle_override",
        "SELECT * FROM harvest.set_start_throttle_override('tw', 0.75, 1.5, 60.25, 'op')",
    )
    call("get_start_throttle", "SELECT * FROM harvest.get_start_throttle('tw')")
    for n in range(3):
        call(
            f"throttled start {n}",
            "SELECT execution_id IS NOT NULL FROM harvest.start_workflow('tw', %s)",
            (Jsonb([n]),),
        )
    call("list_pending_starts", "SELECT count(*) FROM harvest.list_pending_starts()")
    call("set_retention", "SELECT harvest.set_retention('30 days 12:30:00.5', 250, 'op')")
    call("set_worker_retention", "SELECT harvest.set_worker_retention('1 day 02:03:04', 'op')")
    call("get_retention_status", "SELECT harvest.get_retention_status()")
    call("run_retention", "SELECT harvest.run_retention(p_operator_id => 'op')")
    call("prune_workers", "SELECT harvest.prune_workers('-1 days +03:00:00', 'op')")
    call("prune_workers 2", "SELECT harvest.prune_workers(p_operator_id => 'op')")
    call(
        "create_schedule interval",
        "SELECT harvest.create_schedule('s1', 'wf', p_interval_secs => 90, p_jitter_secs => 2.5)",
    )
    call(
        "create_schedule cron",
        "SELECT harvest.create_schedule('s2', 'wf', p_cron => '*/5 * * * *', p_timezone => 'Pacific/Apia',"
        " p_jitter_secs => 0.1, p_input => %s)",
        (Jsonb([0.1, 2.5e-7, 1e300]),),
    )
    call(
        "update_schedule", "SELECT harvest.update_schedule('s1', %s, 'op')", (Jsonb({"max_active_runs": 2}),)
    )
    call("list_schedules", "SELECT * FROM harvest.list_schedules()")
    call("list_due_schedules", "SELECT * FROM harvest.list_due_schedules()")
    call("trigger_schedule", "SELECT harvest.trigger_schedule('s1')")
    call("pause_schedule", "SELECT harvest.pause_schedule('s2')")
    call("get_schedule", "SELECT harvest.get_schedule('s1')")
    call("count_schedule_misses", "SELECT * FROM harvest.count_schedule_misses('2030-01-01')")
    started = call(
        "start_workflow",
        "SELECT execution_id, status FROM harvest.start_workflow('wf', %s, 'r1', p_search_attributes => %s,"
        " p_execution_timeout_secs => 3600.5, p_run_timeout_secs => 1800.25)",
        (Jsonb([1.5, 0.1]), Jsonb({"region": "eu", "score": 0.1})),
    )
    execution_id = started[0][0]
    task = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('w1', ARRAY['default'], 1)"
    ).fetchone()
    assert task is not None
    call(
        "complete_workflow_task",
        "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s, 'w1')",
        (
            task[0],
            task[1],
            Jsonb(
                [
                    {
                        "type": "schedule_activity",
                        "seq": 1,
                        "name": "act",
                        "input": [0.1],
                        "queue": "aq",
                        "options": {
                            "start_to_close": 30.5,
                            "heartbeat_timeout": 5.5,
                            "schedule_to_close": 100.25,
                            "retry": {"initial_interval": 1.5, "backoff": 2.5, "max_interval": 10.5},
                        },
                    },
                    {"type": "start_timer", "seq": 2, "duration": 1.5},
                ]
            ),
        ),
    )
    task = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('w1', ARRAY['aq'], 1)"
    ).fetchone()
    assert task is not None
    call(
        "record_llm_call",
        "SELECT harvest.record_llm_call(%s, %s, 'm', 10, 20, 1500, 250) IS NOT NULL",
        (task[0], task[1]),
    )
    call(
        "heartbeat_activity",
        "SELECT * FROM harvest.heartbeat_activity(%s, %s, %s)",
        (task[0], task[1], Jsonb({"progress": 0.1})),
    )
    call(
        "fail_activity",
        "SELECT harvest.fail_activity(%s, %s, %s)",
        (task[0], task[1], Jsonb({"error_type": "Boom", "message": "retry me", "details": [0.1]})),
    )
    call(
        "signal_workflow",
        "SELECT harvest.signal_workflow(%s, 'sig', %s, 'sig-1') IS NOT NULL",
        (execution_id, Jsonb({"x": 0.1})),
    )
    call(
        "start_workflows",
        "SELECT n, status FROM harvest.start_workflows(%s)",
        (
            Jsonb(
                [
                    {"workflow_name": "wf", "workflow_id": "b1", "input": [0.1], "execution_timeout": 60.5},
                    {"workflow_name": "wf", "workflow_id": "b2", "run_timeout": 0.25, "priority": 2},
                ]
            ),
        ),
    )
    call(
        "signal_with_start",
        "SELECT harvest.signal_with_start('wf', 'sws', 'go', %s) IS NOT NULL",
        (Jsonb({"x": 0.1}),),
    )
    call(
        "update_with_start",
        "SELECT workflow_id, started_fresh, status FROM harvest.update_with_start('wf', 'uws', 'bump', %s,"
        " p_update_id => 'u1', p_timeout_secs => 12.5)",
        (Jsonb([0.1]),),
    )
    call(
        "backfill_schedule",
        "SELECT harvest.backfill_schedule('s1', %s, 'allow_all', 'op')",
        ([dt.datetime(2030, 1, 1, 23, 0, tzinfo=dt.UTC), dt.datetime(2030, 1, 2, 1, 30, tzinfo=dt.UTC)],),
    )
    call("set_legal_hold", "SELECT harvest.set_legal_hold(%s, 'audit 0.1', 'op')", (execution_id,))
    call("heartbeat_event_stream", "SELECT harvest.heartbeat_event_stream('l1')")
    call("get_execution", "SELECT * FROM harvest.get_execution(%s)", (execution_id,))
    call("get_history", "SELECT * FROM harvest.get_history(%s)", (execution_id,))
    call("get_execution_stack", "SELECT harvest.get_execution_stack(%s)", (execution_id,))
    # Later: the timer, the retry and the timeouts come due.
    conn.execute("SET harvest.fake_now = '2030-01-02 03:10:00+00'")
    call("expire_tasks", "SELECT harvest.expire_tasks(100)")
    call("expire_workflows", "SELECT * FROM harvest.expire_workflows(100)")
    call("release_pending_starts", "SELECT * FROM harvest.release_pending_starts(10)")
    call("register_dags", "SELECT harvest.register_dags(%s)", (Jsonb([DAG]),))
    call(
        "trigger_dag", "SELECT status FROM harvest.trigger_dag('nightly', %s, 'dag-1')", (Jsonb({"n": 0.1}),)
    )
    call("create_api_token", "SELECT name, scope FROM harvest.create_api_token('t1', 'read')")
    call("list_api_tokens", "SELECT * FROM harvest.list_api_tokens()")
    call("set_owner_mode", "SELECT harvest.set_owner_mode(true, 12.5, 'op')")
    call("set_owner_mode 2", "SELECT harvest.set_owner_mode(true, 7.25, 'op')")
    call("get_owner_mode", "SELECT harvest.get_owner_mode()")
    call("heartbeat_partitions", "SELECT count(*) FROM harvest.heartbeat_partitions('w1', ARRAY[1, 2])")
    call("set_owner_mode off", "SELECT harvest.set_owner_mode(false, 0.35, 'op')")
    # The retried activity completes, the run completes; another is cancelled, one terminated.
    task = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('w1', ARRAY['aq'], 1)"
    ).fetchone()
    if task is not None:
        call(
            "complete_activity",
            "SELECT harvest.complete_activity(%s, %s, %s)",
            (task[0], task[1], Jsonb({"v": 0.1, "big": 1e300})),
        )
    for _ in range(3):
        task = conn.execute(
            "SELECT task_id, fencing_token, execution_id FROM harvest.claim_tasks('w1', ARRAY['default'], 1)"
        ).fetchone()
        if task is None:
            break
        last = conn.execute(
            "SELECT last_event_id FROM harvest.executions WHERE id OPERATOR(pg_catalog.=) %s", (task[2],)
        ).fetchone()[0]  # type: ignore[index]
        call(
            "complete_workflow_task (complete)",
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, %s, %s, 'w1')",
            (task[0], task[1], last, Jsonb([{"type": "complete_workflow", "seq": 9, "result": [0.1, 2.5]}])),
        )
    call(
        "cancel_workflow",
        "SELECT harvest.cancel_workflow(started.execution_id, 'bye 0.1')"
        " FROM harvest.start_workflow('wf', '[]', 'c1') AS started",
    )
    call(
        "terminate_workflow",
        "SELECT harvest.terminate_workflow(started.execution_id, 'end')"
        " FROM harvest.start_workflow('wf', '[]', 't1') AS started",
    )
    call("drain_worker", "SELECT harvest.drain_worker('w1', '2030-01-02 04:00:00.25+00', 'op')")
    call("get_worker_drain_deadline", "SELECT * FROM harvest.get_worker_drain_deadline('w1')")
    call("list_workers", "SELECT * FROM harvest.list_workers()")
    call("get_worker_health", "SELECT harvest.get_worker_health()")
    call("get_metric_samples", "SELECT harvest.get_metric_samples()")
    call("count_usage", "SELECT * FROM harvest.count_usage('2030-01-01', '2030-01-03')")
    call("list_events", "SELECT * FROM harvest.list_events()")
    call("list_executions", "SELECT * FROM harvest.list_executions()")
    # A time given as a typed parameter (not a literal the session parses) must select the
    # same runs whatever the session's DateStyle, TimeZone and abbreviations.
    after = dt.datetime(2030, 1, 2, 3, 4, 5, 400000, tzinfo=dt.UTC)
    # (Runs made at one instant are ordered by their random ids: which runs make the first
    # page differs, the two pages together do not.)
    pages = "SELECT execution_id, workflow_id FROM harvest.list_executions(p_created_after => %s,"
    pages += " p_created_before => %s, p_page_size => %s, p_order => 'asc', p_cursor => %s)"
    window = (after, after + dt.timedelta(seconds=0.2))
    first = _one(conn, pages, (*window, 2, None))
    cursors = _one(conn, pages.replace("execution_id, workflow_id", "next_cursor"), (*window, 2, None))
    rest = _one(conn, pages, (*window, 1000, cursors[-1][0])) if cursors else []
    answers.append(("list_executions two pages", sorted(r[1] for r in first + rest)))
    call(
        "list_executions by attribute",
        "SELECT * FROM harvest.list_executions(p_search_attributes => %s)",
        (["score>0.05"],),
    )
    call(
        "list_executions filter",
        "SELECT * FROM harvest.list_executions(p_filter => 'score > 0.05 AND region = eu')",
    )
    # A run parked on a timer, planned to move to shard 1: its copy (rows as JSON) is what the
    # target stores.
    moving = _one(
        conn,
        "SELECT execution_id FROM harvest.start_workflow('wf', '[]', 'mv', 'mq',"
        " p_run_timeout_secs => 1800.25)",
    )[0][0]
    task = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('w1', ARRAY['mq'], 1)"
    ).fetchone()
    assert task is not None
    call(
        "complete_workflow_task (timer)",
        "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s, 'w1')",
        (task[0], task[1], Jsonb([{"type": "start_timer", "seq": 1, "duration": 3600.5}])),
    )
    migration = call("begin_migration", "SELECT harvest.begin_migration(%s, 1, 'op')", (moving,))
    call(
        "get_migration_copy",
        "SELECT harvest.get_migration_copy(%s)",
        ((migration[0][0] or {}).get("id") if migration[0][0] != "error" else None,),
    )
    call("list_audit_log", "SELECT * FROM harvest.list_audit_log()")
    conn.execute("RESET harvest.fake_now")
    return answers


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_SECRET = re.compile(r"hvt_[0-9a-f]+")
_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?[+-]\d\d:\d\d$")


def _cursor(value: str) -> str | None:
    """A list page's cursor (base64 of "<created_at>|<id>") as its decoded text, else None."""
    try:
        text = base64.b64decode(value, validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    return text if "|" in text else None


def normalise(value: Any, ids: dict[str, str]) -> Any:
    """Random ids (uuids, token secrets) as the workflow id of their run, or as one placeholder;
    a time in JSON text as its instant (its offset is the session's zone, as for any
    timestamptz the server prints: the instant is what must not change); the rest as is."""
    if isinstance(value, str):
        if _ISO.match(value):
            return dt.datetime.fromisoformat(value).astimezone(dt.UTC)
        value = _cursor(value) or value
        value = _SECRET.sub("hvt_<secret>", value)
        return _UUID.sub(lambda m: ids.get(m.group(0), "<uuid>"), value)
    if isinstance(value, dict):
        return {k: normalise(v, ids) for k, v in value.items() if k not in UNCOMPARED}
    if isinstance(value, list | tuple):
        return [normalise(v, ids) for v in value]
    if isinstance(value, uuid.UUID):
        return normalise(str(value), ids)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    return value


# Written from the wall clock (now(), not the engine's test clock) or random by design; and a
# history's digest, an md5 of its events' stored JSON text, where a time (a timer's fire_at)
# carries the offset of the session that wrote it (the instants, compared above, are the same).
UNCOMPARED = {"secret_hash", "heartbeat_at", "digest"}


def _sorted(rows: list) -> list:
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def dump(dsn: str) -> dict[str, list]:
    """Every row of every harvest table, as JSON text in a session with default settings."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_class AS c WHERE c.relnamespace = 'harvest'::regnamespace"
                " AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1"
            )
        ]
        out: dict[str, list] = {}
        for table in tables:
            rows = conn.execute(
                f"SELECT to_jsonb(t)::text FROM harvest.{table} AS t ORDER BY to_jsonb(t)::text"
            ).fetchall()
            out[table] = [json.loads(r[0]) for r in rows]
        return out


def run_ids(dsn: str) -> dict[str, str]:
    """Each run's id as its workflow id (or as its workflow's name, the workflow id being random)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT id::text, workflow_name, workflow_id FROM harvest.executions").fetchall()
    return {i: f"<run {name}/{'<uuid>' if _UUID.fullmatch(wid) else wid}>" for i, name, wid in rows}


def run(dsn: str, settings: dict[str, str] | None) -> tuple[list, dict]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if settings is not None:
            conn.execute(LOOK_ALIKES)
            for name, value in settings.items():
                conn.execute(
                    f"SET {name} = '{value}'" if name != "search_path" else f"SET search_path = {value}"
                )
        answers = scenario(conn)
    return answers, dump(dsn)


@pytest.fixture
def two_dbs(clone_pool) -> Iterator[tuple[str, str]]:
    names = [clone_pool.take(), clone_pool.take()]
    yield names[0][1], names[1][1]
    for name, _ in names:
        clone_pool.give_back(name)


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if type(a) is not type(b):
        return [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            out += _diff(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{path}.{k}")
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} rows != {len(b)} rows: {a!r} != {b!r}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += _diff(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


@pytest.mark.parametrize(
    "settings",
    [HOSTILE_SETTINGS, HOSTILE_SETTINGS_2, HOSTILE_SETTINGS_3],
    ids=["hostile-1", "hostile-2", "hostile-3"],
)
def test_no_session_setting_changes_what_is_stored_or_answered(two_dbs, settings) -> None:
    base_answers, base_rows = run(two_dbs[0], None)
    answers, rows = run(two_dbs[1], settings)
    ids_a, ids_b = run_ids(two_dbs[0]), run_ids(two_dbs[1])
    # Rows made at one instant come in the order of their random ids: each answer's rows sorted.
    diffs = _diff(
        {f"{n} {label}": _sorted(normalise(rows, ids_a)) for n, (label, rows) in enumerate(base_answers)},
        {f"{n} {label}": _sorted(normalise(rows, ids_b)) for n, (label, rows) in enumerate(answers)},
        "answers",
    )
    tables_a = {t: _sorted(normalise(r, ids_a)) for t, r in base_rows.items()}
    tables_b = {t: _sorted(normalise(r, ids_b)) for t, r in rows.items()}
    diffs += _diff(tables_a, tables_b, "tables")
    assert not diffs, "\n".join(diffs[:80])


# -- the defects the scenario found, one focused test each (each failed before its fix) ----------


def _session(dsn: str, **settings: str) -> psycopg.Connection:
    """A fresh session with ``settings`` SET before its first call (PL/pgSQL parses a
    statement at its first run in a session and keeps the plan, so a setting must be in place
    before it to change anything)."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f"SET harvest.fake_now = '{CLOCK}'")
    for name, value in settings.items():
        conn.execute(f"SET {name} = '{value}'")
    return conn


def test_a_sessions_float_digits_change_no_override_audit_row_or_owner_mode(db: str) -> None:
    """extra_float_digits = -15 printed a double in JSON with one digit: the audit rows of a
    rate-limit and a start-throttle override said rps 1 for 1.25 (and 0.8 for 0.75), and
    the owner-mode answer and audit said lease 10 for 12.5."""
    with _session(db) as conn:
        conn.execute(
            "SELECT harvest.declare_flow_policies(%s)",
            (
                Jsonb(
                    {
                        "workflows": {"tw": {"throttle": {"rps": 0.25}}},
                        "activities": {"act": {"rate_limit": {"rps": 2.5}}},
                    }
                ),
            ),
        )
    with _session(db, extra_float_digits="-15") as conn:
        conn.execute("SELECT * FROM harvest.set_rate_limit_override('act', 1.25, 2.5, 90.5)")
        conn.execute("SELECT * FROM harvest.set_start_throttle_override('tw', 0.75, 1.5, 60.25)")
        answer = conn.execute("SELECT harvest.set_owner_mode(true, 12.5)").fetchone()[0]  # type: ignore[index]
        later = conn.execute("SELECT harvest.get_owner_mode()").fetchone()[0]  # type: ignore[index]
    assert answer["lease_secs"] == later["lease_secs"] == 12.5
    with _session(db) as conn:
        details = dict(conn.execute("SELECT operation, details FROM harvest.audit_log").fetchall())
    assert (
        details["rate_limit.override"] | {"rps": 1.25, "burst": 2.5, "ttl_secs": 90.5}
        == details["rate_limit.override"]
    )
    assert (
        details["start_throttle.override"] | {"rps": 0.75, "burst": 1.5, "ttl_secs": 60.25}
        == details["start_throttle.override"]
    )
    assert details["owner_mode.set"]["lease_secs"] == 12.5


@pytest.mark.parametrize("style", ["sql_standard", "iso_8601", "postgres_verbose"])
def test_a_sessions_interval_style_changes_no_retention_answer_or_audit_row(db: str, style: str) -> None:
    """The retention calls printed their intervals in the session's IntervalStyle: a janitor
    with iso_8601 stored 'P30DT12H30M0.5S' in the audit log and got it back from the status,
    where every other session reads '30 days 12:30:00.5'."""
    with _session(db, IntervalStyle=style) as conn:
        conn.execute("SELECT harvest.set_retention('30 days 12:30:00.5')")
        conn.execute("SELECT harvest.set_worker_retention('1 day 02:03:04')")
        status = conn.execute("SELECT harvest.get_retention_status()").fetchone()[0]  # type: ignore[index]
        pruned = conn.execute("SELECT harvest.prune_workers(p_operator_id => 'op')").fetchone()[0]  # type: ignore[index]
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("SELECT harvest.set_retention('-2 days')")
    assert (status["max_age"], status["worker_max_age"]) == ("30 days 12:30:00.5", "1 day 02:03:04")
    assert pruned["worker_max_age"] == "1 day 02:03:04"
    assert "max age -2 days must be positive" in str(refused.value)
    with _session(db) as conn:
        details = [r[0] for r in conn.execute("SELECT details FROM harvest.audit_log ORDER BY id").fetchall()]
    assert details[0]["max_age"] == "30 days 12:30:00.5"
    assert details[1]["worker_max_age"] == details[2]["worker_max_age"] == "1 day 02:03:04"


def test_standard_conforming_strings_off_changes_no_filter_or_policy_check(db: str) -> None:
    """With standard_conforming_strings off, a session parsed the functions' backslashes as
    escapes ('\\s' read as 's'): the search filter score>0.05 matched the key "core" (no run),
    a filter expression raised 'parentheses () not balanced', and a flow policy whose key path
    is not input.<field> ("inputXtenant") was accepted and stored for every worker."""
    with _session(db) as conn:
        conn.execute(
            "SELECT harvest.start_workflow('wf', '[]', 'r1', p_search_attributes => %s)",
            (Jsonb({"score": 0.1, "region": "eu"}),),
        )
    with _session(db, standard_conforming_strings="off", escape_string_warning="off") as conn:
        by_attribute = conn.execute(
            "SELECT workflow_id FROM harvest.list_executions(p_search_attributes => ARRAY['score>0.05'])"
        ).fetchall()
        by_filter = conn.execute(
            "SELECT workflow_id FROM harvest.list_executions(p_filter => 'score > 0.05 AND region = \"eu\"')"
        ).fetchall()
        with pytest.raises(psycopg.Error, match="is not input or input"):
            conn.execute(
                "SELECT harvest.declare_flow_policies(%s)",
                (Jsonb({"workflows": {"cw": {"concurrency": {"limit": 1, "key": "inputXtenant"}}}}),),
            )
    assert by_attribute == by_filter == [("r1",)]


def test_a_time_filter_selects_the_same_runs_in_any_zone_and_date_style(db: str) -> None:
    """list_executions put its created_after / created_before (and a page cursor's time) into
    dynamic SQL as text in the session's DateStyle and zone, read back with the session's
    abbreviations: in Asia/Kolkata with DateStyle Postgres the time printed as IST, which
    PostgreSQL 15 reads as Israel's +02, so 'after 03:04:05.4 UTC' matched nothing. (Found on
    PostgreSQL 15, scripts/with-debian-pg15.sh; 16 and later read the zone's own abbreviation.)"""
    with _session(db) as conn:
        for n in range(3):
            conn.execute("SELECT harvest.start_workflow('wf', '[]', %s)", (f"r{n}",))
    after = dt.datetime(2030, 1, 2, 3, 4, 5, 400000, tzinfo=dt.UTC)
    query = (
        "SELECT workflow_id, next_cursor FROM harvest.list_executions(p_created_after => %s,"
        " p_created_before => %s, p_page_size => 2, p_order => 'asc', p_cursor => %s)"
    )
    pages = []
    for settings in ({}, {"DateStyle": "Postgres, DMY", "TimeZone": "Asia/Kolkata"}):
        with _session(db, **settings) as conn:
            first = conn.execute(query, (after, after + dt.timedelta(seconds=1), None)).fetchall()
            cursor = first[-1][1] if first else None
            rest = (
                conn.execute(query, (after, after + dt.timedelta(seconds=1), cursor)).fetchall()
                if first
                else []
            )
        pages.append(sorted(r[0] for r in first + rest))
    assert pages == [["r0", "r1", "r2"], ["r0", "r1", "r2"]]


def test_a_sessions_zone_changes_no_retention_cutoff(db: str) -> None:
    """harvest.now() - max_age counted the age's days in the session's zone: a janitor in
    America/New_York cut 30 days before 1 April 2030 12:00 UTC at 13:00 UTC on 2 March (its
    clocks moved on 10 March), so it deleted a run completed at 12:30 that a janitor in UTC
    keeps. Days and months now count in UTC (harvest._ago)."""
    with _session(db) as conn:
        execution_id = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('wf', '[]', 'r1')"
        ).fetchone()[0]  # type: ignore[index]
        conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (execution_id,))
        conn.execute(
            "UPDATE harvest.executions SET completed_at = '2030-03-02 12:30+00' WHERE id = %s",
            (execution_id,),
        )
        conn.execute("SELECT harvest.set_retention('30 days')")
    counted = []
    for zone in ("UTC", "America/New_York", "Pacific/Apia"):
        with _session(db, TimeZone=zone) as conn:
            conn.execute("SET harvest.fake_now = '2030-04-01 12:00+00'")
            status = conn.execute("SELECT harvest.get_retention_status()").fetchone()[0]  # type: ignore[index]
            conn.execute("BEGIN")
            ran = conn.execute("SELECT harvest.run_retention()").fetchone()[0]  # type: ignore[index]
            conn.execute("ROLLBACK")
        counted.append((zone, status["eligible"], ran["deleted"], dt.datetime.fromisoformat(ran["cutoff"])))
    cutoff = dt.datetime(2030, 3, 2, 12, tzinfo=dt.UTC)
    assert counted == [(zone, 0, 0, cutoff) for zone in ("UTC", "America/New_York", "Pacific/Apia")]


def test_a_sessions_float_digits_change_no_migration_copy(db: str) -> None:
    """get_migration_copy wrote the run's row and its tasks' rows with to_jsonb, so a
    rebalancer with extra_float_digits = -15 moved a run timeout of 1800.25 s as 2000 to the
    target shard (and accept_migration_copy kept a moved-back seal the same way)."""
    with _session(db) as conn:
        execution_id = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('wf', '[]', 'mv', 'mq',"
            " p_run_timeout_secs => 1800.25)"
        ).fetchone()[0]  # type: ignore[index]
        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w1', ARRAY['mq'], 1)"
        ).fetchone()
        assert task is not None
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s, 'w1')",
            (task[0], task[1], Jsonb([{"type": "start_timer", "seq": 1, "duration": 60}])),
        )
        conn.execute(
            "UPDATE harvest.tasks SET priority_aging_secs = 0.75 WHERE execution_id = %s", (execution_id,)
        )
        migration = conn.execute("SELECT harvest.begin_migration(%s, 1)", (execution_id,)).fetchone()[0]  # type: ignore[index]
    with _session(db, extra_float_digits="-15") as conn:
        copy = conn.execute("SELECT harvest.get_migration_copy(%s)", (migration["id"],)).fetchone()[0]  # type: ignore[index]
    assert copy["execution"]["run_timeout_secs"] == 1800.25
    assert [t["priority_aging_secs"] for t in copy["tasks"]] == [0.75]


def test_a_search_attribute_time_compares_the_same_in_any_zone_and_date_style(db: str) -> None:
    """A search-attribute time filter (key>2030-01-05T04:00Z) parsed the stored value and the
    filter's time with ::timestamptz, in the session's zone and DateStyle: a value with no
    offset was a time in the session's zone (so one run matched in UTC and not in
    Pacific/Kiritimati), and a value such as 05/01/2030 was 5 January or 1 May as the session's
    DateStyle said. A time is now ISO 8601, UTC unless it carries Z or a numeric offset,
    whatever the session; other text is not a time."""
    with _session(db) as conn:
        for workflow_id, due in (
            ("offset", "2030-01-05T10:00:00+00:00"),
            ("naive", "2030-01-05T10:00:00"),
            ("date", "2030-01-05"),
            ("local", "05/01/2030"),
        ):
            conn.execute(
                "SELECT harvest.start_workflow('wf', '[]', %s, p_search_attributes => %s)",
                (workflow_id, Jsonb({"due": due})),
            )
    filters = ["due>=2030-01-05T04:00Z", "due<2030-01-05T12:00", "due<2030-03-01", "due>2030-01-04T20:00-05"]
    answers = {}
    for settings in (
        {},
        {"TimeZone": "Pacific/Kiritimati"},
        {"TimeZone": "America/Los_Angeles", "DateStyle": "Postgres, MDY"},
        {"TimeZone": "<+0530>-05:30", "DateStyle": "SQL, DMY", "timezone_abbreviations": "India"},
    ):
        with _session(db, **settings) as conn:
            answers[str(settings)] = [
                sorted(
                    r[0]
                    for r in conn.execute(
                        "SELECT workflow_id FROM harvest.list_executions(p_search_attributes => %s)", ([f],)
                    ).fetchall()
                )
                for f in filters
            ]
    both, all_three = ["naive", "offset"], ["date", "naive", "offset"]
    assert answers == {key: [both, all_three, all_three, both] for key in answers}


def _keyed_runs(db: str, queues: list[str], runs: list[tuple[str, str, str]]) -> None:
    """Worker w1 polling ``queues``, workflow ``cw`` limited to one run per key (its input), and
    a run of it for each ``(workflow_id, key, queue)``."""
    with _session(db) as conn:
        conn.execute("SELECT harvest.register_worker('w1', %s, 'host', 1)", (queues,))
        conn.execute(
            "SELECT harvest.declare_flow_policies(%s)",
            (Jsonb({"workflows": {"cw": {"concurrency": {"limit": 1, "key": "input"}}}}),),
        )
        for workflow_id, key, queue in runs:
            start = "SELECT harvest.start_workflow('cw', %s, %s, %s)"
            conn.execute(start, (json.dumps([key]), workflow_id, queue))


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
def test_a_snapshot_transaction_claim_admits_no_run_over_a_concurrency_limit(db: str, isolation: str) -> None:
    """Admission counts a key's runs in flight after it takes the key's lock, in a statement
    whose READ COMMITTED snapshot sees every claim committed before the lock. A worker whose
    session set default_transaction_isolation = 'repeatable read' (or claimed inside its own
    snapshot transaction) counted with a snapshot older than the lock: another worker's claim of
    the key committed in between was not seen, and the claim admitted a second run of a key whose
    limit is 1, for everyone."""
    _keyed_runs(db, ["q1", "q2"], [("r1", "acme", "q1"), ("r2", "acme", "q2")])
    with (
        _session(db, default_transaction_isolation=isolation) as late,
        _session(db) as first,
    ):
        late.execute("BEGIN")
        late.execute("SELECT count(*) FROM harvest.executions")  # (the transaction's snapshot)
        claimed = first.execute("SELECT count(*) FROM harvest.claim_tasks('w1', ARRAY['q2'], 1)").fetchone()
        assert claimed == (1,)
        try:
            late.execute("SELECT count(*) FROM harvest.claim_tasks('w1', ARRAY['q1'], 1)").fetchone()
            late.execute("COMMIT")
        except psycopg.Error:
            late.execute("ROLLBACK")
    with _session(db) as conn:
        running = conn.execute(
            "SELECT count(*) FROM harvest.workflow_slots AS s JOIN harvest.executions AS e"
            " ON e.id = s.execution_id WHERE s.concurrency_key = 'acme' AND e.status = 'RUNNING'"
        ).fetchone()
    assert running == (1,)


def test_the_workers_claim_admits_a_keyed_run_in_a_repeatable_read_session(db: str) -> None:
    """A claim in a snapshot transaction admits no run or activity of a concurrency key (above),
    so the worker's own claim (claim_tasks_open) opens its transaction READ COMMITTED whatever
    its session's default: in a deployment whose role or database defaults to REPEATABLE READ
    it still runs keyed work."""
    _keyed_runs(db, ["q1"], [("r1", "acme", "q1")])
    clock = CLOCK.replace(" ", "\\ ")
    dsn = psycopg.conninfo.make_conninfo(
        db, options=f"-c default_transaction_isolation=repeatable\\ read -c harvest.fake_now={clock}"
    )

    async def claim() -> list[str]:
        pool = await open_async_pool(dsn, max_size=1)
        try:
            rows, open_claim = await claim_tasks_open(AsyncSqlApi(pool), "w1", ["q1"], 10, 30.0)
            await open_claim.commit()
            return [r["workflow_id"] for r in rows]
        finally:
            await pool.close()

    assert asyncio.run(claim()) == ["r1"]


# A session far from UTC, printing times and intervals its own way.
ZONED = {"TimeZone": "Pacific/Kiritimati", "DateStyle": "SQL, DMY", "IntervalStyle": "sql_standard"}


def _refusals(conn: psycopg.Connection, calls: dict[str, tuple[str, Any]]) -> dict[str, str]:
    """Each call's refusal text (its message), by label; "(not refused)" for one that ran."""
    seen = {}
    for label, (sql, params) in calls.items():
        try:
            conn.execute(sql, params)
        except psycopg.Error as refused:
            seen[label] = refused.diag.message_primary
        else:
            seen[label] = "(not refused)"
    return seen


def test_a_refusal_names_its_times_the_same_in_any_zone_and_date_style(db: str) -> None:
    """The functions' own texts printed a time with the session's TimeZone and DateStyle and an
    interval with its IntervalStyle: a drain deadline in the past was '2030-01-02 03:04:05+00'
    in UTC and '02/01/2030 17:04:05 +14' in Pacific/Kiritimati with DateStyle 'SQL, DMY', so one
    refusal read differently per session. A time now reads as ISO 8601 in UTC, as the CLI and
    the API print it (harvest.core.json_values), and a length of time in seconds."""
    with _session(db) as conn:
        conn.execute("SELECT harvest.register_worker('w1', ARRAY['default', 'aq'], 'host', 1)")
        execution_id, _ = conn.execute(
            "SELECT execution_id, status FROM harvest.start_workflow('wf', '[]', 'r1')"
        ).fetchone()  # type: ignore[misc]
        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w1', ARRAY['default'], 1)"
        ).fetchone()
        assert task is not None
        command = {"type": "schedule_activity", "seq": 1, "name": "act", "input": [], "queue": "aq",
                   "options": {"start_to_close": 10}}  # fmt: skip
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s, 'w1')", (*task, Jsonb([command]))
        )
        activity = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w1', ARRAY['aq'], 1)"
        ).fetchone()
        assert activity is not None
        conn.execute("SELECT harvest.create_schedule('s1', 'wf', p_interval_secs => 90)")
        schedule = conn.execute("SELECT id, revision FROM harvest.schedules WHERE name = 's1'").fetchone()
        secret = conn.execute(
            "SELECT secret FROM harvest.create_api_token('t1', 'read', '1 hour')"
        ).fetchone()[0]  # type: ignore[index]
    token_hash = hashlib.sha256(secret.encode()).digest()
    task_token = f"v1:{execution_id}:{activity[0]}:1:1:{activity[1]}"
    refusals = {
        "drain": ("SELECT harvest.drain_worker('w1', '2030-01-02 03:04:05.25+00')", None),
        "usage order": (
            "SELECT * FROM harvest.count_usage('2030-01-02 00:00+00', '2030-01-01 12:00+00')",
            None,
        ),
        "usage window": (
            "SELECT * FROM harvest.count_usage('2029-01-01 00:00+00', '2030-01-01 00:00:01+00')",
            None,
        ),
        "backfill future": (
            "SELECT harvest.backfill_schedule('s1', ARRAY['2031-01-01 00:00+00'::timestamptz])",
            None,
        ),
        "backfill second": (
            "SELECT harvest.backfill_schedule('s1', ARRAY['2029-01-01 00:00:00.5+00'::timestamptz])",
            None,
        ),
        "fire future": (
            (
                "SELECT harvest.fire_schedule(%s, %s, ARRAY['2031-01-01 00:00+00'::timestamptz],"
                " '2031-01-01 00:01:30+00', '2031-01-01 00:01:30+00')"
            ),
            schedule,
        ),
        "token expired": ("SELECT * FROM harvest.authenticate_api_token(%s)", (token_hash,)),
        "token expires_in": ("SELECT * FROM harvest.create_api_token('t2', 'read', '-26 hours')", None),
        "heartbeat": ("SELECT harvest.heartbeat_activity(%s, %s)", activity),
        "by token": ("SELECT harvest.complete_activity_by_token(%s)", (task_token,)),
    }
    answer = (
        "SELECT message FROM harvest.complete_activities('w1', ARRAY[%s]::bigint[], ARRAY[%s]::bigint[],"
        " ARRAY['1']::jsonb[])"
    )
    texts = []
    for settings in ({}, ZONED):
        with _session(db, **settings) as conn:
            conn.execute("SET harvest.fake_now = '2030-01-02 05:00:00+00'")
            seen = _refusals(conn, refusals)
            conn.execute("BEGIN")
            seen["complete_activities"] = conn.execute(answer, activity).fetchone()[0]  # type: ignore[index]
            conn.execute("ROLLBACK")
        texts.append(seen)
    assert texts[0] == texts[1]
    task_id = activity[0]
    assert texts[0] == {
        "drain": "drain deadline 2030-01-02T03:04:05.250000+00:00 is not in the future",
        "usage order": (
            "usage report: to (2030-01-01T12:00:00+00:00) must be after from (2030-01-02T00:00:00+00:00)"
        ),
        "usage window": (
            "usage report: the window 2029-01-01T00:00:00+00:00 .. 2030-01-01T00:00:01+00:00"
            " (31536001 seconds) is wider than the ceiling of 7776000 seconds"
        ),
        "backfill future": "backfill slot 2031-01-01T00:00:00+00:00 is in the future",
        "backfill second": "backfill slot 2029-01-01T00:00:00.500000+00:00 is not a whole second",
        "fire future": (
            "fire_schedule: slot 2031-01-01T00:00:00+00:00 is not after <NULL> or is in the future"
        ),
        "token expired": "the API token expired at 2030-01-02T04:04:05.500000+00:00",
        "token expires_in": "a token's lifetime must be positive and at most 100 years, got -26:00:00",
        "heartbeat": f"task {task_id}: the lease expired at 2030-01-02T03:04:15.500000+00:00",
        "by token": (
            f"cannot complete activity 1 of execution {execution_id} (attempt 1) by this token:"
            " its lease expired at 2030-01-02T03:04:15.500000+00:00"
        ),
        "complete_activities": (
            f"task {task_id}: the lease expired at 2030-01-02T03:04:15.500000+00:00,"
            " so this result is refused"
        ),
    }


@pytest.mark.parametrize("settings", [{}, ZONED], ids=["utc", "kiritimati"])
def test_a_schedules_newer_slot_names_it_the_same_in_the_reason_it_stores(db: str, settings) -> None:
    """A slot of a schedule with overlap terminate_other (or cancel_other) ends the older runs
    with a reason naming the slot, stored in the run's history, its failure and the audit log:
    it was the slot's text in the firing session's zone and DateStyle ('... a newer slot
    (02/01/2030 15:00:00 +14) terminates it ...' in Pacific/Kiritimati)."""
    with _session(db, **settings) as conn:
        conn.execute("SELECT harvest.create_schedule('s1', 'wf', p_interval_secs => 3600)")
        conn.execute(
            "SELECT harvest.backfill_schedule('s1', ARRAY['2030-01-02 00:00+00'::timestamptz], 'allow_all')"
        )
        conn.execute(
            "SELECT harvest.backfill_schedule('s1', ARRAY['2030-01-02 01:00+00'::timestamptz],"
            " 'terminate_other')"
        )
        reasons = conn.execute(
            "SELECT v.event_data ->> 'reason', e.failure ->> 'message' FROM harvest.events AS v"
            " JOIN harvest.executions AS e ON e.id = v.execution_id WHERE v.event_type = 'WorkflowTerminated'"
        ).fetchall()
    reason = "schedule s1: a newer slot (2030-01-02T01:00:00+00:00) terminates it (overlap terminate_other)"
    assert reasons == [(reason, reason)]


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
def test_every_claim_of_harvests_pools_admits_a_keyed_run_whatever_the_default_isolation(
    db: str, isolation: str
) -> None:
    """Only the open claim (claim_tasks_open) began READ COMMITTED; the worker's other claims, a
    plain claim_tasks call on its autocommit pool (every claim of a worker with flow-control
    policies, every claim over shards), ran at the session's default_transaction_isolation:
    under a role or database defaulting to REPEATABLE READ they admitted no keyed run, so a
    `defer` run (and an activity under max_concurrent) waited for ever. Harvest's pooled
    connections now run READ COMMITTED whatever the default."""
    _keyed_runs(db, ["q1"], [("r1", "acme", "q1"), ("r2", "other", "q1")])
    level, clock = isolation.replace(" ", "\\ "), CLOCK.replace(" ", "\\ ")
    dsn = psycopg.conninfo.make_conninfo(
        db, options=f"-c default_transaction_isolation={level} -c harvest.fake_now={clock}"
    )

    async def claim_async() -> list[str]:
        pool = await open_async_pool(dsn, max_size=1)
        try:
            rows = await AsyncSqlApi(pool).claim_tasks("w1", ["q1"], 1, 30.0)
            return [r["workflow_id"] for r in rows]
        finally:
            await pool.close()

    assert asyncio.run(claim_async()) == ["r1"]
    pool = open_pool(dsn, max_size=1)
    try:
        pool.wait()
        with pool.connection() as conn:
            assert conn.execute("SHOW transaction_isolation").fetchone() == ("read committed",)
            rows = SqlApi(conn).claim_tasks("w1", ["q1"], 1, 30.0)
    finally:
        pool.close()
    assert [r["workflow_id"] for r in rows] == ["r2"]


def test_a_refusal_names_its_numbers_the_same_whatever_the_sessions_float_digits(db: str) -> None:
    """A refusal that printed a double precision argument (a lease, a rate, a timeout) with RAISE's
    % followed the session's extra_float_digits: a lease of 3600.5 s read '4e+03' at -15 and
    0.30000000000000004 read '0.3' at 0 and in full at 1 and 3, so one refusal read differently
    per session. Such a number now reads as numeric prints it (15 significant digits, no
    trailing zeros), the same in every session."""
    uuid0 = "00000000-0000-0000-0000-000000000000"
    tiny = 0.1 + 0.2  # 0.30000000000000004: its shortest text and its 15-digit text differ
    refusals = {
        "claim": ("SELECT * FROM harvest.claim_tasks('w', ARRAY['q'], 1, %s)", (-tiny,)),
        "named claim": (
            "SELECT * FROM harvest.claim_named_tasks('w', ARRAY['q'], ARRAY[1]::bigint[], %s)",
            (-tiny,),
        ),
        "hand-off": (
            (
                "SELECT * FROM harvest.complete_activities('w', ARRAY[]::bigint[], ARRAY[]::bigint[],"
                " ARRAY[]::jsonb[], true, %s)"
            ),
            (-3600.5,),
        ),
        "eager signal": (
            "SELECT harvest.signal_workflow_eager(%s, 's', 'null', NULL, NULL, 'w', %s)",
            (uuid0, -3600.5),
        ),
        "cross-shard": ("SELECT * FROM harvest.claim_cross_shard_children(1, %s)", (-tiny,)),
        "relays": ("SELECT * FROM harvest.claim_remote_relays(1, %s)", (-3600.5,)),
        "rate override": ("SELECT * FROM harvest.set_rate_limit_override('act', %s, 2.5, 90.5)", (-tiny,)),
        "throttle override": (
            "SELECT * FROM harvest.set_start_throttle_override('tw', 1.25, 0.5, %s)",
            (-3600.5,),
        ),
        "query timeout": ("SELECT harvest.request_query(%s, 'q', 'null', %s)", (uuid0, 86400.5)),
        "owner lease": ("SELECT harvest.set_owner_mode(true, %s)", (3600.5,)),
        "workflow heartbeat": ("SELECT * FROM harvest.heartbeat_workflow_task(1, 1, %s)", (86400.25,)),
        "worker heartbeat": ("SELECT harvest.register_worker('w', ARRAY['q'], 'h', 1, %s)", (tiny / 10,)),
    }
    texts = []
    for digits in ("-15", "0", "1", "3"):
        with _session(db, extra_float_digits=digits) as conn:
            texts.append(_refusals(conn, refusals))
    assert texts[1:] == texts[:1] * 3, json.dumps(texts, indent=1)
    assert texts[0] == {
        "claim": "workflow task lease -0.3 must be positive seconds",
        "named claim": "workflow task lease -0.3 must be positive seconds",
        "hand-off": "workflow task lease -3600.5 must be positive seconds",
        "eager signal": "workflow task lease -3600.5 must be positive seconds",
        "cross-shard": "lease -0.3 must be positive seconds",
        "relays": "lease -3600.5 must be positive seconds",
        "rate override": (
            "override needs rps > 0, burst >= 1 and a positive ttl, got rps=-0.3 burst=2.5 ttl=90.5"
        ),
        "throttle override": (
            "override needs rps > 0, burst >= 1 and a positive ttl, got rps=1.25 burst=0.5 ttl=-3600.5"
        ),
        "query timeout": "timeout 86400.5 is out of range: give seconds in (0, 86400]",
        "owner lease": "owner lease 3600.5 s is out of range: allowed 0.1 to 3600 seconds",
        "workflow heartbeat": "workflow task lease 86400.25 s is over the ceiling of 86400 seconds (a day)",
        "worker heartbeat": "heartbeat_interval_secs 0.03 is out of range: allowed 0.1 to 3600 seconds",
    }
