"""The max_history_bytes quota: what its check reads, and that its figure is the key's stored bytes.

A start of a workflow with max_history_bytes counts its key's history bytes (functions/flow_quotas.sql,
quota_usage, called by _check_quota): the sum of executions.history_bytes over every kept run of the
key. It summed them all, on every start: a key with a year of kept runs paid for the year on each
start. An ended run's history no longer grows, so the ended runs' bytes are kept per key in
harvest.quota_ended_bytes (written in the transaction that ends, moves or deletes a quota'd run), and
only the live runs are summed (migration 0103). The figure must stay the old one, exactly: these
tests compare it with the direct sum after every kind of close, a continue-as-new chain, a reset, a
purge and a batch of closes.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from test_generic_plans import Statement, nodes
from test_quota_key_reads import _explain

ENDED = 10_000  # kept ended runs of the key
LIVE = 4
BYTES_SUM = Statement(
    "quota_usage",
    r"SELECT \(SELECT coalesce\(sum\(e\.history_bytes\)",
    {"p_key": "text"},
    end=r"\);",  # the RETURN's closing parenthesis
)
POLICY = {"workflows": {"wf_b": {"quota": {"key": "input.t", "max_history_bytes": 10**15}}}}


def _direct(conn: psycopg.Connection, key: str) -> int:
    (total,) = conn.execute(
        "SELECT coalesce(sum(history_bytes), 0)::bigint FROM harvest.executions WHERE quota_key = %s", (key,)
    ).fetchone()
    return total


def _usage(conn: psycopg.Connection, key: str) -> int:
    (usage,) = conn.execute("SELECT harvest.quota_usage(%s, 'max_history_bytes')", (key,)).fetchone()
    return usage


def _assert_figure(conn: psycopg.Connection, key: str) -> None:
    assert _usage(conn, key) == _direct(conn, key) > 0


def _buffers(conn: psycopg.Connection, sql: str) -> int:
    """Shared buffers the statement touched (hit + read), its functions' statements included."""
    (explained,) = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, FORMAT JSON) {sql}").fetchone()
    plan = explained[0]["Plan"]
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]


@pytest.fixture
def long_history(conn: psycopg.Connection) -> psycopg.Connection:
    """Key 'acme': ENDED ended runs with bytes, then LIVE live ones; 2,000 other keys' live runs."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(POLICY),))
    insert = (
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, completed_at,"
        " quota_key, history_bytes) SELECT gen_random_uuid(), 'wf_b', %(key)s || '-' || g || %(status)s,"
        " %(status)s, '2030-01-01 00:00:00+00'::timestamptz + g * interval '1 second',"
        " CASE WHEN %(status)s IN ('RUNNING', 'PAUSED') THEN NULL"
        " ELSE '2030-01-01 00:00:00+00'::timestamptz + g * interval '2 second' END, %(key)s, 100 + g"
        " FROM generate_series(1, %(n)s) AS g"
    )
    conn.execute(insert, {"key": "acme", "status": "COMPLETED", "n": ENDED})
    conn.execute(insert, {"key": "acme", "status": "RUNNING", "n": LIVE})
    conn.execute(insert, {"key": "other", "status": "RUNNING", "n": 2_000})
    conn.execute("VACUUM ANALYZE harvest.executions")
    return conn


def test_a_history_bytes_check_does_not_read_the_keys_ended_runs(long_history: psycopg.Connection) -> None:
    """The check summed history_bytes over executions_quota_key: every one of the key's 10,000 kept
    runs, on every start of the key."""
    conn = long_history
    check = (
        f"SELECT harvest._check_quota('wf_b', 'acme', '{json.dumps(POLICY['workflows']['wf_b']['quota'])}')"
    )
    # The first start folds what the inserts left (a row each; a key's closes leave a row each
    # between its starts), and autovacuum reclaims the folded rows (here at once); the second
    # start's catalog reads are the session's last.
    conn.execute(check)
    if conn.execute("SELECT to_regclass('harvest.quota_ended_bytes')").fetchone() != (None,):
        conn.execute("VACUUM harvest.quota_ended_bytes")
    conn.execute(check)
    assert _usage(conn, "acme") == _direct(conn, "acme")
    buffers = _buffers(conn, check)
    assert buffers <= 40 + LIVE, f"the check touched {buffers} buffers for a key with {LIVE} live runs"
    assert _usage(conn, "acme") == _direct(conn, "acme")


def test_a_refused_start_names_the_same_usage(long_history: psycopg.Connection) -> None:
    """HR006's usage is the full sum, as before."""
    conn = long_history
    total = _direct(conn, "acme")
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(
            "SELECT harvest._check_quota('wf_b', 'acme', %s)", (json.dumps({"max_history_bytes": total}),)
        )
    assert raised.value.sqlstate == "HR006"
    detail = json.loads(raised.value.diag.message_detail or "{}")
    assert detail == {
        "quota": "max_history_bytes",
        "key": "acme",
        "usage": total,
        "limit": total,
        "workflow_name": "wf_b",
    }


