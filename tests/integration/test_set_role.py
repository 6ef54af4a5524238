"""A face's request runs as its caller's role (harvest.db.connection.set_role, RoledPool) and the
pooled connection is reset before it goes back: the next borrower is the login again."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg import conninfo

from harvest.core.errors import PermissionDenied
from harvest.db.connection import dsn_with_role, set_role
from harvest.db.pools import RoledPool, open_async_pool
from harvest.db.sqlapi import AsyncSqlApi


def test_set_role_switches_and_resets_even_when_the_block_fails(db: str) -> None:
    async def go() -> None:
        pool = await open_async_pool(db, max_size=1)
        try:
            async with pool.connection() as conn:
                login = (await (await conn.execute("SELECT current_user")).fetchone())[0]
            reader = RoledPool(pool, "harvest_reader", "ui")
            async with reader.connection() as conn:
                row = await (
                    await conn.execute("SELECT current_user, current_setting('application_name')")
                ).fetchone()
                assert row == ("harvest_reader", "harvest-ui")
            with pytest.raises(PermissionDenied):
                await AsyncSqlApi(reader).terminate_workflow("00000000-0000-0000-0000-000000000000", "x")
            async with pool.connection() as conn:  # the same (only) connection, reset
                row = await (
                    await conn.execute("SELECT current_user, current_setting('application_name')")
                ).fetchone()
                assert row[0] == login and row[1] != "harvest-ui"
            with pytest.raises(ValueError):
                async with pool.connection() as conn, set_role(conn, "postgres; DROP TABLE x", "api"):
                    pass
        finally:
            await pool.close()

    asyncio.run(go())


def test_dsn_with_role_starts_a_connection_in_the_role(db: str) -> None:
    dsn = dsn_with_role(conninfo.make_conninfo(db, options="-c statement_timeout=5000"), "harvest_operator")
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT current_user, current_setting('application_name'), current_setting('statement_timeout')"
        ).fetchone()
    assert row == ("harvest_operator", "harvest-api", "5s")


def test_a_roled_call_is_one_transaction_in_its_role_and_leaves_nothing_set(db: str, monkeypatch) -> None:
    """A RoledPool's call sends the role's settings and the call in one implicit transaction (one
    round trip): the call runs as the role with the audit context, nothing outlives it on the
    connection, and a role the cluster lacks is a SchemaMismatch as set_role's."""
    from harvest.core.errors import SchemaMismatch
    from harvest.db import connection

    monkeypatch.setattr(connection, "FACE_ROLES", connection.FACE_ROLES | {"harvest_nobody"})
    with psycopg.connect(db, autocommit=True) as admin:
        run_id = str(
            admin.execute(
                "SELECT execution_id FROM harvest.start_workflow('wf', '[]', 'roled-1', 'q')"
            ).fetchone()[0]  # type: ignore[index]
        )

    async def go() -> tuple:
        pool = await open_async_pool(db, max_size=1)
        try:
            face = AsyncSqlApi(RoledPool(pool, "harvest_operator", "cli", actor="ann", route="POST /x"))
            await face.cancel_workflow(run_id, "done")
            with pytest.raises(SchemaMismatch, match="role harvest_nobody does not exist"):
                await AsyncSqlApi(RoledPool(pool, "harvest_nobody")).get_shard_id()
            async with pool.connection() as conn:  # the same (only) connection
                return await (
                    await conn.execute(
                        "SELECT current_user, current_setting('application_name'),"
                        " current_setting('harvest.audit_actor', true)"
                    )
                ).fetchone()
        finally:
            await pool.close()

    user, application_name, actor = asyncio.run(go())
    assert user != "harvest_operator" and application_name != "harvest-cli" and not actor
    with psycopg.connect(db, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT operation, actor, acting_role, source, route FROM harvest.audit_log"
        ).fetchall()
    assert rows == [("workflow.cancel", "ann", "harvest_operator", "cli", "POST /x")]
