"""The closed lists of executions, events and tasks hold after 0044 moved them into domains.

Migration 0044 (docs/performance.md "Where the SQL path's time goes") replaced the IN lists
of seven table CHECKs with casts to domains, so PostgreSQL compiles them once per session
instead of once per statement. The rules must be the old ones: every value the old CHECK
took is taken, every value it refused is refused with SQLSTATE 23514 naming the same
constraint, on INSERT and on UPDATE, and the columns stay text. Migration 0057 moved the
executions rules from table CHECKs into the executions_checks trigger (sql/triggers.sql),
which fires on INSERT and (since 0062, as executions_checks_update, after the row is written)
on an UPDATE of the columns they read, and 0058 the task's kind rule into the tasks'
triggers; the tests here hold for them.
"""

from __future__ import annotations

import itertools
import uuid

import psycopg
import pytest

STATUSES = [
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TERMINATED",
    "TIMED_OUT",
    "CONTINUED_AS_NEW",
    "MIGRATING",
    "MIGRATED",
    "PAUSED",
]
POLICIES = ["terminate", "request_cancel", "abandon"]


def _insert_run(
    conn: psycopg.Connection, status: str, shard: int | None, policy: str
) -> tuple[bool, str | None]:
    try:
        with conn.transaction():
            conn.execute(
                "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at,"
                " migrated_to_shard, parent_close_policy) VALUES (%s, 'w', %s, %s, now(), %s, %s)",
                (uuid.uuid4(), uuid.uuid4().hex, status, shard, policy),
            )
        return True, None
    except psycopg.errors.CheckViolation as exc:
        return False, exc.diag.constraint_name


def test_a_runs_row_is_taken_exactly_when_the_old_checks_took_it(conn: psycopg.Connection) -> None:
    refused = set()
    for status, shard, policy in itertools.product(
        [*STATUSES, "BOGUS", "running"], [None, -1, 0, 7, 65535, 65536], [*POLICIES, "orphan"]
    ):
        # The pre-0044 CHECKs, written out.
        old = (
            status in STATUSES
            and policy in POLICIES
            and (shard is None or (status in ("MIGRATING", "MIGRATED") and 0 <= shard <= 65535))
        )
        taken, constraint = _insert_run(conn, status, shard, policy)
        assert taken == old, (status, shard, policy)
        if not taken:
            refused.add(constraint)
    assert refused == {
        "executions_status_check",
        "executions_parent_close_policy_check",
        "executions_migrated_to_shard_check",
    }


def test_search_attributes_must_be_an_object(conn: psycopg.Connection) -> None:
    for value, taken in [("{}", True), ('{"a": 1}', True), ("[]", False), ('"x"', False), ("1", False)]:
        try:
            with conn.transaction():
                conn.execute(
                    "INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at,"
                    " search_attributes) VALUES (gen_random_uuid(), 'w', %s, now(), %s::jsonb)",
                    (uuid.uuid4().hex, value),
                )
            refused = None
        except psycopg.errors.CheckViolation as exc:
            refused = exc.diag.constraint_name
        assert (refused is None) == taken, value
        if not taken:
            assert refused == "executions_search_attributes_object"


def test_an_update_is_checked_too(conn: psycopg.Connection) -> None:
    run = conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at)"
        " VALUES (gen_random_uuid(), 'w', 'upd', now()) RETURNING id"
    ).fetchone()[0]
    for assignment, constraint in [
        ("status = 'DONE'", "executions_status_check"),
        ("migrated_to_shard = 3", "executions_migrated_to_shard_check"),
        ("parent_close_policy = 'orphan'", "executions_parent_close_policy_check"),
        ("search_attributes = '[]'", "executions_search_attributes_object"),
    ]:
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            conn.execute(f"UPDATE harvest.executions SET {assignment} WHERE id = %s", (run,))
        assert caught.value.diag.constraint_name == constraint
    conn.execute(
        "UPDATE harvest.executions SET status = 'MIGRATED', migrated_to_shard = 3 WHERE id = %s", (run,)
    )


def test_a_tasks_kind_and_status_are_the_old_lists(conn: psycopg.Connection) -> None:
    run = conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at)"
        " VALUES (gen_random_uuid(), 'w', 'tasks', now()) RETURNING id"
    ).fetchone()[0]
    for seq, (kind, status) in enumerate(
        itertools.product(["workflow", "activity", "timer", "job"], ["pending", "running", "paused", "done"])
    ):
        old = kind != "job" and status != "done"
        try:
            with conn.transaction():
                conn.execute(
                    "INSERT INTO harvest.tasks (execution_id, kind, queue, status, due_at, scheduled_at, seq)"
                    " VALUES (%s, %s, 'q', %s, now(), now(), %s)",
                    (run, kind, status, seq),
                )
                if kind == "workflow":  # one workflow task per run: make room for the next
                    conn.execute(
                        "DELETE FROM harvest.tasks WHERE execution_id = %s AND kind = 'workflow'", (run,)
                    )
            taken, constraint = True, None
        except psycopg.errors.CheckViolation as exc:
            taken, constraint = False, exc.diag.constraint_name
        assert taken == old, (kind, status)
        if not taken:
            assert constraint == ("tasks_kind_check" if kind == "job" else "tasks_status_check")


def test_the_columns_stay_text_and_each_domain_names_its_rule(conn: psycopg.Connection) -> None:
    columns = conn.execute(
        "SELECT c.relname || '.' || a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
        " JOIN pg_class c ON c.oid = a.attrelid WHERE c.relnamespace = 'harvest'::regnamespace"
        " AND (c.relname, a.attname) IN (('events', 'event_type'), ('executions', 'status'),"
        " ('executions', 'parent_close_policy'), ('tasks', 'kind'), ('tasks', 'status'))"
    ).fetchall()
    assert sorted(t for _, t in columns) == ["text"] * 5
    domains = dict(
        conn.execute(
            "SELECT t.typname, k.conname FROM pg_constraint k JOIN pg_type t ON t.oid = k.contypid"
            " WHERE k.connamespace = 'harvest'::regnamespace"
        ).fetchall()
    )
    # A domain's constraint is named after the rule it carries: a table CHECK of events or
    # tasks, one of the executions rules the executions_checks trigger casts to, or the task
    # kind's rule, which the tasks' triggers cast to (0058).
    tables = {
        r[0]
        for r in conn.execute(
            "SELECT conname FROM pg_constraint WHERE contype = 'c' AND conrelid IN"
            " ('harvest.events'::regclass, 'harvest.tasks'::regclass)"
        )
    } | {
        "executions_status_check",
        "executions_parent_close_policy_check",
        "executions_migrated_to_shard_check",
        "tasks_kind_check",
    }
    assert set(domains.values()) <= tables
    source = conn.execute(
        "SELECT prosrc FROM pg_proc WHERE oid = 'harvest._executions_checks'::regproc"
    ).fetchone()[0]
    for domain in ("execution_status", "parent_close_policy", "migrated_status", "shard_number"):
        assert f"::harvest.{domain})" in source, domain
    for function in ("_tasks_derived_columns", "_task_rules"):
        source = conn.execute(
            "SELECT prosrc FROM pg_proc WHERE oid = %s::regproc", (f"harvest.{function}",)
        ).fetchone()[0]
        assert "::harvest.task_kind" in source, function
    assert set(domains) >= {
        "event_type",
        "execution_status",
        "parent_close_policy",
        "migrated_status",
        "shard_number",
        "task_kind",
        "task_status",
    }