def _decide(conn: psycopg.Connection, queue: str, *commands: dict[str, object]) -> None:
    """One claimed workflow task of the queue decided with the commands."""
    row = conn.execute(
        "SELECT c.task_id, c.fencing_token FROM harvest.claim_tasks('w-b', ARRAY[%s], 1) AS c", (queue,)
    ).fetchone()
    assert row is not None, f"no task on {queue}"
    conn.execute(
        "SELECT harvest.complete_workflow_task(%s, %s, 1, %s::jsonb)",
        (row[0], row[1], json.dumps(list(commands))),
    )


def _start(conn: psycopg.Connection, workflow_id: str, key: str, queue: str = "qb") -> str:
    (run_id,) = conn.execute(
        "SELECT s.execution_id FROM harvest.start_workflow('wf_b', %s, %s, %s) AS s",
        (json.dumps([{"t": key, "pad": "x" * 300}]), workflow_id, queue),
    ).fetchone()
    return str(run_id)


def test_the_figure_is_the_stored_sum_after_every_kind_of_end(conn: psycopg.Connection) -> None:
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(POLICY),))
    marker = {"type": "record_marker", "seq": 1, "kind": "side_effect", "value": "v" * 700}
    # Completed (a marker's bytes appended in the closing decision), failed, terminated.
    _start(conn, "done", "k", "q-done")
    _decide(conn, "q-done", marker, {"type": "complete_workflow", "result": "r" * 200})
    _assert_figure(conn, "k")
    _start(conn, "failed", "k", "q-failed")
    _decide(conn, "q-failed", {"type": "fail_workflow", "failure": {"message": "f" * 100}})
    _assert_figure(conn, "k")
    terminated = _start(conn, "terminated", "k", "q-term")
    conn.execute("SELECT harvest.terminate_workflow(%s, 'why')", (terminated,))
    _assert_figure(conn, "k")
    # A continue-as-new chain: the WorkflowContinuedAsNew event is appended after the run ended.
    _start(conn, "chain", "k", "q-chain")
    for _ in range(3):
        _decide(conn, "q-chain", {"type": "continue_as_new", "input": [{"t": "k", "pad": "c" * 400}]})
        _assert_figure(conn, "k")
    # A reset: the source ends TERMINATED, its fork carries a copy of the history.
    source = _start(conn, "reset", "k", "q-reset")
    _decide(conn, "q-reset", marker)
    (last,) = conn.execute("SELECT last_event_id FROM harvest.executions WHERE id = %s", (source,)).fetchone()
    conn.execute("SELECT harvest.reset_workflow(%s, %s, 'fix')", (source, last))
    _assert_figure(conn, "k")
    # A purge of some ended runs (retention), then of all of them.
    conn.execute(
        "UPDATE harvest.executions SET completed_at = completed_at - interval '30 days'"
        " WHERE quota_key = 'k' AND workflow_id IN ('done', 'chain') AND status NOT IN ('RUNNING', 'PAUSED')"
    )
    (result,) = conn.execute("SELECT harvest.run_retention(interval '1 day')").fetchone()
    assert result["deleted"] >= 1
    _assert_figure(conn, "k")
    conn.execute("UPDATE harvest.executions SET completed_at = completed_at - interval '30 days'")
    conn.execute("SELECT harvest.run_retention(interval '1 day')")
    assert _usage(conn, "k") == _direct(conn, "k")  # the live runs' bytes only


