"""The max_dead_letters quota: what its check reads, and that its figure is the old count.

A start of a workflow with max_dead_letters counts the dead letters of its key's runs
(functions/flow_quotas.sql, quota_usage, called by _check_quota). It joined the key's runs to the
dead letters: the planner read either every kept run of the key (executions_quota_key) or every
dead letter of the shard, on every start of the key. A dead letter now carries its run's key
(dead_letters.quota_key, set from the run by a trigger as it is inserted; migration 0106), and the
check counts the key's dead letters down dead_letters_quota_key. The figure must stay the old
one, exactly: these tests compare it with the old join after every way a dead letter comes and
goes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from test_generic_plans import Statement, nodes
from test_quota_key_reads import _explain

ENDED = 10_000  # kept ended runs of the key, and of other keys (each of those with a dead letter)
PARKED = 3  # dead letters of the key
DEAD_COUNT = Statement(
    "quota_usage",
    r"SELECT count\(\*\) FROM harvest\.(?:executions AS e\s+JOIN harvest\.)?dead_letters",
    {"p_key": "text"},
    end=r"\);",  # the RETURN's closing parenthesis
)
POLICY = {"workflows": {"wf_d": {"quota": {"key": "input.t", "max_dead_letters": 1_000}}}}
QUOTA = json.dumps(POLICY["workflows"]["wf_d"]["quota"])


def _old_count(conn: psycopg.Connection, key: str) -> int:
    """The figure as every release before 0106 counted it."""
    (count,) = conn.execute(
        "SELECT count(*) FROM harvest.executions AS e JOIN harvest.dead_letters AS d"
        " ON d.execution_id = e.id WHERE e.quota_key = %s",
        (key,),
    ).fetchone()
    return count


def _usage(conn: psycopg.Connection, key: str) -> int:
    (usage,) = conn.execute("SELECT harvest.quota_usage(%s, 'max_dead_letters')", (key,)).fetchone()
    return usage


def _assert_figure(conn: psycopg.Connection, key: str, expected: int) -> None:
    assert (_usage(conn, key), _old_count(conn, key)) == (expected, expected)


def _buffers(conn: psycopg.Connection, sql: str) -> int:
    """Shared buffers the statement touched (hit + read), its functions' statements included."""
    (explained,) = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, FORMAT JSON) {sql}").fetchone()
    plan = explained[0]["Plan"]
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]


@pytest.fixture(scope="module")
def dead_letters_db(module_db: str) -> str:
    """Key 'acme': ENDED ended runs, PARKED of them with a dead letter; ENDED ended runs of 200
    other keys, each with a dead letter (a shard's bad day: a downstream outage parked them).
    Once for the module: the tests on it only read it."""
    with psycopg.connect(module_db, autocommit=True) as conn:
        _fill(conn)
    return module_db


@pytest.fixture
def many_dead_letters(dead_letters_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dead_letters_db, autocommit=True) as conn:
        yield conn


def _fill(conn: psycopg.Connection) -> None:
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(POLICY),))
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, completed_at,"
        " quota_key) SELECT gen_random_uuid(), 'wf_d', k || '-' || g, 'FAILED',"
        " '2030-01-01 00:00:00+00'::timestamptz + g * interval '1 second',"
        " '2030-01-01 00:00:00+00'::timestamptz + g * interval '2 second', k"
        " FROM generate_series(1, %s) AS g, generate_series(0, 1) AS s,"
        " LATERAL (SELECT CASE WHEN s = 0 THEN 'acme' ELSE 'tenant-' || (g %% 200) END) AS q (k)",
        (ENDED,),
    )
    # (No quota_key named: a dead letter takes its run's.)
    conn.execute(
        "INSERT INTO harvest.dead_letters (kind, execution_id, workflow_name, queue, attempts, failure,"
        " scheduled_at, failed_at) SELECT 'workflow', e.id, e.workflow_name, 'q', 1, '{}', e.created_at,"
        " e.completed_at FROM harvest.executions AS e"
        " WHERE e.quota_key <> 'acme' OR e.workflow_id IN ('acme-1', 'acme-500', 'acme-9000')"
    )
    conn.execute("VACUUM ANALYZE harvest.executions")
    conn.execute("VACUUM ANALYZE harvest.dead_letters")


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
def test_the_dead_letter_count_reads_only_the_keys_dead_letters(
    many_dead_letters: psycopg.Connection, plan_cache_mode: str
) -> None:
    """The join read every kept run of the key, or every dead letter of the shard: thousands of
    rows and hundreds of buffers for three dead letters."""
    conn = many_dead_letters
    plan = _explain(conn, DEAD_COUNT, plan_cache_mode, "'acme'")
    for scan in nodes(plan):
        if "Relation Name" not in scan:
            continue
        removed = scan.get("Rows Removed by Filter", 0) + scan.get("Rows Removed by Index Recheck", 0)
        assert removed == 0, plan
        assert scan["Actual Rows"] <= PARKED, (
            f"{scan['Relation Name']} read {scan['Actual Rows']} rows: {plan}"
        )
    buffers = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert buffers <= 8 + PARKED, f"{buffers} buffers for {PARKED} dead letters: {plan}"
    _assert_figure(conn, "acme", PARKED)


