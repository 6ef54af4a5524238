"""The SQL API is declared once (harvest.db.sqlapi.CALLS) and SqlApi / AsyncSqlApi are made from it,
so a call cannot exist in one and be missing or different in the other; and the waits both clients
share (harvest.db.steps) run the same steps under either driver. No database: fakes record calls."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from types import SimpleNamespace
from typing import Any, Self

import psycopg
import pytest

from harvest.core.errors import NotFound
from harvest.db import sqlapi
from harvest.db.sqlapi import CALLS, AsyncSqlApi, SqlApi
from harvest.db.steps import Notified, Sql, arun_steps, run_steps


def public_methods(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


def test_both_apis_have_exactly_the_declared_calls() -> None:
    assert public_methods(SqlApi) == set(CALLS)
    assert public_methods(AsyncSqlApi) == set(CALLS) | {"on_connection"}  # a pool of one connection


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_call_has_the_same_signature_in_both_apis(name: str) -> None:
    declared = inspect.signature(CALLS[name].params)
    sync, asynchronous = getattr(SqlApi, name), getattr(AsyncSqlApi, name)
    for method in (sync, asynchronous):
        params = list(inspect.signature(method).parameters.values())
        assert params[0].name == "self"
        assert params[1:] == list(declared.parameters.values()), f"{method.__qualname__} drifted"
    assert not inspect.iscoroutinefunction(sync)
    assert inspect.iscoroutinefunction(asynchronous) is not CALLS[name].stream  # streams: async iterators


def _plain(value: Any) -> Any:
    """A parameter with its Jsonb wrappers taken off (they compare by identity)."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return getattr(value, "obj", value)


