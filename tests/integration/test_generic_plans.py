"""Generic plans of hot-path statements on a freshly migrated, never-analysed database.

PL/pgSQL (and, from PostgreSQL 18, SQL functions) caches one plan per statement and
session; after five executions it keeps a *generic* plan, made without the parameter
values, when that is not dearer than the custom ones, and uses it until the table's
statistics change. On a fresh database nothing has been analysed, every estimate is a
default, so a plan made then may walk a whole index or table for a one-row lookup long
after the table has grown. Each case below takes a statement from the installed
function's source, prepares it with its PL/pgSQL variables as parameters, and checks
the access path the planner chooses under plan_cache_mode = force_generic_plan.

Each case names the trap its statement is written to avoid; the test fails when a
rewrite falls back into it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb


def function_source(conn: psycopg.Connection, name: str) -> str:
    """The body of harvest.<name> as installed, without -- comments."""
    rows = conn.execute(
        "SELECT p.prosrc FROM pg_catalog.pg_proc AS p"
        " WHERE p.pronamespace = 'harvest'::regnamespace AND p.proname = %s",
        (name,),
    ).fetchall()
    if len(rows) != 1:
        raise LookupError(f"expected one function harvest.{name}, found {len(rows)}")
    return re.sub(r"--[^\n]*", "", rows[0][0])


@dataclass(frozen=True)
class Statement:
    function: str  # harvest.<function>
    start: str  # a regex matching the start of the statement in the function's source
    params: dict[str, str]  # each PL/pgSQL variable it reads -> its SQL type, in $1, $2, ... order
    end: str = r";|\bLOOP\b"  # a regex matching what ends it (dropped)


def plain_sql(conn: psycopg.Connection, stmt: Statement) -> str:
    """The statement from its start up to its ';' (or the LOOP of a FOR ... IN query, or what
    its end matches), as plain SQL: PERFORM becomes SELECT, RETURN QUERY and an INTO target
    are dropped, and the PL/pgSQL variables become parameters."""
    source = function_source(conn, stmt.function)
    found = re.search(rf"(?P<statement>{stmt.start}.*?)(?:{stmt.end})", source, re.DOTALL)
    if found is None:
        raise LookupError(
            f"no statement matching {stmt.start!r} in harvest.{stmt.function}: update this test"
        )
    sql = found.group("statement")
    sql = re.sub(r"^PERFORM\b", "SELECT", sql)
    sql = re.sub(r"^RETURN QUERY\s+", "", sql)
    target = r"\s+INTO\s+(?:STRICT\s+)?[\w.]+(?:\s*,\s*[\w.]+)*"
    # (A WITH's final SELECT too: left in, it is SELECT INTO a new table, which PostgreSQL 14
    # refuses to PREPARE, "utility statements cannot be prepared"; 15 on prepare it.)
    sql = re.sub(rf"^((?:SELECT|WITH)\b.*?){target}(?=\s+FROM\b)", r"\1", sql, flags=re.DOTALL)
    sql = re.sub(rf"(\bRETURNING\b.*?){target}\s*$", r"\1", sql, flags=re.DOTALL)
    for number, name in enumerate(stmt.params, start=1):
        sql = re.sub(rf"(?<![\w.]){re.escape(name)}(?!\w)", f"${number}", sql)
    return " ".join(sql.split())


def generic_plan(
    conn: psycopg.Connection, sql: str, types: list[str], function: str | None = None
) -> dict[str, Any]:
    """The plan a session that cached a generic plan of sql would run; with ``function``, under
    the settings that function sets for its statements (its SET clauses: enable_seqscan = off,
    say), as they run inside it."""
    settings: list[str] = []
    if function is not None:
        (config,) = conn.execute(
            "SELECT coalesce(p.proconfig, '{}') FROM pg_catalog.pg_proc AS p WHERE p.oid = %s::regproc",
            (f"harvest.{function}",),
        ).fetchone()
        settings = [entry.split("=", 1)[0] for entry in config]
        for entry in config:
            name, value = entry.split("=", 1)
            conn.execute("SELECT pg_catalog.set_config(%s, %s, false)", (name, value))
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute(f"PREPARE generic_probe ({', '.join(types)}) AS {sql}")
    try:
        nulls = ", ".join(["NULL"] * len(types))
        (explained,) = conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE generic_probe ({nulls})").fetchone()
    finally:
        conn.execute("DEALLOCATE generic_probe")
        conn.execute("RESET plan_cache_mode")
        for name in settings:
            conn.execute(f"RESET {name}")
    return explained[0]["Plan"]


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def access_paths(plan: dict[str, Any], relation: str) -> list[str]:
    """How each scan of relation reads it: an index name, or the node type (Seq Scan, ...)."""
    paths = []
    for node in nodes(plan):
        if node.get("Relation Name") != relation or node["Node Type"] == "ModifyTable":
            continue
        if node["Node Type"] == "Bitmap Heap Scan":
            paths += [n["Index Name"] for n in nodes(node) if "Index Name" in n]
        else:
            paths.append(node.get("Index Name", node["Node Type"]))
    return paths


def assert_reads_only_through(plan: dict[str, Any], expected: dict[str, set[str]], sql: str) -> None:
    """Each relation in expected is read, and only through its indexes there."""
    for relation, indexes in expected.items():
        paths = access_paths(plan, relation)
        assert paths, f"the plan does not read harvest.{relation}:\n{sql}"
        assert set(paths) <= indexes, (
            f"generic plan reads harvest.{relation} through {paths}, expected only {sorted(indexes)}:\n{sql}"
        )


@pytest.fixture
def never_analysed(conn: psycopg.Connection) -> psycopg.Connection:
    """The cloned database as migrated: empty, and no table analysed (the state of the trap)."""
    stats = conn.execute(
        "SELECT c.relname, c.reltuples FROM pg_catalog.pg_class AS c"
        " WHERE c.relnamespace = 'harvest'::regnamespace AND c.relname IN ('executions', 'tasks', 'events')"
    ).fetchall()
    assert len(stats) == 3 and all(tuples < 0 for _, tuples in stats), (
        f"not a never-analysed database: {stats}"
    )
    return conn


# -- start_workflow: the prior run of (workflow_name, workflow_id) ----------------------------------

START_LOOKUP = Statement(
    "_start_resolve_prior",
    r"SELECT \* INTO v_prior FROM harvest\.executions",
    {"p_workflow_name": "text", "p_workflow_id": "text"},
)
# executions_active_workflow_id leads with (workflow_name, workflow_id), executions_workflow_id_runs
# with (workflow_id, workflow_name) (migration 0136); executions_name_created does not, and walks
# every run of the workflow name.
START_INDEXES = {"executions_workflow_id_runs", "executions_active_workflow_id"}

ROWS = (
    "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at)"
    " SELECT gen_random_uuid(), {name}, {workflow_id}, {status}, now() - g * interval '1 second'"
    " FROM generate_series(1, 2000) AS g"
)
DISTRIBUTIONS = {
    "never analysed, empty": [],
    "analysed: one workflow name, many ids, all terminal": [
        ROWS.format(name="'wf'", workflow_id="'order-' || g", status="'COMPLETED'"),
        "ANALYZE harvest.executions",
    ],
    "analysed: a name per run, all running": [
        ROWS.format(name="'wf-' || g", workflow_id="'order-' || g", status="'RUNNING'"),
        "ANALYZE harvest.executions",
    ],
    "analysed: one key, many runs": [
        ROWS.format(name="'wf'", workflow_id="'order'", status="'FAILED'"),
        "ANALYZE harvest.executions",
    ],
}


@pytest.mark.parametrize("distribution", list(DISTRIBUTIONS))
def test_start_workflow_prior_lookup_keeps_its_index(
    never_analysed: psycopg.Connection, distribution: str
) -> None:
    conn = never_analysed
    for setup in DISTRIBUTIONS[distribution]:
        conn.execute(setup)
    sql = plain_sql(conn, START_LOOKUP)
    plan = generic_plan(conn, sql, list(START_LOOKUP.params.values()))
    assert_reads_only_through(plan, {"executions": START_INDEXES}, sql)


def test_start_workflow_on_the_generic_plan_prefers_the_running_prior(
    never_analysed: psycopg.Connection,
) -> None:
    """On the generic plan, with every run created at the same instant, the lookup still
    returns the RUNNING run before a terminal one."""
    conn = never_analysed
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute("SET harvest.fake_now = '2030-01-01 00:00:00+00'")
    first = conn.execute(
        "SELECT execution_id FROM harvest.start_workflow('wf', p_workflow_id => 'k')"
    ).fetchone()
    again = conn.execute(
        "SELECT execution_id, started_fresh FROM harvest.start_workflow('wf', p_workflow_id => 'k')"
    ).fetchone()
    assert again == (first[0], False)
    conn.execute("SELECT harvest._close_execution(%s, 'FAILED', NULL, NULL)", first)
    fresh = conn.execute(
        "SELECT execution_id, started_fresh FROM harvest.start_workflow("
        "'wf', p_workflow_id => 'k', p_reuse_policy => 'allow_duplicate_failed_only')"
    ).fetchone()
    assert fresh[1] and fresh[0] != first[0]
    latest = conn.execute(
        "SELECT execution_id, started_fresh FROM harvest.start_workflow("
        "'wf', p_workflow_id => 'k', p_reuse_policy => 'allow_duplicate_failed_only')"
    ).fetchone()
    assert latest == (fresh[0], False)


# -- an external signal or cancel by business key: the running run, else the latest ----------------

EXTERNAL_LOOKUPS = [
    Statement(
        "_locate_external_target",
        r"SELECT r\.id, r\.status, r\.created_at FROM unnest",
        {"v_names": "text[]", "p_workflow_id": "text"},
    ),
]
# Under the workflow name(s) (all of them, read by _workflow_names, for a workflow_id alone):
# the indexes leading with (workflow_name, workflow_id), never a scan of every run.
EXTERNAL_INDEXES = START_INDEXES


@pytest.mark.parametrize("distribution", list(DISTRIBUTIONS))
@pytest.mark.parametrize("stmt", EXTERNAL_LOOKUPS, ids=["by name"])
def test_an_external_target_by_business_key_is_found_through_an_index(
    never_analysed: psycopg.Connection, distribution: str, stmt: Statement
) -> None:
    conn = never_analysed
    for setup in DISTRIBUTIONS[distribution]:
        conn.execute(setup)
    sql = plain_sql(conn, stmt)
    plan = generic_plan(conn, sql, list(stmt.params.values()))
    assert_reads_only_through(plan, {"executions": EXTERNAL_INDEXES}, sql)


def test_the_workflow_names_are_read_one_index_probe_each(never_analysed: psycopg.Connection) -> None:
    """_workflow_names() (a workflow_id given without its name) reads the names off an index,
    never every run."""
    conn = never_analysed
    conn.execute(ROWS.format(name="'wf-' || (g % 3)", workflow_id="'order-' || g", status="'COMPLETED'"))
    conn.execute("ANALYZE harvest.executions")
    assert conn.execute("SELECT harvest._workflow_names()").fetchone()[0] == ["wf-0", "wf-1", "wf-2"]
    source = function_source(conn, "_workflow_names").strip().rstrip(";")
    (explained,) = conn.execute(f"EXPLAIN (FORMAT JSON) {source}").fetchone()
    assert "Seq Scan" not in {n["Node Type"] for n in nodes(explained[0]["Plan"])}, explained


# -- the other hot-path statements --------------------------------------------------------------

RUNNING_TEST = (
    "`e.status = 'RUNNING'` implies the predicate of the partial index "
    "executions_active_workflow_id, and the planner scans all of it filtering on id; "
    "write the check so it does not, e.g. `(e.status = 'RUNNING') IS TRUE`, which leaves "
    "executions_pkey the only index"
)
ID_LIST = (
    "a lookup of a list of ids runs as a Seq Scan (a Hash Join, or a nested loop over a "
    "materialised Seq Scan) of the whole table; probe the primary key once per id through a "
    "LATERAL subquery the planner cannot flatten (FOR UPDATE inside, or OFFSET 0)"
)
BY_PK = {"executions": {"executions_pkey"}}


# _may_hand_off's one SQL expression (inlined into its callers' queries), its probes included.
HAND_OFF_PROBE = Statement(
    "_may_hand_off",
    r"SELECT p_worker_queues IS NOT NULL",
    {"p_queue": "text", "p_priority": "integer", "p_worker_queues": "text[]"},
)

# claim_tasks' probe of its queues' due timers (before _fire_due_timers' call).
CLAIM_TIMER_PROBE = Statement(
    "claim_tasks",
    r"SELECT true FROM harvest\.tasks AS t\s+WHERE t\.kind = 'timer'",
    {"v_now": "timestamptz", "p_queues": "text[]"},
    end=r"\)\s*THEN\b",
)


def case(stmt: Statement, expected: dict[str, set[str]], why: str, id: str):
    """A statement, the only indexes its generic plan may read through (planned under its
    function's own settings), and the trap it avoids."""
    return pytest.param(stmt, expected, why, id=id)


TRAPS = [
    case(
        Statement(
            "_ensure_workflow_task",
            r"INSERT INTO harvest\.tasks",
            {"p_execution_id": "uuid", "v_now": "timestamptz"},
        ),
        BY_PK,
        f"core.sql: {RUNNING_TEST}",
        id="_ensure_workflow_task",
    ),
    case(
        Statement(
            "_fire_due_timers", r"PERFORM 1 FROM harvest\.executions", {"v_timer.execution_id": "uuid"}
        ),
        BY_PK,
        f"claim.sql: {RUNNING_TEST}",
        id="_fire_due_timers-lock",
    ),
    case(
        Statement(
            "_hand_workflow_task",
            r"INSERT INTO harvest\.tasks",
            {
                "p_execution_id": "uuid",
                "v_now": "timestamptz",
                "p_worker_id": "text",
                "p_workflow_lease_secs": "double precision",
            },
        ),
        BY_PK,
        f"claim.sql: {RUNNING_TEST}",
        id="_hand_workflow_task",
    ),
    case(
        Statement(
            "_claim_head",
            r"SELECT \(coalesce\(array_agg\(head\.id",
            {"p_queues": "text[]", "p_now": "timestamptz", "p_window": "integer"},
        ),
        {"tasks": {"tasks_claimable"}},
        "claim.sql: the head of each polled queue walks tasks_claimable in claim order "
        "(claim_tasks keeps this plan: test_the_claim_head_keeps_its_generic_plan_at_depth)",
        id="_claim_head",
    ),
    case(
        Statement(
            "_claim_ids",
            r"WITH locked AS",
            {
                "p_ids": "bigint[]",
                "p_worker_id": "text",
                "p_limit": "integer",
                "p_workflow_lease_secs": "double precision",
                "p_now": "timestamptz",
            },
        ),
        {"tasks": {"tasks_pkey"}},
        f"claim.sql: {ID_LIST}, e.g. CROSS JOIN LATERAL (SELECT t.id FROM harvest.tasks AS t "
        "WHERE t.id = c.id AND t.status = 'pending' FOR UPDATE SKIP LOCKED)",
        id="_claim_ids",
    ),
    case(
        Statement(
            "_claim_candidates",
            r"RETURN QUERY\s+SELECT c\.id[^;]*FROM harvest\._claim_ids",
            {
                "v_ids": "bigint[]",
                "p_worker_id": "text",
                "p_limit": "integer",
                "p_workflow_lease_secs": "double precision",
                "p_now": "timestamptz",
            },
        ),
        BY_PK,
        f"claim.sql: {ID_LIST}, e.g. LEFT JOIN LATERAL (SELECT x.workflow_name, ... FROM "
        "harvest.executions AS x WHERE x.id = c.execution_id AND (...) OFFSET 0) AS l ON true",
        id="claim_tasks-executions",
    ),
    case(
        Statement(
            "_claim_candidates",
            r"RETURN QUERY\s+SELECT c\.id[^;]*FROM unnest\(v_claimed\)",
            {"v_claimed": "bigint[]", "p_worker_id": "text"},
        ),
        {"executions": {"executions_pkey"}, "tasks": {"tasks_pkey"}},
        f"claim.sql (gated claims): {ID_LIST}",
        id="claim_tasks-gated",
    ),
    case(
        Statement(
            "claim_named_tasks",
            r"SELECT coalesce\(array_agg\(t\.id ORDER BY t\.priority",
            {"p_task_ids": "bigint[]", "p_queues": "text[]", "v_now": "timestamptz"},
        ),
        # (and the hand-off rules' probes, _may_hand_off inlined: the heads of the two queue indexes)
        {"tasks": {"tasks_pkey", "tasks_claimable", "tasks_claimable_aging"}},
        f"claim.sql (Redis dispatch): {ID_LIST}",
        id="claim_named_tasks",
    ),
    case(
        Statement(
            "_order_candidates",
            r"SELECT coalesce\(array_agg\(r\.id",
            {
                "p_queues": "text[]",
                "p_now": "timestamptz",
                "p_window": "integer",
                "v_fair_queues": "text[]",
                "v_fair_keys": "text[]",
                "v_fair_take": "integer[]",
            },
        ),
        {"tasks": {"tasks_claimable", "tasks_claimable_aging", "tasks_claimable_fair"}},
        "claim.sql (fair and ageing queues): each window walks its own index in its order and "
        "carries its rows' columns (no probe per candidate, no scan of the table)",
        id="_order_candidates-windows",
    ),
    case(
        Statement(
            "complete_activities",
            r"SELECT p_task_ids\[s\.i\] AS id, p_fencing_tokens\[s\.i\] AS token, p_results",
            {
                "p_task_ids": "bigint[]",
                "p_fencing_tokens": "bigint[]",
                "p_results": "jsonb[]",
                "p_decisions": "jsonb[]",
            },
        ),
        {"tasks": {"tasks_pkey"}},
        f"activities.sql: {ID_LIST}, e.g. ORDER BY (SELECT t.execution_id FROM harvest.tasks AS t "
        "WHERE t.id = p_task_ids[s.i]), id",
        id="complete_activities-order",
    ),
    case(
        Statement(
            "complete_workflow_tasks",
            r"SELECT p_task_ids\[s\.i\] AS id, p_fencing_tokens\[s\.i\] AS token, p_throughs",
            {
                "p_task_ids": "bigint[]",
                "p_fencing_tokens": "bigint[]",
                "p_throughs": "bigint[]",
                "p_commands": "jsonb[]",
                "p_hand_off_slots": "integer[]",
                "p_owner_epochs": "bigint[]",
            },
        ),
        {"tasks": {"tasks_pkey"}},
        f"decide.sql: {ID_LIST}, as complete_activities",
        id="complete_workflow_tasks-order",
    ),
    case(
        Statement(
            "_may_decide_on_result",
            r"PERFORM 1 FROM harvest\.tasks AS t WHERE t\.execution_id",
            {"p_execution.id": "uuid"},
        ),
        {"tasks": {"tasks_one_workflow_task", "tasks_execution_seq"}},
        "activities.sql: the open workflow task of one execution, by the partial unique index "
        "(a literal kind = 'workflow' matches its predicate in a generic plan)",
        id="_may_decide_on_result-open-workflow-task",
    ),
    case(
        HAND_OFF_PROBE,
        {"tasks": {"tasks_claimable", "tasks_claimable_aging"}, "fair_queues": {"fair_queues_pkey"}},
        "claim.sql (hand-off): the head of one queue's tasks_claimable above a priority and of its "
        "tasks_claimable_aging, each in its order (an EXISTS over `priority > $n` was cached as a "
        "sequential scan of every pending task; an EXISTS drops the ORDER BY and LIMIT)",
        id="_may_hand_off-priority",
    ),
    case(
        Statement(
            "_update_held_rows",
            r"UPDATE harvest\.executions AS x\s+SET last_event_id = u\.last_event_id, "
            r"history_bytes = x\.history_bytes \+ u\.bytes, decided_by = p_decided_by,\s+"
            r"decided_through = u\.decided_through",
            {"p_rows": "harvest.held_run_row[]", "p_decided_by": "text"},
        ),
        BY_PK,
        f"core.sql (a batch's appends' row updates): {ID_LIST}",
        id="_update_held_rows-appends",
    ),
    case(
        Statement(
            "_update_held_rows",
            r"WITH closed AS",
            {"p_rows": "harvest.held_run_row[]", "p_decided_by": "text", "v_now": "timestamptz"},
        ),
        BY_PK,
        f"core.sql (a batch's closes): {ID_LIST}",
        id="_update_held_rows-closes",
    ),
    case(
        Statement(
            "_after_closes",
            r"WITH dropped AS",
            {"p_ids": "uuid[]"},
        ),
        {"tasks": {"tasks_execution_seq", "tasks_one_workflow_task"}},
        "core.sql: a batch's closed runs' tasks, by the run's index prefix, never every task",
        id="_after_closes-tasks",
    ),
    case(
        Statement(
            "_after_closes",
            r"WITH told AS",
            {"p_ids": "uuid[]", "v_locked": "boolean[]"},
        ),
        {"result_waiters": {"result_waiters_pkey"}},
        "core.sql: a batch's closed runs' result waiters, by the primary key's prefix",
        id="_after_closes-waiters",
    ),
    case(
        Statement(
            "_after_closes",
            r"SELECT array_agg\(u\.i ORDER BY u\.i\) INTO v_relaying",
            {"p_ids": "uuid[]", "p_statuses": "text[]", "p_parents": "uuid[]"},
        ),
        {
            # (by parent, or by parent and the live statuses: 0095's index seeks those)
            "executions": {"executions_parent_created", "executions_parent_status_created"},
            "cross_shard_children": {"cross_shard_children_parent"},
        },
        "core.sql: the relays' probe of a batch's closes, one probe of each index per run",
        id="_after_closes-relay-probe",
    ),
    case(
        Statement(
            "complete_activities",
            r"DELETE FROM harvest\.tasks AS t\s+WHERE t\.id = v_item\.id",
            {"v_item.id": "bigint", "v_item.token": "bigint", "v_now": "timestamptz"},
        ),
        {"tasks": {"tasks_pkey"}},
        "activities.sql (a usual result, one statement): the acceptance rules written as plain "
        "conditions (`t.status = 'running' AND t.lease_expires_at >= now`) imply the predicate of the "
        "partial index tasks_running_lease, and early custom plans read every running task through "
        "it; as _claimed_task_problem's CASE, inlined, nothing implies it",
        id="complete_activities-usual-result",
    ),
    case(
        Statement(
            "_decide_cancel_timer",
            r"DELETE FROM harvest\.tasks AS t\s+WHERE t\.execution_id",
            {"p_execution.id": "uuid", "v_timer_seq": "integer"},
        ),
        {"tasks": {"tasks_execution_seq"}},
        "decide.sql (cancel_timer): `t.kind = 'timer'` implies the predicate of the partial index "
        "tasks_timers_due, and the planner scans every timer filtering on execution and seq; e.g. "
        "`t.kind IN ('activity', 'timer') AND (t.kind = 'timer') IS TRUE` leaves "
        "tasks_execution_seq (execution_id, seq)",
        id="_decide_cancel_timer",
    ),
    case(
        Statement(
            "_owner_candidates",
            r"SELECT coalesce\(array_agg\(c\.id ORDER BY c\.ord\)",
            {"p_ids": "bigint[]", "p_worker_id": "text", "p_now": "timestamptz"},
        ),
        {"tasks": {"tasks_pkey"}, "executions": {"executions_pkey"}},
        f"owners.sql (a claim in owner mode): {ID_LIST}",
        id="_owner_candidates",
    ),
    case(
        Statement(
            "_acquire_partitions",
            r"SELECT harvest\.partition_of\(e\.workflow_id\) AS partition_id",
            {"p_ids": "bigint[]"},
        ),
        {"tasks": {"tasks_pkey"}, "executions": {"executions_pkey"}},
        f"owners.sql (a claim in owner mode): {ID_LIST}",
        id="_acquire_partitions",
    ),
    # The statements below run inside claim_tasks, planned generically since the hot entry
    # points force it (test_the_hot_entry_points_plan_each_statement_once).
    case(
        CLAIM_TIMER_PROBE,
        {"tasks": {"tasks_timers_due"}},
        "claim.sql: whether a timer is due, from the oldest entry of tasks_timers_due "
        "(test_a_claim_probes_its_due_timers_by_index_among_many_future_ones)",
        id="claim_tasks-timer-probe",
    ),
    case(
        Statement(
            "_fire_due_timers",
            r"SELECT t\.id, t\.execution_id, t\.seq\s+FROM harvest\.tasks",
            {"v_now": "timestamptz", "p_queues": "text[]", "p_limit": "integer"},
        ),
        {"tasks": {"tasks_timers_due"}},
        "claim.sql: the due timers in due order, from the oldest entry of tasks_timers_due",
        id="_fire_due_timers-due",
    ),
    case(
        Statement(
            "claim_tasks",
            r"SELECT 1 FROM harvest\.tasks AS t\s+WHERE t\.queue = ANY\(p_queues\)[^;()]*?"
            r"t\.priority_aging_secs IS NOT NULL",
            {"p_queues": "text[]"},
            end=r"\)\s*OR EXISTS",
        ),
        {"tasks": {"tasks_claimable_aging"}},
        "claim.sql: whether the polled queues hold ageing work, a probe of its partial index",
        id="claim_tasks-ageing-probe",
    ),
    case(
        Statement(
            "claim_tasks",
            r"SELECT 1 FROM harvest\.tasks AS t\s+WHERE t\.queue = ANY\(p_queues\)[^;()]*?"
            r"t\.fairness_key IS NOT NULL",
            {"p_queues": "text[]"},
            end=r"\)\s*THEN\b",
        ),
        {"tasks": {"tasks_claimable_fair"}},
        "claim.sql: whether the polled queues hold fairness-keyed work, a probe of its partial index",
        id="claim_tasks-fair-probe",
    ),
    case(
        Statement(
            "_continue_as_new",
            r"SELECT array_agg\(ev\.event_data ORDER BY ev\.event_id\)",
            {"p_execution.id": "uuid", "p_through": "bigint"},
        ),
        {"events": {"events_pkey"}},
        "decide.sql (continue_as_new): the signals after the decision's point, by the run's "
        "primary-key prefix, not every event past an event id",
        id="_continue_as_new-signals",
    ),
    case(
        Statement(
            "claim_cross_shard_children",
            r"UPDATE harvest\.cross_shard_children AS c\s+SET next_attempt_at = v_now",
            {"v_now": "timestamptz", "p_limit": "integer", "p_lease_secs": "double precision"},
        ),
        {"cross_shard_children": {"cross_shard_children_due", "cross_shard_children_pkey"}},
        "cross_shard.sql (the pump's claim, each scanner tick): the due rows in due order down "
        "cross_shard_children_due, not every child in flight read and sorted (migration 0118), and "
        f"updated by their ids: {ID_LIST}",
        id="claim_cross_shard_children",
    ),
    case(
        Statement(
            "claim_remote_relays",
            r"UPDATE harvest\.relays AS r\s+SET claimed_until = v_now",
            {"v_now": "timestamptz", "p_limit": "integer", "p_lease_secs": "double precision"},
        ),
        {"relays": {"relays_remote", "relays_pkey"}},
        "relays.sql (the pump's claim of relays, each scanner tick): the remote relays in id order "
        f"down relays_remote, and updated by their ids: {ID_LIST}",
        id="claim_remote_relays",
    ),
    case(
        Statement("run_retention", r"DELETE FROM harvest\.relays AS r", {"v_ids": "uuid[]"}),
        {"relays": {"relays_target"}},
        "retention.sql (each janitor batch): its runs' relays by a probe of relays_target each, not "
        "a read of every relay of the shard (migration 0119)",
        id="run_retention-relays",
    ),
]


@pytest.mark.parametrize(("stmt", "expected", "why"), TRAPS)
def test_hot_path_statement_keeps_its_index(
    never_analysed: psycopg.Connection, stmt: Statement, expected: dict[str, set[str]], why: str
) -> None:
    sql = plain_sql(never_analysed, stmt)
    plan = generic_plan(never_analysed, sql, list(stmt.params.values()), stmt.function)
    assert_reads_only_through(plan, expected, f"{sql}\n(the trap: {why})")


# claim_tasks' head statement (_claim_head, inlined into it).
CLAIM_HEAD = Statement(
    "claim_tasks",
    r"SELECT h\.ids, h\.gated, h\.gates INTO v_ids, v_gated, v_gates\s+FROM harvest\._claim_head",
    {"p_queues": "text[]", "v_now": "timestamptz", "v_window": "integer"},
)
GATE_BUILDERS = [CLAIM_HEAD] + [
    t.values[0] for t in TRAPS if t.values[0].function in ("_order_candidates", "claim_named_tasks")
]


@pytest.mark.parametrize("stmt", GATE_BUILDERS, ids=lambda stmt: stmt.function)
def test_the_gate_columns_are_inlined_into_the_claim_statements(
    never_analysed: psycopg.Connection, stmt: Statement
) -> None:
    """The claim's statements build each candidate's gate columns through harvest._is_gated and
    harvest._gate_of (claim.sql). Those are plain SQL expressions that the planner must inline:
    a call left in the plan would run once per candidate row, a function call where the
    written-out expression cost nothing (a PL/pgSQL body, STRICT or SECURITY DEFINER would
    each keep them from being inlined)."""
    sql = plain_sql(never_analysed, stmt)
    types = list(stmt.params.values())
    never_analysed.execute("SET plan_cache_mode = force_generic_plan")
    never_analysed.execute(f"PREPARE gate_probe ({', '.join(types)}) AS {sql}")
    try:
        nulls = ", ".join(["NULL"] * len(types))
        plan = "\n".join(
            row[0]
            for row in never_analysed.execute(f"EXPLAIN (VERBOSE, COSTS OFF) EXECUTE gate_probe ({nulls})")
        )
    finally:
        never_analysed.execute("DEALLOCATE gate_probe")
        never_analysed.execute("RESET plan_cache_mode")
    assert "gated_candidate" in plan, f"the statement builds no gate columns:\n{plan}"
    assert "_gate_of" not in plan and "_is_gated" not in plan, f"a gate function was not inlined:\n{plan}"


def test_the_hand_off_probe_is_bounded_by_the_priority_in_the_index(
    never_analysed: psycopg.Connection,
) -> None:
    """_may_hand_off's priority probe stops at the first entry of tasks_claimable at or below
    the new task's priority without reading the heap: the bound is an index condition, not a
    filter applied to each entry (a filter reads the queue's live head and the dead entries of
    claimed tasks before it from the heap; docs/performance.md, "Hand-off probe, sixth cut")."""
    sql = plain_sql(never_analysed, HAND_OFF_PROBE)
    plan = generic_plan(never_analysed, sql, list(HAND_OFF_PROBE.params.values()))
    scans = [n for n in nodes(plan) if n.get("Index Name") == "tasks_claimable"]
    assert len(scans) == 1, f"expected one scan of tasks_claimable:\n{sql}\n{plan}"
    condition = scans[0].get("Index Cond", "")
    assert "priority >" in condition and "queue =" in condition, (
        f"the priority bound is not in the index condition ({condition!r}):\n{sql}"
    )
    assert "Filter" not in scans[0], f"the probe filters entries ({scans[0]['Filter']!r}):\n{sql}"


def test_the_claim_head_keeps_its_generic_plan_at_depth(conn: psycopg.Connection) -> None:
    """claim_tasks' head statement (_claim_head, inlined) settles on its generic plan after the
    plan cache's five custom ones, with 2,000 pending tasks analysed, and that plan walks
    tasks_claimable. The trap: with the queues, the due time and the window in sight, a custom
    plan looks cheaper than the generic one (one queue's unnest is one row, LIMIT 56 is 56 rows),
    so the cache planned the head afresh on every claim; a SET plan_cache_mode on the function
    kept that off but cost a non-inlined call and the setting's save and restore per claim."""
    conn.execute(
        "SELECT count(*) FROM generate_series(1, 2000) AS g,"
        " harvest.start_workflow('head_wf', '[]', 'head-' || g, 'head_q') AS s"
    )
    conn.execute("ANALYZE harvest.tasks")
    sql = plain_sql(conn, CLAIM_HEAD)
    conn.execute(f"PREPARE claim_head (text[], timestamptz, integer) AS {sql}")
    try:
        for _ in range(8):
            conn.execute("EXECUTE claim_head (ARRAY['head_q'], now(), 56)")
        row = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_catalog.pg_prepared_statements"
            " WHERE name = 'claim_head'"
        ).fetchone()
        (explained,) = conn.execute(
            "EXPLAIN (FORMAT JSON) EXECUTE claim_head (ARRAY['head_q'], now(), 56)"
        ).fetchone()  # type: ignore[misc]
    finally:
        conn.execute("DEALLOCATE claim_head")
    assert row == (3, 5), f"(generic, custom) plans of 8 executions: {row}, planned afresh:\n{sql}"
    assert access_paths(explained[0]["Plan"], "tasks") == ["tasks_claimable"], (
        f"the head's plan does not walk tasks_claimable (is _claim_head inlined?):\n{sql}"
    )


