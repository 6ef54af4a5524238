"""`harvest backup verify` (harvest/db/backup.py, docs/runbooks/backup-restore.md): a real pg_dump
and pg_restore of a test database with finished and live runs (children, activities, a signal
wait) into scratch databases; a clean database verifies (and replays under the App), a corrupted
one fails with exit 1 naming the problem, a copy that lost a row fails, a drill that cannot run
exits 3, and no scratch database survives any of them."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import conninfo

from harvest import App, Client, activity, workflow
from harvest.cli.main import main as cli
from harvest.db import backup
from harvest.db.backup import SCRATCH_PREFIX, check_copy, drill


@activity
async def bv_double(ctx, x: int) -> int:
    return 2 * x


@workflow
async def bv_child(ctx, x: int) -> int:
    return await ctx.execute_activity(bv_double, x)


@workflow
async def bv_waiting_child(ctx) -> str:
    return await ctx.wait_for_signal("go")


@workflow
async def bv_parent(ctx, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.execute_child_workflow(bv_child, i)
    return total


@workflow
async def bv_waiting_parent(ctx) -> str:
    return await ctx.execute_child_workflow(bv_waiting_child)


APP = App(workflows=[bv_child, bv_waiting_child, bv_parent, bv_waiting_parent], activities=[bv_double])


@workflow(name="bv_child")
async def bv_child_changed(ctx, x: int) -> int:
    await ctx.sleep(1)  # a timer the recorded histories never started: they no longer replay
    return await ctx.execute_activity(bv_double, x)


# The same App with bv_child's code changed incompatibly.
CHANGED = App(
    workflows=[bv_child_changed, bv_waiting_child, bv_parent, bv_waiting_parent], activities=[bv_double]
)


def _verify(dsn: str, *args: str) -> tuple[int, dict | None, str]:
    result = CliRunner().invoke(cli, ["backup", "verify", "--database-url", dsn, "--output", "json", *args])
    try:
        data = json.loads(result.stdout)
    except ValueError:
        data = None
    return result.exit_code, data, result.output


def _scratch_left(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (SCRATCH_PREFIX + "%",))
        return [r[0] for r in rows]


@pytest.fixture
def runs(db: str, start_worker) -> dict[str, str]:
    """A finished parent with two children, and a parent waiting on a child that waits."""
    start_worker(APP)
    with Client(db) as client:
        done = client.start_workflow(bv_parent, 2)
        assert done.result(timeout=30) == 2
        waiting = client.start_workflow(bv_waiting_parent)
        deadline = time.monotonic() + 20
        while not waiting.children():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        return {"done": done.execution_id, "waiting": waiting.execution_id}


def test_a_clean_database_verifies_and_replays_and_leaves_no_scratch_database(db: str, runs) -> None:
    code, data, output = _verify(db, "--app", "test_backup_verify:APP")
    assert code == 0, output
    assert data["status"] == "verified" and data["problems"] == []
    assert data["replay"] == {"replayed": 5, "failed": 0}
    assert data["rows"]["0"] > 0
    assert "dropped scratch database" in output
    assert _scratch_left(db) == []


def test_histories_that_no_longer_replay_under_the_apps_code_fail_with_exit_1(db: str, runs) -> None:
    code, data, output = _verify(db, "--app", "test_backup_verify:CHANGED")
    assert code == 1, output
    replays = [p for p in data["problems"] if p["check"] == "replay"]
    assert len(replays) == 2 and data["replay"] == {"replayed": 5, "failed": 2}, data
    assert _scratch_left(db) == []


def test_a_failed_restore_exits_3_and_still_drops_its_scratch_database(db: str, monkeypatch) -> None:
    real = backup.find_tool
    monkeypatch.setattr(
        backup, "find_tool", lambda name: Path("/bin/false") if name == "pg_restore" else real(name)
    )
    code, _data, output = _verify(db)
    assert code == 3 and "pg_restore failed" in output, output
    assert "dropped scratch database" in output and _scratch_left(db) == []


def test_a_removed_event_and_a_child_without_its_parent_event_fail_with_exit_1(db: str, runs) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DELETE FROM harvest.events WHERE execution_id = %s AND event_id = 3", (runs["done"],))
        # A child row whose parent has no ChildWorkflowStarted naming it.
        conn.execute(
            "UPDATE harvest.executions SET parent_id = %s WHERE parent_id = %s",
            (runs["waiting"], runs["done"]),
        )
    code, data, output = _verify(db)
    assert code == 1, output
    checks = {(p["check"], p["execution_id"]) for p in data["problems"]}
    assert ("history_sequence", runs["done"]) in checks
    assert any(check == "child_parent_event" for check, _ in checks)
    assert data["status"] == "failed"
    assert _scratch_left(db) == []


def test_a_restored_copy_that_lost_rows_is_caught(db: str, runs) -> None:
    with drill({0: db}) as (sources, copies):
        with psycopg.connect(copies[0].dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM harvest.dead_letters")  # nothing: counts still agree
            conn.execute("DELETE FROM harvest.events WHERE execution_id = %s", (runs["waiting"],))
        problems = check_copy(sources[0], copies[0])
        name = copies[0].name
    lines = [p.line() for p in problems]
    assert any("[rows]" in line and "harvest.events" in line for line in lines), lines
    assert any(p.check == "history_sequence" and p.execution_id == runs["waiting"] for p in problems), lines
    assert name not in _scratch_left(db)


def test_a_drill_that_cannot_run_exits_3_without_the_password(db: str) -> None:
    bad = "postgresql://harvest:s3cret-pw@127.0.0.1:1/nowhere?connect_timeout=2"
    code, _data, output = _verify(bad)
    assert code == 3, output
    assert "s3cret-pw" not in output


def test_a_login_that_cannot_read_every_table_exits_3_naming_the_owner(db: str, pg_server) -> None:
    # A harvest_reader reads every harvest table but harvest.api_tokens (auth.md), which the
    # drill counts and pg_dump dumps: it cannot run (3), it found no problem in a backup (1).
    user = f"u_backup_reader_{uuid.uuid4().hex[:8]}"
    with pg_server.admin() as admin:
        admin.execute(f'CREATE ROLE "{user}" LOGIN')
        admin.execute(f'GRANT harvest_reader TO "{user}"')
    try:
        code, _data, output = _verify(conninfo.make_conninfo(db, user=user, password=""))
    finally:
        with pg_server.admin() as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{user}"')
    assert code == 3, output
    assert "api_tokens" in output and "schema owner" in output, output


@workflow
async def bv_rotating_child(ctx, n: int) -> int:
    if n > 0:
        ctx.continue_as_new(n - 1)
    return await ctx.wait_for_signal("go")


@workflow
async def bv_rotating_parent(ctx) -> int:
    return await ctx.execute_child_workflow(bv_rotating_child, 2)


ROTATING = App(workflows=[bv_rotating_child, bv_rotating_parent], activities=[])


def test_a_child_that_continued_as_new_verifies(db: str, start_worker) -> None:
    """A child that continued as new is its parent's child in every run of its chain: the
    successors carry the parent link while the parent's ChildWorkflowStarted names the first run.
    A healthy database with such a child (live, then ended) verifies and replays."""
    start_worker(ROTATING)
    with Client(db) as client:
        parent = client.start_workflow(bv_rotating_parent)
        deadline = time.monotonic() + 20
        with psycopg.connect(db, autocommit=True) as conn:
            while (
                conn.execute(
                    "SELECT count(*) FROM harvest.executions WHERE workflow_name = 'bv_rotating_child'"
                ).fetchone()[0]
                < 3
            ):
                assert time.monotonic() < deadline
                time.sleep(0.05)
        code, data, output = _verify(db, "--app", "test_backup_verify:ROTATING")
        assert code == 0, output
        assert data["problems"] == [], data["problems"]
        client.get_handle(parent.children()[0]["execution_id"]).signal("go", 7)
        assert parent.result(timeout=30) == 7
    code, data, output = _verify(db, "--app", "test_backup_verify:ROTATING")
    assert code == 0, output
    assert data["problems"] == [], data["problems"]


def test_no_secret_of_the_dsn_reaches_a_tools_command_line(db: str, monkeypatch) -> None:
    """pg_dump's and pg_restore's command lines are readable by any user of the host (ps): the
    DSN's password and its sslpassword (a client key's passphrase) reach them another way."""
    import subprocess

    from psycopg import conninfo

    seen: list[list[str]] = []
    real_run = subprocess.run

    def spy(args, *a, **kw):
        seen.append(list(args))
        return real_run(args, *a, **kw)

    monkeypatch.setattr(backup.subprocess, "run", spy)
    dsn = conninfo.make_conninfo(db, sslpassword="ssl-s3cret-phrase", sslmode="disable")
    with drill({0: dsn}) as (sources, copies):
        assert check_copy(sources[0], copies[0]) == []
    assert len(seen) == 2 and all("ssl-s3cret-phrase" not in " ".join(args) for args in seen), seen


def test_an_app_module_that_raises_on_import_shows_its_own_traceback(db: str, tmp_path, monkeypatch) -> None:
    """`backup verify --app` says what every `--app` says of a module that raised as it was
    imported: the line, then the traceback of the module's own frames. The drill's own error
    line printed the line only (the cause's file and line were nowhere)."""
    (tmp_path / "bv_broken_at_import.py").write_text('raise RuntimeError("the config is missing")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    code, _data, output = _verify(db, "--app", "bv_broken_at_import:app")
    assert code == 3, output
    assert "cannot import 'bv_broken_at_import' for 'bv_broken_at_import:app': RuntimeError" in output
    assert "Traceback (most recent call last):" in output, output
    assert 'bv_broken_at_import.py", line 1, in <module>' in output, output
