"""One loop for the sync and the asyncio client: waits written once, as step generators.

A wait that talks to the database (a run's result, a query's or an update's answer, a
signal that follows a run's continue-as-new chain) is a generator with no I/O of its own
(the "sans-I/O" style psycopg itself uses for its protocol): it yields what it needs and
returns its answer.

* ``Sql(call, *args, **kwargs)``: call the SQL API; ``call`` is a declaration of ``harvest.db.sqlapi``
  (``sqlapi.get_execution``), so a misspelt call fails at import, not at run time. The
  generator is sent the call's value, or has its exception thrown in. ``Sql(...).by(deadline)``:
  a wait's read, which waits for a pooled connection until the wait's deadline at most
  (``harvest.db.pools.connections_by``), not for the pool's own wait.
* ``Atomic(sync, asynchronous)``: client code that makes several calls in one transaction on
  one connection (an offloaded payload stored with the request that references it): the sync
  driver calls ``sync(sql)``, the asyncio drivers ``await asynchronous(sql)``, each on an API
  bound to that connection inside ``transaction()``; the generator is sent the return value.
* ``InTransaction(make)``: the steps ``make()`` gives, made in one transaction on one connection
  (a request stored with the offloaded payloads it references): each driver runs them with its
  own ``run_steps`` / ``arun_steps`` on an API bound to that connection, so they are written once;
  ``make`` is called afresh for each attempt (a stale pooled connection's retry).
* ``Notified(payload, timeout)``: wait until a NOTIFY with this payload arrives on the
  listening connection, or ``timeout`` seconds pass (``None`` is sent back either way).

``run_steps`` drives a generator on a :class:`SqlApi`, ``arun_steps`` on an
:class:`AsyncSqlApi`; ``alisten`` first opens a connection of its own and LISTENs on a
channel (an AsyncClient given no hub). Every other wait is driven by ``arun_steps_on_hub``:
its SQL calls take pooled connections one at a time and it is woken by the process's one LISTEN
connection (:class:`harvest.db.notify.NotificationHub`), so a wait holds no connection;
``run_steps_on_hub`` is the same for threads (the synchronous ``Client``'s waits, on a
:class:`harvest.db.notify.ThreadNotificationHub`).
An operation's exception is thrown into the generator (which may catch it, as a wait
catches NotFound); a ``cleanup`` call given to the driver runs however the steps end (given as
a function, it is asked for the call then, and None skips it: a wait that knows it left no
mark behind saves the round trip). A cleanup that fails because the database cannot be reached
is dropped: it never replaces the steps' own outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Protocol, Self, TypeVar, cast

from psycopg.errors import AdminShutdown

from harvest.core.errors import DatabaseUnavailable
from harvest.core.stepper import Stepper as Stepper  # (re-exported: the drivers' and flows' one stepper)
from harvest.db import channels
from harvest.db.connection import DatabaseError, connect_async
from harvest.db.pools import connections_by
from harvest.db.sqlapi import AsyncSqlApi, SqlApi

T = TypeVar("T")


class _Call:
    """What a step asks of the database: a call (Sql), or calls in one transaction (Atomic)."""

    __slots__ = ("deadline",)

    deadline: float | None

    def by(self, deadline: float | None) -> Self:
        """This, waiting for a pooled connection until ``deadline`` at most (``time.monotonic()``;
        harvest.db.pools.connections_by), not for the pool's own wait: a wait's call."""
        self.deadline = deadline
        return self


class Sql(_Call):
    """A call of the SQL API (see the module docstring)."""

    __slots__ = ("args", "kwargs", "name")

    def __init__(self, call: Callable[..., Any], *args: Any, **kwargs: Any):
        self.name = call.__name__
        self.args = args
        self.kwargs = kwargs
        self.deadline = None

    def on(self, sql: SqlApi | AsyncSqlApi) -> Any:
        """Make the call on ``sql`` (an awaitable on an AsyncSqlApi)."""
        return getattr(sql, self.name)(*self.args, **self.kwargs)

    def __repr__(self) -> str:
        return f"Sql({self.name}, {self.args!r}, {self.kwargs!r})"


class Atomic(_Call):
    """Calls made in one transaction on one connection (see the module docstring)."""

    __slots__ = ("asynchronous", "sync")

    def __init__(self, sync: Callable[[SqlApi], Any], asynchronous: Callable[[AsyncSqlApi], Awaitable[Any]]):
        self.sync = sync
        self.asynchronous = asynchronous
        self.deadline = None

    def on(self, sql: SqlApi) -> Any:
        with sql.conn.transaction():
            return self.sync(sql)

    async def aon(self, sql: AsyncSqlApi) -> Any:
        async with sql.pool.connection() as conn, conn.transaction():
            return await self.asynchronous(AsyncSqlApi.on_connection(conn))


class InTransaction(Atomic):
    """Steps made in one transaction on one connection (see the module docstring)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Steps[Any]]):
        self.make = make
        self.deadline = None

    def on(self, sql: SqlApi) -> Any:
        with sql.conn.transaction():
            return run_steps(self.make(), sql)

    async def aon(self, sql: AsyncSqlApi) -> Any:
        async with sql.pool.connection() as conn, conn.transaction():
            return await arun_steps(self.make(), AsyncSqlApi.on_connection(conn))