class _Cursor:
    def __init__(self, log: list, rows: list[dict[str, Any]]):
        self.log, self.rows, self.description = log, rows, True
        self.pgresult = SimpleNamespace(
            nfields=1, status=psycopg.pq.ExecStatus.TUPLES_OK
        )  # (what _has_rows reads)
        self.itersize = None

    def execute(self, sql: str, params: dict[str, Any]) -> None:
        self.log.append((sql, {k: _plain(v) for k, v in params.items()}))

    def fetchall(self) -> list[dict[str, Any]]:
        return [dict(row) for row in self.rows]  # fresh rows per fetch, as psycopg's

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _AsyncCursor(_Cursor):
    async def execute(self, sql: str, params: dict[str, Any]) -> None:  # type: ignore[override]
        _Cursor.execute(self, sql, params)

    async def fetchall(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return [dict(row) for row in self.rows]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _Conn:
    # (lent idle, as a pool's: a retried call reads it, harvest.db.sqlapi._lent)
    info = SimpleNamespace(transaction_status=psycopg.pq.TransactionStatus.IDLE)

    def __init__(self, rows: list[dict[str, Any]], cursor: type = _Cursor):
        self.log: list = []
        self.rows, self._cursor = rows, cursor

    def cursor(self, **_: Any) -> _Cursor:
        return self._cursor(self.log, self.rows)


ROW = {
    "event_id": 1,
    "signal_name": "s",
    "awaited_signals": [],
    "requested": True,
    "plan": {},
    "changed": True,
    "run": {},
    "version": "x",
    "payload_limit": 1,
    "due_at": None,
    "outcome": "ok",
    "cancel_requested": 1,
    "released": 0,
    "paused": True,
    "resumed": True,
    "detached": True,
    "extended": True,
    "registered": 1,
    "status": "s",
    "answer": {},
    "moved": {},
    "declared": 1,
    "cleared": True,
    "settled": True,
    "usage": 0,
    "task_id": 2,
    "stack": {},
    "worker": {},
    "health": {},
    "state": {},
    "result": {},
    "request_id": 3,
    "expired": 0,
    "shard_id": 0,
    "shards": [0, 1],
    "owner_mode": {},
    "residence": {},
    "schedule": {},
    "deleted": True,
    "firing": {},
    "counts": {},
    "started": 0,
    "token_id": 1,
    "stopped": True,
    "ids": [],
    "summary": {},
    "hold": {},
    "id": "6f1c2b7e-0d2a-4a55-9c0e-1a2b3c4d5e6f",
    "data": {},
    "samples": {},
    "leader": True,
    "releases": ["1.4.2"],
    "options": '{"retry": {"max_attempts": 3}, "start_to_close": 300}',  # claim_tasks: as text
}
SAMPLE = {
    "str": "a",
    "str | None": None,
    "bytes": b"h",
    "int": 1,
    "float": 1.0,
    "bool": False,
    "Any": None,
    "list[str]": ["q"],
    "list[int]": [1],
    "list[Any]": [1],
    "dict[str, Any]": {"k": 1},
    "dict[str, Any] | None": None,
    "float | None": None,
    "int | None": None,
    "list[str] | None": None,
    "list[dict[str, Any]]": [{"k": 1}],
    "list[tuple[int, int, int, list[dict[str, Any]], int, int | None]]": [(1, 2, 3, [], 0, None)],
    "list[tuple[int, int, Any, dict[str, Any] | None]]": [(1, 2, "r", None)],
    "list[Any] | None": None,
    "tuple[_dt.datetime, str] | None": None,
}


@pytest.mark.parametrize("name", sorted(name for name, spec in CALLS.items() if not spec.stream))
def test_a_call_sends_the_same_statement_and_answers_the_same_in_both_apis(name: str) -> None:
    params = inspect.signature(CALLS[name].params).parameters.values()
    action = "cancel" if name == "act_on_workflows" else "replay"
    args = [action if p.name == "action" else SAMPLE[p.annotation] for p in params if p.default is p.empty]
    sync_conn, async_conn = _Conn([ROW]), _Conn([ROW], _AsyncCursor)
    answer = getattr(SqlApi(sync_conn), name)(*args)
    async_answer = asyncio.run(getattr(AsyncSqlApi.on_connection(async_conn), name)(*args))
    assert answer == async_answer
    assert sync_conn.log == async_conn.log and len(sync_conn.log) == 1


def test_the_steps_of_a_wait_run_the_same_under_both_drivers() -> None:
    """One generator, two drivers: values are sent back, errors thrown in, a NOTIFY of another
    payload is skipped, and the cleanup call is made however the steps end."""

    def steps():
        first = yield Sql(sqlapi.get_execution, "run-1")
        try:
            yield Sql(sqlapi.get_query_request, 7)
        except NotFound as exc:
            missing = str(exc)
        yield Notified("7", 0.5)
        return first["status"], missing

    class Note:
        def __init__(self, payload: str):
            self.payload = payload

    calls: list = []

    class Fake:
        def get_execution(self, execution_id):
            calls.append(("get_execution", execution_id))
            return {"status": "RUNNING"}

        def get_query_request(self, request_id):
            calls.append(("get_query_request", request_id))
            raise NotFound("no request 7")

        def stop_waiting_for_result(self, waiter_id):
            calls.append(("stop_waiting_for_result", waiter_id))

    class SyncConn:
        def notifies(self, timeout):
            calls.append(("notifies", timeout))
            yield from (Note("6"), Note("7"), Note("never read"))

    class AsyncFake(Fake):
        def __init__(self):
            this = self

            class Pool:
                @contextlib.asynccontextmanager
                async def connection(self):
                    yield this

            self.pool = Pool()

        async def notifies(self, timeout):
            for note in SyncConn().notifies(timeout):
                yield note

    for name in ("get_execution", "get_query_request", "stop_waiting_for_result"):

        def wrap(name=name):
            async def method(self, *args):
                return getattr(Fake, name)(self, *args)

            return method

        setattr(AsyncFake, name, wrap())

    sync_sql = Fake()
    sync_sql.conn = SyncConn()
    cleanup = Sql(sqlapi.stop_waiting_for_result, "w")
    assert run_steps(steps(), sync_sql, cleanup) == ("RUNNING", "no request 7")
    sync_calls, calls[:] = list(calls), []
    assert asyncio.run(arun_steps(steps(), AsyncFake(), cleanup)) == ("RUNNING", "no request 7")
    assert (
        calls
        == sync_calls
        == [
            ("get_execution", "run-1"),
            ("get_query_request", 7),
            ("notifies", 0.5),
            ("stop_waiting_for_result", "w"),
        ]
    )

    def failing():
        yield Sql(sqlapi.get_query_request, 1)

    calls.clear()
    with pytest.raises(NotFound):
        run_steps(failing(), sync_sql, cleanup)
    assert calls[-1] == ("stop_waiting_for_result", "w")  # the cleanup ran on the way out
