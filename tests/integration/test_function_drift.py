"""A database whose SQL functions are not the ones this release ships, though its schema version
is: releases change functions/ without a migration, so the schema version (and
functions_version()) stay, and `harvest shard health`, preflight and the boot warnings read such
a database as healthy. The function ledger (what `harvest migrate run` recorded per file) and a
digest of the live bodies (harvest.get_function_state) say it: a file applied from other text,
or a function replaced by hand after the run, reads stale; a run of this release reads fresh."""

from __future__ import annotations

import asyncio
import json
import logging

import psycopg
from click.testing import CliRunner

from harvest.cli.main import main
from harvest.db.migrate import Migrator, read_function_drift
from harvest.db.sqlapi import SqlApi
from harvest.db.steps import run_steps

# A body that is not core.sql's: what a hand edit (or an older file applied by hand) leaves.
HAND_EDIT = (
    "CREATE OR REPLACE FUNCTION harvest.payload_limit() RETURNS integer LANGUAGE sql STABLE AS $$ SELECT 1 $$"
)


def drift(dsn: str):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return run_steps(read_function_drift(), SqlApi(conn))


def test_a_database_migrated_by_this_release_reads_fresh(db: str) -> None:
    assert drift(db) is None
    assert Migrator(db).inspect().stale_functions == []


