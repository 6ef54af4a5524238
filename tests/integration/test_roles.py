"""The four database roles: log in as each and prove what it may and may not do (SQLSTATE 42501)."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import psycopg
import pytest
from operator_helpers import harvest, park, start
from psycopg import conninfo
from psycopg.types.json import Jsonb


@pytest.fixture
def login(pg_server, db: str):
    """login(role) -> DSN of a fresh LOGIN user that is a member of `role` only."""
    made: list[str] = []

    def make(role: str) -> str:
        user = f"u_{role.removeprefix('harvest_')}_{uuid.uuid4().hex[:8]}"
        with pg_server.admin() as admin:
            admin.execute(f'CREATE ROLE "{user}" LOGIN')
            admin.execute(f'GRANT {role} TO "{user}"')
        made.append(user)
        return conninfo.make_conninfo(db, user=user, password="")

    yield make
    with pg_server.admin() as admin:
        for user in made:
            admin.execute(f'DROP ROLE IF EXISTS "{user}"')


@pytest.fixture
def setup(db: str):
    with psycopg.connect(db, autocommit=True) as conn:
        execution_id, dead_id = park(conn, "r1")
        _, dead_id2 = park(conn, "r2")
        other = start(conn, "wf", "plain")
        conn.execute("SELECT harvest.register_worker('w1', ARRAY['default'], 'h', 1, 5)")
        conn.execute("SELECT harvest.set_retention('30 days')")
        conn.execute(  # (a DAG to list the runs of: list_dag_runs refuses an unknown one, HR002)
            "SELECT harvest.register_dags(%s)",
            (
                Jsonb(
                    [
                        {
                            "dag_name": "roles_dag",
                            "queue": "default",
                            "tasks": [{"task": "a", "kind": "activity", "target": "act_a", "upstream": []}],
                        }
                    ]
                ),
            ),
        )
    return {"execution_id": execution_id, "dead_id": dead_id, "dead_id2": dead_id2, "other": other}


READS = [
    "SELECT * FROM harvest.list_executions()",
    "SELECT harvest.get_execution_stack(%(e)s)",
    "SELECT * FROM harvest.get_execution(%(e)s)",
    "SELECT * FROM harvest.get_history(%(e)s)",
    "SELECT * FROM harvest.get_history_page(%(e)s)",
    "SELECT * FROM harvest.get_start_gate('wf')",
    "SELECT * FROM harvest.list_dead_letters()",
    "SELECT * FROM harvest.count_dead_letters()",
    "SELECT * FROM harvest.list_workers()",
    "SELECT harvest.get_worker_health()",
    "SELECT * FROM harvest.preview_drain()",
    "SELECT harvest.get_retention_status()",
    "SELECT * FROM harvest.list_audit_log()",
    "SELECT * FROM harvest.list_dag_runs('roles_dag')",
    # (Their signature or body changed in stop 53: the keyset page of children, the horizon.)
    "SELECT * FROM harvest.list_children(%(e)s, p_after_created_at => now(), p_after_id => %(e)s)",
    "SELECT * FROM harvest.get_event_horizon()",
    # (Their signature or body changed in stop 54: bounded stacks, a status's page of children,
    # pages of keys, schedules and workers.)
    "SELECT harvest.get_execution_stack(%(e)s, 5)",
    "SELECT * FROM harvest.list_children(%(e)s, 'RUNNING', 1, NULL, NULL, 5)",
    "SELECT * FROM harvest.list_concurrency_keys(NULL, 'a', 5)",
    "SELECT * FROM harvest.list_schedules(NULL, 'a', 5, false)",
    "SELECT * FROM harvest.list_workers(p_limit => 5)",
    "SELECT harvest.count_audit_log('400 days')",
    "SELECT count(*) FROM harvest.executions",
]
OPERATE = [
    "SELECT harvest.signal_workflow(%(e)s, 'sig')",
    "SELECT harvest.cancel_workflow(%(e)s)",
    "SELECT harvest.replay_dead_letter(%(d)s)",
    "SELECT harvest.replay_dead_letters(p_activity_name => 'nothing-matches')",
]
ADMIN = [
    "SELECT harvest.terminate_workflow(%(o)s)",
    "SELECT harvest.drain_worker('w1')",
    "SELECT harvest.run_retention()",
    "SELECT harvest.set_retention('10 days')",
    "SELECT harvest.set_worker_retention('7 days')",
    "SELECT harvest.prune_workers()",
    "SELECT harvest.prune_audit_log('400 days')",
    # MIGRATED seals: the janitor's page, the judgement where they point, the drop.
    "SELECT * FROM harvest.list_expired_seals('1 day')",
    "SELECT * FROM harvest.list_moved_runs(ARRAY[%(e)s::uuid])",
    "SELECT harvest.delete_seals(ARRAY[%(e)s::uuid])",
    # Legal holds and erasure (payloads.sql): the run `o` was terminated above.
    "SELECT harvest.set_legal_hold(%(o)s, 'case 1')",
    "SELECT harvest.release_legal_hold(%(o)s)",
    "SELECT harvest.erase_payloads(%(o)s)",
    "SELECT harvest.discard_dead_letters(p_activity_name => 'nothing-matches')",
    "SELECT harvest.discard_dead_letter(%(d2)s)",
    # (A page of the tokens, revoked ones included: stop 54's keyset.)
    "SELECT * FROM harvest.list_api_tokens(true, p_limit => 5)",
    # A pacing override that missed a shard, audited as failed (audit.sql).
    """SELECT harvest.record_incomplete_write('rate_limit.override', 'x', '[{"shard_id": 1}]')""",
]
WORKER = [
    "SELECT * FROM harvest.claim_tasks('w1', ARRAY['nothing'], 1)",
    "SELECT harvest.heartbeat_worker('w1')",
    "SELECT harvest.register_worker('w2', ARRAY['default'], 'h', 2, 5)",
    "SELECT harvest.expire_tasks(10)",
    "SELECT harvest.deliver_relays(10)",
    "SELECT * FROM harvest.claim_remote_relays(10)",
    (
        "SELECT * FROM harvest.deliver_external_relay(0, 1, 'external_signal', NULL, NULL, 'nobody',"
        ' \'{"signal_name": "s"}\', %(e)s)'
    ),
    "SELECT harvest.complete_relay(0, 'not_found')",
    "SELECT harvest.release_relay(0, 'unreachable')",
    "SELECT harvest.next_due_at(ARRAY['default'])",
    # (The last three are not the worker's alone: readers may read them, admins drain.)
    "SELECT harvest.schema_version()",
    "SELECT harvest.get_deployment_shards()",
    "SELECT harvest.stop_worker('w2')",
]
NEVER = [
    (
        "INSERT INTO harvest.workers (id, queues, hostname, pid, started_at, last_heartbeat_at)"
        " VALUES ('x', ARRAY['q'], 'h', 1, now(), now())"
    ),
    "DELETE FROM harvest.dead_letters",
    "SELECT harvest._append_event(%(e)s, 'X', '{}')",
    "SELECT harvest._secure_functions()",
    # (Stop 57: the max_history_bytes quota's ended bytes are written by the triggers of the
    # runs' own writes alone, so no role can add, take or fold them to move a key's usage; the
    # helpers the new starts, status view and pump read through are an entry point's only.)
    "INSERT INTO harvest.quota_ended_bytes (quota_key, bytes) VALUES ('k', -1000000)",
    "DELETE FROM harvest.quota_ended_bytes",
    "UPDATE harvest.quota_ended_bytes SET bytes = 0",
    "TRUNCATE harvest.quota_ended_bytes",
    "SELECT harvest._fold_quota_bytes(ARRAY['k'])",
    "SELECT harvest._start_queue('wf')",
    "SELECT * FROM harvest._count_concurrency_keys(NULL, NULL, true)",
    "SELECT * FROM harvest._live_keyed_runs(NULL)",
    "SELECT harvest._busiest_concurrency_keys(NULL, 1)",
    "SELECT harvest._current_cross_shard_run(%(e)s)",
]


def params_attempt(dsn, sql, setup):
    params = {"e": setup["execution_id"], "d": setup["dead_id"], "d2": setup["dead_id2"], "o": setup["other"]}
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(sql, params if "%(" in sql else None).fetchall()
            return "ok"
        except psycopg.Error as exc:
            return exc.sqlstate


def outcomes(dsn: str, statements: list[str], setup: dict) -> set[str]:
    return {params_attempt(dsn, sql, setup) for sql in statements}


def test_reader_reads_and_is_refused_everything_else(login, setup) -> None:
    dsn = login("harvest_reader")
    assert outcomes(dsn, READS, setup) == {"ok"}
    assert params_attempt(dsn, "SELECT harvest.get_deployment_shards()", setup) == "ok"
    for sql in OPERATE + ADMIN + WORKER[:-3] + NEVER:
        assert params_attempt(dsn, sql, setup) == "42501", sql


def test_operator_signals_cancels_replays_but_cannot_terminate(login, setup) -> None:
    dsn = login("harvest_operator")
    assert outcomes(dsn, READS, setup) == {"ok"}
    for sql in OPERATE:
        assert params_attempt(dsn, sql, setup) == "ok", sql
    for sql in ADMIN + WORKER[:-3] + NEVER:
        assert params_attempt(dsn, sql, setup) == "42501", sql


def test_admin_does_everything_an_operator_does_and_more(login, setup) -> None:
    dsn = login("harvest_admin")
    assert outcomes(dsn, READS, setup) == {"ok"}
    for sql in OPERATE + ADMIN:
        assert params_attempt(dsn, sql, setup) == "ok", sql
    for sql in WORKER[:-3] + NEVER:
        assert params_attempt(dsn, sql, setup) == "42501", sql


def test_worker_claims_and_completes_only(login, setup) -> None:
    dsn = login("harvest_worker")
    for sql in WORKER:
        assert params_attempt(dsn, sql, setup) == "ok", sql
    for sql in [r for r in READS if "harvest.get_history(" not in r] + OPERATE + ADMIN + NEVER:
        assert params_attempt(dsn, sql, setup) == "42501", sql


def test_functions_pin_search_path_and_run_as_definer(db: str) -> None:
    """Entry points run as the owner with a pinned path; helpers only run inside them."""
    with psycopg.connect(db, autocommit=True) as conn:
        loose = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'harvest'::regnamespace"
            " AND p.proname NOT LIKE '\\_%' AND p.proname NOT IN ('now', 'shard_of', 'partition_of')"
            " AND (NOT p.prosecdef OR NOT coalesce(p.proconfig, '{}')"
            " @> ARRAY['search_path=pg_catalog, harvest, pg_temp'])"
        ).fetchall()
        helpers_granted = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'harvest'::regnamespace"
            " AND p.proname LIKE '\\_%' AND (has_function_privilege('harvest_worker', p.oid, 'EXECUTE')"
            " OR has_function_privilege('harvest_admin', p.oid, 'EXECUTE'))"
        ).fetchall()
        assert helpers_granted == []
        public = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'harvest'::regnamespace"
            " AND has_function_privilege('public', p.oid, 'EXECUTE')"
        ).fetchall()
    assert loose == [] and public == []


def test_a_replaced_function_is_secured_again_by_the_migrator(db: str) -> None:
    from harvest.db.migrate import Migrator

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION harvest.schema_version() RETURNS text LANGUAGE sql STABLE"
            " AS $$ SELECT max(version) FROM harvest.schema_migrations WHERE set_name = 'harvest' $$"
        )
        conn.execute("UPDATE harvest.function_files SET checksum = 'changed' WHERE file_name = 'core.sql'")
        assert (
            conn.execute(
                "SELECT prosecdef FROM pg_proc WHERE oid = 'harvest.schema_version()'::regprocedure"
            ).fetchone()[0]
            is False
        )
    Migrator(db).run()
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute(
            "SELECT prosecdef, proconfig FROM pg_proc WHERE oid = 'harvest.schema_version()'::regprocedure"
        ).fetchone() == (True, ["search_path=pg_catalog, harvest, pg_temp"])


def test_the_roles_that_check_health_read_the_function_state_and_not_the_ledger(login, db: str) -> None:
    """harvest.get_function_state (the shard health check, preflight, the boot warnings) answers
    a reader and a worker, as the owner: the worker has no grant on the function ledger itself."""
    from harvest.db.migrate import read_function_drift
    from harvest.db.sqlapi import SqlApi
    from harvest.db.steps import run_steps

    for role in ("harvest_reader", "harvest_worker"):
        with psycopg.connect(login(role), autocommit=True) as conn:
            assert run_steps(read_function_drift(), SqlApi(conn)) is None, role
    with (
        psycopg.connect(login("harvest_worker"), autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("SELECT count(*) FROM harvest.function_files")


def test_cli_permission_denied_is_one_line(login, setup) -> None:
    dsn = login("harvest_reader")
    r = harvest(dsn, "workflow", "cancel", setup["execution_id"])
    assert r.returncode == 1
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: permission denied"), r.stderr
    r = harvest(dsn, "workflow", "list", "--output", "json")
    assert r.returncode == 0, r.stderr


def test_a_production_role_cannot_move_the_engine_clock(login, db: str) -> None:
    """Issue 12 item 1, the attack as reported: with the test clock switched off (production), an
    operator who sets harvest.fake_now to 2100 and starts throttled runs does not stamp the throttle
    (which deferred every later start to 2100) nor the runs with 2100, and a worker who sets it is
    not leased tasks until 2100."""
    year_2099 = dt.datetime(2099, 1, 1, tzinfo=dt.UTC)
    with psycopg.connect(db, autocommit=True) as owner:
        owner.execute("UPDATE harvest.engine_settings SET test_clock_allowed = false")
        owner.execute(
            "SELECT harvest.declare_flow_policies(%s)",
            (Jsonb({"workflows": {"paced": {"throttle": {"rps": 0.01, "burst": 2, "key": None}}}}),),
        )
    with psycopg.connect(login("harvest_operator"), autocommit=True) as operator:
        operator.execute("SET harvest.fake_now = '2100-01-01 00:00:00+00'")
        statuses = [
            operator.execute(
                "SELECT status FROM harvest.start_workflow('paced', %s, %s, 'clock_q')", (Jsonb([n]), f"p{n}")
            ).fetchone()[0]
            for n in range(3)
        ]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            operator.execute("UPDATE harvest.engine_settings SET test_clock_allowed = true")
    assert statuses == ["RUNNING", "RUNNING", "DEFERRED"]
    with psycopg.connect(db, autocommit=True) as owner:
        stamps = owner.execute(
            "SELECT (SELECT max(created_at) FROM harvest.executions),"
            " (SELECT max(refilled_at) FROM harvest.start_throttle_buckets),"
            " (SELECT max(greatest(created_at, release_at)) FROM harvest.pending_starts)"
        ).fetchone()
    assert all(stamp < year_2099 for stamp in stamps), stamps
    with psycopg.connect(login("harvest_worker"), autocommit=True) as worker:
        worker.execute("SET harvest.fake_now = '2100-01-01 00:00:00+00'")
        leases = [
            lease
            for (lease,) in worker.execute(
                "SELECT lease_expires_at FROM harvest.claim_tasks('w-clock', ARRAY['clock_q'], 10, 30)"
            )
        ]
        assert worker.execute("SELECT harvest.now() < %s", (year_2099,)).fetchone()[0]
    assert len(leases) == 2 and all(lease < year_2099 for lease in leases), leases


def test_a_start_that_can_terminate_a_live_run_needs_admin(login, db: str) -> None:
    """Issue 12 item 4 (spec 002, "Conflict policies"): an operator is refused terminate_workflow, so
    a start with conflict_policy terminate_existing (or reuse_policy terminate_if_running) is refused
    too, typed in Python and one line in the CLI; an admin's works."""
    from harvest import Client
    from harvest.core.errors import PermissionDenied

    with psycopg.connect(db, autocommit=True) as owner:
        live = start(owner, "wf", "live-1")
    operator = login("harvest_operator")
    with Client(operator) as client:
        for policies in ({"conflict_policy": "terminate_existing"}, {"reuse_policy": "terminate_if_running"}):
            with pytest.raises(PermissionDenied, match="needs the harvest_admin role"):
                client.start_workflow("wf", workflow_id="live-1", **policies)
        attached = client.start_workflow(
            "wf", workflow_id="live-1", reuse_policy="terminate_if_running", conflict_policy="use_existing"
        )
        assert attached.execution_id == live
    r = harvest(
        operator,
        "workflow",
        "start",
        "wf",
        "--workflow-id",
        "live-1",
        "--conflict-policy",
        "terminate_existing",
    )
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode != 0 and len(lines) == 1, r.stderr
    assert 'conflict_policy "terminate_existing"' in lines[0] and "harvest_admin" in lines[0], lines[0]
    with psycopg.connect(db, autocommit=True) as owner:
        assert owner.execute(
            "SELECT status, last_event_id FROM harvest.executions WHERE workflow_id = 'live-1'"
        ).fetchall() == [("RUNNING", 1)]
    with Client(login("harvest_admin")) as client:
        replaced = client.start_workflow("wf", workflow_id="live-1", conflict_policy="terminate_existing")
    assert replaced.execution_id != live and replaced.started_fresh
    with psycopg.connect(db, autocommit=True) as owner:
        assert (
            owner.execute("SELECT status FROM harvest.executions WHERE id = %s", (live,)).fetchone()[0]
            == "TERMINATED"
        )


