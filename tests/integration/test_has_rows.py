"""harvest.db.sqlapi._has_rows on a real server: whether a statement returned rows to fetch, read
from its result, is what ``cursor.description is not None`` says (the test the SQL API's calls
made before, which built a ``Column`` per column only to be tested)."""

from __future__ import annotations

import asyncio

import psycopg
from psycopg.rows import dict_row

from harvest.db.sqlapi import AsyncSqlApi, _has_rows

STATEMENTS = [
    "SELECT 1 AS a, 'x' AS b",  # rows
    "SELECT 1 AS a WHERE false",  # no rows, columns: still a result to fetch
    "SELECT",  # rows of no columns
    "SELECT FROM generate_series(1, 3)",
    "SET statement_timeout = 0",  # no result rows
    "DO $$ BEGIN END $$",
]


def test_has_rows_is_whether_the_cursor_has_a_description(conn: psycopg.Connection) -> None:
    with conn.cursor(row_factory=dict_row) as cur:
        for sql in STATEMENTS:
            cur.execute(sql)  # type: ignore[arg-type]
            assert _has_rows(cur) is (cur.description is not None), sql


def test_the_async_call_answers_rows_or_none(db: str) -> None:
    async def go() -> list[object]:
        async with await psycopg.AsyncConnection.connect(db, autocommit=True) as aconn:
            return [
                await AsyncSqlApi._on(aconn, "SELECT 1 AS a, 'x' AS b", {}),
                await AsyncSqlApi._on(aconn, "SELECT 1 AS a WHERE false", {}),
                await AsyncSqlApi._on(aconn, "SELECT FROM generate_series(1, 2)", {}),
                await AsyncSqlApi._on(aconn, "DO $$ BEGIN END $$", {}),
            ]

    assert asyncio.run(go()) == [[{"a": 1, "b": "x"}], [], [{}, {}], []]
