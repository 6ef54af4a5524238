"""`harvest migrate` and the Migrator against a real PostgreSQL (the embedded one by default).

In-process tests drive the click group with CliRunner; exit codes, stderr and
concurrency are checked on real subprocesses.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import cli_forks
import psycopg
import pytest
from click.testing import CliRunner, Result

from harvest.cli.migrate import migrate
from harvest.core.errors import ConfigError, SchemaMismatch
from harvest.db import migrate as m
from harvest.db.connection import describe_dsn

REPO = Path(__file__).resolve().parents[2]
HARVEST_PY = REPO / "harvest_py"
CLI = [sys.executable, "-c", "from harvest.cli.migrate import migrate; migrate(prog_name='harvest migrate')"]
CORE_MIGRATIONS = sorted(p.name for p in (REPO / "migrations").glob("*.sql"))
LATEST_CORE = CORE_MIGRATIONS[-1][:4]
# Harvest's own marked migrations (CREATE INDEX CONCURRENTLY): said as such when they apply.
CORE_NON_TRANSACTIONAL = [
    n for n in CORE_MIGRATIONS if not m.is_transactional((REPO / "migrations" / n).read_text())
]
FUNCTION_FILES = sorted(p.name for p in (REPO / "functions").glob("*.sql"))


def applying_core(name: str) -> str:
    """The progress line of one of Harvest's migrations."""
    return f"applying harvest/{name}" + (" (non-transactional)" if name in CORE_NON_TRANSACTIONAL else "")


def applied_core(
    extra: int = 0, extra_non_transactional: int = 0, functions: int = len(FUNCTION_FILES)
) -> str:
    """The summary of a run that applied Harvest's migrations, ``extra`` more (of them
    ``extra_non_transactional`` marked), and ``functions`` function files."""
    marked = len(CORE_NON_TRANSACTIONAL) + extra_non_transactional
    return (
        f"applied {len(CORE_MIGRATIONS) + extra} migration(s)"
        + (f", {marked} non-transactional" if marked else "")
        + f", {functions} function file(s)"
    )


# -- helpers ---------------------------------------------------------------------------


def cli(*args: str, dsn: str | None = None) -> Result:
    env = {"HARVEST_DATABASE_URL": dsn} if dsn else {"HARVEST_DATABASE_URL": None}
    return CliRunner().invoke(migrate, list(args), env=env, prog_name="harvest migrate")


def cli_env(dsn: str | None = None) -> dict[str, str]:
    env = os.environ.copy()
    env.pop("HARVEST_DATABASE_URL", None)
    if dsn:
        env["HARVEST_DATABASE_URL"] = dsn
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HARVEST_PY), env.get("PYTHONPATH")) if p)
    return env