def _attempt(dsn: str, sql: str, params: tuple) -> str:
    """Run ``sql`` in a session of its own: "ok", or the SQLSTATE it was refused with."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(sql, params).fetchall()
        except psycopg.Error as exc:
            return exc.sqlstate or "error"
    return "ok"


def test_a_client_start_cannot_pass_for_the_engines_own(login, pg_server, db: str) -> None:
    """A parent run and "skip the gates" belong to the engine's own starts (a child, a
    continue-as-new successor, a released deferred start), never to a client's: an operator
    cannot graft a run onto another's history as its child (the child's close appends a
    ChildWorkflow* event to it), nor jump a start throttle, and the worker's and client's
    usual login (operator and worker) cannot terminate a live run as the engine's
    continue-as-new does."""
    with psycopg.connect(db, autocommit=True) as owner:
        owner.execute(
            "SELECT harvest.declare_flow_policies(%s)",
            (Jsonb({"workflows": {"paced": {"throttle": {"rps": 0.001, "burst": 1, "key": None}}}}),),
        )
        victim = start(owner, "victim", "victim-1")
        live = start(owner, "wf", "live-1")
        start(owner, "paced", "paced-0", queue="paced_q")  # takes the throttle's only token
    operator = login("harvest_operator")
    app_login = login("harvest_operator")
    user = conninfo.conninfo_to_dict(app_login)["user"]
    with pg_server.admin() as admin:
        admin.execute(f'GRANT harvest_worker TO "{user}"')
    graft = "SELECT * FROM harvest.start_workflow('forger', '[]', 'forged-1', p_parent_id => %s)"
    jump = "SELECT * FROM harvest.start_workflow('paced', '[]', %s, 'paced_q', p_flow_gates => false)"
    terminate = (
        "SELECT * FROM harvest.start_workflow('wf', '[]', 'live-1',"
        " p_conflict_policy => 'terminate_existing', p_flow_gates => false)"
    )
    assert _attempt(operator, graft, (victim,)) != "ok"
    assert _attempt(operator, jump, ("paced-1",)) != "ok"
    assert _attempt(app_login, jump, ("paced-2",)) != "ok"
    assert _attempt(app_login, terminate, ()) != "ok"
    with psycopg.connect(db, autocommit=True) as owner:
        owner.execute(
            "SELECT harvest.terminate_workflow(id) FROM harvest.executions WHERE workflow_id = 'forged-1'"
        )
        owner.execute("SELECT harvest.deliver_relays(10)")
        assert [
            r[0]
            for r in owner.execute(
                "SELECT event_type FROM harvest.events WHERE execution_id = %s ORDER BY event_id", (victim,)
            )
        ] == ["WorkflowStarted"]
        assert owner.execute(
            "SELECT workflow_id, status FROM harvest.executions WHERE workflow_name IN ('paced', 'wf')"
            " ORDER BY workflow_id"
        ).fetchall() == [("live-1", "RUNNING"), ("paced-0", "RUNNING")]
        kept = owner.execute("SELECT id::text FROM harvest.executions WHERE workflow_id = 'live-1'")
        assert kept.fetchall() == [(live,)]


def test_a_worker_login_continues_as_new(login, db: str) -> None:
    """The engine's own start of a continue-as-new successor (terminate_if_running) is not an
    operator's terminate: a worker login that is no admin still runs it."""
    with psycopg.connect(db, autocommit=True) as owner:
        first = start(owner, "loop", "loop-1", queue="loop_q")
    with psycopg.connect(login("harvest_worker"), autocommit=True) as worker:
        task_id, token = worker.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w-loop', ARRAY['loop_q'], 1)"
        ).fetchone()
        worker.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)",
            (task_id, token, Jsonb([{"type": "continue_as_new", "input": [2]}])),
        )
    with psycopg.connect(db, autocommit=True) as owner:
        rows = owner.execute(
            "SELECT id::text, status FROM harvest.executions WHERE workflow_id = 'loop-1'"
            " ORDER BY created_at, status"
        ).fetchall()
    assert (first, "CONTINUED_AS_NEW") in rows and sum(status == "RUNNING" for _, status in rows) == 1, rows