# -- start_workflows: whether a batch is plain ---------------------------------------------------

REGISTRATIONS = {
    "never analysed, empty": [],
    "analysed: 3,000 registrations and declared policies": [
        (
            "INSERT INTO harvest.registered_workflows (queue, workflow_name, first_registered_at,"
            " last_registered_at) SELECT 'q' || (g % 10), 'wf-' || g, now(), now()"
            " FROM generate_series(1, 3000) AS g"
        ),
        (
            "INSERT INTO harvest.flow_policies (kind, name, policy, updated_at)"
            " SELECT 'workflow', 'wf-' || g, '{}', now() FROM generate_series(1, 3000) AS g"
        ),
        "ANALYZE harvest.registered_workflows",
        "ANALYZE harvest.flow_policies",
    ],
}


@pytest.mark.parametrize("registrations", list(REGISTRATIONS))
def test_the_plain_start_check_probes_the_policy_and_registrations_by_key(
    never_analysed: psycopg.Connection, registrations: str
) -> None:
    """_starts_plain (every start_workflows call) reads a start's flow policy and its queue's
    registrations by key (the primary key; by name where a start names no queue). The trap:
    written as EXISTS over the batch's elements, the planner hashed each whole table on every
    call (a start cost 7 ms at 3,000 registrations)."""
    conn = never_analysed
    for setup in REGISTRATIONS[registrations]:
        conn.execute(setup)
    source = function_source(conn, "_starts_plain")
    found = re.search(r"RETURN (jsonb_array_length\(p_starts\).*?);", source, re.DOTALL)
    assert found is not None, "no RETURN jsonb_array_length(p_starts) ... in _starts_plain: update this test"
    sql = "SELECT " + re.sub(r"\bp_starts\b", "$1", re.sub(r"\bp_limit\b", "$2", found.group(1)))
    plan = generic_plan(conn, " ".join(sql.split()), ["jsonb", "integer"])
    assert_reads_only_through(
        plan,
        {
            "flow_policies": {"flow_policies_pkey"},
            # (By name: _start_queue, for a start that names no queue, migration 0104.)
            "registered_workflows": {"registered_workflows_pkey", "registered_workflows_by_name"},
        },
        sql,
    )
    assert not any(n.get("Subplan Name", "").startswith("hashed") for n in nodes(plan)), sql