def cli_process(*args: str, dsn: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`harvest migrate ARGS` as a process of its own: a warm fork (cli_forks), not a cold start."""
    return cli_forks.run(["migrate", *args], cli_env(dsn), timeout=timeout)


def query(dsn: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def ledger(dsn: str) -> list[tuple]:
    if query(dsn, "SELECT to_regclass('harvest.schema_migrations')")[0][0] is None:
        return []
    return query(
        dsn,
        "SELECT set_name, version, name, checksum, transactional, applied_at"
        " FROM harvest.schema_migrations ORDER BY 1, 2",
    )


def function_ledger(dsn: str) -> dict[str, tuple[str, object]]:
    if query(dsn, "SELECT to_regclass('harvest.function_files')")[0][0] is None:
        return {}
    return {
        name: (checksum, at)
        for name, checksum, at in query(
            dsn, "SELECT file_name, checksum, applied_at FROM harvest.function_files"
        )
    }


def relation_exists(dsn: str, name: str) -> bool:
    return query(dsn, "SELECT to_regclass(%s) IS NOT NULL", (name,))[0][0]


def write_set(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.fixture
def sql_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private copy of sql/, functions/ and migrations/, used through HARVEST_SQL_DIR. The
    process reads its function files once (m.shipped_functions): forgotten before and after, so
    neither this test nor the ones after it (test_function_drift.py's, in one process) compare
    a database with the files another test changed."""
    root = tmp_path / "sqlroot"
    for name in ("sql", "functions", "migrations"):
        shutil.copytree(REPO / name, root / name)
    monkeypatch.setenv("HARVEST_SQL_DIR", str(root))
    m.shipped_functions.cache_clear()
    yield root
    m.shipped_functions.cache_clear()


# -- status, run, dry run --------------------------------------------------------------


def test_status_and_run_name_the_one_database_they_act_on_when_shards_are_configured(db: str) -> None:
    # A sharded configuration: `migrate` still acts on the one database its DSN names, which
    # its summary says, and a note says the other shards need a run (an operator upgrading
    # every shard read "90 applied, 0 pending" from shard 0 and took it for the fleet).
    where = describe_dsn(db)
    single = cli("status", dsn=db)
    assert single.exit_code == 0, single.output
    assert f"{where}: {len(CORE_MIGRATIONS)} applied, 0 pending" in single.stdout
    assert "note:" not in single.stderr
    env = {"HARVEST_DATABASE_URL": db, "HARVEST_SHARDS__URLS__2": "postgresql://app@db2.internal/harvest"}
    for args in (["status"], ["run"], ["run", "--dry-run"]):
        result = CliRunner().invoke(migrate, args, env=env, prog_name="harvest migrate")
        assert result.exit_code == 0, result.output
        assert result.stderr.splitlines()[-1] == (
            f"note: this configuration names shards 0, 2; harvest migrate acted on {where} only: "
            "run it against each shard's database (HARVEST_DATABASE_URL set to that shard's url: "
            "its shards.session_urls entry is used)"
        ), result.stderr
        assert "db2.internal" not in result.output


def test_status_check_fails_on_a_fresh_database_and_passes_after_run(fresh_db: str) -> None:
    before = cli("status", "--check", dsn=fresh_db)
    assert before.exit_code == 1, before.output
    assert f"harvest/{CORE_MIGRATIONS[0]}" in before.stdout
    assert f"0 applied, {len(CORE_MIGRATIONS)} pending" in before.stdout
    assert all(f"functions/{name}" in before.stdout for name in FUNCTION_FILES)
    # Never applied, so not "changed": a newcomer's first `status` listed every file as changed.
    assert all(f"functions/{name}".ljust(45) + " pending\n" in before.stdout for name in FUNCTION_FILES)
    assert "(changed)" not in before.stdout, before.stdout
    assert ledger(fresh_db) == [], "status must not create anything"

    run = cli("run", dsn=fresh_db)
    assert run.exit_code == 0, run.output
    assert applied_core() in run.stdout

    after = cli("status", "--check", dsn=fresh_db)
    assert after.exit_code == 0, after.output
    assert "pending" not in after.stdout.replace(" 0 pending", "")
    assert f"{len(CORE_MIGRATIONS)} applied, 0 pending" in after.stdout

    as_json = json.loads(cli("status", "--output", "json", dsn=fresh_db).stdout)
    assert as_json["pending"] == 0 and as_json["stale_function_files"] == []
    assert [(r["set"], r["version"]) for r in as_json["migrations"]] == [
        ("harvest", name[:4]) for name in CORE_MIGRATIONS
    ]
    assert all(r["applied_at"] for r in as_json["migrations"])


@pytest.mark.parametrize("args", [("run",), ("run", "--dry-run")])
def test_a_server_older_than_the_oldest_supported_is_refused_before_anything_is_written(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    """Nothing checked the server's version: on PostgreSQL 12 every migration applied and every
    start without a workflow id failed later (no gen_random_uuid()). The run now refuses at once,
    naming both versions; here the floor is raised above this server's to see it."""
    monkeypatch.setattr(m, "MIN_SERVER_VERSION", 990000)
    refused = cli(*args, dsn=fresh_db)
    assert refused.exit_code == 1, refused.output
    server = m.version_text(psycopg.connect(fresh_db).info.server_version)
    expected = (
        f"error: this server is PostgreSQL {server}; Harvest needs PostgreSQL 99 or newer"
        ' (docs/install.md, "Which database"): nothing was changed'
    )
    assert error_lines(refused.stderr) == [expected], refused.stderr
    assert query(fresh_db, "SELECT to_regnamespace('harvest')")[0][0] is None, (
        "the refused run created the schema"
    )


def test_server_versions_are_named_as_postgresql_names_them() -> None:
    assert [m.version_text(v) for v in (90624, 120022, 130000, 180001)] == ["9.6.24", "12.22", "13.0", "18.1"]
    m.require_server_version(140000)  # the oldest supported passes
    with pytest.raises(m.MigrationError, match=r"PostgreSQL 12\.22; Harvest needs PostgreSQL 14 or newer"):
        m.require_server_version(120022)


def test_postgresql_13_is_refused() -> None:
    """13 was the floor, but migration 0027's int8multirange column (shard_arrivals.copied_events)
    is 14+: on 13.23 the run stopped at 0027 with 'type "int8multirange" does not exist', 25
    migrations in (docs/install.md, "Which database")."""
    with pytest.raises(m.MigrationError, match=r"PostgreSQL 13\.23; Harvest needs PostgreSQL 14 or newer"):
        m.require_server_version(130023)


def test_status_without_check_exits_zero_while_pending(fresh_db: str) -> None:
    result = cli("status", dsn=fresh_db)
    assert result.exit_code == 0, result.output
    assert "pending" in result.stdout


def test_dry_run_prints_the_plan_and_changes_nothing(fresh_db: str, tmp_path: Path) -> None:
    result = cli("run", "--dry-run", dsn=fresh_db)
    assert result.exit_code == 0, result.output
    assert "dry run, nothing changed" in result.stdout
    assert f"would apply harvest/{CORE_MIGRATIONS[0]}" in result.stdout
    assert all(f"would apply functions/{name}" in result.stdout for name in FUNCTION_FILES)
    assert query(fresh_db, "SELECT to_regnamespace('harvest')")[0][0] is None, "a dry run created the schema"

    assert cli("run", dsn=fresh_db).exit_code == 0
    before, functions_before = ledger(fresh_db), function_ledger(fresh_db)
    extra = write_set(tmp_path / "app", {"0001_widgets.sql": "CREATE TABLE public.widgets (id int);\n"})
    planned = cli("run", "--dry-run", "--include-dir", str(extra), dsn=fresh_db)
    assert planned.exit_code == 0, planned.output
    assert "would apply app/0001_widgets.sql" in planned.stdout
    assert "would apply harvest/" not in planned.stdout and "functions/" not in planned.stdout
    assert ledger(fresh_db) == before and function_ledger(fresh_db) == functions_before
    assert not relation_exists(fresh_db, "public.widgets")

    nothing = cli("run", "--dry-run", dsn=fresh_db)
    assert "nothing to do" in nothing.stdout


def test_include_dir_brings_an_extra_set(fresh_db: str, tmp_path: Path) -> None:
    extra = write_set(
        tmp_path / "app",
        {
            "0001_widgets.sql": "CREATE TABLE public.widgets (id int PRIMARY KEY, name text);\n",
            "0002_widget_rows.sql": "INSERT INTO public.widgets VALUES (1, 'one');\n",
        },
    )
    result = cli("run", "--include-dir", str(extra), dsn=fresh_db)
    assert result.exit_code == 0, result.output
    assert applied_core(extra=2) in result.stdout
    # The extra set runs after Harvest's own, in version order.
    order = [line for line in result.stderr.splitlines() if line.startswith("applying ") and "/0" in line]
    assert order == [applying_core(n) for n in CORE_MIGRATIONS] + [
        "applying app/0001_widgets.sql",
        "applying app/0002_widget_rows.sql",
    ]
    rows = [(s, v, n, t) for s, v, n, _c, t, _at in ledger(fresh_db)]
    assert ("app", "0001", "widgets", True) in rows and ("app", "0002", "widget_rows", True) in rows
    assert query(fresh_db, "SELECT id, name FROM public.widgets") == [(1, "one")]

    listed = cli("status", "--check", "--include-dir", str(extra), dsn=fresh_db)
    assert listed.exit_code == 0, listed.output
    assert "app/0001_widgets.sql" in listed.stdout
    core_only = cli("status", dsn=fresh_db)
    assert "app/" not in core_only.stdout

    later = write_set(extra, {"0003_more.sql": "ALTER TABLE public.widgets ADD COLUMN size int;\n"})
    assert cli("status", "--check", "--include-dir", str(later), dsn=fresh_db).exit_code == 1
    again = cli("run", "--include-dir", str(later), dsn=fresh_db)
    assert "applied 1 migration(s), 0 function file(s)" in again.stdout, again.output


def test_a_second_run_applies_nothing_and_skips_unchanged_function_files(db: str) -> None:
    migrations_before, functions_before = ledger(db), function_ledger(db)
    assert sorted(functions_before) == FUNCTION_FILES
    for name, (checksum, _at) in functions_before.items():
        assert checksum == hashlib.sha256((REPO / "functions" / name).read_bytes()).hexdigest()

    second = cli("run", dsn=db)
    assert second.exit_code == 0, second.output
    assert "applied 0 migration(s), 0 function file(s)" in second.stdout
    assert "applying" not in second.stderr
    assert ledger(db) == migrations_before
    assert function_ledger(db) == functions_before, "an unchanged function file was re-run"


def test_a_changed_function_file_is_run_again(db: str, sql_copy: Path) -> None:
    before = function_ledger(db)
    changed = sql_copy / "functions" / "core.sql"
    changed.write_text(changed.read_text() + "\n-- a comment is a change too\n")

    status = cli("status", "--check", dsn=db)
    assert status.exit_code == 1
    assert "functions/core.sql" in status.stdout and "pending (changed)" in status.stdout
    assert f"{len(CORE_MIGRATIONS)} applied, 0 pending" in status.stdout

    result = cli("run", dsn=db)
    assert result.exit_code == 0, result.output
    assert "applied 0 migration(s), 1 function file(s)" in result.stdout
    after = function_ledger(db)
    assert after["core.sql"][0] == hashlib.sha256(changed.read_bytes()).hexdigest()
    assert after["core.sql"][1] > before["core.sql"][1]
    assert {k: v for k, v in after.items() if k != "core.sql"} == {
        k: v for k, v in before.items() if k != "core.sql"
    }
    assert cli("status", "--check", dsn=db).exit_code == 0


def test_a_function_file_that_left_functions_loses_its_ledger_row(db: str, sql_copy: Path) -> None:
    """Functions moved out of a file that then disappears: the next run applies the file
    that took them and deletes the old name's ledger row, so the ledger names exactly the
    files of functions/, as a fresh install's does, and status lists no ghost."""
    functions = sql_copy / "functions"
    moved, taker = functions / "flow_usage.sql", functions / "core.sql"
    taker.write_text(taker.read_text() + "\n" + moved.read_text())
    moved.unlink()

    status = cli("status", "--check", dsn=db)
    assert status.exit_code == 1, status.output
    assert "functions/flow_usage.sql" in status.stdout and "pending (retired" in status.stdout
    as_json = json.loads(cli("status", "--output", "json", dsn=db).stdout)
    assert as_json["retired_function_files"] == ["flow_usage.sql"]
    plan = cli("run", "--dry-run", dsn=db)
    assert "would retire functions/flow_usage.sql" in plan.stdout
    assert "flow_usage.sql" in function_ledger(db), "a dry run changes nothing"

    result = cli("run", dsn=db)
    assert result.exit_code == 0, result.output
    assert "applied 0 migration(s), 1 function file(s), 1 retired" in result.stdout
    assert sorted(function_ledger(db)) == sorted(p.name for p in functions.glob("*.sql"))
    assert query(
        db,
        "SELECT to_regprocedure('harvest.count_usage(timestamptz,timestamptz,text)') IS NOT NULL",
    )[0][0]
    assert cli("status", "--check", dsn=db).exit_code == 0
    assert "retired" not in cli("run", dsn=db).stdout


def test_a_function_file_with_crlf_line_ends_is_current_after_one_run(fresh_db: str, sql_copy: Path) -> None:
    """The checksum recorded must be the one compared: the bytes on disk, CRLF and all."""
    path = sql_copy / "functions" / "workers.sql"
    path.write_bytes(path.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    assert cli("run", dsn=fresh_db).exit_code == 0
    status = cli("status", "--check", dsn=fresh_db)
    assert status.exit_code == 0, status.output
    assert "applied 0 migration(s), 0 function file(s)" in cli("run", dsn=fresh_db).stdout


# -- non-transactional migrations ------------------------------------------------------

NT_SET = {
    "0001_gadgets.sql": "CREATE TABLE public.gadgets (id int PRIMARY KEY, name text);\n"
    "INSERT INTO public.gadgets SELECT g, 'g' || g FROM generate_series(1, 100) g;\n",
    "0002_gadgets_name_index.sql": (
        "-- harvest:no-transaction\n"
        "-- Built without blocking writes. Nothing rolls this file back, so every statement\n"
        "-- must be safe to run again: IF NOT EXISTS.\n"
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS gadgets_name ON public.gadgets (name);\n"
    ),
}


def test_a_marked_concurrent_index_migration_applies_and_is_reported(fresh_db: str, tmp_path: Path) -> None:
    extra = write_set(tmp_path / "app", NT_SET)
    result = cli("run", "--include-dir", str(extra), dsn=fresh_db)
    assert result.exit_code == 0, result.output
    assert "applying app/0002_gadgets_name_index.sql (non-transactional)" in result.stderr
    assert f", {len(CORE_NON_TRANSACTIONAL) + 1} non-transactional" in result.stdout
    # CREATE INDEX CONCURRENTLY errors inside a transaction block: it ran in autocommit.
    assert query(
        fresh_db, "SELECT x.indisvalid FROM pg_index x WHERE x.indexrelid = 'public.gadgets_name'::regclass"
    ) == [(True,)]
    rows = {(s, v): t for s, v, _n, _c, t, _at in ledger(fresh_db)}
    assert rows[("app", "0001")] is True and rows[("app", "0002")] is False

    status = cli("status", "--include-dir", str(extra), dsn=fresh_db)
    line = next(x for x in status.stdout.splitlines() if "app/0002_gadgets_name_index.sql" in x)
    assert "applied" in line and "(non-transactional)" in line
    other = next(x for x in status.stdout.splitlines() if "app/0001_gadgets.sql" in x)
    assert "non-transactional" not in other
    as_json = json.loads(cli("status", "--output", "json", "--include-dir", str(extra), dsn=fresh_db).stdout)
    assert {(r["set"], r["version"]): r["transactional"] for r in as_json["migrations"]}[
        ("app", "0002")
    ] is False

    planned = cli(
        "run", "--dry-run", "--include-dir", str(write_set(tmp_path / "other", NT_SET)), dsn=fresh_db
    )
    assert "would apply other/0002_gadgets_name_index.sql (non-transactional)" in planned.stdout


def test_an_unmarked_concurrent_index_migration_fails_and_records_nothing(
    fresh_db: str, tmp_path: Path
) -> None:
    files = dict(NT_SET)
    files["0002_gadgets_name_index.sql"] = files["0002_gadgets_name_index.sql"].replace(
        "-- harvest:no-transaction\n", ""
    )
    extra = write_set(tmp_path / "app", files)
    result = cli_process("run", "--include-dir", str(extra), dsn=fresh_db)
    assert result.returncode == 1, result.stderr
    [line] = error_lines(result.stderr)
    assert "0002_gadgets_name_index.sql line 3" in line and "transaction block" in line
    assert ("app", "0002") not in {(s, v) for s, v, *_ in ledger(fresh_db)}
    assert ("app", "0001") in {(s, v) for s, v, *_ in ledger(fresh_db)}


# -- a failing migration ---------------------------------------------------------------

BROKEN_RUNTIME = (
    "-- statement 1 works, statement 2 works, statement 3 fails\n"
    "CREATE TABLE public.half_done (id int);\n"
    "\n"
    "INSERT INTO public.half_done VALUES (1);\n"
    "\n"
    "SELECT no_such_column FROM public.half_done;\n"
)
BROKEN_SYNTAX = (
    "CREATE TABLE public.half_done (id int);\nINSERT INTO public.half_done VALUES (1);\n\n\nSELEKT 1;\n"
)
BROKEN_DEEP = (
    "CREATE TABLE public.half_done (id int);\n"
    "INSERT INTO public.half_done VALUES (1);\n"
    "SELECT id,\n"
    "       id + 1,\n"
    "       missing_column\n"
    "FROM public.half_done;\n"
)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (BROKEN_RUNTIME, 6, "no_such_column"),
        (BROKEN_SYNTAX, 5, "SELEKT"),
        (BROKEN_DEEP, 5, "missing_column"),
    ],
    ids=["runtime-error", "syntax-error", "error-inside-a-statement"],
)
def test_a_failing_migration_rolls_back_whole_and_names_file_and_line(
    db: str, tmp_path: Path, text: str, line: int, words: str
) -> None:
    extra = write_set(
        tmp_path / "app", {"0001_ok.sql": "CREATE TABLE public.fine (id int);\n", "0002_break.sql": text}
    )
    before = ledger(db)
    result = cli_process("run", "--include-dir", str(extra), dsn=db)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    [error] = error_lines(result.stderr)
    assert f"0002_break.sql line {line}:" in error, error
    assert words in error
    assert all(x.startswith("applying ") for x in result.stderr.splitlines() if x != error)
    assert result.stdout == ""
    assert not relation_exists(db, "public.half_done"), "statement 1 of the failed file survived"
    # Migrations before the broken one stay applied; the broken one left no ledger row.
    after = ledger(db)
    assert [(s, v) for s, v, *_ in after] == sorted([(s, v) for s, v, *_ in before] + [("app", "0001")])
    assert relation_exists(db, "public.fine")

    in_process = cli("run", "--include-dir", str(extra), dsn=db)
    assert in_process.exit_code == 1
    assert f"0002_break.sql line {line}:" in in_process.stderr


def test_a_failing_function_file_records_nothing(db: str, sql_copy: Path) -> None:
    before = function_ledger(db)
    path = sql_copy / "functions" / "workers.sql"
    path.write_text(
        path.read_text() + "\nCREATE OR REPLACE FUNCTION harvest.zz_broken() RETURNS int\n"
        "LANGUAGE sql AS $$ SELECT 1 $$;\nSELECT harvest.no_such_function();\n"
    )
    result = cli_process("run", dsn=db)
    assert result.returncode == 1
    [error] = error_lines(result.stderr)
    assert "workers.sql line" in error and "no_such_function" in error
    assert function_ledger(db) == before
    assert query(db, "SELECT to_regprocedure('harvest.zz_broken()')") == [(None,)]


# A migrator killed (SIGKILL) at the moment it would pin the functions' options and grants
# (harvest._secure_functions), after the function files were applied and recorded.
KILLED_BEFORE_SECURING = (
    "import os, signal\n"
    "from harvest.db import migrate as m\n"
    "m.Migrator._secure_functions = lambda self, conn: os.kill(os.getpid(), signal.SIGKILL)\n"
    "from harvest.cli.migrate import migrate\n"
    "migrate(prog_name='harvest migrate')\n"
)


def unsecured_functions(dsn: str) -> list[str]:
    """Functions any login may call, and entry points that run as their caller: what a run
    leaves before harvest._secure_functions pins them (functions/security.sql)."""
    return [
        name
        for (name,) in query(
            dsn,
            "SELECT p.oid::regprocedure::text FROM pg_proc AS p"
            " WHERE p.pronamespace = 'harvest'::regnamespace AND p.prokind = 'f'"
            " AND (has_function_privilege('public', p.oid, 'EXECUTE')"
            "      OR (p.proname IN ('claim_tasks', 'start_workflow', 'stop_worker') AND NOT p.prosecdef))"
            " ORDER BY 1",
        )
    ]


@pytest.mark.chaos
def test_a_run_killed_before_securing_the_functions_leaves_them_pending(fresh_db: str) -> None:
    """The function files, their ledger rows and the grants that make them usable are one
    step: a run killed in between must leave work for the next run (and say so), not a ledger
    that says all is done over functions that every login may call and that run as the caller."""
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_BEFORE_SECURING, "run"],
        env=cli_env(fresh_db),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert cli("status", "--check", dsn=fresh_db).exit_code == 1, "a half-done run reported as done"
    again = cli_process("run", dsn=fresh_db)
    assert again.returncode == 0, again.stderr
    assert unsecured_functions(fresh_db) == []
    assert cli("status", "--check", dsn=fresh_db).exit_code == 0