def test_a_worker_login_signals_and_cancels_another_workflow(login, db: str) -> None:
    """Workflow code runs as the worker role: its external signal and cancel, and their
    delivery through the relay, need no operator right."""
    with psycopg.connect(db, autocommit=True) as owner:
        start(owner, "sender", "ext-sender", queue="ext_q")
        target = start(owner, "target", "ext-target", queue="ext_t")
    with psycopg.connect(login("harvest_worker"), autocommit=True) as worker:
        task_id, token = worker.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w-ext', ARRAY['ext_q'], 1)"
        ).fetchone()
        commands = [
            {"type": "signal_external_workflow", "seq": 1, "execution_id": target, "signal_name": "go"},
            {"type": "cancel_external_workflow", "seq": 2, "workflow_id": "ext-target", "reason": "done"},
        ]
        worker.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)", (task_id, token, Jsonb(commands))
        )
    with psycopg.connect(db, autocommit=True) as owner:
        types = [
            r[0]
            for r in owner.execute(
                "SELECT event_type FROM harvest.events WHERE execution_id = %s ORDER BY event_id", (target,)
            )
        ]
    assert types == ["WorkflowStarted", "SignalReceived", "WorkflowCancelRequested"], types


def test_only_an_admin_turns_owner_mode_on(login, db: str) -> None:
    """Owner mode's switch (functions/owners.sql): no other role may call set_owner_mode or write
    the switch or the owner rows; a reader reads them; an admin's change is audited."""
    for role in ("harvest_reader", "harvest_operator", "harvest_worker"):
        with psycopg.connect(login(role), autocommit=True) as conn:
            for statement in (
                "SELECT harvest.set_owner_mode(true)",
                "UPDATE harvest.owner_mode SET enabled = true",
                "UPDATE harvest.partition_owners SET worker_id = 'me'",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
    with psycopg.connect(login("harvest_reader"), autocommit=True) as reader:
        assert reader.execute("SELECT harvest.get_owner_mode() ->> 'enabled'").fetchone()[0] == "false"
        assert reader.execute("SELECT count(*) FROM harvest.list_partition_owners()").fetchone()[0] == 512
    with psycopg.connect(login("harvest_admin"), autocommit=True) as admin:
        admin.execute("SELECT harvest.set_owner_mode(true, 5, 'ops-7')")
    with psycopg.connect(db, autocommit=True) as owner:
        audit = owner.execute(
            "SELECT operator_id, details ->> 'enabled', details ->> 'lease_secs' FROM harvest.audit_log "
            "WHERE operation = 'owner_mode.set'"
        ).fetchall()
        assert owner.execute("SELECT enabled FROM harvest.owner_mode").fetchone()[0] is True
    assert audit == [("ops-7", "true", "5")]


def _terminating_start(conn: psycopg.Connection) -> str:
    try:
        conn.execute(
            "SELECT * FROM harvest.start_workflow('wf', '[]', 'live-1',"
            " p_conflict_policy => 'terminate_existing')"
        ).fetchall()
    except psycopg.Error as exc:
        return exc.sqlstate or "error"
    return "ok"


def test_a_membership_whose_rights_are_not_usable_does_not_hold_the_role(login, pg_server, db: str) -> None:
    """A login holds a role for the in-function checks (harvest._session_has_role) only as
    PostgreSQL lets it use the role's rights: through inheritance, or after SET ROLE. Before,
    any membership counted: an operator login that is a member of harvest_admin through a
    NOINHERIT group (or, on PostgreSQL 16+, by a grant WITH INHERIT FALSE, SET FALSE: a
    membership that can never be used) could start with a terminating policy without it."""
    with psycopg.connect(db, autocommit=True) as owner:
        live = start(owner, "wf", "live-1")
    group = f"g_noinherit_{uuid.uuid4().hex[:8]}"
    via_group = login("harvest_operator")
    unusable = login("harvest_operator")
    with pg_server.admin() as admin:
        new_grants = int(admin.execute("SHOW server_version_num").fetchone()[0]) >= 160000
        admin.execute(f'CREATE ROLE "{group}" NOLOGIN NOINHERIT')
        admin.execute(f'GRANT harvest_admin TO "{group}"')
        admin.execute(f'GRANT "{group}" TO "{conninfo.conninfo_to_dict(via_group)["user"]}"')
        if new_grants:
            user = conninfo.conninfo_to_dict(unusable)["user"]
            admin.execute(f'GRANT harvest_admin TO "{user}" WITH INHERIT FALSE, SET FALSE')
    try:
        with psycopg.connect(via_group, autocommit=True) as conn:
            assert _terminating_start(conn) == "42501"
            conn.execute("SET ROLE harvest_admin")  # the membership is usable this way
            assert _terminating_start(conn) == "ok"
        if new_grants:
            with psycopg.connect(unusable, autocommit=True) as conn:
                assert _terminating_start(conn) == "42501"
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("SET ROLE harvest_admin")
    finally:
        with pg_server.admin() as admin:
            admin.execute(f'DROP ROLE "{group}"')
    with psycopg.connect(db, autocommit=True) as owner:
        statuses = owner.execute(
            "SELECT id::text, status FROM harvest.executions WHERE workflow_id = 'live-1' ORDER BY created_at"
        ).fetchall()
    assert statuses[0] == (live, "TERMINATED"), statuses
    assert [status for _, status in statuses] == ["TERMINATED", "RUNNING"], statuses


def test_a_reader_cannot_drop_another_logins_result_wait_or_stream_listener(login, db: str) -> None:
    """stop_waiting_for_result and stop_event_stream delete only the caller's login's own rows:
    a reader could read another client's waiter or listener id (SELECT on every table) and
    delete its mark, so that client's result was no longer notified (it fell back to its
    5 s re-read) and the event stream stopped being notified until its next heartbeat."""
    with psycopg.connect(db, autocommit=True) as owner:
        run = start(owner, "wf", "waited-1")
    waiter = str(uuid.uuid4())
    client_dsn, other_dsn = login("harvest_reader"), login("harvest_reader")
    with (
        psycopg.connect(client_dsn, autocommit=True) as client,
        psycopg.connect(other_dsn, autocommit=True) as other,
    ):
        client.execute("SELECT harvest.wait_for_result(%s, %s)", (run, waiter))
        client.execute("SELECT harvest.heartbeat_event_stream('host:1:abc')")
        seen = other.execute("SELECT waiter_id::text FROM harvest.result_waiters").fetchall()
        assert seen == [(waiter,)]  # what another reader can learn
        other.execute("SELECT harvest.stop_waiting_for_result(%s)", (waiter,))
        # Marking the same ids first under its own login does not make the client's its own either.
        other.execute("SELECT harvest.wait_for_result(%s, %s)", (run, waiter))
        other.execute("SELECT harvest.stop_waiting_for_result(%s)", (waiter,))
        assert other.execute("SELECT harvest.stop_event_stream('host:1:abc')").fetchone()[0] is False
        other.execute("SELECT harvest.heartbeat_event_stream('host:1:abc')")
        assert other.execute("SELECT harvest.stop_event_stream('host:1:abc')").fetchone()[0] is True
        with psycopg.connect(db, autocommit=True) as owner:
            assert owner.execute("SELECT count(*) FROM harvest.result_waiters").fetchone()[0] == 1
            assert owner.execute("SELECT count(*) FROM harvest.event_stream_listeners").fetchone()[0] == 1
        # The owner of the marks still drops them.
        client.execute("SELECT harvest.stop_waiting_for_result(%s)", (waiter,))
        assert client.execute("SELECT harvest.stop_event_stream('host:1:abc')").fetchone()[0] is True
    with psycopg.connect(db, autocommit=True) as owner:
        assert owner.execute("SELECT count(*) FROM harvest.result_waiters").fetchone()[0] == 0
        assert owner.execute("SELECT count(*) FROM harvest.event_stream_listeners").fetchone()[0] == 0


# The keys of two of Harvest's advisory locks, as functions/start.sql and the migrator take them.
START_KEY = "SELECT pg_advisory_lock(hashtextextended('harvest.start:' || %s || ':' || %s, 0))"
MIGRATE_KEY = 0x48415256  # harvest.db.migrate.MIGRATE_LOCK_KEY
SAMPLER_KEY = 0x68617276_6D657472  # harvest.claim_sampler_lead()'s (functions/metrics.sql)
# What docs/security.md ("Advisory locks") tells an operator to run, as a superuser, in the
# Harvest database: PostgreSQL grants EXECUTE on the advisory-lock functions to PUBLIC.
LOCK_DOWN_ADVISORY_LOCKS = """
DO $$
DECLARE
    f regprocedure;
    v_owner text := (SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'harvest');
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p
             WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname ~ '^pg_(try_)?advisory_'
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', f, v_owner);
    END LOOP;
END
$$;
"""


def _lead_sampler(dsn: str) -> object:
    from harvest.db.sqlapi import SqlApi

    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            return SqlApi(conn).claim_sampler_lead()
        except psycopg.Error as exc:
            return exc.sqlstate


def test_any_login_can_hold_harvests_advisory_locks_until_they_are_locked_down(
    login, pg_server, db: str
) -> None:
    """PostgreSQL grants the advisory-lock functions to PUBLIC, and every login may connect to a
    database by default: a login with no harvest role (or a reader) can hold the locks Harvest
    serialises on and stall it for everyone: a start of one workflow id waits for as long as it
    holds the key's start lock, the migrator for its migrate lock, and no process samples the
    gauges while it holds the sampler's (docs/security.md lists every key). Revoking the
    functions from PUBLIC (the documented lock-down) closes it, and Harvest keeps working:
    its functions take the locks as their owner, and the sampler leads through
    harvest.claim_sampler_lead() (before, the worker's own login called pg_try_advisory_lock)."""
    nobody = conninfo.make_conninfo(db, user=f"u_nobody_{uuid.uuid4().hex[:8]}", password="")
    with pg_server.admin() as admin:
        admin.execute(f'CREATE ROLE "{conninfo.conninfo_to_dict(nobody)["user"]}" LOGIN')
    operator, worker = login("harvest_operator"), login("harvest_worker")
    try:
        for intruder in (nobody, login("harvest_reader")):
            with psycopg.connect(intruder, autocommit=True) as held:
                held.execute(START_KEY, ("wf", "blocked-1"))
                held.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_KEY,))
                held.execute("SELECT pg_advisory_lock(%s)", (SAMPLER_KEY,))
                with psycopg.connect(operator, autocommit=True) as conn:
                    conn.execute("SET lock_timeout = '50ms'")  # the start would wait as long as `held` lives
                    with pytest.raises(psycopg.errors.LockNotAvailable):
                        conn.execute("SELECT * FROM harvest.start_workflow('wf', '[]', 'blocked-1')")
                assert _lead_sampler(worker) is False
                with psycopg.connect(db, autocommit=True) as owner:  # what `harvest migrate run` loops on
                    migrating = owner.execute("SELECT pg_try_advisory_lock(%s)", (MIGRATE_KEY,)).fetchone()[0]
                    assert migrating is False
        with psycopg.connect(db, autocommit=True) as owner:
            owner.execute(LOCK_DOWN_ADVISORY_LOCKS)
        for intruder in (nobody, login("harvest_reader"), worker, operator):
            assert _attempt(intruder, START_KEY, ("wf", "blocked-1")) == "42501"
            assert _attempt(intruder, "SELECT pg_try_advisory_xact_lock(1)", ()) == "42501"
        assert _attempt(operator, "SELECT * FROM harvest.start_workflow('wf', '[]', 'blocked-1')", ()) == "ok"
        assert _lead_sampler(worker) is True
        # Who leads decides whether anyone samples: not a reader's to take.
        assert _attempt(login("harvest_reader"), "SELECT harvest.claim_sampler_lead()", ()) == "42501"
    finally:
        with pg_server.admin() as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{conninfo.conninfo_to_dict(nobody)["user"]}"')