# -- a batch's closes: the runs' rows and their tasks by key, whatever the tables' size then ---------


def test_a_batch_of_closes_reads_its_runs_and_their_tasks_by_key(conn: psycopg.Connection) -> None:
    """_update_held_rows' closes (one UPDATE of executions joined to the batch's rows) and
    _after_closes' delete of the closed runs' tasks read both tables through their indexes,
    never a sequential scan. The trap: on a young, never-analysed database a batch of a few
    dozen closes looked cheaper as a hash join over a scan of every run (and of every task),
    the plan cache kept that plan for the session, and each close batch of a drain then read
    the whole of both tables as they grew (docs/performance.md, "Canonical drain, eleventh
    cut"). The functions plan their statements with sequential scans off."""
    conn.execute(
        "SELECT count(*) FROM generate_series(1, 2000) AS g,"
        " harvest.start_workflow('close_wf', '[]', 'close-' || g, 'close_q') AS s"
    )
    runs = conn.execute(
        "SELECT array_agg(e.id), array_agg(e.last_event_id) FROM ("
        " SELECT e.id, e.last_event_id FROM harvest.executions AS e ORDER BY e.id LIMIT 50) AS e"
    ).fetchone()
    assert runs is not None and len(runs[0]) == 50
    with conn.transaction():
        conn.execute(
            "SELECT harvest._update_held_rows(ARRAY("
            " SELECT ROW(u.id, u.last_event_id, 0, 0, NULL, false, 'COMPLETED', '6'::jsonb, NULL)"
            "::harvest.held_run_row FROM unnest(%s::uuid[], %s::bigint[]) AS u (id, last_event_id)), 'w')",
            runs,
        )
        scans = dict(
            conn.execute(
                "SELECT relname, seq_scan FROM pg_catalog.pg_stat_xact_user_tables"
                " WHERE schemaname = 'harvest' AND relname IN ('executions', 'tasks')"
            ).fetchall()
        )
    assert scans == {"executions": 0, "tasks": 0}, f"sequential scans in a batch's closes: {scans}"
    closed = conn.execute(
        "SELECT count(*) FILTER (WHERE e.status = 'COMPLETED'),"
        " (SELECT count(*) FROM harvest.tasks AS t WHERE t.execution_id = ANY (%s::uuid[]))"
        " FROM harvest.executions AS e WHERE e.id = ANY (%s::uuid[])",
        (runs[0], runs[0]),
    ).fetchone()
    assert closed == (50, 0)


