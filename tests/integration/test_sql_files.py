"""The SQL files themselves: names, versions, parseability, and the no-transaction mark.

These need no database: pglast carries PostgreSQL's own parser.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pglast
import pytest
from pglast import ast

from harvest.core.errors import ConfigError
from harvest.db import migrate as m
from harvest.db import paths

ROOT = Path(__file__).resolve().parents[2]
SQL_DIRS = ("sql", "functions", "migrations")


def sql_files() -> list[Path]:
    return [p for d in SQL_DIRS for p in sorted((ROOT / d).glob("*.sql"))]


def _raw_statements(sql: str) -> list[tuple[ast.RawStmt, str]]:
    """Each parsed statement with its own text (pglast locations are byte offsets)."""
    data = sql.encode()
    result = []
    for raw in pglast.parse_sql(sql):
        start = raw.stmt_location or 0
        end = start + raw.stmt_len if raw.stmt_len else len(data)
        result.append((raw, data[start:end].decode()))
    return result


# -- naming and versions ---------------------------------------------------------------


def test_repository_migrations_are_named_and_versioned_strictly() -> None:
    directory = ROOT / "migrations"
    files = sorted(p.name for p in directory.iterdir() if p.is_file())
    assert files, "migrations/ is empty"
    # A misnamed file (0002_x.SQL, 0002-x.sql) would be silently skipped by the glob: refuse it here.
    bad = [name for name in files if not m.MIGRATION_NAME.match(name)]
    assert not bad, f"migrations not named NNNN_description.sql: {bad}"
    versions = [m.MIGRATION_NAME.match(name).group(1) for name in files]
    assert len(set(versions)) == len(versions), f"duplicate versions: {versions}"
    assert versions == sorted(versions)
    assert all(int(a) < int(b) for a, b in itertools.pairwise(versions)), versions
    assert versions[0] == "0001", "the baseline is 0001"
    loaded = m.load_set(directory, m.CORE_SET)
    assert [x.version for x in loaded] == versions
    assert m.latest_core_version() == versions[-1]


def test_load_set_rejects_a_duplicate_version(tmp_path: Path) -> None:
    (tmp_path / "0001_first.sql").write_text("SELECT 1;\n")
    (tmp_path / "0001_second.sql").write_text("SELECT 2;\n")
    with pytest.raises(ConfigError) as info:
        m.load_set(tmp_path, "app")
    message = str(info.value)
    assert "0001" in message and "0001_first.sql" in message and "0001_second.sql" in message


@pytest.mark.parametrize(
    "name",
    [
        "1_short.sql",
        "0001-dash.sql",
        "0001_Upper.sql",
        "0001_.sql",
        "00001_five_digits.sql",
        "0001 space.sql",
        "v0001_prefix.sql",
    ],
)
def test_load_set_rejects_a_bad_name(tmp_path: Path, name: str) -> None:
    (tmp_path / "0001_good.sql").write_text("SELECT 1;\n")
    (tmp_path / name).write_text("SELECT 2;\n")
    with pytest.raises(ConfigError, match=r"NNNN_description.sql"):
        m.load_set(tmp_path, "app")


def test_load_set_orders_by_version_and_reads_the_mark(tmp_path: Path) -> None:
    (tmp_path / "0010_later.sql").write_text("SELECT 10;\n")
    (tmp_path / "0002_sooner.sql").write_text(f"{m.NO_TRANSACTION_MARK}\nSELECT 2;\n")
    (tmp_path / "notes.txt").write_text("not a migration\n")
    loaded = m.load_set(tmp_path, "app")
    assert [(x.version, x.name, x.transactional) for x in loaded] == [
        ("0002", "sooner", False),
        ("0010", "later", True),
    ]
    assert all(x.set_name == "app" for x in loaded)


def test_load_set_rejects_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        m.load_set(tmp_path / "nope", "app")


# -- parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", sql_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_sql_file_parses(path: Path) -> None:
    statements = pglast.parse_sql(path.read_text())
    assert statements, f"{path} holds no statement"


def _plpgsql_functions(sql: str) -> list[tuple[str, str]]:
    found = []
    for raw, text in _raw_statements(sql):
        stmt = raw.stmt
        if not isinstance(stmt, ast.CreateFunctionStmt):
            continue
        language = next((o.arg.sval for o in stmt.options or () if o.defname == "language"), None)
        if language == "plpgsql":
            found.append((".".join(n.sval for n in stmt.funcname), text))
    return found


def for_plpgsql_parser(text: str) -> str:
    """libpg_query's PL/pgSQL parser resolves only pg_catalog and public in a qualified name
    (``harvest.tasks%ROWTYPE`` fails with "LookupExplicitNamespace only supports pg_catalog
    and public"); the schema name does not change the syntax, so parse with it as public.
    It knows no tables either, so an array of a table's rows (``harvest.tasks[]``) is an
    array of records to it, which no variable or parameter may be: parse it as ``text[]``."""
    return re.sub(r"\bpublic\.\w+\[\]", "text[]", re.sub(r"\bharvest\.", "public.", text))


@pytest.mark.parametrize("path", sql_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_plpgsql_bodies_parse(path: Path) -> None:
    if not hasattr(pglast, "parse_plpgsql"):
        pytest.skip("this pglast has no parse_plpgsql")
    failures = []
    for name, text in _plpgsql_functions(path.read_text()):
        try:
            pglast.parse_plpgsql(for_plpgsql_parser(text))
        except pglast.parser.ParseError as exc:
            failures.append(f"{name}: {exc}")
    assert not failures, f"{path}: PL/pgSQL bodies that do not parse:\n" + "\n".join(failures)


def test_plpgsql_check_catches_a_broken_body() -> None:
    """The body check above is real: a typo inside $$ passes parse_sql but not parse_plpgsql."""
    if not hasattr(pglast, "parse_plpgsql"):
        pytest.skip("this pglast has no parse_plpgsql")
    sql = (
        "CREATE FUNCTION harvest.broken() RETURNS int LANGUAGE plpgsql AS $$\n"
        "BEGIN\n    RETRUN 1;\nEND;\n$$;\n"
    )
    pglast.parse_sql(sql)
    [(name, text)] = _plpgsql_functions(sql)
    assert name == "harvest.broken"
    with pytest.raises(pglast.parser.ParseError, match="RETRUN"):
        pglast.parse_plpgsql(for_plpgsql_parser(text))
    fixed = text.replace("RETRUN", "RETURN")
    pglast.parse_plpgsql(for_plpgsql_parser(fixed))


def test_functions_are_plpgsql_or_sql_and_found() -> None:
    """At least the engine's PL/pgSQL is seen by the body check (it would pass vacuously otherwise)."""
    count = sum(len(_plpgsql_functions(p.read_text())) for p in sorted((ROOT / "functions").glob("*.sql")))
    assert count > 0


# -- statements that cannot run in a transaction block ---------------------------------


def non_transactional_reasons(sql: str) -> list[str]:
    """What in ``sql`` PostgreSQL refuses inside a transaction block (PostgreSQL 12 and later)."""
    reasons = []
    for raw, text in _raw_statements(sql):
        stmt = raw.stmt
        first_line = text.strip().splitlines()[0] if text.strip() else ""
        if isinstance(stmt, ast.IndexStmt) and stmt.concurrent:
            reasons.append(f"CREATE INDEX CONCURRENTLY: {first_line}")
        elif isinstance(stmt, ast.DropStmt) and stmt.concurrent:
            reasons.append(f"DROP INDEX CONCURRENTLY: {first_line}")
        elif isinstance(stmt, ast.ReindexStmt) and any(
            p.defname == "concurrently"
            and (
                p.arg is None
                or (
                    getattr(p.arg, "boolval", True) not in (False, 0)
                    and getattr(p.arg, "sval", "on") not in ("off", "false")
                )
            )
            for p in stmt.params or ()
        ):
            reasons.append(f"REINDEX CONCURRENTLY: {first_line}")
        elif isinstance(stmt, (ast.CreatedbStmt, ast.DropdbStmt)):
            reasons.append(f"CREATE/DROP DATABASE: {first_line}")
        elif isinstance(stmt, ast.VacuumStmt) and stmt.is_vacuumcmd:
            reasons.append(f"VACUUM: {first_line}")
        elif isinstance(stmt, (ast.CreateTableSpaceStmt, ast.DropTableSpaceStmt)):
            reasons.append(f"CREATE/DROP TABLESPACE: {first_line}")
        elif isinstance(stmt, ast.AlterSystemStmt):
            reasons.append(f"ALTER SYSTEM: {first_line}")
        elif isinstance(stmt, ast.CreateSubscriptionStmt):
            reasons.append(f"CREATE SUBSCRIPTION: {first_line}")
        elif isinstance(stmt, ast.ClusterStmt) and stmt.relation is None:
            reasons.append(f"CLUSTER of every table: {first_line}")
        elif isinstance(stmt, ast.AlterTableStmt) and any(
            isinstance(cmd, ast.AlterTableCmd)
            and isinstance(cmd.def_, ast.PartitionCmd)
            and cmd.def_.concurrent
            for cmd in stmt.cmds or ()
        ):
            reasons.append(f"DETACH PARTITION CONCURRENTLY: {first_line}")
    return reasons


def transaction_control(sql: str) -> list[str]:
    return [text.strip() for raw, text in _raw_statements(sql) if isinstance(raw.stmt, ast.TransactionStmt)]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (a);", True),
        ("CREATE UNIQUE INDEX CONCURRENTLY i ON t (a);", True),
        ("DROP INDEX CONCURRENTLY IF EXISTS i;", True),
        ("REINDEX INDEX CONCURRENTLY i;", True),
        ("REINDEX (CONCURRENTLY) TABLE t;", True),
        ("CREATE DATABASE d;", True),
        ("DROP DATABASE d;", True),
        ("VACUUM t;", True),
        ("VACUUM (ANALYZE) t;", True),
        ("ALTER SYSTEM SET work_mem = '8MB';", True),
        ("CREATE TABLESPACE ts LOCATION '/tmp/ts';", True),
        ("ALTER TABLE p DETACH PARTITION c CONCURRENTLY;", True),
        ("CLUSTER;", True),
        ("CREATE INDEX i ON t (a);", False),
        ("DROP INDEX i;", False),
        ("REINDEX INDEX i;", False),
        ("ANALYZE t;", False),
        ("ALTER TABLE p DETACH PARTITION c;", False),
        ("CLUSTER t USING i;", False),
        ("ALTER TYPE e ADD VALUE 'x';", False),  # allowed in a transaction since PostgreSQL 12
        ("CREATE TABLE t (a int); SELECT 1;", False),
    ],
)
def test_non_transactional_detector(sql: str, expected: bool) -> None:
    assert bool(non_transactional_reasons(sql)) is expected, non_transactional_reasons(sql)


