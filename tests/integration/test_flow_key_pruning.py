"""The janitor deletes the rows of ``harvest.flow_keys`` that no start needs.

A quota'd or cancel_running start writes its key's row (functions/flow_quotas.sql), one row per
key ever admitted: a per-tenant key made one per tenant, forever. ``harvest.prune_flow_keys``
(functions/retention.sql) deletes a row only when no session holds it, its last writer is older
than every open snapshot, and no live run has the key.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import psycopg
import pytest
from psycopg.types.json import Jsonb
from test_generic_plans import Statement, nodes, plain_sql

from harvest import App, Worker, workflow

POLICIES = {
    "workflows": {
        "metered": {"quota": {"key": "input.t", "max_active_executions": 100}},
        "latest": {"concurrency": {"key": "input.doc", "limit": 1, "on_conflict": "cancel_running"}},
    },
    "activities": {},
}


def _start(conn: psycopg.Connection, workflow_name: str, arg: dict[str, str]) -> str:
    return conn.execute(
        "SELECT execution_id FROM harvest.start_workflow(%s, %s)", (workflow_name, Jsonb([arg]))
    ).fetchone()[0]


def _keys(conn: psycopg.Connection) -> list[tuple[str, str]]:
    return conn.execute("SELECT kind, key FROM harvest.flow_keys ORDER BY kind, key").fetchall()


def _prune(conn: psycopg.Connection) -> int:
    return int(conn.execute("SELECT harvest.prune_flow_keys() ->> 'deleted'").fetchone()[0])


@pytest.fixture
def declared(conn: psycopg.Connection) -> psycopg.Connection:
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(POLICIES),))
    return conn


def test_a_key_without_live_runs_goes_and_a_key_in_use_stays(declared: psycopg.Connection) -> None:
    conn = declared
    _start(conn, "metered", {"t": "live"})
    conn.execute("SELECT harvest.terminate_workflow(%s)", (_start(conn, "metered", {"t": "done"}),))
    _start(conn, "latest", {"doc": "open"})
    conn.execute("SELECT harvest.terminate_workflow(%s)", (_start(conn, "latest", {"doc": "closed"}),))
    assert _prune(conn) == 2
    assert _keys(conn) == [("concurrency", "open"), ("quota", "live")]
    # The next start of a pruned key makes its row again.
    _start(conn, "metered", {"t": "done"})
    assert ("quota", "done") in _keys(conn)


def test_a_row_a_start_holds_is_skipped_without_waiting(db: str, declared: psycopg.Connection) -> None:
    conn = declared
    with psycopg.connect(db) as starting:  # a start in its own transaction, not yet committed
        starting.execute("SELECT harvest._take_flow_key('quota', 'busy')")
        conn.execute("INSERT INTO harvest.flow_keys (kind, key) VALUES ('quota', 'idle')")
        assert _prune(conn) == 1  # 'idle' went; 'busy' was skipped, the call did not wait
        starting.commit()
    assert _keys(conn) == [("quota", "busy")]
    assert _prune(conn) == 1


def test_a_row_stays_while_a_snapshot_older_than_its_last_start_is_open(
    db: str, declared: psycopg.Connection
) -> None:
    """A start in a REPEATABLE READ transaction whose snapshot predates another start of its key
    is refused on the key's row (40001). Had the row been pruned in between, the start would
    insert a fresh one and count the key's runs without the other start's."""
    conn = declared
    with psycopg.connect(db) as snapshot:
        snapshot.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        snapshot.execute("SELECT count(*) FROM harvest.executions")  # the snapshot is taken
        conn.execute("SELECT harvest.terminate_workflow(%s)", (_start(conn, "metered", {"t": "k"}),))
        assert _prune(conn) == 0
        with pytest.raises(psycopg.errors.SerializationFailure):
            snapshot.execute("SELECT harvest.start_workflow('metered', %s)", (Jsonb([{"t": "k"}]),))
        snapshot.rollback()
    assert _prune(conn) == 1
    assert _keys(conn) == []


def test_the_horizon_counts_other_roles_snapshots_under_an_owner_that_is_no_superuser(
    db: str, declared: psycopg.Connection
) -> None:
    """The schema's owner need not be a superuser (docs/install.md). Without pg_read_all_stats it
    sees other roles' sessions' backend_xmin in pg_stat_activity but not their backend_type: a
    filter on backend_type (meant to leave autovacuum out) dropped them all, and the janitor
    pruned a row an open snapshot predates."""
    conn = declared
    owner = f"harvest_low_owner_{uuid.uuid4().hex[:8]}"  # (roles are the cluster's)
    conn.execute(f'CREATE ROLE "{owner}" NOLOGIN')
    try:
        conn.execute(f'GRANT USAGE ON SCHEMA harvest TO "{owner}"')
        conn.execute(f'GRANT SELECT, UPDATE, DELETE ON harvest.flow_keys, harvest.executions TO "{owner}"')
        # (a round folds the quota's ended-bytes rows: _fold_quota_bytes)
        conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON harvest.quota_ended_bytes TO "{owner}"')
        # (a round that deletes is audited)
        conn.execute(f'GRANT SELECT, INSERT ON harvest.audit_log TO "{owner}"')
        conn.execute(f'GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA harvest TO "{owner}"')
        conn.execute(f'ALTER FUNCTION harvest.prune_flow_keys(integer) OWNER TO "{owner}"')
        with psycopg.connect(db) as snapshot:  # (a superuser's: another role's session)
            snapshot.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            snapshot.execute("SELECT count(*) FROM harvest.executions")  # the snapshot is taken
            conn.execute("SELECT harvest.terminate_workflow(%s)", (_start(conn, "metered", {"t": "k"}),))
            assert _prune(conn) == 0
            snapshot.rollback()
        assert _prune(conn) == 1
    finally:
        conn.execute("ALTER FUNCTION harvest.prune_flow_keys(integer) OWNER TO CURRENT_USER")
        conn.execute(f'DROP OWNED BY "{owner}"')
        conn.execute(f'DROP ROLE "{owner}"')


def test_the_batch_size_is_bounded(declared: psycopg.Connection) -> None:
    conn = declared
    conn.execute(
        "INSERT INTO harvest.flow_keys (kind, key) SELECT 'quota', 'k' || n FROM generate_series(1, 3) AS n"
    )
    assert conn.execute("SELECT harvest.prune_flow_keys(2) ->> 'deleted'").fetchone() == ("2",)
    with pytest.raises(psycopg.Error, match=r"out of range 1\.\.10000") as refused:
        conn.execute("SELECT harvest.prune_flow_keys(0)")
    assert refused.value.sqlstate == "HR001"


# The janitor's probe of each key it would prune: does a live run have it?
IN_USE = Statement("_flow_key_in_use", r"SELECT EXISTS", {"p_kind": "text", "p_key": "text"})


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
def test_the_in_use_probe_of_a_concurrency_key_seeks_the_key(
    conn: psycopg.Connection, plan_cache_mode: str
) -> None:
    """The probe of a cancel_running key read executions_concurrency_key, which led with
    workflow_name: every live keyed run's entry (PostgreSQL 15 to 17), or one search per workflow
    name (18's skip scan), for each of the up to 1,000 probes of a round. Its index now leads
    with the key."""
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at, concurrency_key)"
        " SELECT gen_random_uuid(), 'w' || (g % 2000), 'id-' || g, '2030-01-01 00:00:00+00', 'doc-' || g"
        " FROM generate_series(1, 20000) AS g"
    )
    conn.execute("ANALYZE harvest.executions")
    sql = plain_sql(conn, IN_USE)
    conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
    conn.execute(f"PREPARE in_use (text, text) AS {sql}")
    (explained,) = conn.execute("EXPLAIN (FORMAT JSON) EXECUTE in_use ('concurrency', 'doc-7')").fetchone()
    scans = [n for n in nodes(explained[0]["Plan"]) if n.get("Relation Name") == "executions"]
    leading = {
        n.get("Index Name"): conn.execute(
            "SELECT a.attname FROM pg_catalog.pg_index AS i"
            " JOIN pg_catalog.pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]"
            " WHERE i.indexrelid = ('harvest.' || %s)::regclass",
            (n["Index Name"],),
        ).fetchone()[0]
        if "Index Name" in n
        else n["Node Type"]
        for n in scans
    }
    assert "concurrency_key" in leading.values(), leading


@workflow
async def idle(ctx: object) -> None:
    return None


def test_the_retention_janitor_prunes_them_unconfigured(db: str, conn: psycopg.Connection) -> None:
    """Every round, whether or not execution retention is configured (it is not here)."""
    conn.execute("INSERT INTO harvest.flow_keys (kind, key) VALUES ('quota', 'tenant-gone')")

    async def main() -> None:
        worker = Worker(
            App(workflows=[idle]),
            db,
            run_worker=False,
            run_scanner=False,
            run_retention=True,
            retention_interval=0.1,
        )
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 20
        while _keys(conn) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        worker.request_stop()
        await asyncio.wait_for(task, 20)

    asyncio.run(main())
    assert _keys(conn) == []