# -- the hot entry points: every statement of the call planned once per session ----------------

# Each runs every statement inside it (nested functions and triggers too) on the generic plan
# the session makes at its first execution, as the plan cache would after five custom plans
# (docs/performance.md, "One plan per statement for the hot entry points"); with the two
# helpers that already did. Nothing else: the retention janitor compares columns with its
# cutoff (`completed_at < v_cutoff`), whose generic plan reads the table whole.
HOT_ENTRY_POINTS = {
    "claim_tasks",
    "claim_named_tasks",
    "complete_activities",
    "complete_activities_with_claim",
    "complete_workflow_tasks",
    "start_workflows",
}
# (_queue_activities: its INSERT with a fair-queue probe per row, planned afresh on every call of
# complete_workflow_task, which sets nothing; docs/performance.md, "Fan-out row, thirteenth cut".)
FORCED_GENERIC = HOT_ENTRY_POINTS | {"_after_closes", "_order_candidates", "_queue_activities"}


def test_the_hot_entry_points_plan_each_statement_once(conn: psycopg.Connection) -> None:
    """The worker's per-run entry points carry `plan_cache_mode = force_generic_plan` beside
    their search_path (which harvest._secure_functions sets and keeps), and no other function
    does. The trap it avoids: each of a drain's worker backends made five custom plans of every
    statement before its generic one, and planned afresh on every call a statement whose custom
    plan looked cheaper (a start batch's aggregate, a decision batch's ordering)."""
    rows = conn.execute(
        "SELECT p.proname::text, coalesce(p.proconfig, ARRAY[]::text[]) FROM pg_catalog.pg_proc AS p"
        " WHERE p.pronamespace = 'harvest'::regnamespace"
    ).fetchall()
    forced = {name for name, config in rows if "plan_cache_mode=force_generic_plan" in config}
    assert forced == FORCED_GENERIC
    for name, config in rows:
        if name in HOT_ENTRY_POINTS:
            assert "search_path=pg_catalog, harvest, pg_temp" in config, (name, config)