def test_a_run_stopped_after_its_migrations_leaves_every_function_file_pending(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migration commits on its own; the functions' step comes after it. A run whose
    connection is lost in between must not leave a ledger that says all is done: the
    migration may have dropped a function a file brings back (0080), or added a table the
    grants have not reached.

    The newest core migration runs a second time here (its ledger row deleted): write each
    migration re-runnable (``IF NOT EXISTS``, ``DROP ... IF EXISTS``; CONTRIBUTING.md)."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "DELETE FROM harvest.schema_migrations WHERE set_name = 'harvest' AND version = %s",
            (LATEST_CORE,),
        )

    def lost(self: m.Migrator, conn: psycopg.Connection) -> None:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(m.Migrator, "_secure_functions", lost)
    with pytest.raises(psycopg.OperationalError):
        m.Migrator(db).run()
    assert query(db, "SELECT harvest.schema_version()") == [(LATEST_CORE,)]
    assert cli("status", "--check", dsn=db).exit_code == 1, "a half-done run reported as done"
    monkeypatch.undo()
    report = m.Migrator(db).run()
    assert not report.applied and report.functions_applied == FUNCTION_FILES
    assert unsecured_functions(db) == []
    assert cli("status", "--check", dsn=db).exit_code == 0


# -- connection errors -----------------------------------------------------------------