def test_the_figure_after_a_batch_of_closes_of_two_keys(conn: psycopg.Connection) -> None:
    """A worker's group commit closes runs of several keys in one statement (_update_held_rows)."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(POLICY),))
    for i in range(6):
        _start(conn, f"batch-{i}", "ka" if i % 2 else "kb", "q-batch")
    tasks = conn.execute(
        "SELECT c.task_id, c.fencing_token FROM harvest.claim_tasks('w-b', ARRAY['q-batch'], 10) AS c"
    ).fetchall()
    assert len(tasks) == 6
    commands = [json.dumps([{"type": "complete_workflow", "result": "x" * (50 * i)}]) for i in range(6)]
    conn.execute(
        "SELECT * FROM harvest.complete_workflow_tasks('w-b', %s, %s, %s, %s::jsonb[], %s)",
        ([t[0] for t in tasks], [t[1] for t in tasks], [1] * 6, commands, [0] * 6),
    )
    (ended,) = conn.execute(
        "SELECT count(*) FROM harvest.executions WHERE workflow_id LIKE 'batch-%%' AND status = 'COMPLETED'"
    ).fetchone()
    assert ended == 6
    _assert_figure(conn, "ka")
    _assert_figure(conn, "kb")


def test_closes_of_one_key_and_a_purge_of_it_never_wait_for_each_other(
    db: str, conn: psycopg.Connection
) -> None:
    """Two closes of one key and a purge of its ended runs, all open at once: none waits for
    another (a lock wait fails the statement at once: lock_timeout), and once they commit the
    figure is the stored sum. A total updated in place would make the second close wait for the
    first's commit, and a batch closing runs of two keys deadlock with one closing them in the
    other order; an added row locks nothing."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(POLICY),))
    first, second, old = (_start(conn, f"race-{i}", "k") for i in range(3))
    conn.execute("SELECT harvest.terminate_workflow(%s, 'old')", (old,))
    conn.execute(
        "UPDATE harvest.executions SET completed_at = completed_at - interval '30 days' WHERE id = %s", (old,)
    )
    sessions = [psycopg.connect(db) for _ in range(3)]
    try:
        for session in sessions:
            session.execute("SET lock_timeout = '50ms'")
        sessions[0].execute("SELECT harvest.terminate_workflow(%s, 'one')", (first,))
        sessions[1].execute("SELECT harvest.terminate_workflow(%s, 'two')", (second,))
        (purged,) = sessions[2].execute("SELECT harvest.run_retention(interval '1 day')").fetchone()
        assert purged["deleted"] == 1
        # And a start of the key, which folds its rows, while all three are open.
        conn.execute(
            "SELECT harvest._check_quota('wf_b', 'k', %s)", (json.dumps({"max_history_bytes": 10**15}),)
        )
        for session in sessions:
            session.commit()
    finally:
        for session in sessions:
            session.close()
    conn.execute("SELECT harvest._check_quota('wf_b', 'k', %s)", (json.dumps({"max_history_bytes": 10**15}),))
    _assert_figure(conn, "k")
    (rows,) = conn.execute("SELECT count(*) FROM harvest.quota_ended_bytes WHERE quota_key = 'k'").fetchone()
    assert rows == 1  # folded by the last start


def test_two_folds_of_a_key_at_once_keep_its_total(db: str, conn: psycopg.Connection) -> None:
    """A fold takes the rows it can lock at once: a second fold meanwhile takes none of them and
    does not wait; the total is the same after both."""
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, completed_at,"
        " quota_key, history_bytes)"
        " SELECT gen_random_uuid(), 'wf_b', 'f-' || g, 'COMPLETED', now(), now(), 'f', g"
        " FROM generate_series(1, 50) AS g"
    )
    total = _direct(conn, "f")
    with psycopg.connect(db) as one, psycopg.connect(db) as two:
        two.execute("SET lock_timeout = '50ms'")
        one.execute("SELECT harvest._fold_quota_bytes(ARRAY['f'])")
        two.execute("SELECT harvest._fold_quota_bytes(ARRAY['f'])")
        two.commit()
        one.commit()
    assert _usage(conn, "f") == total
    (rows,) = conn.execute("SELECT count(*) FROM harvest.quota_ended_bytes WHERE quota_key = 'f'").fetchone()
    assert rows == 1


