"""One loop for the sync and the asyncio client: waits written once, as step generators.

A wait that talks to the database (a run's result, a query's or an update's answer, a
signal that follows a run's continue-as-new chain) is a generator with no I/O of its own
(the "sans-I/O" style psycopg itself uses for its protocol): it yields what it needs and
returns its answer.

* ``Sql(call, *args, **kwargs)``: call the SQL API; ``call`` is a declaration of ``harvest.db.sqlapi``
  (``sqlapi.get_execution``), so a misspelt call fails at import, not at run time. The
  generator is sent the call's value, or has its exception thrown in.
* ``Notified(payload, timeout)``: wait until a NOTIFY with this payload arrives on the
  listening connection, or ``timeout`` seconds pass (``None`` is sent back either way).

``run_steps`` drives a generator on a :class:`SqlApi`, ``arun_steps`` on an
:class:`AsyncSqlApi`; ``listen``/``alisten`` first open a connection of their own and
LISTEN on a channel. These four are the only code that differs between the two clients'
waits. An operation's exception is thrown into the generator (which may catch it, as a wait
catches NotFound); a ``cleanup`` call given to the driver runs however the steps end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from harvest.db import channels
from harvest.db.connection import DatabaseError, connect, connect_async
from harvest.db.sqlapi import AsyncSqlApi, SqlApi

T = TypeVar("T")


class Sql:
    """A call of the SQL API (see the module docstring)."""

    __slots__ = ("args", "kwargs", "name")

    def __init__(self, call: Callable[..., Any], *args: Any, **kwargs: Any):
        self.name = call.__name__
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"Sql({self.name}, {self.args!r}, {self.kwargs!r})"


class Notified:
    """Wait for a NOTIFY carrying ``payload`` on the listening connection, at most ``timeout`` s."""

    __slots__ = ("payload", "timeout")

    def __init__(self, payload: str, timeout: float):
        self.payload = payload
        self.timeout = timeout


Steps = Generator[Sql | Notified, Any, T]


def run_steps(steps: Steps[T], sql: SqlApi, cleanup: Sql | None = None) -> T:
    """Drive ``steps`` on a synchronous API (``Notified`` needs ``sql.conn`` to LISTEN), then,
    however they end, make the ``cleanup`` call (a database error of its own is ignored)."""
    try:
        value: Any = None
        error: Exception | None = None
        while True:
            try:
                op = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as done:
                return done.value
            value = error = None
            try:
                if isinstance(op, Notified):
                    for note in sql.conn.notifies(timeout=op.timeout):
                        if note.payload == op.payload:
                            break
                else:
                    value = getattr(sql, op.name)(*op.args, **op.kwargs)
            except Exception as exc:  # noqa: BLE001 - thrown into the generator, which decides
                error = exc
    finally:
        if cleanup is not None:
            with contextlib.suppress(DatabaseError):
                getattr(sql, cleanup.name)(*cleanup.args, **cleanup.kwargs)


async def arun_steps(steps: Steps[T], sql: AsyncSqlApi, cleanup: Sql | None = None) -> T:
    """:func:`run_steps` under asyncio (``Notified`` needs ``sql`` on one connection: ``alisten``)."""
    try:
        value: Any = None
        error: Exception | None = None
        while True:
            try:
                op = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as done:
                return done.value
            value = error = None
            try:
                if isinstance(op, Notified):
                    async with sql.pool.connection() as conn:
                        async for note in conn.notifies(timeout=op.timeout):
                            if note.payload == op.payload:
                                break
                else:
                    value = await getattr(sql, op.name)(*op.args, **op.kwargs)
            except Exception as exc:  # noqa: BLE001 - thrown into the generator, which decides
                error = exc
    finally:
        if cleanup is not None:
            with contextlib.suppress(DatabaseError):
                await getattr(sql, cleanup.name)(*cleanup.args, **cleanup.kwargs)


def listen(dsn: str, channel: str, steps: Steps[T], cleanup: Sql | None = None) -> T:
    """Drive ``steps`` on a connection of its own that LISTENs on ``channel`` first (so no
    notification the steps wait for can come before the LISTEN)."""
    with connect(dsn, autocommit=True) as conn:
        conn.execute(channels.listen(channel))
        return run_steps(steps, SqlApi(conn), cleanup)


async def alisten(dsn: str, channel: str, steps: Steps[T], cleanup: Sql | None = None) -> T:
    """:func:`listen` under asyncio."""
    conn = await connect_async(dsn, autocommit=True)
    async with conn:
        await conn.execute(channels.listen(channel))
        return await arun_steps(steps, AsyncSqlApi.on_connection(conn), cleanup)