def unmarked_non_transactional(migrations: list[m.Migration]) -> dict[str, list[str]]:
    return {
        mig.label: reasons
        for mig in migrations
        if mig.transactional and (reasons := non_transactional_reasons(mig.sql))
    }


def test_every_non_transactional_migration_is_marked() -> None:
    migrations = m.load_set(ROOT / "migrations", m.CORE_SET)
    offenders = unmarked_non_transactional(migrations)
    assert not offenders, (
        f"these migrations need `{m.NO_TRANSACTION_MARK}` in their first lines "
        f"(and must be idempotent): {offenders}"
    )


# Tables that stay small whatever the workload (settings, registrations, one row a worker or a
# schedule): a migration may index one in its transaction. Any other table grows with the runs,
# and a plain CREATE INDEX holds its writes (starts, claims, admissions) for the whole build.
SMALL_TABLES = frozenset(
    {
        "api_tokens",
        "dags",
        "engine_settings",
        "event_stream_listeners",
        "fair_queues",
        "flow_policies",
        "owner_mode",
        "partition_owners",
        "registered_workflows",
        "retention_config",
        "schedules",
        "search_attribute_indexes",
        "shard_identity",
        "shard_migrations",
        "workers",
    }
)
# The first migration the rule holds for (those before are applied as they are).
CONCURRENT_INDEXES_FROM = "0138"