class Notified:
    """Wait for a NOTIFY carrying ``payload`` on the listening connection, at most ``timeout`` s."""

    __slots__ = ("payload", "timeout")

    def __init__(self, payload: str, timeout: float):
        self.payload = payload
        self.timeout = timeout


Steps = Generator[Sql | Atomic | Notified, Any, T]

# A driver's cleanup: a call, or a function that says at the end which call (None: none).
Cleanup = Sql | Callable[[], Sql | None] | None


def _cleanup_call(cleanup: Cleanup) -> Sql | None:
    return cleanup() if callable(cleanup) else cleanup


def bounded_by(steps: Steps[T], deadline: float | None) -> Steps[T]:
    """``steps`` with each of their calls waiting for a pooled connection until ``deadline``
    at most (``by``; None: the pools' own waits): a wait's reads, or its request, within the
    wait's timeout."""
    stepper = Stepper(steps)
    try:
        while (op := stepper.next()) is not None:
            if not isinstance(op, Notified):
                op.by(deadline)
            try:
                stepper.value = yield op
            except Exception as exc:
                stepper.error = exc
        return cast(T, stepper.result)
    finally:
        steps.close()  # (closed with this one, or already done)


def run_steps(steps: Steps[T], sql: SqlApi, cleanup: Cleanup = None) -> T:
    """Drive ``steps`` on a synchronous API (``Notified`` needs ``sql.conn`` to LISTEN), then,
    however they end, make the ``cleanup`` call (a database error of its own is ignored)."""
    stepper = Stepper(steps)
    try:
        while (op := stepper.next()) is not None:
            try:
                if isinstance(op, Notified):
                    for note in sql.conn.notifies(timeout=op.timeout):
                        if note.payload == op.payload:
                            break
                else:
                    stepper.value = op.on(sql)
            except Exception as exc:
                stepper.error = exc
        return cast(T, stepper.result)
    finally:
        if (call := _cleanup_call(cleanup)) is not None:
            with contextlib.suppress(DatabaseError, DatabaseUnavailable):
                call.on(sql)


async def arun_steps(steps: Steps[T], sql: AsyncSqlApi, cleanup: Cleanup = None) -> T:
    """:func:`run_steps` under asyncio (``Notified`` needs ``sql`` on one connection: ``alisten``)."""
    stepper = Stepper(steps)
    try:
        while (op := stepper.next()) is not None:
            try:
                if isinstance(op, Notified):
                    async with sql.pool.connection() as conn:
                        async for note in conn.notifies(timeout=op.timeout):
                            if note.payload == op.payload:
                                break
                else:
                    with connections_by(op.deadline):
                        stepper.value = await (op.aon(sql) if isinstance(op, Atomic) else op.on(sql))
            except Exception as exc:
                stepper.error = exc
        return cast(T, stepper.result)
    finally:
        if (call := _cleanup_call(cleanup)) is not None:
            with contextlib.suppress(DatabaseError, DatabaseUnavailable), connections_by(call.deadline):
                await call.on(sql)


async def alisten(dsn: str, channel: str, steps: Steps[T], cleanup: Cleanup = None) -> T:
    """Drive ``steps`` on a connection of its own that LISTENs on ``channel`` first (so no
    notification the steps wait for can come before the LISTEN): an AsyncClient whose
    ``notifications`` is None. Every other wait registers with a hub (below)."""
    conn = await connect_async(dsn, autocommit=True)
    async with conn:
        await conn.execute(channels.listen(channel))
        return await arun_steps(steps, AsyncSqlApi.on_connection(conn), cleanup)


class Waiting(Protocol):
    """What :func:`arun_steps_on_hub` needs of a hub (:class:`harvest.db.notify.NotificationHub`)."""

    def waiting(self, payload: str) -> contextlib.AbstractAsyncContextManager[asyncio.Event]: ...