def _at(dsn: str, minute: int) -> str:
    """``dsn`` with the engine clock at 2030-01-01 00:<minute> (the test clock): a trigger's slot
    is the current second, and a second trigger of one slot is a duplicate that does nothing."""
    return conninfo.make_conninfo(dsn, options=f"-c harvest.fake_now=2030-01-01T00:{minute:02d}:00Z")


def test_a_schedule_that_can_terminate_runs_needs_admin(login, db: str) -> None:
    """An operator may not terminate a run, nor start with a policy that can (above); a schedule's
    overlap terminate_other terminates the live runs it counts (a DAG schedule: every live run of
    the DAG, triggered ones too). Before, an operator could create or update a schedule with it,
    or trigger or backfill any schedule with terminate_other, and so terminate runs: a trigger
    of an admin's schedule ended the run that schedule had started. Now each is 42501 for an
    operator before anything is written, and an admin's works."""
    with psycopg.connect(_at(db, 0), autocommit=True) as owner:
        owner.execute("SELECT harvest.create_schedule('nightly', 'wf', p_interval_secs => 3600)")
        owner.execute("SELECT harvest.trigger_schedule('nightly')")  # its run is live
        owner.execute(
            "SELECT harvest.create_schedule('hourly', 'wf', p_interval_secs => 3600,"
            " p_overlap => 'terminate_other')"
        )
    operator = login("harvest_operator")
    past = dt.datetime(2029, 12, 31, tzinfo=dt.UTC)
    refused = [
        ("SELECT harvest.trigger_schedule('nightly', 'terminate_other')", ()),
        ("SELECT harvest.trigger_schedule('hourly')", ()),  # its own overlap terminates
        ("SELECT harvest.backfill_schedule('nightly', ARRAY[%s::timestamptz], 'terminate_other')", (past,)),
        ("SELECT harvest.create_schedule('mine', 'wf', NULL, 60, p_overlap => 'terminate_other')", ()),
        ("SELECT harvest.update_schedule('nightly', '{\"overlap\": \"terminate_other\"}')", ()),
        ("SELECT harvest.update_schedule('hourly', '{\"interval_secs\": 60}')", ()),
    ]
    for minute, (sql, params) in enumerate(refused, start=1):
        assert _attempt(_at(operator, minute), sql, params) == "42501", sql
    # What cannot terminate stays the operator's: asking the run to cancel, lowering the policy.
    assert (
        _attempt(_at(operator, 10), "SELECT harvest.trigger_schedule('nightly', 'cancel_other')", ()) == "ok"
    )
    assert (
        _attempt(operator, "SELECT harvest.update_schedule('hourly', '{\"overlap\": \"skip\"}')", ()) == "ok"
    )
    with psycopg.connect(db, autocommit=True) as owner:
        statuses = owner.execute(
            "SELECT status FROM harvest.executions WHERE workflow_id LIKE 'sched:%'"
        ).fetchall()
        schedules = owner.execute("SELECT name, overlap FROM harvest.schedules ORDER BY name").fetchall()
    assert statuses == [("RUNNING",)], statuses
    assert schedules == [("hourly", "skip"), ("nightly", "skip")], schedules
    assert _attempt(_at(login("harvest_admin"), 11), refused[0][0], ()) == "ok"
    with psycopg.connect(db, autocommit=True) as owner:
        statuses = owner.execute(
            "SELECT status FROM harvest.executions WHERE workflow_id LIKE 'sched:%' ORDER BY created_at"
        ).fetchall()
    assert statuses == [("TERMINATED",), ("RUNNING",)], statuses  # what the operator's trigger did before