def test_a_start_in_a_repeatable_read_transaction_counts_its_snapshot_and_folds_nothing(
    db: str, conn: psycopg.Connection
) -> None:
    """A start inside the caller's REPEATABLE READ transaction counts with its snapshot, as the
    full sum did, and never fails for a fold another session committed after its snapshot (it
    folds nothing itself: a row deleted after the snapshot would fail its delete with 40001)."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(POLICY),))
    runs = [_start(conn, f"rr-{i}", "k") for i in range(3)]
    conn.execute("SELECT harvest.terminate_workflow(%s, 'a')", (runs[0],))
    before = _direct(conn, "k")
    with psycopg.connect(db) as rr:
        rr.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        assert _usage(rr, "k") == before  # the snapshot
        conn.execute("SELECT harvest.terminate_workflow(%s, 'b')", (runs[1],))
        conn.execute("SELECT harvest._fold_quota_bytes(ARRAY['k'])")
        rr.execute("SELECT harvest._fold_quota_bytes(ARRAY['k'])")  # nothing at REPEATABLE READ
        assert _usage(rr, "k") == before
        rr.rollback()
    _assert_figure(conn, "k")


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
def test_the_bytes_sum_reads_the_live_runs_and_the_keys_rows_in_both_plan_modes(
    long_history: psycopg.Connection, plan_cache_mode: str
) -> None:
    """The sum's plan, generic (what a session's sixth call keeps) or custom: no row of another key
    or of an ended run dropped by a filter, a few buffers."""
    conn = long_history
    conn.execute("SELECT harvest._fold_quota_bytes(ARRAY['acme'])")
    conn.execute("VACUUM ANALYZE harvest.quota_ended_bytes")
    plan = _explain(conn, BYTES_SUM, plan_cache_mode, "'acme'")
    scans = [n for n in nodes(plan) if n.get("Relation Name") in ("executions", "quota_ended_bytes")]
    assert {n["Relation Name"] for n in scans} == {"executions", "quota_ended_bytes"}, plan
    for scan in scans:
        removed = scan.get("Rows Removed by Filter", 0) + scan.get("Rows Removed by Index Recheck", 0)
        assert removed == 0, plan
        assert scan["Actual Rows"] <= LIVE, plan
    assert plan["Shared Hit Blocks"] + plan["Shared Read Blocks"] <= 16 + LIVE, plan


def test_a_key_under_another_quota_keeps_one_row_of_ended_bytes(conn: psycopg.Connection) -> None:
    """Every quota'd run's end adds a row, whatever its quotas; a key checked only for
    max_active_executions is folded by its starts too, or it would keep a row per ended run."""
    policy = {"workflows": {"wf_b": {"quota": {"key": "input.t", "max_active_executions": 100}}}}
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(policy),))
    for i in range(5):
        run = _start(conn, f"active-{i}", "only-active")
        conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (run,))
    _start(conn, "active-last", "only-active")
    (rows,) = conn.execute(
        "SELECT count(*) FROM harvest.quota_ended_bytes WHERE quota_key = 'only-active'"
    ).fetchone()
    assert rows == 1
    _assert_figure(conn, "only-active")


def test_the_migration_on_a_live_database_keeps_readers_of_the_runs_going(db: str) -> None:
    """Applied to a database without its triggers (an upgrade from 0102), migration 0103 takes
    harvest.executions' SHARE ROW EXCLUSIVE lock (what CREATE TRIGGER needs), which keeps writes
    out for its backfill and lets reads (a list, a get, a claim's read) go on, as its comment
    says. Its DROP TRIGGER IF EXISTS, there for a re-run, would take ACCESS EXCLUSIVE if a trigger
    were there (on a re-run it does); on an upgrade none is, and this holds that: a change that
    locked the runs against readers for the backfill would fail here."""
    from pathlib import Path

    migration = Path(__file__).parents[2] / "migrations" / "0103_quota_ended_bytes.sql"
    triggers = ("insert", "update", "delete", "truncate")
    with psycopg.connect(db, autocommit=True) as setup:  # the schema as 0102 left it
        for trigger in triggers:
            setup.execute(f"DROP TRIGGER executions_quota_bytes_{trigger} ON harvest.executions")
    with psycopg.connect(db) as upgrade:
        upgrade.execute(migration.read_text())
        modes = {
            mode
            for (mode,) in upgrade.execute(
                "SELECT mode FROM pg_locks WHERE pid = pg_backend_pid() "
                "AND relation = 'harvest.executions'::regclass"
            ).fetchall()
        }
        assert "ShareRowExclusiveLock" in modes, modes
        assert "AccessExclusiveLock" not in modes, modes
        upgrade.commit()
    with psycopg.connect(db, autocommit=True) as check:  # every trigger is there, once
        names = {
            name
            for (name,) in check.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'harvest.executions'::regclass "
                "AND tgname LIKE 'executions_quota_bytes_%'"
            ).fetchall()
        }
    assert names == {f"executions_quota_bytes_{trigger}" for trigger in triggers}


REPEATABLE_READ_ENDED = 5_000  # ended runs of a key whose starts all run at REPEATABLE READ


def _rows_the_check_reads(db: str, key: str) -> int:
    """The rows of harvest.quota_ended_bytes the max_history_bytes sum reads for ``key``, in a
    REPEATABLE READ transaction (the starts' own)."""
    with psycopg.connect(db) as rr:
        rr.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        plan = _explain(rr, BYTES_SUM, "force_custom_plan", f"'{key}'")
        rr.rollback()
    return sum(int(n["Actual Rows"]) for n in nodes(plan) if n.get("Relation Name") == "quota_ended_bytes")


def test_the_janitor_folds_a_key_whose_starts_all_run_at_repeatable_read(
    db: str, conn: psycopg.Connection
) -> None:
    """A start folds its key's rows at READ COMMITTED only (_fold_quota_bytes): a client that
    starts every run inside its own REPEATABLE READ transaction never folded them, and its key's
    check read a row per ended run, ever more. The janitor's round (prune_flow_keys, READ
    COMMITTED) folds them; closes, a start and the round open at once wait for none of each
    other (lock_timeout), and the figure stays the direct sum."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(POLICY),))
    open_runs = [_start(conn, f"rr-open-{i}", "rr") for i in range(2)]
    conn.execute(  # as many closes: the trigger adds a row each
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, completed_at,"
        " quota_key, history_bytes) SELECT gen_random_uuid(), 'wf_b', 'rr-' || g, 'COMPLETED', now(), now(),"
        " 'rr', 100 + g FROM generate_series(1, %s) AS g",
        (REPEATABLE_READ_ENDED,),
    )
    conn.execute("SELECT harvest.terminate_workflow(%s, 'x')", (open_runs[0],))
    with psycopg.connect(db) as rr:
        rr.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        _start(rr, "rr-start", "rr")  # folds nothing
        rr.commit()
    assert _rows_the_check_reads(db, "rr") == REPEATABLE_READ_ENDED + 1

    closing, starting = psycopg.connect(db), psycopg.connect(db)
    try:
        for session in (closing, starting, conn):
            session.execute("SET lock_timeout = '50ms'")
        closing.execute("SELECT harvest.terminate_workflow(%s, 'y')", (open_runs[1],))
        starting.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        _start(starting, "rr-start-2", "rr")
        conn.execute("SELECT harvest.prune_flow_keys()")  # the janitor's round, meanwhile
        closing.commit()
        starting.commit()
    finally:
        closing.close()
        starting.close()
    assert _rows_the_check_reads(db, "rr") == 2  # the round's row, the close committed after it
    conn.execute("SELECT harvest.prune_flow_keys()")
    assert _rows_the_check_reads(db, "rr") == 1
    _assert_figure(conn, "rr")