def blocking_index_builds(sql: str) -> list[str]:
    """The indexes ``sql`` builds without CONCURRENTLY on a table it did not create that is not
    one of SMALL_TABLES."""
    created = set()
    found = []
    for raw, text in _raw_statements(sql):
        stmt = raw.stmt
        if isinstance(stmt, ast.CreateStmt):
            created.add(stmt.relation.relname)
        elif isinstance(stmt, ast.IndexStmt) and not stmt.concurrent:
            table = stmt.relation.relname
            if table not in created and table not in SMALL_TABLES:
                found.append(text.strip().splitlines()[0])
    return found


@pytest.mark.parametrize(
    ("sql", "blocking"),
    [
        ("CREATE INDEX IF NOT EXISTS i ON harvest.pending_starts (created_at, id);", True),
        ("CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON harvest.pending_starts (created_at, id);", False),
        ("CREATE INDEX i ON harvest.workers (lost_at);", False),
        ("CREATE TABLE harvest.t (a int); CREATE INDEX i ON harvest.t (a);", False),
    ],
)
def test_the_blocking_index_detector(sql: str, blocking: bool) -> None:
    assert bool(blocking_index_builds(sql)) is blocking


def test_a_migration_indexes_a_growing_table_concurrently() -> None:
    """An index on a table that grows with the workload is built CONCURRENTLY (a no-transaction
    migration): a plain build blocks the table's writes for as long as it reads every row."""
    offenders = {
        mig.label: found
        for mig in m.load_set(ROOT / "migrations", m.CORE_SET)
        if mig.version >= CONCURRENT_INDEXES_FROM and (found := blocking_index_builds(mig.sql))
    }
    assert not offenders, f"build these with CREATE INDEX CONCURRENTLY ({m.NO_TRANSACTION_MARK}): {offenders}"


