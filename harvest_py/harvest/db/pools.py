"""Connection pools for the client and the worker, and the errors a caller may retry.

The layers above open pools only here, so they never import psycopg_pool (docs/internals.md,
"Python layers"). Every pool is autocommit (one SQL API call, one transaction) and uses the
redacting connection class, so a failed connect the pool logs never shows the password.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from harvest.db.connection import RedactingAsyncConnection, RedactingConnection, set_role

__all__ = [
    "TRANSIENT",
    "AsyncConnectionPool",
    "ConnectionPool",
    "RoledPool",
    "open_async_pool",
    "open_pool",
]

# A lost connection or a pool with none free in time: the call may succeed if retried.
TRANSIENT: tuple[type[BaseException], ...] = (psycopg.OperationalError, PoolTimeout)


def open_pool(dsn: str, *, max_size: int, min_size: int = 1) -> ConnectionPool:
    """An open synchronous pool (it fills in the background)."""
    return ConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True},
        open=True,
        connection_class=RedactingConnection,
    )


async def open_async_pool(
    dsn: str,
    *,
    max_size: int,
    min_size: int = 1,
    timeout: float = 30.0,
    application_name: str | None = None,
) -> AsyncConnectionPool[Any]:
    """An asyncio pool, returned once ``min_size`` connections are up (else PoolTimeout
    after ``timeout`` seconds, and the pool is closed). ``application_name`` names the
    connections (the audit log's source: ``harvest-api`` for the HTTP API's pools)."""
    kwargs: dict[str, Any] = {"autocommit": True}
    if application_name:
        kwargs["application_name"] = application_name
    pool = AsyncConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        kwargs=kwargs,
        open=False,
        connection_class=RedactingAsyncConnection,
    )
    try:
        await pool.open(wait=True, timeout=timeout)
    except BaseException:
        await pool.close()
        raise
    return pool


class RoledPool:
    """An async pool seen through one caller's role: each connection it lends runs as
    ``role`` with the audit source ``source`` (:func:`harvest.db.connection.set_role`), and is
    RESET before it goes back. ``AsyncSqlApi(RoledPool(pool, "harvest_reader"))`` makes every
    call of one HTTP request under the request's role. Closing it closes nothing: the pool is
    the caller's."""

    def __init__(
        self, pool: Any, role: str, source: str = "api", *, actor: str | None = None, route: str | None = None
    ):
        self.pool, self.role, self.source = pool, role, source
        self.actor, self.route = actor, route

    @contextlib.asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[Any]:
        async with (
            self.pool.connection(timeout=timeout) as conn,
            set_role(conn, self.role, self.source, actor=self.actor, route=self.route),
        ):
            yield conn

    async def close(self) -> None:
        """The pool is the caller's: nothing to close."""