async def arun_steps_on_hub(
    steps: Steps[T], sql: AsyncSqlApi, hub: Waiting, cleanup: Cleanup = None, *, expect: str | None = None
) -> T:
    """:func:`arun_steps` with each ``Notified`` served by ``hub``: the process's one LISTEN
    connection wakes the wait, and ``sql`` (a pool) lends a connection per call only.

    The first ``Notified`` of a payload registers with the hub and goes straight back to the
    steps (which read again): a notification that came between their read and the registration
    is then seen by that read, and every later one sets the registered event. ``expect`` names a
    payload to register before the first step, so its first ``Notified`` waits at once (a result
    wait knows its run's id: one read, not two)."""
    stepper = Stepper(steps)
    async with contextlib.AsyncExitStack() as registered:
        woken: dict[str, asyncio.Event] = {}
        if expect is not None:
            woken[expect] = await registered.enter_async_context(hub.waiting(expect))
        try:
            while (op := stepper.next()) is not None:
                try:
                    if isinstance(op, Notified):
                        event = woken.get(op.payload)
                        if event is None:
                            woken[op.payload] = await registered.enter_async_context(hub.waiting(op.payload))
                            continue  # read again, now that no notification can be missed
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(event.wait(), op.timeout)
                        event.clear()
                    else:
                        with connections_by(op.deadline):
                            if isinstance(op, Atomic):
                                stepper.value = await op.aon(sql)
                            else:
                                stepper.value = await _aon_live_connection(op, sql)
                except Exception as exc:
                    stepper.error = exc
            return cast(T, stepper.result)
        finally:
            if (call := _cleanup_call(cleanup)) is not None:
                with contextlib.suppress(DatabaseError, DatabaseUnavailable), connections_by(call.deadline):
                    await call.on(sql)


class ThreadWaiting(Protocol):
    """What :func:`run_steps_on_hub` needs of a hub (:class:`harvest.db.notify.ThreadNotificationHub`)."""

    def waiting(self, payload: str) -> contextlib.AbstractContextManager[threading.Event]: ...


# A pooled connection whose server restarted (or whose backend an admin terminated) since it
# was pooled is not lent: the pool sees the ending backend's message on its socket
# (harvest.db.pools, ``_server_spoke``). One that ends in the moment between the poll and the
# statement, or while the statement runs, fails the call with AdminShutdown (57P01). A wait on
# pooled connections (below) then makes the call again on the next connection, a bounded
# number of times: the waits' calls read, or mark a waiter, which is idempotent. Any other
# call's AdminShutdown is the caller's (its statement may have committed).
STALE_CONNECTION_ATTEMPTS = 8


def _on_live_connection(
    op: Sql | Atomic, api: Callable[[], contextlib.AbstractContextManager[SqlApi]]
) -> Any:
    for _ in range(STALE_CONNECTION_ATTEMPTS - 1):
        with contextlib.suppress(AdminShutdown), api() as sql:
            return op.on(sql)
    with api() as sql:  # the last attempt's AdminShutdown is the caller's
        return op.on(sql)


async def _aon_live_connection(op: Sql, sql: AsyncSqlApi) -> Any:
    for _ in range(STALE_CONNECTION_ATTEMPTS - 1):
        with contextlib.suppress(AdminShutdown):
            return await op.on(sql)
    return await op.on(sql)


def run_steps_on_hub(
    steps: Steps[T],
    api: Callable[[], contextlib.AbstractContextManager[SqlApi]],
    hub: ThreadWaiting,
    cleanup: Cleanup = None,
    *,
    expect: str | None = None,
) -> T:
    """:func:`arun_steps_on_hub` for threads: each call takes a connection from ``api()`` (a
    pooled connection, given back after the call) and each ``Notified`` waits on ``hub``'s event
    for its payload, registered as there (``expect`` first, any other at its first ``Notified``,
    which then reads again)."""
    stepper = Stepper(steps)
    with contextlib.ExitStack() as registered:
        woken: dict[str, threading.Event] = {}
        if expect is not None:
            woken[expect] = registered.enter_context(hub.waiting(expect))
        try:
            while (op := stepper.next()) is not None:
                try:
                    if isinstance(op, Notified):
                        event = woken.get(op.payload)
                        if event is None:
                            woken[op.payload] = registered.enter_context(hub.waiting(op.payload))
                            continue  # read again, now that no notification can be missed
                        event.wait(op.timeout)
                        event.clear()
                    else:
                        with connections_by(op.deadline):
                            stepper.value = _on_live_connection(op, api)
                except Exception as exc:
                    stepper.error = exc
            return cast(T, stepper.result)
        finally:
            if (call := _cleanup_call(cleanup)) is not None:
                bounded = connections_by(call.deadline)
                with contextlib.suppress(DatabaseError, DatabaseUnavailable), bounded, api() as sql:
                    call.on(sql)
