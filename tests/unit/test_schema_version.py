"""The schema version a Client and a Worker require is baked in (harvest.db.SCHEMA_VERSION), so
neither reads the migration files; it must equal the newest migration's version."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harvest.db import SCHEMA_VERSION
from harvest.db import migrate as m


def test_schema_version_is_the_newest_migration() -> None:
    newest = m.latest_core_version()
    assert newest == SCHEMA_VERSION, (
        f"migrations/ ends at {newest} but harvest.db.SCHEMA_VERSION is {SCHEMA_VERSION!r}: set "
        f"SCHEMA_VERSION = {newest!r} in harvest_py/harvest/db/__init__.py (the version a Client and a "
        "Worker require of the database) in the change that adds the migration"
    )


def test_functions_version_is_the_schema_version() -> None:
    """harvest.functions_version() names the migration the function files were written for:
    a worker refuses a database whose functions answer another (a migrate run that stopped
    after its migrations), so it moves with SCHEMA_VERSION."""
    core = (Path(__file__).resolve().parents[2] / "functions" / "core.sql").read_text()
    body = re.search(r"FUNCTION harvest\.functions_version\(\).*?SELECT '(\d{4})'::text;", core, re.S)
    assert body is not None, "functions/core.sql has no harvest.functions_version()"
    assert body.group(1) == SCHEMA_VERSION, (
        f"harvest.functions_version() in functions/core.sql answers {body.group(1)!r} but "
        f"SCHEMA_VERSION is {SCHEMA_VERSION!r}: bump both in the change that adds the migration"
    )


class _Conn:
    """Answers harvest.schema_version(), functions_version() and get_function_releases() like a
    migrated database (the cursor a SqlApi reads them through)."""

    pgresult = type("Result", (), {"nfields": 1})()

    def __init__(self, version: str) -> None:
        self.version = version

    def cursor(self, **_kwargs):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        return None

    def execute(self, sql: str, _params=None):
        assert "schema_version()" in sql or "functions_version()" in sql or "get_function_releases()" in sql
        self.releases = "get_function_releases()" in sql
        return self

    def fetchall(self):
        return [{"releases": []}] if self.releases else [{"version": self.version}]


def test_check_schema_reads_no_migration_file(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_files(*_args, **_kwargs):
        raise AssertionError("check_schema read the migration files")

    monkeypatch.setattr(m, "load_set", no_files)
    m.check_schema(_Conn(SCHEMA_VERSION))  # a Client() on a current database
    with pytest.raises(m.SchemaMismatch, match="run `harvest migrate run`"):
        m.check_schema(_Conn("0001"))


def test_a_migration_set_that_cannot_be_read_is_one_config_error(tmp_path) -> None:
    """`--include-dir` with a name too long for the file system, or a file that is not UTF-8,
    was an OSError / UnicodeDecodeError traceback; both are a ConfigError naming the path."""
    from harvest.core.errors import ConfigError
    from harvest.db.migrate import load_set

    with pytest.raises(ConfigError, match="cannot be read"):
        load_set(tmp_path / ("x" * 300), "app")
    (tmp_path / "0001_binary.sql").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=r"0001_binary\.sql cannot be read as UTF-8 text"):
        load_set(tmp_path, "app")
    with pytest.raises(ConfigError, match="does not exist"):
        load_set(tmp_path / "missing", "app")
