"""Harvest packaged as a PostgreSQL extension: build it, CREATE EXTENSION, compare with a migrated DB."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import catalog
import psycopg
import pytest
from click.testing import CliRunner

from harvest.cli.migrate import migrate
from harvest.db import embedded, paths
from harvest.db import migrate as m

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "build_extension.py"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def build(output_dir: Path) -> tuple[Path, Path]:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--output-dir", str(output_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    script, control = output_dir / f"harvest--{VERSION}.sql", output_dir / "harvest.control"
    assert result.stdout.split() == [str(script), str(control)]
    return script, control


def test_build_writes_the_script_and_the_control_file(tmp_path: Path) -> None:
    script, control = build(tmp_path)
    text = script.read_text()
    # sql/ in its install order, then functions/, then the one call that secures them.
    sections = re.findall(r"^-- ---- ((?:sql|functions)/\S+)$", text, re.MULTILINE)
    assert sections == (
        [f"sql/{p.name}" for p in paths.schema_files(REPO / "sql")]
        + [f"functions/{p.name}" for p in sorted((REPO / "functions").glob("*.sql"))]
    )
    last_function = text.index(f"-- ---- functions/{max((REPO / 'functions').glob('*.sql')).name}")
    assert text.index("SELECT harvest._secure_functions();", last_function) > last_function
    assert re.search(r"^CREATE SCHEMA harvest;$", text, re.MULTILINE)
    assert "CREATE SCHEMA IF NOT EXISTS" not in text
    assert not re.search(r"^\s*(BEGIN|COMMIT|ROLLBACK)\s*;", text, re.MULTILINE | re.IGNORECASE)
    for mig in m.load_set(REPO / "migrations", m.CORE_SET):
        assert f"'{mig.version}', '{mig.name}', '{mig.checksum}'" in text
    for path in sorted((REPO / "functions").glob("*.sql")):
        # with the extension's version as the release that applied it (the migrator's rule)
        assert f"('{path.name}', '{m.file_checksum(path)}', '{VERSION}')" in text

    settings = dict(re.findall(r"^(\w+)\s*=\s*(.+?)\s*$", control.read_text(), re.MULTILINE))
    assert settings["default_version"] == f"'{VERSION}'"
    assert settings["relocatable"] == "false"
    assert settings["superuser"] == "true"
    assert "comment" in settings
    assert "schema" not in settings and "requires" not in settings


def test_make_extension_runs_the_build_script() -> None:
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    result = subprocess.run(
        ["make", "-n", "-C", str(REPO), "extension"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "scripts/build_extension.py" in result.stdout


@pytest.fixture
def installed_extension(tmp_path: Path, pg_server) -> Iterator[None]:
    """The built files, copied into the embedded server's share/extension for one test."""
    if os.environ.get("HARVEST_TEST_DSN"):
        pytest.skip("HARVEST_TEST_DSN points at another server: its share/extension is not ours to write")
    target = embedded.share_dir() / "extension"
    if not target.is_dir() or not os.access(target, os.W_OK):
        pytest.skip(f"{target} is not writable: cannot install the extension files")
    built = build(tmp_path / "built")
    saved = {}
    for path in built:
        destination = target / path.name
        if destination.exists():
            saved[destination] = destination.read_bytes()
        shutil.copyfile(path, destination)
        destination.chmod(0o644)
    try:
        yield
    finally:
        for path in built:
            destination = target / path.name
            if destination in saved:
                destination.write_bytes(saved[destination])
            else:
                destination.unlink(missing_ok=True)


@pytest.fixture
def migrated_now(pg_server) -> Iterator[str]:
    """A database migrated now (not the session template), from the same files the build just read."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    dsn = pg_server.create_database(name)
    m.Migrator(dsn).run()
    yield dsn
    pg_server.drop_database(name)


def test_create_extension_equals_a_migrated_database(
    installed_extension: None, fresh_db: str, migrated_now: str
) -> None:
    db = migrated_now
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION harvest")
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'harvest'").fetchone() == (
            VERSION,
        )
        assert conn.execute("SELECT harvest.schema_version()").fetchone() == (m.latest_core_version(),)
    catalog.assert_same(catalog.snapshot(fresh_db), catalog.snapshot(db), "CREATE EXTENSION", "migrated")

    # Nothing pending: the script carried the ledgers.
    status = CliRunner().invoke(migrate, ["status", "--check"], env={"HARVEST_DATABASE_URL": fresh_db})
    assert status.exit_code == 0, status.output
    report = m.Migrator(fresh_db).run()
    assert not report.applied and not report.applied_non_transactional and not report.functions_applied
    with psycopg.connect(fresh_db) as conn:
        m.check_schema(conn)


def test_extension_tables_are_dumped_and_dropped_with_it(installed_extension: None, fresh_db: str) -> None:
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION harvest")
        # pg_dump skips extension tables' rows unless marked: every data table is, the ledgers are not.
        marked = {
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_extension e, unnest(e.extconfig) AS x(oid)"
                " JOIN pg_class c ON c.oid = x.oid WHERE e.extname = 'harvest' AND c.relkind = 'r'"
            )
        }
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT relname FROM pg_class WHERE relnamespace = 'harvest'::regnamespace AND relkind = 'r'"
            )
        }
        assert marked == tables - {"schema_migrations", "function_files"}
        assert {"executions", "events", "tasks"} <= marked
        # The schema belongs to the extension: dropping it leaves nothing behind.
        conn.execute("DROP EXTENSION harvest")
        assert conn.execute("SELECT to_regnamespace('harvest')").fetchone() == (None,)


def test_create_extension_refuses_a_database_that_already_has_the_schema(
    installed_extension: None, db: str
) -> None:
    with psycopg.connect(db, autocommit=True) as conn, pytest.raises(psycopg.errors.DuplicateSchema):
        conn.execute("CREATE EXTENSION harvest")
