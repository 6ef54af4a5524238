"""An older Harvest against a database a newer one migrated (issue 12, item 2): it shows what it
does not know, refuses to migrate or to apply its older function files, and its worker and client
say to upgrade the package rather than to run `harvest migrate run`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from harvest import AsyncClient, Client, Worker
from harvest.cli.demo import app as demo_app
from harvest.cli.main import main
from harvest.core.errors import ConfigError, SchemaMismatch
from harvest.db import migrate as m

LATEST_CORE = m.latest_core_version()
FUTURE = "9999"


def query(dsn: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def harvest(*args: str, dsn: str) -> object:
    return CliRunner().invoke(main, list(args), env={"HARVEST_DATABASE_URL": dsn})


@pytest.fixture
def ahead_db(db: str) -> str:
    """A database a newer Harvest migrated: a core migration this package lacks, and a
    function file (and its body) newer than ours."""
    query(
        db,
        "INSERT INTO harvest.schema_migrations (set_name, version, name, checksum, transactional)"
        " VALUES ('harvest', %s, 'from_the_future', 'x', true)",
        (FUTURE,),
    )
    query(db, "UPDATE harvest.function_files SET checksum = 'newer' WHERE file_name = 'core.sql'")
    query(
        db,
        "CREATE OR REPLACE FUNCTION harvest.schema_version() RETURNS text LANGUAGE sql STABLE"
        " AS $$ SELECT max(version) FROM harvest.schema_migrations"
        " WHERE set_name = 'harvest' /* newer body */ $$",
    )
    return db


def body(dsn: str) -> str:
    return query(dsn, "SELECT prosrc FROM pg_proc WHERE oid = 'harvest.schema_version()'::regprocedure")[0][0]


def test_status_shows_the_unknown_migration_and_says_the_database_is_ahead(ahead_db: str) -> None:
    result = harvest("migrate", "status", dsn=ahead_db)
    assert result.exit_code == 0, result.output
    assert f"harvest/{FUTURE}_from_the_future.sql" in result.stdout
    assert "unknown to this Harvest" in result.stdout
    assert "ahead" in result.stdout and FUTURE in result.stdout and LATEST_CORE in result.stdout
    assert "pending (changed)" not in result.stdout  # the newer core.sql is not "changed"
    assert harvest("migrate", "status", "--check", dsn=ahead_db).exit_code == 1
    as_json = json.loads(harvest("migrate", "status", "--output", "json", dsn=ahead_db).stdout)
    assert as_json["database_ahead"] is True
    assert as_json["unknown_migrations"][0]["version"] == FUTURE


@pytest.mark.parametrize("dry_run", [False, True])
def test_run_refuses_naming_both_versions_and_changes_nothing(ahead_db: str, dry_run: bool) -> None:
    ledger = query(ahead_db, "SELECT * FROM harvest.function_files ORDER BY 1")
    migrations = query(ahead_db, "SELECT * FROM harvest.schema_migrations ORDER BY 1, 2")
    before = body(ahead_db)
    result = harvest("migrate", "run", *(["--dry-run"] if dry_run else []), dsn=ahead_db)
    assert result.exit_code == 1, result.output
    error = result.stderr.strip()
    assert error.startswith("error: the database is ahead") and len(error.splitlines()) == 1
    assert error.endswith("nothing was changed")
    assert FUTURE in error and LATEST_CORE in error and "Upgrade Harvest (the package)" in error
    assert query(ahead_db, "SELECT * FROM harvest.function_files ORDER BY 1") == ledger
    assert query(ahead_db, "SELECT * FROM harvest.schema_migrations ORDER BY 1, 2") == migrations
    assert body(ahead_db) == before and "newer body" in before


def test_the_migrator_refuses_before_touching_anything(ahead_db: str) -> None:
    with pytest.raises(SchemaMismatch, match=f"ahead.*{FUTURE}.*{LATEST_CORE}"):
        m.Migrator(ahead_db).run()


def test_worker_and_clients_say_to_upgrade_the_package(ahead_db: str) -> None:
    # The newer body of schema_version() still answers the newest core version.
    with pytest.raises(SchemaMismatch) as worker_error:
        asyncio.run(Worker(demo_app, ahead_db).run())
    with pytest.raises(SchemaMismatch) as client_error:
        Client(ahead_db)
    with pytest.raises(SchemaMismatch) as async_error:
        asyncio.run(AsyncClient.connect(ahead_db))
    for info in (worker_error, client_error, async_error):
        message = str(info.value)
        assert "ahead" in message and FUTURE in message and LATEST_CORE in message
        assert "Upgrade Harvest (the package)" in message
        assert "run `harvest migrate run` against it" not in message


def test_a_behind_database_still_says_to_migrate(db: str) -> None:
    query(
        db,
        "DELETE FROM harvest.schema_migrations WHERE set_name = 'harvest' AND version = %s",
        (LATEST_CORE,),
    )
    with pytest.raises(SchemaMismatch, match="harvest migrate run") as info:
        Client(db)
    assert "ahead" not in str(info.value)


def test_an_included_set_is_not_the_core_set(db: str, tmp_path: Path) -> None:
    app_set = tmp_path / "app"
    app_set.mkdir()
    (app_set / "0001_app.sql").write_text("CREATE TABLE public.app_one (id int);\n")
    assert harvest("migrate", "run", "--include-dir", str(app_set), dsn=db).exit_code == 0
    # An app set's rows are not judged by a run that does not include it...
    query(
        db,
        "INSERT INTO harvest.schema_migrations (set_name, version, name, checksum, transactional)"
        " VALUES ('app', %s, 'later_app', 'x', true)",
        (FUTURE,),
    )
    plain = harvest("migrate", "status", "--check", dsn=db)
    assert plain.exit_code == 0, plain.output
    assert "unknown to this Harvest" not in plain.stdout
    # ...nor do they make Harvest's own schema look ahead.
    Client(db).close()
    # A run that includes the set refuses: the database is ahead of that set.
    refused = harvest("migrate", "run", "--include-dir", str(app_set), dsn=db)
    assert refused.exit_code == 1 and "'app'" in refused.stderr and FUTURE in refused.stderr
    # A directory named like Harvest's own set would mix its versions into the core ledger.
    core_named = tmp_path / "nested" / "harvest"
    core_named.mkdir(parents=True)
    (core_named / f"{FUTURE}_x.sql").write_text("SELECT 1;\n")
    with pytest.raises(ConfigError, match="may not be named 'harvest'"):
        m.discover([core_named])
    named = harvest("migrate", "run", "--include-dir", str(core_named), dsn=db)
    assert named.exit_code == 1 and "may not be named 'harvest'" in named.stderr
    assert query(
        db,
        "SELECT count(*) FROM harvest.schema_migrations WHERE version = %s AND set_name = 'harvest'",
        (FUTURE,),
    ) == [(0,)]
    twin = tmp_path / "other" / "app"
    twin.mkdir(parents=True)
    with pytest.raises(ConfigError, match="same name 'app'"):
        m.discover([app_set, twin])