UNREACHABLE = "postgresql://bob:s3cret@127.0.0.1:1/nodb"


@pytest.mark.parametrize("command", [["status"], ["status", "--check"], ["run"], ["run", "--dry-run"]])
@pytest.mark.parametrize("how", ["flag", "env"])
def test_an_unreachable_database_is_one_line_without_the_password(command: list[str], how: str) -> None:
    if how == "flag":
        result = cli_process(*command, "--database-url", UNREACHABLE, timeout=60)
    else:
        result = cli_process(*command, dsn=UNREACHABLE, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "127.0.0.1" in lines[0] and "nodb" in lines[0]
    assert "s3cret" not in result.stderr + result.stdout


def test_a_missing_dsn_names_the_environment_variable() -> None:
    result = cli_process("status")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "HARVEST_DATABASE_URL" in lines[0] and "--database-url" in lines[0]
    in_process = cli("run")
    assert in_process.exit_code == 1 and "HARVEST_DATABASE_URL" in in_process.stderr


def test_database_url_flag_wins_over_the_environment(fresh_db: str) -> None:
    result = CliRunner().invoke(
        migrate, ["status", "--database-url", fresh_db], env={"HARVEST_DATABASE_URL": UNREACHABLE}
    )
    assert result.exit_code == 0, result.output


# -- schema version --------------------------------------------------------------------


def test_schema_version_answers_the_latest_core_migration(db: str, tmp_path: Path) -> None:
    assert query(db, "SELECT harvest.schema_version()") == [(LATEST_CORE,)]
    assert m.latest_core_version() == LATEST_CORE
    # Another set's versions are not Harvest's.
    extra = write_set(tmp_path / "app", {"9999_app.sql": "SELECT 1;\n"})
    assert cli("run", "--include-dir", str(extra), dsn=db).exit_code == 0
    assert query(db, "SELECT harvest.schema_version()") == [(LATEST_CORE,)]


def test_check_schema_refuses_a_fresh_database_and_passes_after_migration(fresh_db: str) -> None:
    with psycopg.connect(fresh_db) as conn:
        with pytest.raises(SchemaMismatch, match="harvest migrate run") as info:
            m.check_schema(conn)
        assert "no Harvest schema" in str(info.value) and LATEST_CORE in str(info.value)
    m.Migrator(fresh_db).run()
    with psycopg.connect(fresh_db) as conn:
        m.check_schema(conn)
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        m.check_schema(conn)


def test_check_schema_refuses_another_version(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "UPDATE harvest.schema_migrations SET version = '0000' WHERE set_name = 'harvest'"
            " AND version = %s",
            (LATEST_CORE,),
        )
        if LATEST_CORE != "0001":
            conn.execute(
                "DELETE FROM harvest.schema_migrations WHERE set_name = 'harvest' AND version > '0000'"
            )
        with pytest.raises(SchemaMismatch, match=r"schema version 0000.*harvest migrate run"):
            m.check_schema(conn)
        conn.execute("DROP FUNCTION harvest.schema_version()")
        with pytest.raises(SchemaMismatch, match="no Harvest schema"):
            m.check_schema(conn)


# -- concurrency -----------------------------------------------------------------------


def test_concurrent_runs_apply_each_migration_exactly_once(
    fresh_db: str, tmp_path: Path, sql_copy: Path
) -> None:
    slow = write_set(
        tmp_path / "slow",
        {
            "0001_nap.sql": "SELECT pg_sleep(0.5);\nCREATE TABLE public.naps (id int);\n",
            "0002_count.sql": "INSERT INTO public.naps VALUES (1);\n",
        },
    )
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [*CLI, "run", "--include-dir", str(slow)],
            env=cli_env(fresh_db),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    elapsed = time.monotonic() - started
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert "error" not in err.lower() and "Traceback" not in err
    applying = [line for _out, err in outputs for line in err.splitlines() if line.startswith("applying ")]
    expected = (
        [applying_core(n) for n in CORE_MIGRATIONS]
        + ["applying slow/0001_nap.sql", "applying slow/0002_count.sql"]
        + [f"applying functions/{n}" for n in FUNCTION_FILES]
    )
    assert sorted(applying) == sorted(expected), "some migration ran twice or not at all"
    # One process did all the work; the others found nothing left.
    totals = sorted(out.strip() for out, _err in outputs)
    assert sum("applied 0 migration(s), 0 function file(s)" in t for t in totals) == 2, totals
    assert query(fresh_db, "SELECT count(*) FROM public.naps") == [(1,)]
    keys = [(s, v) for s, v, *_ in ledger(fresh_db)]
    assert sorted(keys) == sorted(
        [("harvest", n[:4]) for n in CORE_MIGRATIONS] + [("slow", "0001"), ("slow", "0002")]
    )
    assert sorted(function_ledger(fresh_db)) == FUNCTION_FILES
    assert cli("status", "--check", "--include-dir", str(slow), dsn=fresh_db).exit_code == 0
    assert elapsed < 100


def test_a_migrator_waiting_for_its_lock_says_who_holds_it(db: str, pg_server) -> None:
    """Any session of the database can take the migrate lock (PostgreSQL grants the advisory-lock
    functions to PUBLIC; docs/security.md, "Advisory locks"), and the migrator waits for it as for
    another migrator. Its one waiting line names the holder (pid, login, application), so an
    operator can tell a migrator from a stray session and end it; before, it said only that
    another `harvest migrate run` was at work."""
    import threading
    import uuid

    from psycopg import conninfo

    stray = f"u_stray_{uuid.uuid4().hex[:8]}"
    with pg_server.admin() as admin:
        admin.execute(f'CREATE ROLE "{stray}" LOGIN')
    lines: list[str] = []
    said = threading.Event()

    def progress(line: str) -> None:
        lines.append(line)
        if line.startswith("waiting"):
            said.set()

    try:
        holder_dsn = conninfo.make_conninfo(db, user=stray, application_name="stray-tool")
        with psycopg.connect(holder_dsn, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (m.MIGRATE_LOCK_KEY,))
            pid = holder.info.backend_pid
            migrator = threading.Thread(target=lambda: m.Migrator(db, progress=progress).run(), daemon=True)
            migrator.start()
            assert said.wait(60), lines
        migrator.join(120)  # the holder's session ended: the migrator goes on
        assert not migrator.is_alive()
    finally:
        with pg_server.admin() as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{stray}"')
    waiting = [line for line in lines if line.startswith("waiting")]
    expected = (
        f"waiting for the migrate lock, held by pid {pid} (login {stray}, application stray-tool):"
        " another `harvest migrate run`, or a session to end (docs/security.md, Advisory locks)"
    )
    assert waiting == [expected], waiting


# -- patch releases: the function files of the same schema version -------------------------

# What a newer patch release changed in its core.sql: a function's comment (anything the older
# file would put back shows up as this line gone).
PATCHED = "patched in the newer release"


def as_release(monkeypatch: pytest.MonkeyPatch, version: str, sql_root: Path) -> None:
    """Make this process Harvest `version` whose sql/, functions/ and migrations/ are sql_root's:
    two patch releases share the migrations and differ in their function files."""
    monkeypatch.setattr(m, "_package_version", lambda: version)
    monkeypatch.setenv("HARVEST_SQL_DIR", str(sql_root))


def function_releases(dsn: str) -> dict[str, tuple[str, str | None]]:
    return {
        name: (checksum, release)
        for name, checksum, release in query(
            dsn, "SELECT file_name, checksum, package_version FROM harvest.function_files"
        )
    }


def payload_limit_comment(dsn: str) -> str:
    return query(dsn, "SELECT obj_description('harvest.payload_limit()'::regprocedure)")[0][0]


@pytest.fixture
def newer_patch(db: str, sql_copy: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A database the newer patch release (1.4.2, its core.sql changed) migrated last; the older
    one (1.4.1) has this checkout's files, and both have the same migrations."""
    core = sql_copy / "functions" / "core.sql"
    core.write_text(core.read_text() + f"\nCOMMENT ON FUNCTION harvest.payload_limit IS '{PATCHED}';\n")
    as_release(monkeypatch, "1.4.2", sql_copy)
    report = m.Migrator(db).run()
    assert report.functions_applied == ["core.sql"] and payload_limit_comment(db) == PATCHED
    return db


def test_an_older_patch_release_refuses_to_put_back_its_function_files(
    newer_patch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both releases are at the same schema version, so the ahead check passes; the older one's
    core.sql differs by checksum and used to be applied over the newer one's, silently
    downgrading the functions the newer fleet runs against."""
    ledger_before, migrations_before = function_ledger(newer_patch), ledger(newer_patch)
    as_release(monkeypatch, "1.4.1", REPO)
    for dry_run in (True, False):
        with pytest.raises(SchemaMismatch) as info:
            m.Migrator(newer_patch).run(dry_run=dry_run)
        message = str(info.value)
        assert len(message.splitlines()) == 1
        assert "functions/core.sql" in message and "1.4.2" in message and "1.4.1" in message
        assert "Upgrade Harvest (the package)" in message and "--allow-downgrade" in message
        assert message.endswith("nothing was changed")
    assert function_ledger(newer_patch) == ledger_before and ledger(newer_patch) == migrations_before
    assert payload_limit_comment(newer_patch) == PATCHED
    # The CLI says it in one line and exits 1; status names it too, and --check fails.
    result = cli_process("run", dsn=newer_patch)
    assert result.returncode == 1 and len(error_lines(result.stderr)) == 1, result.stderr
    status = cli("status", dsn=newer_patch)
    assert "pending (changed)" not in status.stdout
    assert "function files applied by " in status.stdout and "Harvest 1.4.2 (1)" in status.stdout
    assert "newer release's: functions/core.sql applied by Harvest 1.4.2" in status.stdout
    as_json = json.loads(cli("status", "--output", "json", dsn=newer_patch).stdout)
    assert as_json["database_ahead"] is True and "1.4.1" in as_json["error"]
    assert as_json["function_file_releases"]["core.sql"] == "1.4.2"
    assert cli("status", "--check", dsn=newer_patch).exit_code == 1
    assert payload_limit_comment(newer_patch) == PATCHED


def test_allow_downgrade_puts_the_older_files_back_says_so_and_audits_it(
    newer_patch: str, sql_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_release(monkeypatch, "1.4.1", REPO)
    plan = cli("run", "--dry-run", "--allow-downgrade", dsn=newer_patch)
    assert plan.exit_code == 0, plan.output
    assert "would apply functions/core.sql (downgrading Harvest 1.4.2's)" in plan.stdout
    assert "downgrading functions/" not in plan.stderr, "a dry run said it was downgrading"
    assert payload_limit_comment(newer_patch) == PATCHED, "a dry run changes nothing"

    result = cli("run", "--allow-downgrade", "--operator-id", "ops-ann", dsn=newer_patch)
    assert result.exit_code == 0, result.output
    assert "downgrading functions/core.sql: Harvest 1.4.2 applied it, this is Harvest 1.4.1" in result.stderr
    assert "applied 0 migration(s), 1 function file(s), 1 downgraded" in result.stdout
    assert payload_limit_comment(newer_patch) != PATCHED
    older_core = hashlib.sha256((REPO / "functions" / "core.sql").read_bytes()).hexdigest()
    assert function_releases(newer_patch)["core.sql"] == (older_core, "1.4.1")
    [(operator_id, target, details)] = query(
        newer_patch,
        "SELECT operator_id, target, details FROM harvest.audit_log WHERE operation = 'functions.downgrade'",
    )
    assert (operator_id, target) == ("ops-ann", "functions")
    assert details["package_version"] == "1.4.1" and details["replaced"] == {"core.sql": "1.4.2"}
    assert unsecured_functions(newer_patch) == []
    # Now at this release, a rerun is a no-op; the newer release replaces its files as before.
    assert "applied 0 migration(s), 0 function file(s)" in cli("run", dsn=newer_patch).stdout
    as_release(monkeypatch, "1.4.2", sql_copy)
    again = m.Migrator(newer_patch).run()
    assert again.functions_applied == ["core.sql"] and not again.functions_downgraded
    assert function_releases(newer_patch)["core.sql"][1] == "1.4.2"
    assert payload_limit_comment(newer_patch) == PATCHED


def test_a_newer_patch_release_replaces_older_and_unrecorded_files_and_reruns_are_no_ops(
    db: str, sql_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows from before migration 0085 record no release: the oldest, any release replaces
    them. A release replaces an older one's files; its own rerun changes nothing."""
    query(db, "UPDATE harvest.function_files SET package_version = NULL")
    core = sql_copy / "functions" / "core.sql"
    core.write_text(core.read_text() + f"\nCOMMENT ON FUNCTION harvest.payload_limit IS '{PATCHED}';\n")
    as_release(monkeypatch, "0.0.1", sql_copy)
    assert m.Migrator(db).run().functions_applied == ["core.sql"]
    releases = function_releases(db)
    assert releases["core.sql"][1] == "0.0.1" and releases["start.sql"][1] is None
    before = function_ledger(db)
    assert m.Migrator(db).run().functions_applied == []
    assert function_ledger(db) == before, "a same-release rerun changed the ledger"
    # A newer release (this checkout's files): replaces 0.0.1's core.sql, no flag needed.
    as_release(monkeypatch, "0.0.2", REPO)
    assert m.Migrator(db).run().functions_applied == ["core.sql"]
    assert function_releases(db)["core.sql"][1] == "0.0.2" and payload_limit_comment(db) != PATCHED


def test_a_checkout_of_unknown_version_refuses_a_released_file_and_retiring_one_is_refused_too(
    db: str, sql_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Harvest run from a checkout that is not installed has no version to compare: it
    counts as the oldest. A file the newer release has and this one lacks would be retired:
    deleting a newer release's ledger row is a downgrade too."""
    (sql_copy / "functions" / "zz_patch.sql").write_text(
        "CREATE OR REPLACE FUNCTION harvest._zz_patch() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;\n"
    )
    as_release(monkeypatch, "2.0.0", sql_copy)
    assert m.Migrator(db).run().functions_applied == ["zz_patch.sql"]
    as_release(monkeypatch, "unknown", REPO)
    with pytest.raises(SchemaMismatch, match=r"functions/zz_patch\.sql applied by Harvest 2\.0\.0") as info:
        m.Migrator(db).run()
    assert "an unknown version" in str(info.value)
    assert "zz_patch.sql" in function_releases(db)
    as_release(monkeypatch, "1.9.9", REPO)
    with pytest.raises(SchemaMismatch, match="zz_patch"):
        m.Migrator(db).run()
    report = m.Migrator(db).run(allow_downgrade=True)
    assert report.functions_retired == ["zz_patch.sql"] and report.functions_downgraded == {
        "zz_patch.sql": "2.0.0"
    }


def test_an_included_set_runs_after_harvests_functions_so_it_can_use_this_releases_sql_api(
    db: str, tmp_path: Path
) -> None:
    """A run that upgrades Harvest and applies an app's migrations. Harvest's migrations drop
    functions whose new signatures its function files bring back (0077, 0080, 0081 do), and a
    function new in a release exists only once the files are applied: an app migration that
    calls the SQL API (to seed a schedule, set retention, ...) must run after them, not between
    Harvest's migrations and its functions, against the functions of no release."""
    # As far as this needs, the previous release's database: Harvest's newest migration pending
    # (the run applies every function file after it) and a function it dropped, which this
    # release's core.sql brings back.
    query(
        db,
        "DELETE FROM harvest.schema_migrations WHERE set_name = 'harvest' AND version = %s",
        (LATEST_CORE,),
    )
    query(db, "DROP FUNCTION harvest.payload_limit()")
    app = write_set(
        tmp_path / "app",
        {"0001_uses_the_api.sql": "CREATE TABLE public.limits AS SELECT harvest.payload_limit() AS bytes;\n"},
    )
    plan = cli("run", "--dry-run", "--include-dir", str(app), dsn=db)
    planned = [line.strip() for line in plan.stdout.splitlines() if "would apply" in line]
    assert planned.index("would apply app/0001_uses_the_api.sql") > planned.index(
        "would apply functions/core.sql"
    )
    result = cli("run", "--include-dir", str(app), dsn=db)
    assert result.exit_code == 0, result.output
    order = [line for line in result.stderr.splitlines() if line.startswith("applying ")]
    assert order.index("applying app/0001_uses_the_api.sql") > order.index("applying functions/core.sql")
    assert query(db, "SELECT count(*) FROM public.limits") == [(1,)]
    assert cli("status", "--check", "--include-dir", str(app), dsn=db).exit_code == 0


def test_a_run_whose_connection_is_lost_names_the_file_it_was_applying(db: str, tmp_path: Path) -> None:
    """The server ends the migrator's session mid-file (a failover, an administrator): the one
    error line must say which file and why, not only what releasing the migration lock on the
    dead connection raised afterwards ("the connection is closed")."""
    app = write_set(tmp_path / "app", {"0001_lost.sql": "SELECT pg_terminate_backend(pg_backend_pid());\n"})
    result = cli_process("run", "--include-dir", str(app), dsn=db)
    assert result.returncode == 1, result.stderr
    [error] = error_lines(result.stderr)
    assert "0001_lost.sql line 1" in error and "terminat" in error, error
    assert "nothing from this file was recorded" in error
    assert ("app", "0001") not in {(s, v) for s, v, *_ in ledger(db)}
    # The session (and its lock) went with the connection: the next run is not kept waiting.
    (app / "0001_lost.sql").write_text("SELECT 1;\n")
    again = cli_process("run", "--include-dir", str(app), dsn=db, timeout=60)
    assert again.returncode == 0 and "waiting for" not in again.stderr, again.stderr


# A migrator of release argv[2] whose progress lines go to stderr as they come; with argv[3]
# ("hold"), it stops inside its functions' step (after core.sql, before the commit) until a line
# arrives on stdin.
RELEASE_MIGRATOR = """
import sys
from harvest.core.errors import HarvestError
from harvest.db import migrate as m

m._package_version = lambda: sys.argv[2]

def progress(line):
    print(line, file=sys.stderr, flush=True)
    if line == "applying functions/core.sql" and sys.argv[3] == "hold":
        sys.stdin.readline()

try:
    report = m.Migrator(sys.argv[1], progress=progress).run()
except HarvestError as exc:
    print(f"error: {exc}", file=sys.stderr, flush=True)
    sys.exit(1)
print("applied", ",".join(report.functions_applied))
"""


def read_until(stream, marker: str, timeout: float = 60) -> list[str]:
    """The lines of ``stream`` up to the first that starts with ``marker``, read by a thread so
    that a marker that never comes fails the test after ``timeout`` s instead of hanging it."""
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        for line in iter(stream.readline, ""):
            lines.append(line.rstrip("\n"))
            if lines[-1].startswith(marker):
                found.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    assert found.is_set(), f"no line starting {marker!r} within {timeout} s: {lines}"
    return lines


def test_an_older_release_started_while_a_newer_one_applies_its_functions_refuses_after_the_lock(
    db: str, sql_copy: Path
) -> None:
    """The release check reads the ledger under the migration lock: an older release that
    starts while a newer one is inside its functions' step (its rows not yet committed) waits,
    then sees them and refuses, rather than judging the ledger as it was and downgrading it."""
    core = sql_copy / "functions" / "core.sql"
    core.write_text(core.read_text() + f"\nCOMMENT ON FUNCTION harvest.payload_limit IS '{PATCHED}';\n")

    def start(version: str, root: Path, hold: str) -> subprocess.Popen:
        env = {**cli_env(), "HARVEST_SQL_DIR": str(root)}
        return subprocess.Popen(
            [sys.executable, "-c", RELEASE_MIGRATOR, db, version, hold],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    newer = start("1.4.2", sql_copy, "hold")
    older = None
    try:
        read_until(newer.stderr, "applying functions/core.sql")  # holding the lock, not committed
        older = start("1.4.1", REPO, "go")
        read_until(older.stderr, "waiting for")  # (another migrator, or the lock's holder named)
        newer.stdin.write("go\n")
        newer.stdin.flush()
        out, err = newer.communicate(timeout=120)
        assert newer.returncode == 0 and out.strip() == "applied core.sql", err
        out, err = older.communicate(timeout=120)
    finally:
        for proc in (newer, older):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert older.returncode == 1, out + err
    assert "newer release's: functions/core.sql applied by Harvest 1.4.2" in err
    assert function_releases(db)["core.sql"][1] == "1.4.2" and payload_limit_comment(db) == PATCHED


@pytest.mark.parametrize(
    ("text", "line", "word"),
    [
        # psql-style: the COMMIT committed the table, the error after it left it unrecorded
        ("BEGIN;\nCREATE TABLE public.half_done (id int);\nCOMMIT;\nSELECT 1 / 0;\n", 1, "BEGIN"),
        ("CREATE TABLE public.half_done (id int);\n\nCOMMIT;\nSELECT 1 / 0;\n", 3, "COMMIT"),
        # the ROLLBACK undid the table and the runner recorded the file as applied
        ("CREATE TABLE public.half_done (id int);\n-- changed my mind\nROLLBACK;\n", 3, "ROLLBACK"),
        ("-- harvest:no-transaction\nBEGIN;\nCREATE TABLE public.half_done (id int);\n", 2, "BEGIN"),
    ],
    ids=["begin-commit", "commit", "rollback", "begin-without-transaction"],
)
def test_a_migration_holding_transaction_control_is_refused_before_it_runs(
    db: str, tmp_path: Path, text: str, line: int, word: str
) -> None:
    """The runner owns the transaction: a COMMIT or ROLLBACK inside a file broke the promise that
    a failed file leaves neither its changes nor its record, and that a recorded one is applied."""
    app = write_set(tmp_path / "app", {"0001_ok.sql": "SELECT 1;\n", "0002_control.sql": text})
    with pytest.raises(m.MigrationError) as info:
        m.Migrator(db, [app]).run()
    message = str(info.value)
    assert f"0002_control.sql line {line}: {word}" in message and "runner owns" in message, message
    assert message.endswith("nothing from this file was recorded, fix it and run again")
    assert not relation_exists(db, "public.half_done"), "a statement of the refused file ran"
    assert ("app", "0002") not in {(s, v) for s, v, *_ in ledger(db)}
    assert ("app", "0001") in {(s, v) for s, v, *_ in ledger(db)}
    # Savepoints stay inside the runner's transaction: allowed.
    (app / "0002_control.sql").write_text(
        "SAVEPOINT a;\nCREATE TABLE public.kept (id int);\nRELEASE SAVEPOINT a;\n"
        "SAVEPOINT b;\nCREATE TABLE public.undone (id int);\nROLLBACK TO SAVEPOINT b;\n"
    )
    m.Migrator(db, [app]).run()
    assert relation_exists(db, "public.kept") and not relation_exists(db, "public.undone")


def test_an_applied_migration_edited_since_is_named_not_silently_skipped(db: str, tmp_path: Path) -> None:
    """A migration is never run again, so an edit to an applied one changes nothing where it
    ran (and everything where it has not yet): the ledger has its checksum, and status and run
    say so instead of passing over it in silence."""
    app = write_set(tmp_path / "app", {"0001_widgets.sql": "CREATE TABLE public.widgets (id int);\n"})
    assert cli("run", "--include-dir", str(app), dsn=db).exit_code == 0
    assert "changed since" not in cli("status", "--include-dir", str(app), dsn=db).stdout
    (app / "0001_widgets.sql").write_text("CREATE TABLE public.widgets (id int, name text);\n")

    status = cli("status", "--include-dir", str(app), dsn=db)
    [line] = [x for x in status.stdout.splitlines() if "app/0001_widgets.sql" in x]
    assert "applied" in line and "changed since it was applied" in line, line
    as_json = json.loads(cli("status", "--output", "json", "--include-dir", str(app), dsn=db).stdout)
    changed = {(r["set"], r["version"]): r["changed"] for r in as_json["migrations"]}
    assert changed[("app", "0001")] is True and not any(v for k, v in changed.items() if k[0] == "harvest")
    # Not pending: --check is about what a run would do.
    assert cli("status", "--check", "--include-dir", str(app), dsn=db).exit_code == 0
    for args in (["run", "--dry-run"], ["run"]):
        result = cli(*args, "--include-dir", str(app), dsn=db)
        assert result.exit_code == 0, result.output
        assert "app/0001_widgets.sql changed since it was applied" in result.stderr, result.stderr
        assert "new migration" in result.stderr
    assert query(
        db, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'public.widgets'::regclass AND attnum > 0"
    ) == [(1,)]


def test_harvests_own_migrations_directory_is_refused_as_an_included_set(db: str) -> None:
    """Passed by mistake (`--include-dir .../harvest/migrations`), Harvest's own files became a set
    named `migrations` and every core migration ran a second time under it."""
    own = REPO / "migrations"
    with pytest.raises(ConfigError, match="Harvest's own migrations"):
        m.discover([own])
    result = cli("run", "--include-dir", str(own), dsn=db)
    assert result.exit_code == 1 and "Harvest's own migrations" in result.stderr, result.output
    assert "migrations" not in {s for s, *_ in ledger(db)}


# -- lock waits: a migration's DDL behind a long transaction ------------------------------


def wait_for_lock_wait(conn: psycopg.Connection, query_start: str) -> None:
    """Until a session waits on a lock in a statement starting with ``query_start``."""
    deadline = time.monotonic() + 60
    while not conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
        (query_start + "%",),
    ).fetchone()[0]:  # type: ignore[index]
        assert time.monotonic() < deadline, f"nobody waits in {query_start!r}"
        time.sleep(0.02)


def test_a_migration_behind_a_long_transaction_gives_up_in_bounded_tries_and_names_the_blocker(
    db: str, tmp_path: Path
) -> None:
    """An ALTER TABLE waiting for its lock queues every later query on the table behind it
    (PostgreSQL grants locks in order): before, the migrator waited without limit and a report
    left open stopped every worker's query on harvest.tasks. Now each try waits --lock-timeout,
    the queue drains between tries, and after --lock-wait the run stops naming the blocker."""
    app = write_set(tmp_path / "app", {"0001_note.sql": "ALTER TABLE harvest.tasks ADD COLUMN note text;\n"})
    with psycopg.connect(db, application_name="nightly-report") as report:
        report.execute(
            "SELECT count(*) FROM harvest.tasks WHERE 'secret' <> '' -- the nightly report\nLIMIT 1"
        )
        blocker = report.info.backend_pid
        proc = subprocess.Popen(
            [*CLI, "run", "--include-dir", str(app), "--lock-timeout", "0.5", "--lock-wait", "3"],
            env=cli_env(db),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            with psycopg.connect(db, autocommit=True) as worker:
                wait_for_lock_wait(worker, "ALTER TABLE harvest.tasks")
                # A worker's query, behind the migrator's waiting lock: it goes through at the
                # end of the try, while the report still holds its lock.
                worker.execute("SET statement_timeout = '60s'")
                assert worker.execute("SELECT count(*) FROM harvest.tasks").fetchone() is not None
            _out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        report.rollback()
    assert proc.returncode == 1, err
    waited = [line for line in err.splitlines() if "waited 0.5s for a lock" in line]
    assert len(waited) == 2, err  # tries at 0, 1 and 2.5s; a pause of 2 more would pass 3s
    (line,) = error_lines(err)
    assert line.startswith(
        f"error: {app / '0001_note.sql'} line 1: gave up waiting for a lock after 3 tries"
    ), line
    assert (
        f"blocked by pid {blocker} (login " in line
        and ", application nightly-report, idle in transaction, in a transaction for " in line
        and "running `SELECT count(*) FROM harvest.tasks WHERE '…' <> '…' -- the nightly report`" in line
    ), line
    assert f"(SELECT pg_terminate_backend({blocker}))" in line, line
    assert line.endswith("nothing from this file was recorded"), line
    assert "secret" not in err
    assert [r for r in ledger(db) if r[0] == "app"] == []
    assert query(
        db,
        "SELECT count(*) FROM pg_attribute WHERE attrelid = 'harvest.tasks'::regclass AND attname = 'note'",
    ) == [(0,)]


def test_what_a_migration_sets_for_its_session_ends_with_its_file(db: str, tmp_path: Path) -> None:
    """A plain SET (not SET LOCAL) outlives its transaction: before, a migration's search_path
    made the next file create its table in another schema, and its SET ROLE ran the next files
    (and the ledger rows) as that role. Now the session is reset after each file; within a file
    (a no-transaction one needs it: SET LOCAL does nothing there) a SET still holds."""
    role = f"r_{os.getpid()}_{time.monotonic_ns() % 100000}"
    with psycopg.connect(db, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" NOLOGIN')
        admin.execute(f'GRANT "{role}" TO current_user')
        login = admin.execute("SELECT current_user").fetchone()[0]  # type: ignore[index]
    try:
        app = write_set(
            tmp_path / "app",
            {
                "0001_elsewhere.sql": "CREATE SCHEMA elsewhere;\nSET search_path = elsewhere;\n"
                f'SET ROLE "{role}";\n',
                "0002_marker.sql": "CREATE TABLE public.marker (id int);\nCREATE TABLE plain (id int);\n",
                "0003_within.sql": "-- harvest:no-transaction\nSET search_path = elsewhere;\n"
                "CREATE TABLE IF NOT EXISTS inside (id int);\n",
                "0004_after.sql": "CREATE TABLE after (id int);\n",
            },
        )
        result = cli("run", "--include-dir", str(app), dsn=db)
        assert result.exit_code == 0, result.output
        tables = query(
            db,
            "SELECT c.relnamespace::regnamespace::text || '.' || c.relname, pg_get_userbyid(c.relowner)"
            " FROM pg_class AS c WHERE c.relname IN ('marker', 'plain', 'inside', 'after') ORDER BY 1",
        )
        assert tables == [
            ("elsewhere.inside", login),
            ("public.after", login),
            ("public.marker", login),
            ("public.plain", login),
        ]
    finally:
        with psycopg.connect(db, autocommit=True) as admin:
            admin.execute("DROP SCHEMA IF EXISTS elsewhere CASCADE")
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.mark.parametrize(
    ("stmt", "unbounded"),
    [
        ("CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON harvest.tasks (id)", True),
        ("DROP INDEX CONCURRENTLY IF EXISTS harvest.i", True),
        ("REINDEX INDEX CONCURRENTLY harvest.i", True),
        ("CREATE INDEX IF NOT EXISTS i ON harvest.tasks (id)", False),
        ("ALTER TABLE harvest.tasks ADD COLUMN note text", False),
        ("REINDEX INDEX harvest.i", False),
    ],
)
def test_only_concurrent_index_builds_wait_for_their_lock_without_limit(stmt: str, unbounded: bool) -> None:
    """Their wait queues no query (a lock reads and writes do not conflict with), and one given up
    midway leaves an INVALID index a re-run's IF NOT EXISTS skips: no lock timeout for them."""
    assert m.waits_harmlessly(m.statements(stmt)[0].node) is unbounded


def test_a_file_is_cut_into_its_statements_after_text_that_is_not_ascii() -> None:
    """The parser's positions count UTF-8 bytes: cut as characters, every statement after an
    accented word started that many characters late (and a failure named the wrong text)."""
    sql = "SELECT 'é — ü';\nSELECT 2;\n\nSELECT 'ß'\n"
    parsed = m.statements(sql)
    assert [(s.line, s.text.strip()) for s in parsed] == [
        (1, "SELECT 'é — ü'"),
        (2, "SELECT 2"),
        (4, "SELECT 'ß'"),
    ]
    assert list(parsed[0].node) == ["SelectStmt"]
    assert m.transaction_control(m.statements("SELECT 'é';\nSAVEPOINT a;\nCOMMIT;")) == (3, "COMMIT")


def test_a_no_transaction_file_retries_the_statement_that_timed_out_not_the_ones_before(
    db: str, tmp_path: Path
) -> None:
    """In a no-transaction file each statement is its own try: the one before the lock wait is
    committed once; the one waiting is tried again once the blocker let go."""
    app = write_set(
        tmp_path / "app",
        {
            "0001_two.sql": "-- harvest:no-transaction\nINSERT INTO public.tries VALUES (1);\n"
            "ALTER TABLE harvest.tasks ADD COLUMN IF NOT EXISTS note text;\n",
        },
    )
    query(db, "CREATE TABLE public.tries (n int)")
    lines: list[str] = []
    with psycopg.connect(db) as report:
        report.execute("SELECT count(*) FROM harvest.tasks")

        def let_go(_pause: float) -> None:  # the first pause: the report ends
            report.rollback()

        migrator = m.Migrator(db, [app], progress=lines.append, lock_timeout=0.2, lock_wait=60, sleep=let_go)
        migrator.run()
    waited = [line for line in lines if "waited 0.2s for a lock" in line]
    assert len(waited) == 1 and waited[0].startswith(f"{app / '0001_two.sql'} line 3:"), lines
    assert query(db, "SELECT n FROM public.tries") == [(1,)]
    assert query(
        db,
        "SELECT count(*) FROM pg_attribute WHERE attrelid = 'harvest.tasks'::regclass AND attname = 'note'",
    ) == [(1,)]


def test_a_process_of_another_release_than_the_functions_warns_once_and_runs(
    db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, a worker of 1.4.2 ran silently against the functions 1.4.1's --allow-downgrade
    put back (the same schema version: nothing refused it). It still runs (a rolling deploy
    overlaps the two releases both ways), and says so once, naming both releases."""
    import logging

    monkeypatch.setattr(m, "_package_version", lambda: "1.4.2")
    monkeypatch.setattr(m, "_release_warnings", set())

    def boot(release: str) -> list[str]:
        query(db, "UPDATE harvest.function_files SET package_version = %s", (release,))
        caplog.clear()
        with (
            psycopg.connect(db, autocommit=True) as conn,
            caplog.at_level(logging.WARNING, "harvest.db.migrate"),
        ):
            m.check_schema(conn, "this worker")
            m.check_schema(conn, "this worker")  # a reconnect, another shard's lane: said once
        return [r.getMessage() for r in caplog.records if r.name == "harvest.db.migrate"]

    assert boot("1.4.1") == [
        (
            "the database's SQL functions were applied by Harvest 1.4.1, this worker is Harvest 1.4.2: the"
            " fixes of 1.4.2's functions are not in effect until `harvest migrate run` of 1.4.2 applies"
            " them; if the functions were rolled back on purpose (--allow-downgrade), roll this process"
            " back too"
        )
    ]
    assert boot("1.4.3") == [
        (
            "the database's SQL functions were applied by Harvest 1.4.3, this worker is Harvest 1.4.2:"
            " expected while a rolling deploy replaces this process; one that is not being replaced"
            " should be upgraded to 1.4.3"
        )
    ]
    assert boot("1.4.2") == []
    assert boot("1.4.2+g123") == []  # the same release, a local label


def test_the_functions_step_behind_a_lock_is_tried_again_whole(db: str, sql_copy: Path) -> None:
    """The function files' step is one transaction: a try that timed out on a lock (here a
    function's catalog row another transaction altered) rolls back and the next one applies
    every changed file again, each counted once."""
    changed = sql_copy / "functions" / "core.sql"
    changed.write_text(changed.read_text() + "\n-- a comment is a change too\n")
    lines: list[str] = []
    with psycopg.connect(db) as other:
        other.execute("ALTER FUNCTION harvest.payload_limit() COST 7")

        def let_go(_pause: float) -> None:
            other.rollback()

        migrator = m.Migrator(db, progress=lines.append, lock_timeout=0.2, lock_wait=60, sleep=let_go)
        report = migrator.run()
    waited = [line for line in lines if "waited 0.2s for a lock" in line]
    assert len(waited) == 1 and waited[0].startswith(f"{changed} line "), lines
    assert report.functions_applied == ["core.sql"]
    assert lines.count("applying functions/core.sql") == 2
    assert function_ledger(db)["core.sql"][0] == hashlib.sha256(changed.read_bytes()).hexdigest()


# -- statement timeouts: the login's, the database's or the DSN's ---------------------------


def test_a_long_migration_is_not_cut_short_by_the_logins_statement_timeout(db: str, tmp_path: Path) -> None:
    """A statement_timeout the migrating login brings (its DSN's options, ALTER ROLE/DATABASE ...
    SET, often set for the application's own queries) cancelled a migration statement that ran
    longer: a data migration then rolled back on every run and never applied. The runner bounds
    lock waits itself (--lock-timeout, --lock-wait); a statement that holds its locks and works
    runs to its end (docs/install.md, "Lock waits")."""
    app = write_set(
        tmp_path / "app",
        {"0001_backfill.sql": "CREATE TABLE public.backfilled AS SELECT 1 AS n FROM pg_sleep(0.5);\n"},
    )
    timed = psycopg.conninfo.make_conninfo(db, options="-c statement_timeout=100")
    report = m.Migrator(timed, [app]).run()
    assert [x.label for x in report.applied] == ["app/0001_backfill.sql"]
    assert query(db, "SELECT n FROM public.backfilled") == [(1,)]


def test_a_concurrent_index_waiting_for_old_transactions_is_not_left_invalid_by_a_statement_timeout(
    db: str, tmp_path: Path
) -> None:
    """CREATE INDEX CONCURRENTLY waits for the transactions older than it, without a lock timeout
    (one given up midway leaves an INVALID index that a re-run's IF NOT EXISTS skips). A
    statement_timeout from the login did exactly that: the run failed, and the next one recorded
    the file as applied over the INVALID index. Now it waits for the old transaction, as documented."""
    query(db, "CREATE TABLE public.gadgets (id int PRIMARY KEY, name text)")
    app = write_set(
        tmp_path / "app",
        {
            "0001_gadget_names.sql": "-- harvest:no-transaction\n"
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS gadgets_name ON public.gadgets (name);\n"
        },
    )
    timed = psycopg.conninfo.make_conninfo(db, options="-c statement_timeout=1000")
    outcome: list[object] = []
    with psycopg.connect(db) as old:
        old.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        old.execute("SELECT 1")  # a snapshot older than the index build, which must outwait it
        migrator = threading.Thread(
            target=lambda: outcome.append(_run_or_error(m.Migrator(timed, [app]))), daemon=True
        )
        migrator.start()
        with psycopg.connect(db, autocommit=True) as watcher:
            wait_for_lock_wait(watcher, "%CREATE INDEX CONCURRENTLY")
            # Still waiting at twice the login's statement_timeout, by the server's clock.
            deadline = time.monotonic() + 60
            while not watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%CREATE INDEX CONCURRENTLY%'"
                " AND state = 'active' AND clock_timestamp() - query_start > interval '2 s'"
            ).fetchone()[0]:  # type: ignore[index]
                assert not outcome and time.monotonic() < deadline, outcome
                time.sleep(0.05)
        old.rollback()
    migrator.join(60)
    assert outcome and not isinstance(outcome[0], Exception), outcome
    valid = query(db, "SELECT indisvalid FROM pg_index WHERE indexrelid = 'public.gadgets_name'::regclass")
    assert valid == [(True,)]


def _run_or_error(migrator: m.Migrator) -> object:
    try:
        return migrator.run()
    except Exception as exc:  # the test asserts on it
        return exc


def test_a_harvest_role_refused_by_migrate_is_told_which_login_migrates(db: str, pg_server) -> None:
    """No harvest_* role may migrate, so a refused `harvest migrate` (a worker's login given by
    mistake) says which login does, not "see the harvest_* roles"; and the group run on its own
    printed the driver's traceback for the same refusal, not one line."""
    import uuid

    from psycopg import conninfo

    login = f"u_fleet_{uuid.uuid4().hex[:8]}"
    with pg_server.admin() as admin:
        admin.execute(f'CREATE ROLE "{login}" LOGIN')
        admin.execute(f'GRANT harvest_worker TO "{login}"')
    try:
        fleet = conninfo.make_conninfo(db, user=login)
        done = cli_process("run", dsn=fleet)
        assert done.returncode == 1, done.stdout + done.stderr
        [line] = error_lines(done.stderr)
        assert "permission denied" in line and "owner of the harvest schema" in line, line
        assert "see the harvest_* roles" not in line, line
        alone = cli("status", dsn=fleet)  # the group alone (harvest.cli.migrate.migrate)
        assert alone.exit_code == 1 and isinstance(alone.exception, SystemExit), alone.exception
        assert "owner of the harvest schema" in alone.output, alone.output
    finally:
        with pg_server.admin() as admin:
            admin.execute(f'DROP OWNED BY "{login}"')
            admin.execute(f'DROP ROLE IF EXISTS "{login}"')