def test_an_operator_cannot_take_another_clients_pending_start_payloads(login, db: str) -> None:
    """A client stores a large start input run-less (put_payloads), then hands it to the run it
    starts (set_payloads_execution). Any reader can read the run-less rows' ids, and an operator
    could hand them to a run of its own first: the starting client's hand-off then left them
    alone, and the rows went with the operator's run when retention deleted it (ON DELETE
    CASCADE), leaving the client's run without its input. A run-less row is now its storing
    login's to hand over."""
    client_dsn, other_dsn = login("harvest_operator"), login("harvest_operator")
    with (
        psycopg.connect(client_dsn, autocommit=True) as client,
        psycopg.connect(other_dsn, autocommit=True) as other,
    ):
        (ids,) = client.execute("SELECT harvest.put_payloads(NULL, ARRAY['{\"big\": 1}'::jsonb])").fetchone()
        decoy = start(other, "wf", "decoy-1")
        seen = other.execute(
            "SELECT array_agg(id) FROM harvest.payloads WHERE execution_id IS NULL"
        ).fetchone()[0]
        assert seen == ids
        assert (
            other.execute("SELECT harvest.set_payloads_execution(%s, %s)", (seen, decoy)).fetchone()[0] == 0
        )
        run = start(client, "wf", "owner-1")
        assert client.execute("SELECT harvest.set_payloads_execution(%s, %s)", (ids, run)).fetchone()[0] == 1
    with psycopg.connect(db, autocommit=True) as owner:
        owners = owner.execute(
            "SELECT execution_id::text FROM harvest.payloads WHERE id = ANY(%s)", (ids,)
        ).fetchall()
    assert owners == [(run,)]