def test_a_hot_call_plans_its_nested_statements_generically(conn: psycopg.Connection) -> None:
    """The setting holds for everything a hot call runs (here a trigger on the tasks a start
    batch inserts) and ends with the call: the session keeps its own."""
    conn.execute("CREATE TEMPORARY TABLE seen_modes (mode text)")
    conn.execute(
        "CREATE FUNCTION pg_temp.note_plan_cache_mode() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN INSERT INTO pg_temp.seen_modes VALUES (current_setting('plan_cache_mode'));"
        " RETURN NULL; END $$"
    )
    with conn.transaction(force_rollback=True):
        conn.execute(
            "CREATE TRIGGER note_plan_cache_mode AFTER INSERT ON harvest.tasks"
            " FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.note_plan_cache_mode()"
        )
        started = conn.execute(
            "SELECT count(*) FROM harvest.start_workflows(%s::jsonb)",
            ('[{"workflow_name": "modes_wf"}, {"workflow_name": "modes_wf"}]',),
        ).fetchone()
        seen = [mode for (mode,) in conn.execute("SELECT mode FROM pg_temp.seen_modes").fetchall()]
        after = conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()
    assert started == (2,)
    assert seen == ["force_generic_plan"]
    assert after == ("auto",)


def test_a_claim_probes_its_due_timers_by_index_among_many_future_ones(conn: psycopg.Connection) -> None:
    """claim_tasks asks whether one of its queues' timers is due before it fires any, in a
    plan made without the clock's value (a third of the timers due, the planner guesses).
    The trap: written as an EXISTS (which drops an ORDER BY and LIMIT), that plan was a
    sequential scan of every task, stopped at the first due timer; with 2,000 timers due in
    an hour and none now, each claim read the whole table (on main from a session's sixth
    claim, when the plan cache settled on the generic plan). In due order with a LIMIT it
    reads tasks_timers_due from its oldest entry."""
    conn.execute(
        "SELECT count(*) FROM generate_series(1, 2000) AS g,"
        " harvest.start_workflow('timer_wf', '[]', 'timer-' || g, 'timer_q') AS s"
    )
    conn.execute(
        "INSERT INTO harvest.tasks (execution_id, kind, queue, seq, due_at, scheduled_at)"
        " SELECT e.id, 'timer', 'timer_q', 2, now() + interval '1 hour', now() FROM harvest.executions AS e"
    )
    conn.execute("ANALYZE harvest.tasks")
    conn.execute("SELECT harvest.register_worker('timer-w', ARRAY['other_q'], 'host', 1)")
    scans = []
    for _ in range(8):
        with conn.transaction():
            claimed = conn.execute(
                "SELECT * FROM harvest.claim_tasks('timer-w', ARRAY['timer_q'], 1, 30)"
            ).fetchall()
            assert len(claimed) == 1 and claimed[0][1] == "workflow"
            (seq_scans,) = conn.execute(
                "SELECT seq_scan FROM pg_catalog.pg_stat_xact_user_tables"
                " WHERE schemaname = 'harvest' AND relname = 'tasks'"
            ).fetchone()  # type: ignore[misc]
            scans.append(seq_scans)
    assert scans == [0] * 8, f"sequential scans of tasks by each claim: {scans}"
    due = conn.execute(
        "SELECT count(*) FROM harvest.tasks WHERE kind = 'timer' AND status = 'pending' AND due_at <= now()"
    ).fetchone()
    assert due == (0,)


