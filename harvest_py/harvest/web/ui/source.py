"""Where the dashboard reads and writes: one database, or every shard, always as the caller.

Every connection the dashboard uses is lent by :meth:`Source.lend`: lowered to the principal's
Postgres role with the audit source ``ui`` and the principal as the audit actor
(:func:`harvest.db.connection.set_role`: SET LOCAL, ending with the transaction), in one
transaction; a page's reads are also ``READ ONLY`` and one snapshot. So a read principal's
page cannot write by accident, and an action the page let through is still checked by the
database's own grants (``functions/security.sql``).

The reads over several shards are the CLI's: the plans of ``harvest.shard.fanout`` over a
mapping of shard number to provider, one provider per readable shard; a shard that cannot be
reached within ``timeout`` is named unavailable and the page shows the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar, cast

from harvest.config import Config, async_shard_pools, database_url, shard_urls, shards_configured
from harvest.core.errors import ConfigError
from harvest.db.connection import set_role
from harvest.db.pools import open_async_pool
from harvest.db.sqlapi import AsyncSqlApi
from harvest.shard.fanout import AsyncShardReads
from harvest.shard.router import ShardRouter
from harvest.web.principal import Principal

T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0  # seconds a page waits for one shard, as the CLI's shards.cli_timeout


class _OneDatabase:
    """A pool of one database, answering as shard 0 (the CLI's one-database case)."""

    def __init__(self, dsn: str, *, max_size: int, timeout: float):
        self._dsn, self.max_size, self.timeout = dsn, max_size, timeout
        self.router = ShardRouter.single()
        self._pool: Any = None
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def connection(self, shard: int) -> AsyncIterator[Any]:
        async with self._lock:
            if self._pool is None:
                self._pool = await open_async_pool(  # fail_fast, as the shards' pools below
                    self._dsn, max_size=self.max_size, timeout=self.timeout, fail_fast=True
                )
        async with self._pool.connection(timeout=self.timeout) as conn:
            yield conn

    async def follow(self, execution_id: str, attempt: Callable[[int], Awaitable[T]]) -> T:
        return await attempt(0)

    def dsn(self, shard: int) -> str:
        return self._dsn

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


class Source:
    """The dashboard's databases: ``dsn`` (one database), or ``shards`` (an ``AsyncShardPools``
    the caller owns and closes), else what ``config`` says (``[shards]`` or ``database_url``)."""

    def __init__(
        self,
        *,
        dsn: str | None = None,
        shards: Any = None,
        config: Config | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_size: int = 4,
    ):
        if shards is None and dsn is None and config is None:
            raise ConfigError("the dashboard needs a database: pass dsn=, shards= or config=")
        self.timeout = timeout
        self._owned = shards is None
        self._urls: dict[int, str] | None = None
        self._pools = shards
        self._dsn, self._config, self._max_size = dsn, config, max_size

    @property
    def pools(self) -> Any:
        """The shard pools, or the one database's; made on first use, so an app is built before
        its configuration is complete (a database URL that only the environment of the
        serving process has), and a bad one is reported by the first page."""
        if self._pools is None:
            # (a config is given when neither a dsn nor shards are: __init__ checks)
            config, size, timeout = cast(Config, self._config), self._max_size, self.timeout
            if self._dsn is not None:
                self._pools = _OneDatabase(self._dsn, max_size=size, timeout=timeout)
            elif shards_configured(config):
                self._urls = shard_urls(config, _optional_url(config))
                self._pools = async_shard_pools(
                    config, max_size=size, acquire_timeout=timeout, fail_fast=True
                )
            else:
                self._pools = _OneDatabase(database_url(None, config), max_size=size, timeout=timeout)
        return self._pools

    @property
    def sharded(self) -> bool:
        """Shard pools (a moved run's seal is followed), not one database (read as it is)."""
        return not isinstance(self.pools, _OneDatabase)

    @property
    def router(self) -> ShardRouter:
        return cast(ShardRouter, self.pools.router)

    @property
    def shards(self) -> tuple[int, ...]:
        return tuple(self.router.readable)

    def urls(self) -> dict[int, str]:
        """Each readable shard's database URL (for the shard health report's own connections)."""
        if self._urls is not None:
            return self._urls
        out = {}
        for shard in self.shards:
            with contextlib.suppress(Exception):  # no url for it: the report says not_configured
                out[shard] = self.pools.dsn(shard)
        return out

    # -- lending ---------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def lend(
        self, shard: int, principal: Principal, *, write: bool = False
    ) -> AsyncIterator[AsyncSqlApi]:
        """The SQL API on one connection of ``shard``, in one transaction as ``principal``'s role
        (read only unless ``write``). A read is also one snapshot (REPEATABLE READ): a page that
        reads a run's row, stack and history shows one moment of it, not a RUNNING row over a
        history that has ended since. A lost or unreachable shard raises ShardUnavailable, which
        the fan-out counts as unavailable; an error its database answered with (a statement
        timeout too) is raised as it is. The role is the transaction's
        (SET LOCAL), so behind a transaction-mode pooler it stays on this transaction's server
        connection."""
        async with self.pools.connection(shard) as conn, conn.transaction():
            if not write:  # (a read-only transaction never fails to serialize; its first statement)
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            async with set_role(conn, principal.role, "ui", actor=principal.actor):
                yield AsyncSqlApi.on_connection(conn)

    def apis(self, principal: Principal, shards: tuple[int, ...] | None = None) -> Mapping[int, Any]:
        """Shard -> provider of a read-only API as ``principal``, for the fan-out plans."""
        return {s: functools.partial(self.lend, s, principal) for s in (shards or self.shards)}

    def reads(self, principal: Principal) -> AsyncShardReads:
        """The fan-out reads (``harvest.shard.fanout``) over every readable shard."""
        return AsyncShardReads(self.apis(principal), timeout=self.timeout)

    async def on_shard(
        self, shard: int, principal: Principal, fn: Callable[[AsyncSqlApi], Awaitable[T]], *, write: bool
    ) -> T:
        """``fn(api)`` on one shard (what is named by a per-shard id: a dead letter)."""
        async with self.lend(shard, principal, write=write) as api:
            return await fn(api)

    async def routed(
        self,
        execution_id: str,
        principal: Principal,
        fn: Callable[[AsyncSqlApi], Awaitable[T]],
        *,
        write: bool = False,
    ) -> T:
        """``fn(api)`` on the shard the execution lives on (its id's shard, then a moved run's
        forwarding pointer, as the client and the CLI follow it)."""
        return (await self.routed_to(execution_id, principal, fn, write=write))[1]

    async def routed_to(
        self,
        execution_id: str,
        principal: Principal,
        fn: Callable[[AsyncSqlApi], Awaitable[T]],
        *,
        write: bool = False,
    ) -> tuple[int, T]:
        """:meth:`routed`, with the shard that answered (a run's page links to what it holds
        by a per-shard id: a dead letter)."""

        async def attempt(shard: int) -> tuple[int, T]:
            async with self.lend(shard, principal, write=write) as api:
                return shard, await fn(api)

        return cast("tuple[int, T]", await self.pools.follow(execution_id, attempt))

    async def close(self) -> None:
        if self._owned and self._pools is not None:
            await self._pools.close()


def _optional_url(config: Config) -> str | None:
    try:
        return database_url(None, config)
    except ConfigError:
        return None


__all__ = ["DEFAULT_TIMEOUT", "Source"]