def test_a_caller_is_its_login_and_acts_with_the_role_it_set(login, db: str) -> None:
    """The one rule (docs/security.md, "Who the caller is"): a caller is its login (session_user),
    which no session can change, so the rows a login owns (result-wait marks, stream listeners,
    run-less payloads) and the audit's login follow it; what it may do follows the role it acts
    as (SET ROLE's, else the login's), which can only lower its rights. Two admin logins that both
    SET ROLE harvest_operator share the role, not each other's rows; a refusal names the role in
    use: it said "login <admin login> does not have" harvest_admin, which that login has."""
    mine_dsn, other_dsn = login("harvest_admin"), login("harvest_admin")
    other_login = conninfo.conninfo_to_dict(other_dsn)["user"]
    with psycopg.connect(db, autocommit=True) as owner:
        run = start(owner, "wf", "set-role-1")
    waiter = str(uuid.uuid4())
    with (
        psycopg.connect(mine_dsn, autocommit=True) as mine,
        psycopg.connect(other_dsn, autocommit=True) as other,
    ):
        for conn in (mine, other):
            conn.execute("SET ROLE harvest_operator")
        mine.execute("SELECT harvest.wait_for_result(%s, %s)", (run, waiter))
        mine.execute("SELECT harvest.heartbeat_event_stream('host:2:set-role')")
        (ids,) = mine.execute("SELECT harvest.put_payloads(NULL, ARRAY['{\"big\": 1}'::jsonb])").fetchone()
        other.execute("SELECT harvest.stop_waiting_for_result(%s)", (waiter,))
        assert other.execute("SELECT harvest.stop_event_stream('host:2:set-role')").fetchone()[0] is False
        assert other.execute("SELECT harvest.set_payloads_execution(%s, %s)", (ids, run)).fetchone()[0] == 0
        with psycopg.connect(db, autocommit=True) as owner:
            assert owner.execute("SELECT count(*) FROM harvest.result_waiters").fetchone()[0] == 1
            assert owner.execute("SELECT count(*) FROM harvest.event_stream_listeners").fetchone()[0] == 1
        # The rights are the role's: a terminating start is refused, naming the role in use.
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
            other.execute(
                "SELECT harvest.start_workflow('wf', '[]', 'set-role-1',"
                " p_conflict_policy => 'terminate_existing')"
            )
        message = refused.value.diag.message_primary or ""
        assert "role harvest_operator" in message and other_login in message, message
        assert f"login {other_login} does not have it" not in message, message
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="role harvest_operator"):
            other.execute(
                "SELECT harvest.create_schedule('s1', 'wf', NULL, 60, p_overlap => 'terminate_other')"
            )
        # The audit records the login, whatever role it set.
        other.execute("SELECT harvest.cancel_workflow(%s, 'as an operator')", (run,))
        with psycopg.connect(db, autocommit=True) as owner:
            assert owner.execute(
                "SELECT login, actor FROM harvest.audit_log WHERE operation = 'workflow.cancel'"
            ).fetchall() == [(other_login, other_login)]
        # A lowered session still owns its login's rows.
        mine.execute("SELECT harvest.stop_waiting_for_result(%s)", (waiter,))
        assert mine.execute("SELECT harvest.stop_event_stream('host:2:set-role')").fetchone()[0] is True
        assert mine.execute("SELECT harvest.set_payloads_execution(%s, %s)", (ids, run)).fetchone()[0] == 1


