"""Connection pools for the client and the worker, and the errors a caller may retry.

The layers above open pools only here, so they never import psycopg_pool (docs/internals.md,
"Python layers"). Every pool is autocommit (one SQL API call, one transaction) and uses the
redacting connection class, so a failed connect the pool logs never shows the password.
"""

from __future__ import annotations

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from harvest.db.connection import RedactingAsyncConnection, RedactingConnection

__all__ = ["TRANSIENT", "AsyncConnectionPool", "ConnectionPool", "open_async_pool", "open_pool"]

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
    dsn: str, *, max_size: int, min_size: int = 1, timeout: float = 30.0
) -> AsyncConnectionPool:
    """An asyncio pool, returned once ``min_size`` connections are up (else PoolTimeout
    after ``timeout`` seconds, and the pool is closed)."""
    pool = AsyncConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True},
        open=False,
        connection_class=RedactingAsyncConnection,
    )
    try:
        await pool.open(wait=True, timeout=timeout)
    except BaseException:
        await pool.close()
        raise
    return pool