def test_a_dead_letter_quota_check_does_not_read_the_keys_runs(many_dead_letters: psycopg.Connection) -> None:
    """The whole start-time check of a key under max_dead_letters alone."""
    conn = many_dead_letters
    check = f"SELECT harvest._check_quota('wf_d', 'acme', '{QUOTA}')"
    conn.execute(check)
    buffers = _buffers(conn, check)
    assert buffers <= 40, f"the check touched {buffers} buffers for {PARKED} dead letters"


def test_a_refused_start_names_the_same_usage(many_dead_letters: psycopg.Connection) -> None:
    conn = many_dead_letters
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(
            "SELECT harvest._check_quota('wf_d', 'acme', %s)", (json.dumps({"max_dead_letters": 3}),)
        )
    assert raised.value.sqlstate == "HR006"
    assert json.loads(raised.value.diag.message_detail or "{}") == {
        "quota": "max_dead_letters",
        "key": "acme",
        "usage": 3,
        "limit": 3,
        "workflow_name": "wf_d",
    }
    # One under the usage's limit + 1 admits.
    conn.execute("SELECT harvest._check_quota('wf_d', 'acme', %s)", (json.dumps({"max_dead_letters": 4}),))


def _start(conn: psycopg.Connection, workflow_id: str, key: str) -> str:
    (run_id,) = conn.execute(
        "SELECT s.execution_id FROM harvest.start_workflow('wf_d', %s, %s, %s) AS s",
        (json.dumps([{"t": key}]), workflow_id, f"q-{workflow_id}"),
    ).fetchone()
    return str(run_id)


def _claim(conn: psycopg.Connection, queue: str) -> tuple[int, int]:
    row = conn.execute(
        "SELECT c.task_id, c.fencing_token FROM harvest.claim_tasks('w-d', ARRAY[%s], 1) AS c", (queue,)
    ).fetchone()
    assert row is not None, f"no task on {queue}"
    return row[0], row[1]


def _park(conn: psycopg.Connection, workflow_id: str, key: str) -> tuple[str, int]:
    """A run of the key whose one activity failed for good and parked: (run, dead letter)."""
    run_id = _start(conn, workflow_id, key)
    task, token = _claim(conn, f"q-{workflow_id}")
    command = {"type": "schedule_activity", "seq": 1, "name": "act", "input": [], "queue": f"a-{workflow_id}"}
    conn.execute(
        "SELECT harvest.complete_workflow_task(%s, %s, 1, %s::jsonb)", (task, token, json.dumps([command]))
    )
    task, token = _claim(conn, f"a-{workflow_id}")
    failure = {"error_type": "Boom", "message": "down", "non_retryable": True, "details": None}
    (outcome,) = conn.execute(
        "SELECT harvest.fail_activity(%s, %s, %s::jsonb)", (task, token, json.dumps(failure))
    ).fetchone()
    assert outcome == "dead_lettered"
    (dead_id,) = conn.execute(
        "SELECT id FROM harvest.dead_letters WHERE execution_id = %s", (run_id,)
    ).fetchone()
    return run_id, dead_id


def _unknown_workflow(conn: psycopg.Connection, workflow_id: str, key: str) -> str:
    """A run failed as UnknownWorkflow at its 10th claim: a dead letter of kind 'workflow'."""
    run_id = _start(conn, workflow_id, key)
    failure = json.dumps({"error_type": "UnknownWorkflow", "message": "not registered"})
    for _ in range(10):
        task, token = _claim(conn, f"q-{workflow_id}")
        conn.execute("SELECT harvest.fail_workflow_task(%s, %s, %s::jsonb, 0)", (task, token, failure))
    (status,) = conn.execute("SELECT status FROM harvest.executions WHERE id = %s", (run_id,)).fetchone()
    assert status == "FAILED"
    return run_id