def test_no_migration_or_sql_file_holds_transaction_control() -> None:
    """The runner owns the transaction; a BEGIN/COMMIT inside a file would break its atomicity."""
    offenders = {
        str(p.relative_to(ROOT)): found for p in sql_files() if (found := transaction_control(p.read_text()))
    }
    assert not offenders, offenders


def test_the_mark_check_catches_an_unmarked_migration(tmp_path: Path) -> None:
    (tmp_path / "0001_table.sql").write_text("CREATE TABLE t (a int);\n")
    (tmp_path / "0002_index.sql").write_text(
        "-- an index built without locking writes\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_a ON t (a);\n"
    )
    (tmp_path / "0003_marked.sql").write_text(
        f"{m.NO_TRANSACTION_MARK}\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_b ON t (a);\n"
    )
    offenders = unmarked_non_transactional(m.load_set(tmp_path, "app"))
    assert list(offenders) == ["app/0002_index.sql"]


@pytest.mark.parametrize(
    ("text", "transactional"),
    [
        (f"{m.NO_TRANSACTION_MARK}\nCREATE INDEX CONCURRENTLY i ON t (a);\n", False),
        (f"-- why: a big table\n{m.NO_TRANSACTION_MARK}\nSELECT 1;\n", False),
        (f"  {m.NO_TRANSACTION_MARK}  \nSELECT 1;\n", False),
        ("SELECT 1;\n" * 6 + f"{m.NO_TRANSACTION_MARK}\n", True),  # only the first lines count
        (f"SELECT 1; {m.NO_TRANSACTION_MARK}\n", True),  # the mark is a line of its own
        ("CREATE INDEX CONCURRENTLY i ON t (a);\n", True),
    ],
)
def test_is_transactional_reads_the_mark_in_the_first_lines(text: str, transactional: bool) -> None:
    assert m.is_transactional(text) is transactional


# -- sql/ is the current schema, one file per entity -------------------------------------

SCHEMA_FILE_NAME = re.compile(r"^[a-z]+(?:_[a-z]+)*\.sql$")


def schema_changes(sql: str) -> list[str]:
    """Statements that change an existing object (ALTER ..., RENAME, DROP): sql/ creates
    each object whole, so a change belongs in its CREATE, not after it."""
    found = []
    for raw, text in _raw_statements(sql):
        kind = type(raw.stmt).__name__
        if kind.startswith("Alter") or kind in ("RenameStmt", "DropStmt"):
            found.append(" ".join(text.split())[:80])
    return found


