"""A hot call's cursor kept on its connection (harvest.db.sqlapi, ``_KEPT_CURSOR_STATEMENTS``):
the async API runs a claim's, a group commit's, a start's or a signal's next call on a
connection on the cursor its last call there used, so psycopg's adapters for its parameters
and columns are set up once, not on every call. What it must not change: each call's answer, a
call that raised, two calls of one statement at once on one connection, a lost connection's
error, and what a connection holds (no cursor of another call, none that answered a large
batch)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from harvest.core.errors import NotFound
from harvest.db import sqlapi
from harvest.db.pools import database_unreachable
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


def _kept(conn: psycopg.AsyncConnection[Any]) -> dict[str, Any]:
    return getattr(conn, "_harvest_cursors", {})


async def _start(api: AsyncSqlApi, name: str) -> str:
    started = await api.start_workflows([{"workflow_name": name, "input": [1], "queue": "kept"}])
    return str(started[0]["execution_id"])


def test_a_hot_calls_next_call_on_a_connection_reuses_its_cursor(db: str) -> None:
    async def go() -> None:
        async with await _connect(db) as conn:
            counting = _Counting(conn)
            api = AsyncSqlApi.on_connection(conn)
            first, second = await _start(api, "kept_a"), await _start(api, "kept_b")
            assert first != second
            assert await api.next_due_at(["kept"]) == await api.next_due_at(["kept"])
            # One cursor per hot statement, each made once: the second calls took the kept ones.
            assert counting.made == 2
            assert set(_kept(conn)) == {sqlapi.START_WORKFLOWS, sqlapi.NEXT_DUE_AT}
            # Any other call runs on a cursor of its own, as before, and leaves none behind.
            assert await api.schema_version() == await api.schema_version()
            assert counting.made == 4
            assert sqlapi.SCHEMA_VERSION not in _kept(conn)

    asyncio.run(go())


def test_a_call_that_raised_is_answered_right_next_time_and_its_cursor_not_kept(db: str) -> None:
    async def go() -> None:
        async with await _connect(db) as conn:
            api = AsyncSqlApi.on_connection(conn)
            run = await _start(api, "kept_signalled")
            missing = str(uuid.uuid4())
            seen = []
            for _ in range(2):
                with pytest.raises(NotFound):
                    await api.signal_workflow(missing, "poke", {"n": 1})
                assert sqlapi.SIGNAL_WORKFLOW not in _kept(conn)
                seen.append(await api.signal_workflow(run, "poke", {"n": 2}))
                assert sqlapi.SIGNAL_WORKFLOW in _kept(conn)
            assert seen[0] is not None and seen[1] == seen[0] + 1  # (each signal's own event)
            history = await api.get_history(run)
            assert [e["event_id"] for e in history if e["event_type"] == "SignalReceived"] == seen

    asyncio.run(go())


def test_two_calls_of_one_statement_at_once_on_one_connection_get_their_own_answers(db: str) -> None:
    async def go() -> None:
        async with await _connect(db) as conn:
            api = AsyncSqlApi.on_connection(conn)
            await _start(api, "kept_first")  # (a cursor kept for the statement)
            names = [f"kept_together_{i}" for i in range(4)]
            runs = await asyncio.gather(*(_start(api, name) for name in names))
            assert len(set(runs)) == len(names)
            for run, name in zip(runs, names, strict=True):
                assert (await api.get_execution(run))["workflow_name"] == name

    asyncio.run(go())


def test_a_large_answer_is_not_kept(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def go() -> None:
        async with await _connect(db) as conn:
            api = AsyncSqlApi.on_connection(conn)
            monkeypatch.setattr(sqlapi, "KEPT_CURSOR_ROWS", 0)
            await _start(api, "kept_large")  # one row: more than the bound
            assert _kept(conn) == {}
            monkeypatch.setattr(sqlapi, "KEPT_CURSOR_ROWS", 1)
            await _start(api, "kept_small")
            assert set(_kept(conn)) == {sqlapi.START_WORKFLOWS}

    asyncio.run(go())


def test_a_kept_cursor_on_a_lost_connection_raises_the_connection_error(db: str) -> None:
    async def go() -> None:
        async with await _connect(db) as conn:
            api = AsyncSqlApi.on_connection(conn)
            await api.next_due_at(["kept"])
            assert sqlapi.NEXT_DUE_AT in _kept(conn)
            async with await _connect(db) as admin:
                await admin.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
            # What a fresh cursor raises too: a lost database (db.pools.database_unreachable),
            # not the cursor's InterfaceError.
            for _ in range(2):
                with pytest.raises(psycopg.OperationalError) as raised:
                    await api.next_due_at(["kept"])
                assert database_unreachable(raised.value), raised.value

    asyncio.run(go())


def test_a_kept_cursor_holds_neither_its_calls_parameters_nor_its_answer(db: str) -> None:
    """A kept cursor keeps its adapters, not its last call: a start's 1.5 MB input (and a claim's
    answer) would otherwise stay in memory per connection and statement until the statement's next
    call there (a group commit's results, a batch of starts' inputs: many MB a connection)."""
    import gc
    import tracemalloc

    async def go() -> int:
        async with await _connect(db) as conn:
            api = AsyncSqlApi.on_connection(conn)
            await api.next_due_at(["kept"])  # (the connection's first call: its own allocations)
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                await api.start_workflows(
                    [{"workflow_name": "big", "input": ["x" * 1_500_000], "queue": "kept"}]
                )
                assert sqlapi.START_WORKFLOWS in _kept(conn)
                gc.collect()
                return tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()

    held = asyncio.run(go())
    assert held < 500_000, f"{held} bytes still held after the call"