def test_the_figure_is_the_old_count_after_every_way_a_dead_letter_comes_and_goes(
    conn: psycopg.Connection,
) -> None:
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(POLICY),))
    _replayed, replayed_dl = _park(conn, "replayed", "k")
    _discarded, discarded_dl = _park(conn, "discarded", "k")
    bulk, _ = _park(conn, "bulk", "k")
    ended, _ = _park(conn, "ended", "k")
    _park(conn, "elsewhere", "other")
    _unknown_workflow(conn, "unknown", "k")
    _assert_figure(conn, "k", 5)
    _assert_figure(conn, "other", 1)
    conn.execute("SELECT harvest.replay_dead_letter(%s)", (replayed_dl,))
    _assert_figure(conn, "k", 4)
    conn.execute("SELECT harvest.discard_dead_letter(%s)", (discarded_dl,))
    _assert_figure(conn, "k", 3)
    # A run ended with its dead letter parked keeps it (and its count) until retention.
    conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (ended,))
    _assert_figure(conn, "k", 3)
    # Its payloads erased: the dead letter stays, scrubbed.
    conn.execute("SELECT harvest.erase_payloads(%s)", (ended,))
    _assert_figure(conn, "k", 3)
    # A reset of a run with a parked dead letter (to before the activity was scheduled): the
    # source ends with its dead letter, the fork has none.
    conn.execute("SELECT harvest.reset_workflow(%s, 1, 'fix')", (bulk,))
    (forks,) = conn.execute(
        "SELECT count(*) FROM harvest.executions WHERE quota_key = 'k' AND status = 'RUNNING'"
        " AND workflow_id = 'bulk'"
    ).fetchone()
    assert forks == 1
    _assert_figure(conn, "k", 3)
    # The replayed activity fails for good again: a new dead letter of the same run.
    task, token = _claim(conn, "a-replayed")
    failure = {"error_type": "Boom", "message": "again", "non_retryable": True, "details": None}
    conn.execute("SELECT harvest.fail_activity(%s, %s, %s::jsonb)", (task, token, json.dumps(failure)))
    _assert_figure(conn, "k", 4)
    # Retention deletes the ended run and, with it (ON DELETE CASCADE), its dead letter.
    conn.execute(
        "UPDATE harvest.executions SET completed_at = completed_at - interval '30 days' WHERE id = %s",
        (ended,),
    )
    (result,) = conn.execute("SELECT harvest.run_retention(interval '1 day')").fetchone()
    assert result["deleted"] >= 1
    _assert_figure(conn, "k", 3)
    # A bulk discard of every dead letter left.
    conn.execute("SELECT harvest.discard_dead_letters(p_workflow_name => 'wf_d')")
    _assert_figure(conn, "k", 0)
    _assert_figure(conn, "other", 0)


def test_a_repeatable_read_start_counts_with_its_snapshot(db: str, conn: psycopg.Connection) -> None:
    """A dead letter committed after a REPEATABLE READ transaction's snapshot is not counted by a
    check in it, as before; at READ COMMITTED it is."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(POLICY),))
    _park(conn, "first", "k")
    with psycopg.connect(db) as session:
        session.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        assert _usage(session, "k") == 1
        _park(conn, "second", "k")
        assert _usage(session, "k") == 1
        session.rollback()
        assert _usage(session, "k") == 2
    _assert_figure(conn, "k", 2)


def test_the_migration_backfills_the_key_of_every_kept_dead_letter(conn: psycopg.Connection) -> None:
    """Dead letters parked before 0106 have no key on them; the migration (run twice) copies each
    run's key onto its dead letters, and the figure is the old count."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(POLICY),))
    for i in range(3):
        _park(conn, f"old-{i}", "k")
    _park(conn, "other", "o")
    conn.execute("ALTER TABLE harvest.dead_letters DISABLE TRIGGER USER")
    conn.execute("UPDATE harvest.dead_letters SET quota_key = NULL")
    conn.execute("ALTER TABLE harvest.dead_letters ENABLE TRIGGER USER")
    assert _usage(conn, "k") == 0
    migration = Path(__file__).parents[2] / "migrations" / "0106_dead_letters_quota_key.sql"
    for _ in range(2):
        conn.execute(migration.read_text())
        _assert_figure(conn, "k", 3)
        _assert_figure(conn, "o", 1)