def _retention_check(db: str) -> dict:
    report = harvest(db, "preflight", "--output", "json")
    (check,) = [c for c in json.loads(report.stdout)["checks"] if c["name"] == "retention"]
    return check


def test_preflight_warns_when_the_only_janitor_has_a_login_without_harvest_admin(
    db: str, login, start_worker
) -> None:
    """The documented roles, a worker connecting as a harvest_worker login in the default role:
    its janitor stops at its first round ("retention janitor stopped"), and no process deletes
    anything. Preflight's retention check passed as soon as an age was set."""
    from harvest import App
    from harvest.db import testkit

    with psycopg.connect(db, autocommit=True) as owner:
        owner.execute("SELECT harvest.set_retention('30 days'::interval)")
    clock = testkit.SharedClock(db)
    try:
        worker_login = testkit.shared_clock_dsn(login("harvest_worker"))
        options = {"run_retention": True, "retention_interval": 0.2, "heartbeat_interval": 0.2}
        start_worker(App(), dsn=worker_login, **options)
        assert _retention_check(db)["status"] == "pass"  # (it has just started: no round missed yet)
        clock.set_offset(clock.offset() + dt.timedelta(seconds=120))  # two rounds and a minute

        def moved() -> bool:  # (a heartbeat on the moved clock)
            with psycopg.connect(db) as conn:
                return conn.execute(
                    "SELECT max(last_heartbeat_at) > now() + interval '100 seconds' FROM harvest.workers"
                ).fetchone()[0]

        _wait(moved)
        check = _retention_check(db)
        assert check["status"] == "warn", check
        assert "no janitor sweeps (never)" in check["summary"] and "harvest_admin" in check["remediation"], (
            check
        )

        # A janitor whose login may run it (the owner): its rounds keep the check passing.
        start_worker(App(), dsn=testkit.shared_clock_dsn(db), **options)
        _wait(lambda: _retention_check(db)["status"] == "pass")
    finally:
        clock.close()


def _wait(check, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


STARTING = "SELECT status, execution_id::text FROM harvest.start_workflow(%s, %s, %s)"
STORING = "SELECT harvest.put_payloads(NULL, ARRAY[%s::jsonb])"


def _victims_held_back_input(db: str, victim: psycopg.Connection, policies: dict) -> tuple[str, dict]:
    """``policies`` declared, the victim's start of ``slow`` (a throttle of burst 1) held back
    after the burst's run, its input offloaded run-less first as a client's start does: the
    row's id and the reference to it."""
    with psycopg.connect(db, autocommit=True) as owner:
        owner.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(policies),))
    assert victim.execute(STARTING, ("slow", Jsonb([]), "v-0")).fetchone()[0] == "RUNNING"  # (the burst)
    with victim.transaction():  # as a client's start: stored run-less, then the start
        (ids,) = victim.execute(STORING, (Jsonb("victim input"),)).fetchone()
        ref = {"_harvest_ref": str(ids[0]), "bytes": 14}
        assert victim.execute(STARTING, ("slow", Jsonb([ref]), "v-1")).fetchone()[0] == "DEFERRED"
    return str(ids[0]), ref


def test_a_forged_reference_cannot_erase_copy_or_take_another_clients_held_back_input(login, db: str) -> None:
    """A held-back start's offloaded input is run-less until its release, and its id is readable
    to every reader. Another client wrote a reference to it into its own runs' inputs: erasing
    its run erased the row, a reset's fork of that run copied it (sec69 took run-less rows through
    references), and its own held-back start, released first, took the row as its run's. Now only
    a run's own rows are erased and copied, and a release takes only its starter's login's rows;
    the victim's run, once released, owns its input and erasing it erases it."""
    victim_dsn, forger_dsn = login("harvest_operator"), login("harvest_operator")
    policies = {
        "workflows": {
            "slow": {"throttle": {"rps": 0.001, "burst": 1, "key": None}},
            "fast": {"throttle": {"rps": 1, "burst": 1, "key": None}},
        }
    }
    starting = STARTING
    with (
        psycopg.connect(victim_dsn, autocommit=True) as victim,
        psycopg.connect(forger_dsn, autocommit=True) as forger,
    ):
        held_id, ref = _victims_held_back_input(db, victim, policies)
        assert forger.execute(starting, ("fast", Jsonb([]), "f-0")).fetchone()[0] == "RUNNING"
        forged_run = forger.execute(starting, ("wf", Jsonb([ref]), "f-run")).fetchone()[1]
        assert forger.execute(starting, ("fast", Jsonb([ref]), "f-held")).fetchone()[0] == "DEFERRED"
    owned = "SELECT execution_id::text, data FROM harvest.payloads WHERE id = %s"
    erasing = "SELECT harvest.erase_payloads(%s)"
    with psycopg.connect(db, autocommit=True) as owner:
        later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
        owner.execute("SELECT set_config('harvest.fake_now', %s, false)", (later.isoformat(),))
        assert owner.execute("SELECT harvest.release_pending_starts()").fetchone()[0] == 1  # the forger's
        assert owner.execute(owned, (held_id,)).fetchone() == (None, "victim input"), "not the forger's run's"
        fork = owner.execute("SELECT harvest.reset_workflow(%s, 1, 'forked')", (forged_run,)).fetchone()[0]
        fork_rows = "SELECT count(*) FROM harvest.payloads WHERE execution_id = %s"
        assert owner.execute(fork_rows, (fork["new_execution_id"],)).fetchone()[0] == 0, "nothing copied"
        owner.execute("SELECT harvest.terminate_workflow(%s, 'done')", (fork["new_execution_id"],))
        for ended in (forged_run, fork["new_execution_id"]):  # (the reset ended its source)
            assert (
                owner.execute("SELECT harvest.erase_payloads(%s)", (ended,)).fetchone()[0]["offloaded"] == 0
            )
        assert owner.execute(owned, (held_id,)).fetchone() == (None, "victim input"), "not erased"
        # The victim's start is released: its run owns its input, and erasing it erases the row.
        much_later = later + dt.timedelta(hours=1)
        owner.execute("SELECT set_config('harvest.fake_now', %s, false)", (much_later.isoformat(),))
        assert owner.execute("SELECT harvest.release_pending_starts()").fetchone()[0] == 1
        (run,) = owner.execute("SELECT id::text FROM harvest.executions WHERE workflow_id = 'v-1'").fetchone()
        assert owner.execute(owned, (held_id,)).fetchone() == (run, "victim input")
        owner.execute("SELECT harvest.terminate_workflow(%s, 'done')", (run,))
        assert owner.execute(erasing, (run,)).fetchone()[0]["offloaded"] == 1
        assert owner.execute(owned, (held_id,)).fetchone() == (run, {"_harvest_erased": True})


