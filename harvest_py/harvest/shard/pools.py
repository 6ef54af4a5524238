"""A connection pool per shard (over ``harvest.db.pools``), and the boot check that each pool
reaches the shard it was configured for.

``api(shard)`` lends the SQL API on one connection of that shard's pool. A shard with no
pool in this process, or whose database cannot be reached now, raises
:class:`ShardUnavailable` (retryable; its message names the shard, never the DSN): a call
pinned to a shard never falls back to another database. A pool's first connection checks
the database's ``harvest.get_shard_id()`` against the configured number, so a pool pointed
at the wrong database fails with a :class:`ConfigError` naming both numbers before it
serves anything; :meth:`ShardPools.check_identities` does that for every pool at boot.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar

from harvest.core.errors import ConfigError, ExecutionMigrated, NotFound, ShardUnavailable
from harvest.core.ids import shard_number, shard_of
from harvest.core.shared_attempt import SharedAttempt
from harvest.db import pooler
from harvest.db.connection import DatabaseError, dsn_with_role, parse_dsn, set_role
from harvest.db.pools import (
    AsyncConnectionPool,
    ConnectionPool,
    RoledPool,
    ServerUnreachable,
    cannot_be_reached,
    database_unreachable,
    open_async_pool,
    open_pool,
)
from harvest.db.sqlapi import AsyncSqlApi, SqlApi
from harvest.shard.router import MAX_FORWARD_HOPS, ShardRouter, too_many_hops

__all__ = ["AsyncShardPools", "ShardPools"]

# SQLSTATE 42883 (undefined function): a database migrated before shard identity (0023).
_UNDEFINED_FUNCTION = "42883"
T = TypeVar("T")
# How long an id-routed call waits for a moved run's staged copy to be activated (the
# liveness gap between a cutover and its activation; docs/sharding.md, "Rebalancing").
ACTIVATION_WAIT_SECS = 10.0


def _pointer(residence: dict[str, Any]) -> int | None:
    """The shard a residence row forwards to, or None when the row is the live one (or absent)."""
    if residence.get("found") and residence.get("status") in ("MIGRATED", "MIGRATING"):
        return residence.get("migrated_to_shard")
    return None


# How often a call that met a staged copy not activated yet tries again.
_ACTIVATION_POLL_SECS = 0.05


def unreachable(shard: int, exc: BaseException) -> ShardUnavailable:
    """ShardUnavailable for ``shard``, naming what its pool's last connect met when it knows
    (a fail-fast pool: a refused login, no server there, a server up but full at
    max_connections), never a password or a DSN."""
    reason = getattr(exc, "reason", None)
    if not reason:
        return ShardUnavailable(shard)
    # A server up and full says so, and the remedy, in the pool's own words (ServerFull.words).
    words = exc.words("its database") if isinstance(exc, ServerUnreachable) else None
    unavailable = ShardUnavailable(shard, words or f"its database {cannot_be_reached(reason)}")
    unavailable.refused = isinstance(exc, ServerUnreachable) and exc.refused
    return unavailable


class _Follow:
    """Where a followed call stands: the shard to try next, the shards passed, and when a
    staged copy has been waited for long enough (ShardPools.follow)."""

    def __init__(self, router: ShardRouter, execution_id: str, wait_secs: float):
        self.execution_id, self.wait_secs = execution_id, wait_secs
        self.shard = router.route(execution_id)
        self.passed: list[int] = []
        self._deadline: float | None = None

    def pause(self, exc: ExecutionMigrated) -> bool:
        """Take in a call's ExecutionMigrated: True to wait and try the same shard again (a
        staged copy not activated yet), False to try the shard it names now; re-raised when
        it is not a move, or when the hops or the wait ran out."""
        if exc.reason != "migrated":
            raise exc
        if exc.shard is None or exc.shard == self.shard:
            if self._deadline is None:
                self._deadline = time.monotonic() + self.wait_secs
            if time.monotonic() > self._deadline:
                raise exc
            return True
        self.passed.append(self.shard)
        if len(self.passed) > MAX_FORWARD_HOPS:
            raise too_many_hops(self.execution_id, self.passed) from exc
        self.shard = exc.shard
        return False

    def not_found(self, exc: NotFound) -> NotFound:
        """A call's NotFound, saying so when the id's shard is retired and the call went where
        ``shards.forwards`` sends its ids, with no seal passed: a run of that shard that was not
        moved before it was retired (an ended one) is not there (the runbook's step 5), and the
        database's hint (a workflow id?) alone misled. Only a NotFound that names the run: one
        of something else of a run that is there (a query request expired, a dead letter) is
        answered as it was."""
        origin = shard_of(self.execution_id)
        if self.passed or origin == self.shard or self.execution_id.lower() not in str(exc).lower():
            return exc
        return NotFound(
            f"{exc} (shard {origin} is retired: shards.forwards sends its ids to shard {self.shard}, "
            f"which holds only the runs moved off shard {origin} before it was retired)"
        )

    @property
    def collapse(self) -> int | None:
        """The origin to repoint at the run's home when the call passed more than one seal."""
        return self.passed[0] if len(self.passed) > 1 else None


def _checked_dsns(dsns: Mapping[int, str]) -> dict[int, str]:
    out: dict[int, str] = {}
    for shard, dsn in dsns.items():
        shard_number(shard, "shards.urls", ConfigError)
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigError(f"shards.urls.{shard} is empty: give the shard's database URL")
        parse_dsn(dsn, f"shards.urls.{shard}")  # a bad URL fails here, redacted
        out[shard] = dsn
    return dict(sorted(out.items()))


def _identity_error(shard: int, found: int) -> ConfigError:
    return ConfigError(
        f"shards.urls.{shard} reaches the database of shard {found}, not shard {shard}: point it at "
        f"shard {shard}'s database, or give an empty one that number (harvest migrate run --shard-id {shard})"
    )


def _missing_identity(shard: int) -> ConfigError:
    return ConfigError(
        f"shard {shard}'s database has no shard identity (harvest.get_shard_id): run "
        f"harvest migrate run --shard-id {shard} against it"
    )


class _Base:
    def __init__(
        self,
        router: ShardRouter,
        dsns: Mapping[int, str],
        *,
        max_size: int,
        acquire_timeout: float,
        fail_fast: bool = False,
        session_urls: Mapping[int, str] | None = None,
    ):
        if max_size < 1:
            raise ConfigError(f"max_size {max_size} must be at least 1")
        self.router = router
        self._dsns = _checked_dsns(dsns)
        if session_urls is not None:  # (before any pool opens: a pooled URL's connections prepare nothing)
            pooler.declare_shards(self._dsns, session_urls, f"{type(self).__name__}(session_urls=...)")
        self.max_size = max_size
        self.acquire_timeout = acquire_timeout
        # A shard whose server refused a connect is unavailable at once, not after
        # acquire_timeout (harvest.db.pools, ServerUnreachable): the fan-outs of the CLI and the
        # HTTP API, which name a shard that does not answer. A client's or a worker's pools wait.
        self.fail_fast = fail_fast
        self._verified: set[int] = set()
        # Each workflow's debounce or batch as the shards declared it, and until when it stands,
        # read by a client that starts it by name (harvest.client.routing.read_declaration: once
        # per name per DECLARATION_TTL_SECS); shared by with_role's pools, so a server reads it
        # once per period, not per request.
        self.declared_gates: dict[str, tuple[Any, float]] = {}  # name: (gate or None, stale at)
        # The read of each such name in flight (aread_declaration): a burst of starts of a name
        # not yet known waits for one read, not one read a start.
        self.declared_reads: dict[str, SharedAttempt[Any]] = {}

    @property
    def shards(self) -> tuple[int, ...]:
        """The shards this process has a pool for (opened or not yet)."""
        return tuple(self._dsns)

    def _dsn(self, shard: int) -> str:
        dsn = self._dsns.get(shard)
        if dsn is None:
            raise ShardUnavailable(shard, "this process has no pool for it (give it a url in shards.urls)")
        return dsn

    def dsn(self, shard: int) -> str:
        """``shard``'s database URL, for a connection of its own (a LISTEN that outlives a
        call); ShardUnavailable when this process has no pool for it. Never print it."""
        return self._dsn(shard)

    def _compare(self, shard: int, found: Any) -> None:
        if found != shard:
            raise _identity_error(shard, found)
        self._verified.add(shard)


class ShardPools(_Base):
    """Synchronous pools, one per shard, each opened on first use (the Client's, the CLI's).

    ``dsns`` maps a shard number to its database URL; ``acquire_timeout`` bounds how long
    ``api()`` waits for a connection before the shard counts as unavailable; ``close_timeout``
    how long :meth:`close` waits for each pool's threads (one stuck connecting to a database
    that never answers is left behind, a daemon thread); ``fail_fast``: a shard whose server
    refused a connect counts as unavailable at once, until a connect succeeds (the pool tries
    again in the background, at most 2 s apart); ``session_urls`` maps a shard whose URL goes
    through a transaction-mode pooler to its *session URL* (the database directly, or a
    session-mode pool), as ``Worker(session_urls=...)`` and ``[shards.session_urls]`` do: a shard
    with no URL in ``dsns``, or a value that is not a URL string, is a ConfigError."""

    def __init__(
        self,
        router: ShardRouter,
        dsns: Mapping[int, str],
        *,
        max_size: int = 10,
        acquire_timeout: float = 10.0,
        close_timeout: float = 5.0,
        fail_fast: bool = False,
        session_urls: Mapping[int, str] | None = None,
    ):
        super().__init__(
            router,
            dsns,
            max_size=max_size,
            acquire_timeout=acquire_timeout,
            fail_fast=fail_fast,
            session_urls=session_urls,
        )
        self.close_timeout = close_timeout
        self._pools: dict[int, ConnectionPool] = {}
        self._lock = threading.Lock()

    def _pool(self, shard: int) -> ConnectionPool:
        pool = self._pools.get(shard)
        if pool is None:
            dsn = self._dsn(shard)
            with self._lock:
                pool = self._pools.get(shard)
                if pool is None:
                    pool = self._pools[shard] = open_pool(
                        dsn, max_size=self.max_size, fail_fast=self.fail_fast, name=f"shard-{shard}"
                    )
        return pool

    @contextlib.contextmanager
    def connection(self, shard: int) -> Iterator[Any]:
        """One autocommit connection of ``shard``'s pool, its identity checked (for a
        transaction of several calls: ``with conn.transaction()``); errors as :meth:`api`."""
        pool = self._pool(shard)
        try:
            with pool.connection(timeout=self.acquire_timeout) as conn:
                if shard not in self._verified:
                    self._verify(shard, SqlApi(conn))
                yield conn
        except Exception as exc:
            if not database_unreachable(exc):
                raise  # the database's answer (a lock not available, a statement timeout): as it is
            raise unreachable(shard, exc) from None

    @contextlib.contextmanager
    def api(self, shard: int) -> Iterator[SqlApi]:
        """The SQL API on one connection of ``shard``'s pool, for one or more calls.

        ShardUnavailable when the process has no pool for it, no connection comes within
        ``acquire_timeout``, or the connection is lost during the calls
        (harvest.db.pools.database_unreachable); an error the database answered with (a lock
        not available, a statement timeout, a function's own SQLSTATE) is raised as it is."""
        with self.connection(shard) as conn:
            yield SqlApi(conn)

    def _verify(self, shard: int, sql: SqlApi) -> None:
        try:
            found = sql.get_shard_id()
        except DatabaseError as exc:
            if getattr(exc, "sqlstate", None) == _UNDEFINED_FUNCTION:
                raise _missing_identity(shard) from None
            raise
        self._compare(shard, found)

    def check_identities(self) -> tuple[int, ...]:
        """Check every pool's database is the shard it is configured as: a ConfigError naming
        both numbers at the first that is not. Returns the shards that could not be reached
        (unchecked: each is checked on its first use instead)."""
        unreachable = []
        for shard in self.shards:
            try:
                with self.api(shard):
                    pass  # the first connection of a pool verifies it
            except ShardUnavailable:
                unreachable.append(shard)
        return tuple(unreachable)

    def resolve(self, execution_id: str) -> int:
        """The shard an execution lives on now: the router's route, then each MIGRATED row's
        forwarding pointer (at most MAX_FORWARD_HOPS). A chain of more than one hop is
        collapsed on the origin, best effort, so the next lookup takes one."""
        shard, passed = self.router.resolve(execution_id, lambda s: self._pointer_at(s, execution_id))
        if len(passed) > 1:
            with contextlib.suppress(Exception), self.api(passed[0]) as sql:
                sql.set_migration_forward(execution_id, shard)
        return shard

    def _pointer_at(self, shard: int, execution_id: str) -> int | None:
        with self.api(shard) as sql:
            return _pointer(sql.get_residence(execution_id))

    def call_routed(
        self, execution_id: str, fn: Callable[[SqlApi], T], *, wait_secs: float = ACTIVATION_WAIT_SECS
    ) -> T:
        """Run ``fn(sql)`` on the shard the execution lives on. A move that cuts over between
        the lookup and the call (ExecutionMigrated naming a shard) is followed; a staged copy
        not yet activated is retried for up to ``wait_secs``, then the error is raised."""
        deadline = time.monotonic() + wait_secs
        shard = self.resolve(execution_id)
        while True:
            try:
                with self.api(shard) as sql:
                    return fn(sql)
            except ExecutionMigrated as exc:
                if exc.reason != "migrated" or time.monotonic() > deadline:
                    raise
                if exc.shard is not None:
                    shard = exc.shard
                else:
                    time.sleep(0.05)
                    shard = self.resolve(execution_id)

    def follow(
        self, execution_id: str, attempt: Callable[[int], T], *, wait_secs: float = ACTIVATION_WAIT_SECS
    ) -> T:
        """``attempt(shard)`` on the shard the execution lives on, with no lookup first: the
        id's shard (:meth:`ShardRouter.route`), then each shard an ExecutionMigrated
        (``reason == "migrated"``, HR013 from a seal, or raised by ``attempt`` when it read
        one) names, at most MAX_FORWARD_HOPS of them (then ExecutionMigrated
        ``too_many_hops``). A staged copy not activated yet (no shard named) is retried for
        up to ``wait_secs``. A run that never moved costs nothing more than the call itself;
        a chain of more than one hop is collapsed on the origin, best effort."""
        step = _Follow(self.router, execution_id, wait_secs)
        while True:
            try:
                found = attempt(step.shard)
            except ExecutionMigrated as exc:
                if step.pause(exc):
                    time.sleep(_ACTIVATION_POLL_SECS)
                continue
            except NotFound as exc:
                raise step.not_found(exc) from exc
            if step.collapse is not None:
                with contextlib.suppress(Exception), self.api(step.collapse) as sql:
                    sql.set_migration_forward(execution_id, step.shard)
            return found

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()  # (in place, as AsyncShardPools.close: one dict for its life)
        for pool in pools:
            pool.close(timeout=self.close_timeout)

    def __enter__(self) -> ShardPools:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncShardPools(_Base):
    """:class:`ShardPools` for asyncio (the worker's, the AsyncClient's): ``async with
    pools.api(shard) as sql`` lends an :class:`AsyncSqlApi` on one connection.

    ``acquire_timeout`` (default 10 s, as :class:`ShardPools`: a client's call, which may
    wait out a busy pool) bounds a shard's open and each wait for a connection. A process with
    a deadline of its own passes it: the worker waits ``CONNECT_WAIT_SECS`` (30 s) at start,
    the management API ``OPEN_SECS`` (5 s, as its one-database pool and its token check), the
    dashboard and the CLI ``shards.cli_timeout`` (5 s); those three pass ``fail_fast`` (see
    :class:`ShardPools`) and the pools of a client or a worker do not. ``session_urls`` as
    :class:`ShardPools`."""

    def __init__(
        self,
        router: ShardRouter,
        dsns: Mapping[int, str],
        *,
        max_size: int = 10,
        acquire_timeout: float = 10.0,
        min_size: int = 1,
        fail_fast: bool = False,
        session_urls: Mapping[int, str] | None = None,
    ):
        super().__init__(
            router,
            dsns,
            max_size=max_size,
            acquire_timeout=acquire_timeout,
            fail_fast=fail_fast,
            session_urls=session_urls,
        )
        self.min_size = min(min_size, max_size)
        self._pools: dict[int, AsyncConnectionPool] = {}
        # A shard's pool opens once for every caller waiting on it, its outcome shared: with the
        # shard down, a burst waits one acquire_timeout, not one each in turn.
        self._opening: dict[int, SharedAttempt[AsyncConnectionPool]] = {}

    async def _pool(self, shard: int) -> AsyncConnectionPool:
        pool = self._pools.get(shard)
        if pool is not None:
            return pool
        dsn = self._dsn(shard)

        async def open_pool() -> AsyncConnectionPool:
            pool = self._pools.get(shard)
            if pool is None:
                try:
                    pool = await open_async_pool(
                        dsn,
                        min_size=self.min_size,
                        max_size=self.max_size,
                        timeout=self.acquire_timeout,
                        fail_fast=self.fail_fast,
                        name=f"shard-{shard}",
                    )
                except Exception as exc:
                    if not database_unreachable(exc):
                        raise
                    raise unreachable(shard, exc) from None
                self._pools[shard] = pool
            return pool

        return await self._opening.setdefault(shard, SharedAttempt()).run(open_pool)

    @contextlib.asynccontextmanager
    async def connection(self, shard: int, timeout: float | None = None) -> AsyncIterator[Any]:
        """One autocommit connection of ``shard``'s pool (see :meth:`ShardPools.connection`),
        waited for ``timeout`` seconds at most (None: ``acquire_timeout``). Opening the shard's
        pool, once for every caller, is the pools' own wait: ``acquire_timeout``."""
        pool = await self._pool(shard)
        wait = self.acquire_timeout if timeout is None else timeout
        try:
            async with pool.connection(timeout=wait) as conn:
                if shard not in self._verified:
                    await self._verify(shard, AsyncSqlApi.on_connection(conn))
                yield conn
        except Exception as exc:
            if not database_unreachable(exc):
                raise  # the database's answer (a lock not available, a statement timeout): as it is
            raise unreachable(shard, exc) from None

    @contextlib.asynccontextmanager
    async def api(self, shard: int) -> AsyncIterator[AsyncSqlApi]:
        """The async SQL API on one connection of ``shard``'s pool (see :meth:`ShardPools.api`)."""
        async with self.connection(shard) as conn:
            yield AsyncSqlApi.on_connection(conn)

    async def sql(self, shard: int) -> AsyncSqlApi:
        """The async SQL API over ``shard``'s whole pool (each call takes a connection, as
        ``AsyncSqlApi(pool)`` does: the worker's hot path), once the pool's database has been
        verified as that shard. ShardUnavailable when it cannot be reached now; a ConfigError
        when it is another shard's database."""
        if shard not in self._verified:
            async with self.api(shard):
                pass  # the first connection of a pool verifies it
        return AsyncSqlApi(await self._pool(shard))

    def lender(self, shard: int) -> Any:
        """``shard``'s pool shaped as one for :class:`AsyncSqlApi` (``AsyncSqlApi(lender)``: each
        call takes a connection of :meth:`connection`, verified, and a lost one is
        ShardUnavailable), with no I/O to make it: a client's calls to one shard."""
        return _OneShard(self.connection, shard)

    async def _verify(self, shard: int, sql: AsyncSqlApi) -> None:
        try:
            found = await sql.get_shard_id()
        except DatabaseError as exc:
            if getattr(exc, "sqlstate", None) == _UNDEFINED_FUNCTION:
                raise _missing_identity(shard) from None
            raise
        self._compare(shard, found)

    async def check_identities(self) -> tuple[int, ...]:
        """See :meth:`ShardPools.check_identities`."""
        unreachable = []
        for shard in self.shards:
            try:
                async with self.api(shard):
                    pass  # the first connection of a pool verifies it
            except ShardUnavailable:
                unreachable.append(shard)
        return tuple(unreachable)

    async def resolve(self, execution_id: str) -> int:
        """See :meth:`ShardPools.resolve`."""
        shard = self.router.route(execution_id)
        passed: list[int] = []
        for _ in range(MAX_FORWARD_HOPS + 1):
            async with self.api(shard) as sql:
                pointer = _pointer(await sql.get_residence(execution_id))
            if pointer is None:
                if len(passed) > 1:
                    with contextlib.suppress(Exception):
                        async with self.api(passed[0]) as sql:
                            await sql.set_migration_forward(execution_id, shard)
                return shard
            passed.append(shard)
            shard = pointer
        raise too_many_hops(execution_id, passed)

    async def call_routed(
        self,
        execution_id: str,
        fn: Callable[[AsyncSqlApi], Awaitable[T]],
        *,
        wait_secs: float = ACTIVATION_WAIT_SECS,
    ) -> T:
        """See :meth:`ShardPools.call_routed`."""
        deadline = time.monotonic() + wait_secs
        shard = await self.resolve(execution_id)
        while True:
            try:
                async with self.api(shard) as sql:
                    return await fn(sql)
            except ExecutionMigrated as exc:
                if exc.reason != "migrated" or time.monotonic() > deadline:
                    raise
                if exc.shard is not None:
                    shard = exc.shard
                else:
                    await asyncio.sleep(0.05)
                    shard = await self.resolve(execution_id)

    async def follow(
        self,
        execution_id: str,
        attempt: Callable[[int], Awaitable[T]],
        *,
        wait_secs: float = ACTIVATION_WAIT_SECS,
    ) -> T:
        """See :meth:`ShardPools.follow`."""
        step = _Follow(self.router, execution_id, wait_secs)
        while True:
            try:
                found = await attempt(step.shard)
            except ExecutionMigrated as exc:
                if step.pause(exc):
                    await asyncio.sleep(_ACTIVATION_POLL_SECS)
                continue
            except NotFound as exc:
                raise step.not_found(exc) from exc
            if step.collapse is not None:
                with contextlib.suppress(Exception):
                    async with self.api(step.collapse) as sql:
                        await sql.set_migration_forward(execution_id, step.shard)
            return found

    def with_role(
        self, role: str, source: str = "api", *, actor: str | None = None, route: str | None = None
    ) -> AsyncShardPools:
        """These pools seen through one caller's role (an HTTP request's): the same pools,
        each connection lent in a transaction of its own running as ``role`` with the audit
        source ``source`` (:func:`harvest.db.connection.set_role`: SET LOCAL), each call of
        :meth:`api` in one of its own; :meth:`dsn` carries the role too, for a connection of its
        own. Closing the view closes nothing."""
        return _RoledShardPools(self, role, source, actor, route)

    async def close(self) -> None:
        """Close every shard's pool; the pools object may open them again (the management API's
        next lifespan). The dict is emptied in place: the role views (:meth:`with_role`) share
        it, so none lends a closed pool or opens one that this close would never see."""
        pools = list(self._pools.values())
        self._pools.clear()
        for pool in pools:
            await pool.close()

    async def __aenter__(self) -> AsyncShardPools:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class _RoledShardPools(AsyncShardPools):
    """:meth:`AsyncShardPools.with_role`: shares the pools (and their identity checks) of the
    base, and switches each lent connection to one role."""

    def __init__(self, base: AsyncShardPools, role: str, source: str, actor: str | None, route: str | None):
        self.__dict__.update(base.__dict__)  # the same pools, locks and verified shards
        self._role, self._source, self._actor, self._route = role, source, actor, route

    @contextlib.asynccontextmanager
    async def connection(self, shard: int, timeout: float | None = None) -> AsyncIterator[Any]:
        async with (
            super().connection(shard, timeout) as conn,
            set_role(conn, self._role, self._source, actor=self._actor, route=self._route),
        ):
            yield conn

    @contextlib.asynccontextmanager
    async def api(self, shard: int) -> AsyncIterator[AsyncSqlApi]:
        """The SQL API on one connection of ``shard``, each call in a transaction of its own in
        the role (:class:`harvest.db.pools.RoledPool` over it): as one pooled call, a conflict is
        run again and an error ends its call only, not the calls after it."""
        async with super().connection(shard) as conn:
            yield AsyncSqlApi(self._in_role(AsyncSqlApi.on_connection(conn).pool))

    async def sql(self, shard: int) -> AsyncSqlApi:
        """The SQL API over ``shard``'s pool, each call on a connection in the role (:meth:`lender`)."""
        if shard not in self._verified:
            async with self.api(shard):
                pass  # the first connection of a pool verifies it
        return AsyncSqlApi(self.lender(shard))

    def lender(self, shard: int) -> RoledPool:
        """``shard``'s pool seen through the role (:class:`harvest.db.pools.RoledPool` over
        :meth:`AsyncShardPools.lender`): a call sends the role's settings and itself in one round
        trip (RoledPool.one_call), a transaction of its own, so a conflict is run again; a
        connection taken for several statements (``connection()``) is in a transaction that begins
        with the role. A lost connection is ShardUnavailable, as the pools' own."""
        return self._in_role(_OneShard(super().connection, shard))

    def _in_role(self, pool: Any) -> RoledPool:
        """``pool`` (connections of the base's) seen through this view's role."""
        return RoledPool(pool, self._role, self._source, actor=self._actor, route=self._route)

    def dsn(self, shard: int) -> str:
        return dsn_with_role(self._dsn(shard), self._role, self._source)

    async def close(self) -> None:
        """The pools are the base's: nothing to close."""


class _OneShard:
    """One shard of a pools object, shaped as a pool for AsyncSqlApi (``connection()``):
    ``connection`` is the pools' (the roled view's lends the base's, under a RoledPool)."""

    def __init__(
        self,
        connection: Callable[[int, float | None], contextlib.AbstractAsyncContextManager[Any]],
        shard: int,
    ):
        self._connection, self._shard = connection, shard

    def connection(self, timeout: float | None = None) -> contextlib.AbstractAsyncContextManager[Any]:
        """A connection of the shard, waited for ``timeout`` seconds at most, as a pool's
        ``connection(timeout)`` (None: the pools' ``acquire_timeout``)."""
        return self._connection(self._shard, timeout)
