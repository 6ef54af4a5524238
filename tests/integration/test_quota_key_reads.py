"""What a quota key's live-run reads cost once the key has a long history.

A quota'd start counts the key's live runs (functions/flow_quotas.sql, quota_usage's
max_active_executions, called by _check_quota), and the retention janitor asks whether a live
run has the key before it prunes the key's flow_keys row (functions/retention.sql,
_flow_key_in_use). Both read the key's runs through executions_quota_key. The runs a key keeps
for history (finished, not yet deleted by retention) must not be read by either: a per-tenant
key with a year of kept runs would make every start of the tenant, and every janitor round,
read them all. executions_quota_key holds every run with a key; the live-run reads go through
executions_live_quota_key (migration 0088), which holds the live runs only.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from test_generic_plans import Statement, nodes, plain_sql

FINISHED = 10_000  # kept runs of each key
LIVE = {"RUNNING": 3, "PAUSED": 1}  # live runs of 'acme', started after its finished ones
OTHER_TENANTS = 2_000  # a live run each: the live runs of other keys are no business of 'acme's either

ACTIVE_COUNT = Statement(
    "quota_usage",
    r"SELECT count\(\*\) FROM harvest\.executions AS e\s+WHERE e\.quota_key = p_key AND e\.status",
    {"p_key": "text"},
    end=r"\);",  # the RETURN's closing parenthesis
)
IN_USE = Statement("_flow_key_in_use", r"SELECT EXISTS", {"p_kind": "text", "p_key": "text"})


@pytest.fixture
def long_history(conn: psycopg.Connection) -> psycopg.Connection:
    """Key 'acme': FINISHED finished runs, then its live ones; key 'gone': FINISHED finished runs;
    OTHER_TENANTS keys with a live run each."""
    insert = (
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, completed_at,"
        " quota_key) SELECT gen_random_uuid(), 'metered', %(key)s || '-' || g || %(status)s, %(status)s,"
        " '2030-01-01 00:00:00+00'::timestamptz + g * interval '1 second',"
        " CASE WHEN %(status)s IN ('RUNNING', 'PAUSED') THEN NULL"
        " ELSE '2030-01-01 00:00:00+00'::timestamptz + g * interval '2 second' END, %(key)s"
        " FROM generate_series(1, %(n)s) AS g"
    )
    for key in ("acme", "gone"):
        conn.execute(insert, {"key": key, "status": "COMPLETED", "n": FINISHED})
    for status, n in LIVE.items():
        conn.execute(insert, {"key": "acme", "status": status, "n": n})
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at, quota_key)"
        " SELECT gen_random_uuid(), 'metered', 'other-' || g, '2030-01-01 00:00:00+00', 'tenant-' || g"
        " FROM generate_series(1, %s) AS g",
        (OTHER_TENANTS,),
    )
    conn.execute("VACUUM ANALYZE harvest.executions")
    return conn


def _explain(conn: psycopg.Connection, stmt: Statement, plan_cache_mode: str, args: str) -> dict[str, Any]:
    sql = plain_sql(conn, stmt)
    types = ", ".join(stmt.params.values())
    conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
    conn.execute(f"PREPARE probe ({types}) AS {sql}")
    try:
        (explained,) = conn.execute(
            f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, FORMAT JSON) EXECUTE probe ({args})"
        ).fetchone()
    finally:
        conn.execute("DEALLOCATE probe")
        conn.execute("RESET plan_cache_mode")
    return explained[0]["Plan"]


def _assert_reads_only_live_runs(plan: dict[str, Any], live: int) -> None:
    """No row but a live run of the key is read (none dropped by a filter: a finished run of the
    key, or a live run of another key), and the buffers the statement touches stay a few index
    pages and the live runs' heap pages, whatever the key's history and the other keys' runs."""
    scans = [n for n in nodes(plan) if n.get("Relation Name") == "executions"]
    assert scans, plan
    for scan in scans:
        removed = scan.get("Rows Removed by Filter", 0) + scan.get("Rows Removed by Index Recheck", 0)
        assert removed == 0, f"{scan.get('Index Name', scan['Node Type'])} read {removed} other runs: {plan}"
        assert scan["Actual Rows"] <= live, plan
    buffers = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert buffers <= 16 + live, f"{buffers} buffers for a key with {live} live runs: {plan}"


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
def test_a_quota_start_counts_the_live_runs_of_its_key_without_reading_its_history(
    long_history: psycopg.Connection, plan_cache_mode: str
) -> None:
    """executions_quota_key held (quota_key) for every kept run: the count read every run of the
    key and dropped the finished ones by their status (10,000 runs: hundreds of buffers)."""
    conn = long_history
    plan = _explain(conn, ACTIVE_COUNT, plan_cache_mode, "'acme'")
    _assert_reads_only_live_runs(plan, sum(LIVE.values()))
    assert conn.execute("SELECT harvest.quota_usage('acme', 'max_active_executions')").fetchone() == (
        sum(LIVE.values()),
    )
    assert conn.execute("SELECT harvest.quota_usage('gone', 'max_active_executions')").fetchone() == (0,)


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("key", ["acme", "gone"])
def test_the_in_use_probe_of_a_quota_key_reads_no_finished_run(
    long_history: psycopg.Connection, plan_cache_mode: str, key: str
) -> None:
    """The janitor's probe read the key's kept runs until it met a live one: all of them for a key
    whose runs are all finished (the key it is about to prune), for each of up to 1,000 keys a
    round."""
    conn = long_history
    plan = _explain(conn, IN_USE, plan_cache_mode, f"'quota', '{key}'")
    _assert_reads_only_live_runs(plan, 1)  # EXISTS stops at the first live run
    assert conn.execute("SELECT harvest._flow_key_in_use('quota', %s)", (key,)).fetchone() == (key == "acme",)


def test_no_index_holds_a_quota_keys_finished_runs(conn: psycopg.Connection) -> None:
    """executions_quota_key held (quota_key) for every kept run with a key, and had no reader
    since the quotas read live runs only (migration 0088), ended runs' bytes from
    quota_ended_bytes (0103) and dead letters by their own key (0106): every quota'd start wrote
    an entry in it for nothing. The live runs' index is the one index of executions on the key."""
    rows = conn.execute(
        "SELECT i.indexrelid::regclass::text FROM pg_index AS i"
        " JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)"
        " WHERE i.indrelid = 'harvest.executions'::regclass AND a.attname = 'quota_key' ORDER BY 1"
    ).fetchall()
    assert rows == [("harvest.executions_live_quota_key",)]
