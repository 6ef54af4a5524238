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
