"""A statement's cursor kept on its connection (harvest.db.sqlapi, ``_kept_cursors``): the async
API runs a statement's next call on a connection on the cursor its last call there used, so
psycopg's adapters for its parameters and columns are set up once, not on every call. What it
must not change: each call's answer, a call that raised, two calls of one statement at once on
one connection, a lost connection's error, and what a connection holds (a bounded number of
cursors, none that answered a large result)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from harvest.core.errors import NotFound
from harvest.db import sqlapi
from harvest.db.sqlapi import AsyncSqlApi


class _Counting:
    """The connection's cursor factory, counted."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]):
        self.made = 0
        self._cursor = conn.cursor
        conn.cursor = self  # type: ignore[method-assign]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.made += 1
        return self._cursor(*args, **kwargs)


async def _connect(db: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(db, autocommit=True)


def test_a_statements_next_call_on_a_connection_reuses_its_cursor(db: str) -> None:
    async def go() -> None:
        async with await _connect(db) as conn:
            counting = _Counting(conn)
            api = AsyncSqlApi.on_connection(conn)
            first = await api.get_function_state(["now"], None)
            again = await api.get_function_state(["now"], None)
            version = await api.schema_version()
            assert first == again
            assert version == await api.schema_version()
            # One cursor per statement, each made once: the second calls took the kept ones.
            assert counting.made == 2
            assert len(conn._harvest_cursors) == 2  # type: ignore[attr-defined]

    asyncio.run(go())


def test_a_call_that_raised_is_answered_right_next_time_and_its_cursor_not_kept(db: str) -> None:
    async def go() -> None:
        async with await _connect(db) as conn:
            api = AsyncSqlApi.on_connection(conn)
            started = await api.start_workflows([{"workflow_name": "kept", "input": [1], "queue": "kept"}])
            run = str(started[0]["execution_id"])
            missing = str(uuid.uuid4())
            for _ in range(2):
                with pytest.raises(NotFound):
                    await api.get_execution(missing)
                assert sqlapi.GET_EXECUTION not in conn._harvest_cursors  # type: ignore[attr-defined]
                found = await api.get_execution(run)
                assert str(found["id"]) == run and found["workflow_name"] == "kept"
                assert sqlapi.GET_EXECUTION in conn._harvest_cursors  # type: ignore[attr-defined]

    asyncio.run(go())


def test_two_calls_of_one_statement_at_once_on_one_connection_get_their_own_answers(db: str) -> None:
    async def go() -> None:
        async with await _connect(db) as conn:
            api = AsyncSqlApi.on_connection(conn)
            await api.get_function_state(["now"], None)  # (a cursor kept for the statement)
            names = [["now"], ["shard_of"], ["now", "shard_of"], ["schema_version"]]
            alone = [await api.get_function_state(n, None) for n in names]
            together = await asyncio.gather(*(api.get_function_state(n, None) for n in names))
            assert list(together) == alone
            assert len({repr(a) for a in alone}) > 1  # (the answers differ: each is its own)

    asyncio.run(go())


def test_a_large_answer_and_a_statement_past_the_bound_are_not_kept(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def go() -> None:
        async with await _connect(db) as conn:
            api = AsyncSqlApi.on_connection(conn)
            monkeypatch.setattr(sqlapi, "KEPT_CURSOR_ROWS", 0)
            assert await api.schema_version() is not None  # one row: more than the bound
            assert conn._harvest_cursors == {}  # type: ignore[attr-defined]
            monkeypatch.setattr(sqlapi, "KEPT_CURSOR_ROWS", 256)
            monkeypatch.setattr(sqlapi, "KEPT_CURSORS", 1)
            await api.schema_version()
            await api.get_function_state(["now"], None)
            assert list(conn._harvest_cursors) == [sqlapi.SCHEMA_VERSION]  # type: ignore[attr-defined]

    asyncio.run(go())


def test_a_kept_cursor_on_a_lost_connection_raises_the_connection_error(db: str) -> None:
    async def go() -> None:
        async with await _connect(db) as conn:
            api = AsyncSqlApi.on_connection(conn)
            await api.schema_version()
            assert sqlapi.SCHEMA_VERSION in conn._harvest_cursors  # type: ignore[attr-defined]
            async with await _connect(db) as admin:
                await admin.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
            # What a fresh cursor raises too: a transient error (db.pools.TRANSIENT), not the
            # cursor's InterfaceError.
            for _ in range(2):
                with pytest.raises(psycopg.OperationalError):
                    await api.schema_version()

    asyncio.run(go())