def test_a_batch_hands_its_run_only_the_rows_each_argument_s_own_starter_stored(login, db: str) -> None:
    """A batch collects many starters' arguments and recorded the logins whose arguments it
    collected (migration 0126); its release handed every run-less row its input referenced that
    one of those logins stored. So a forger whose argument joined a batch the victim also added
    to named the victim's other held-back start's input, and the batch's run took it: erasing
    that run erased the victim's input, and the victim's own run, once released, did not own it.
    Now each deferral records the run-less rows its own caller stored that its argument names,
    and a release hands those only."""
    victim_dsn, forger_dsn = login("harvest_operator"), login("harvest_operator")
    policies = {
        "workflows": {
            "slow": {"throttle": {"rps": 0.001, "burst": 1, "key": None}},
            "bat": {"batch": {"key": None, "max_size": 3, "window_secs": 3600}},
        }
    }
    starting = STARTING
    with (
        psycopg.connect(victim_dsn, autocommit=True) as victim,
        psycopg.connect(forger_dsn, autocommit=True) as forger,
    ):
        held_id, held_ref = _victims_held_back_input(db, victim, policies)
        with victim.transaction():  # the victim's own argument to the batch, offloaded too
            (own,) = victim.execute(STORING, (Jsonb("victim argument"),)).fetchone()
            own_ref = {"_harvest_ref": str(own[0]), "bytes": 17}
            assert victim.execute(starting, ("bat", Jsonb([own_ref]), "b-1")).fetchone()[0] == "DEFERRED"
        assert forger.execute(starting, ("bat", Jsonb([held_ref]), "b-2")).fetchone()[0] == "DEFERRED"
        status, batch_run = forger.execute(starting, ("bat", Jsonb(["x"]), "b-3")).fetchone()
        assert status == "RUNNING"  # (the third argument filled the batch)
    owned = "SELECT execution_id::text, data FROM harvest.payloads WHERE id = %s"
    with psycopg.connect(db, autocommit=True) as owner:
        assert owner.execute(owned, (own[0],)).fetchone() == (batch_run, "victim argument")
        assert owner.execute(owned, (held_id,)).fetchone() == (None, "victim input"), "not the batch's run's"
        owner.execute("SELECT harvest.terminate_workflow(%s, 'done')", (batch_run,))
        assert (
            owner.execute("SELECT harvest.erase_payloads(%s)", (batch_run,)).fetchone()[0]["offloaded"] == 1
        )
        assert owner.execute(owned, (held_id,)).fetchone() == (None, "victim input"), "not erased"
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        owner.execute("SELECT set_config('harvest.fake_now', %s, false)", (later.isoformat(),))
        assert owner.execute("SELECT harvest.release_pending_starts()").fetchone()[0] == 1
        (run,) = owner.execute("SELECT id::text FROM harvest.executions WHERE workflow_id = 'v-1'").fetchone()
        assert owner.execute(owned, (held_id,)).fetchone() == (run, "victim input")


def test_a_worker_login_cannot_lease_a_task_or_a_relay_for_centuries(login, db: str) -> None:
    """A claim took any positive lease: a worker login's claim of a workflow task for 1e10 s
    held the run out of expire_tasks' reach until the year 2343 (a relay's or a cross-shard
    child's pump lease likewise), and 1e300 failed as 'interval out of range', naming nothing.
    Every lease a caller asks for is now at most a day (a worker's workflow_lease), HR001."""
    worker = login("harvest_worker")
    with psycopg.connect(db, autocommit=True) as owner:
        start(owner, "wf", "held-for-centuries")
    for sql in (
        "SELECT * FROM harvest.claim_tasks('w', ARRAY['default'], 1, %s)",
        "SELECT * FROM harvest.claim_remote_relays(10, %s)",
        "SELECT * FROM harvest.claim_cross_shard_children(10, %s)",
    ):
        for lease in (1e10, 1e300):
            with psycopg.connect(worker, autocommit=True) as conn:
                with pytest.raises(psycopg.Error) as refused:
                    conn.execute(sql, (lease,))
                assert refused.value.sqlstate == "HR001", (sql, lease, refused.value)
                assert "over the ceiling of 86400 seconds" in str(refused.value)
    with psycopg.connect(db, autocommit=True) as owner:
        assert owner.execute("SELECT count(*) FROM harvest.tasks WHERE status = 'running'").fetchone()[0] == 0
    with psycopg.connect(worker, autocommit=True) as conn:
        assert (
            len(conn.execute("SELECT * FROM harvest.claim_tasks('w', ARRAY['default'], 1, 86400)").fetchall())
            == 1
        )


def test_a_worker_login_s_sweep_is_bounded(login, db: str) -> None:
    """The scanner's sweeps took any limit: NULL (no LIMIT) made one call sweep every expired
    task, run, relay, mutex waiter and held-back start in one transaction, holding their locks
    throughout, and a negative one failed as the server's 'LIMIT must not be negative'. Each
    now takes 1 to 10000 rows a call, HR001 naming the function."""
    worker = login("harvest_worker")
    sweeps = ("scan", "expire_tasks", "expire_workflows", "deliver_relays", "grant_mutexes")
    more = ("release_pending_starts", "expire_query_requests", "start_buffered_firings")
    for name in sweeps + more:
        for limit in (None, -1, 0, 10001):
            state = _attempt(worker, f"SELECT * FROM harvest.{name}(%s)", (limit,))
            assert state == "HR001", (name, limit, state)
        assert _attempt(worker, f"SELECT * FROM harvest.{name}(%s)", (100,)) == "ok", name