def test_sql_holds_no_alter() -> None:
    offenders = {
        p.name: found
        for p in sorted((ROOT / "sql").glob("*.sql"))
        if (found := schema_changes(p.read_text()))
    }
    assert not offenders, f"sql/ must create each table whole, with no ALTER: {offenders}"


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE harvest.tasks ADD COLUMN x int;",
        "ALTER TABLE harvest.tasks ALTER COLUMN seq DROP NOT NULL;",
        "ALTER INDEX harvest.a RENAME TO b;",
        "DROP INDEX harvest.tasks_deadline;",
        "ALTER SEQUENCE harvest.fencing_tokens RESTART;",
    ],
)
def test_the_alter_check_catches_a_change(sql: str) -> None:
    assert schema_changes("CREATE TABLE harvest.t (a int);\n" + sql)


def test_sql_file_names_carry_no_order_and_all_are_installed() -> None:
    """Install order lives in harvest.db.paths.SCHEMA_FILES, not in a 10_ prefix; each file
    is named for its entity and listed there exactly once."""
    names = sorted(p.name for p in (ROOT / "sql").iterdir() if p.is_file())
    bad = [name for name in names if not SCHEMA_FILE_NAME.match(name)]
    assert not bad, f"sql/ files are named for their entity (lowercase words joined by _): {bad}"
    assert sorted(p.name for p in paths.schema_files(ROOT / "sql")) == names


def test_schema_files_refuses_an_unlisted_or_missing_file(tmp_path: Path) -> None:
    for name in paths.SCHEMA_FILES:
        (tmp_path / f"{name}.sql").write_text("SELECT 1;\n")
    assert [p.stem for p in paths.schema_files(tmp_path)] == list(paths.SCHEMA_FILES)
    (tmp_path / "10_extra.sql").write_text("SELECT 1;\n")
    (tmp_path / "events.sql").unlink()
    with pytest.raises(FileNotFoundError, match="not listed: 10_extra; missing: events"):
        paths.schema_files(tmp_path)


def test_the_migrator_creates_the_ledgers_from_sql_ledger_file() -> None:
    """One definition of the ledgers: sql/ledger.sql, also what the migrator runs first."""
    assert paths.ledger_file() == paths.sql_dir() / "ledger.sql"
    assert paths.schema_files()[0] == paths.ledger_file()
    source = (ROOT / "harvest_py" / "harvest" / "db" / "migrate.py").read_text()
    assert "CREATE TABLE" not in source and "paths.ledger_file()" in source


def test_the_wheel_ships_sql_beside_functions_and_migrations() -> None:
    """The migrator reads sql/ledger.sql at run time, so an installed package needs sql/
    where harvest.db.paths looks for it (harvest/_sql/sql)."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for name in ("sql", "functions", "migrations"):
        package = f"harvest._sql.{name}"
        assert setuptools["package-dir"][package] == name
        assert package in setuptools["packages"]
        assert setuptools["package-data"][package] == ["*.sql"]


def test_the_wheel_lists_every_package_and_data_file() -> None:
    """pyproject.toml lists the packages by hand, and the suites' editable install finds an
    unlisted one anyway: only a user's wheel would miss it. Every directory of .py files under
    harvest_py/harvest is a listed package, and every other file (py.typed, the dashboard's
    templates and static files) is matched by its package's package-data."""
    import fnmatch
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    base = ROOT / "harvest_py"
    files = [p for p in (base / "harvest").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    packages = {".".join(p.parent.relative_to(base).parts) for p in files if p.suffix == ".py"}
    assert sorted(packages - set(setuptools["packages"])) == []
    unshipped = []
    for path in files:
        if path.suffix == ".py":
            continue
        holder = next(d for d in path.parents if ".".join(d.relative_to(base).parts) in packages)
        patterns = setuptools["package-data"].get(".".join(holder.relative_to(base).parts), [])
        if not any(fnmatch.fnmatch(path.relative_to(holder).as_posix(), p) for p in patterns):
            unshipped.append(path.relative_to(base).as_posix())
    assert unshipped == []