PATH_OPTIONS = {"retry": {"maximum_attempts": 3}, "start_to_close_secs": 30}
PATH_COMMAND = {"type": "schedule_activity", "seq": 1, "name": "noop", "input": [1], "queue": "path_q"}
PATH_CLOSE = {"result_text": "1", "hand_off_slots": 1, "commands": [{"type": "complete_workflow"}]}


def canonical_round(conn: psycopg.Connection, batch: int) -> None:
    """batch runs through the canonical path's hot calls, as a worker's group commits send
    them: a start batch, its claim, the decisions that hand an activity each, and the results
    that close the runs decided ahead."""
    starts = [{"workflow_name": "one_step", "input": [0], "queue": "path_q"} for _ in range(batch)]
    conn.execute("SELECT * FROM harvest.start_workflows(%s)", (Jsonb(starts),))
    tasks = conn.execute(
        "SELECT task_id, fencing_token, new_events_after + jsonb_array_length(new_events)"
        " FROM harvest.claim_tasks('path-w', ARRAY['path_q'], %s, 30)",
        (batch,),
    ).fetchall()
    assert len(tasks) == batch
    decided = conn.execute(
        "SELECT last_event_id, handed FROM harvest.complete_workflow_tasks("
        "%s, %s, %s, %s, %s::jsonb[], %s::integer[], 50000, 52428800, NULL)",
        (
            "path-w",
            [t[0] for t in tasks],
            [t[1] for t in tasks],
            [t[2] for t in tasks],
            [Jsonb([dict(PATH_COMMAND, options=PATH_OPTIONS)]) for _ in tasks],
            [1 for _ in tasks],
        ),
    ).fetchall()
    handed = [row[1][0] for row in decided]
    closed = conn.execute(
        "SELECT decided FROM harvest.complete_activities("
        "%s, %s, %s, %s::jsonb[], true, 30, %s::jsonb[], 50000, 52428800)",
        (
            "path-w",
            [h["task_id"] for h in handed],
            [h["fencing_token"] for h in handed],
            [Jsonb(1) for _ in handed],
            [Jsonb(dict(PATH_CLOSE, after=row[0])) for row in decided],
        ),
    ).fetchall()
    assert len(closed) == batch and all(row[0] is not None for row in closed), closed