def test_a_function_replaced_by_hand_reads_stale_until_migrate_run_applies_its_file_again(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(HAND_EDIT)
    found = drift(db)
    assert found is not None and found.stale
    assert found.functions == ["payload_limit"] and found.files == []
    assert "harvest.payload_limit" in found.describe() and "harvest migrate run" in found.describe()
    # `migrate status` lists its file, and a run applies it again (the ledger alone said applied)
    assert [p.name for p in Migrator(db).inspect().stale_functions] == ["core.sql"]
    status = CliRunner().invoke(
        main, ["migrate", "status", "--check"], env={"HARVEST_DATABASE_URL": db}, catch_exceptions=False
    )
    assert status.exit_code == 1
    assert "functions/core.sql" in status.output
    assert "pending (1 of its functions replaced since it was applied)" in status.output
    assert Migrator(db).run().functions_applied == ["core.sql"]
    assert drift(db) is None
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT harvest.payload_limit()").fetchone()[0] > 1


def applied_by(dsn: str, release: str, file_name: str = "claim.sql") -> None:
    """The ledger row a run of ``release`` leaves for a file whose text is not this package's."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE harvest.function_files SET checksum = 'another text', package_version = %s"
            " WHERE file_name = %s",
            (release, file_name),
        )


def test_a_file_an_older_release_applied_reads_stale(db: str) -> None:
    applied_by(db, "0.0.1")
    found = drift(db)
    assert found is not None and found.stale and found.files == ["claim.sql"] and found.functions == []
    assert "functions/claim.sql" in found.describe()


def test_files_a_newer_release_applied_read_newer_not_stale(db: str) -> None:
    applied_by(db, "999.0")
    found = drift(db)
    assert found is not None and not found.stale and found.newer == ["999.0"]
    assert "rolling deploy" in found.describe()


def test_functions_from_before_get_function_state_read_stale(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP FUNCTION harvest.get_function_state(text[], text)")
    found = drift(db)
    assert found is not None and found.unreadable and found.stale


def _preflight(dsn: str):
    result = CliRunner().invoke(
        main, ["preflight", "--output", "json"], env={"HARVEST_DATABASE_URL": dsn}, catch_exceptions=False
    )
    checks = {c["name"]: c for c in json.loads(result.output)["checks"]}
    return result.exit_code, checks


def test_preflight_fails_a_database_whose_function_was_replaced(db: str) -> None:
    code, checks = _preflight(db)
    assert checks["migrations"]["status"] == "pass", checks["migrations"]
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(HAND_EDIT)
    code, checks = _preflight(db)
    assert code == 1
    migrations = checks["migrations"]
    assert migrations["status"] == "fail", migrations
    assert migrations["details"]["stale_function_files"] == ["core.sql"]
    assert migrations["details"]["changed_functions"] == ["payload_limit"]
    assert (
        "(1 function(s) replaced since `harvest migrate run` applied them: harvest.payload_limit)"
        in migrations["summary"]
    ), migrations
    assert "harvest migrate run" in migrations["remediation"]
    text = CliRunner().invoke(main, ["preflight"], env={"HARVEST_DATABASE_URL": db}, catch_exceptions=False)
    assert "changed function file functions/core.sql" in text.output
    assert "function harvest.payload_limit replaced since its file was applied" in text.output


def test_shard_health_of_one_database_says_functions_stale(db: str) -> None:
    from harvest.shard.health import shard_health
    from harvest.shard.router import ShardRouter

    router = ShardRouter(readable=[0], writable=[0], default=0)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.register_worker('w', ARRAY['default'], 'h', 1, 60, '{}')")
    row = shard_health(router, {0: db})["shards"][0]
    assert row["reason_codes"] == [] and row["schema"]["functions"]["status"] == "fresh", row
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(HAND_EDIT)
    health = shard_health(router, {0: db})
    row = health["shards"][0]
    assert row["reason_codes"] == ["functions_stale"] and row["readiness"] == "degraded", row
    functions = row["schema"]["functions"]
    assert functions["status"] == "stale" and functions["functions"] == ["payload_limit"]
    assert "harvest migrate run" in functions["reason"]
    assert health["readiness"] == "degraded"


def test_the_web_boot_warns_of_functions_not_this_releases(db: str, caplog) -> None:
    from harvest.db.sqlapi import AsyncSqlApi
    from harvest.web.app import _warn_if_not_migrated

    async def boot(what: str) -> bool:
        async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
            return await _warn_if_not_migrated(AsyncSqlApi.on_connection(conn), what)

    with caplog.at_level(logging.WARNING, logger="harvest"):
        assert asyncio.run(boot("the database"))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(HAND_EDIT)
    with caplog.at_level(logging.WARNING, logger="harvest"):
        assert asyncio.run(boot("shard 3"))
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "shard 3" in lines[0] and "harvest.payload_limit" in lines[0], lines


def test_a_worker_warns_once_per_database_of_functions_behind_its_release(db: str, caplog) -> None:
    """What a worker's boot (and each shard lane's setup after an outage) says: one line."""
    from harvest.db.migrate import warn_function_drift_async
    from harvest.db.sqlapi import AsyncSqlApi

    async def set_up() -> None:
        async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
            await warn_function_drift_async(AsyncSqlApi.on_connection(conn), "shard 7")

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(HAND_EDIT)
    with caplog.at_level(logging.WARNING, logger="harvest"):
        asyncio.run(set_up())
        asyncio.run(set_up())
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert lines == [lines[0]] and lines[0].startswith("harvest: shard 7: its SQL functions"), lines


def test_a_boot_that_cannot_read_the_function_state_warns_and_starts(db: str, caplog) -> None:
    """The comparison is a warning's: a login that may not call harvest.get_function_state (one
    granted EXECUTE function by function rather than through harvest_worker or harvest_reader)
    gets a line saying the functions were not compared, not a failed boot (review59)."""
    from harvest.db.migrate import warn_function_drift_async
    from harvest.db.sqlapi import AsyncSqlApi
    from harvest.web.app import _warn_if_not_migrated

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "REVOKE EXECUTE ON FUNCTION harvest.get_function_state(text[], text)"
            " FROM PUBLIC, harvest_reader, harvest_worker"
        )

    async def boot(what: str) -> bool:
        async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
            await conn.execute("SET ROLE harvest_worker")
            sql = AsyncSqlApi.on_connection(conn)
            await warn_function_drift_async(sql, what)
            return await _warn_if_not_migrated(sql, what)

    with caplog.at_level(logging.WARNING, logger="harvest"):
        assert asyncio.run(boot("shard 5"))
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 2, lines
    assert all("shard 5" in line and "could not compare its SQL functions" in line for line in lines), lines
    assert all("harvest migrate status" in line for line in lines), lines