def sequential_scans(conn: psycopg.Connection) -> dict[str, int]:
    """This transaction's sequential scans of the three big tables so far."""
    return dict(
        conn.execute(
            "SELECT relname, seq_scan FROM pg_catalog.pg_stat_xact_user_tables"
            " WHERE schemaname = 'harvest' AND relname IN ('executions', 'tasks', 'events')"
        ).fetchall()
    )


@pytest.mark.parametrize("planned", ["on the tables analysed", "on the young tables, then grown"])
def test_the_canonical_path_reads_no_table_whole_under_its_generic_plans(
    conn: psycopg.Connection, planned: str
) -> None:
    """Every statement the canonical path's hot calls run (canonical_round; nested functions
    and triggers included), planned once for the session as the hot entry points force it,
    reads executions, tasks and events by key: no sequential scan of any once 2,000 other runs
    are pending. Whether the session planned them after an ANALYZE of the grown tables, or at
    its first round on the young, never-analysed database and kept those plans as the tables
    grew (as a drain's worker sessions do: a plan that reads a table whole then costs more
    with every run, on every call; docs/performance.md, "Canonical drain, eleventh cut")."""
    conn.execute("SELECT harvest.register_worker('path-w', ARRAY['path_q'], 'host', 1)")
    conn.execute("SELECT harvest.register_workflows(ARRAY['path_q'], ARRAY['one_step'])")
    conn.execute(
        """SELECT harvest.declare_flow_policies('{"workflows": {"one_step": {}}, "activities": {}}')"""
    )
    grow = (
        "SELECT count(*) FROM generate_series(1, 2000) AS g,"
        " harvest.start_workflow('bulk_wf', '[]', 'bulk-' || g, 'bulk_q') AS s"
    )
    with conn.transaction(force_rollback=True):
        if planned == "on the tables analysed":
            conn.execute(grow)
            for table in ("executions", "tasks", "events"):
                conn.execute(f"ANALYZE harvest.{table}")
        else:
            canonical_round(conn, 8)
            conn.execute(grow)
        before = sequential_scans(conn)
        for _ in range(6):
            canonical_round(conn, 8)
        after = sequential_scans(conn)
        finished = conn.execute(
            "SELECT count(*) FROM harvest.executions"
            " WHERE workflow_name = 'one_step' AND status = 'COMPLETED'"
        ).fetchone()
    assert finished == (48 if planned == "on the tables analysed" else 56,)
    scans = {table: after.get(table, 0) - before.get(table, 0) for table in ("executions", "tasks", "events")}
    assert scans == {"executions": 0, "tasks": 0, "events": 0}, (
        f"sequential scans on the canonical path: {scans}"
    )
