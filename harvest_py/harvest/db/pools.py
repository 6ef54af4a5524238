"""Connection pools for the client and the worker, and the errors a caller may retry.

The layers above open pools only here, so they never import psycopg_pool (docs/internals.md,
"Python layers"). Every pool is autocommit (one SQL API call, one transaction) and uses the
redacting connection class, so a failed connect the pool logs never shows the password.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import select
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar, Token
from typing import Any, LiteralString, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from harvest.core.errors import DatabaseUnavailable
from harvest.core.sqlstates import session_ended
from harvest.db.connection import (
    SERVER_FULL_ADVICE,
    RedactingAsyncConnection,
    RedactingConnection,
    error_line,
    failure_reason,
    redact,
    refused_connect,
    role_missing,
    role_settings,
    server_full,
    set_role,
)

__all__ = [
    "AsyncConnectionPool",
    "ConnectionPool",
    "RoledPool",
    "ServerFull",
    "ServerUnreachable",
    "cannot_be_reached",
    "connections_by",
    "database_unreachable",
    "may_pass",
    "met_full_server",
    "never_sent",
    "open_async_pool",
    "open_pool",
    "outage",
    "server_full",
    "unless_unreachable",
]


def database_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database could not be reached or its connection was lost under
    the call, rather than the database answering it: the one test of "unavailable" (a shard's
    ShardUnavailable, the management API's and the dashboard's 503 ``database_unavailable``, a
    fan-out's ``unavailable_shards``; harvest.db.resend.connection_lost is it less a closed pool).

    Unreachable: the client's own connection failure (an OperationalError with no SQLSTATE: a
    connect refused, 53300 too many connections included, which libpq reports with none;
    "server closed the connection unexpectedly"; a pool with no connection in time,
    PoolTimeout), class 08, and the server ending the session (57P01 to 57P03, ...:
    harvest.core.sqlstates.session_ended). Not: every other SQLSTATE psycopg also calls an
    OperationalError (55P03 lock_not_available, 55000 raised by a function, 57014 a statement
    timeout, 53200 out of memory, 58, F0, HV): the database answered, and the same call will
    most likely meet the same error again."""
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate
    if state is None:
        return isinstance(exc, psycopg.OperationalError)
    return session_ended(state)


def outage(exc: BaseException) -> bool:
    """Whether ``exc`` means "this database (a shard's) cannot be reached now": Harvest's own
    DatabaseUnavailable (ShardUnavailable, a refused connect) or a driver error
    :func:`database_unreachable` calls one, not an error the database answered with."""
    return isinstance(exc, DatabaseUnavailable) or database_unreachable(exc)


def may_pass(exc: BaseException) -> bool:
    """Whether a later call may not meet ``exc``: the database unreachable
    (:func:`database_unreachable`), or an error psycopg calls operational that the database
    answered with (a lock not available, a statement timeout, out of memory). What a worker's
    claim retries at its next poll; only the first is an outage (a shard marked down)."""
    return database_unreachable(exc) or isinstance(exc, psycopg.OperationalError)


_T = TypeVar("_T")


class _MostRecentFirst(collections.deque[_T]):
    """A pool's idle connections, lent most recently returned first.

    psycopg_pool lends the connection idle longest (it takes from the left, returns to the
    right), so one call at a time rotates over every connection: each server backend then
    plans every hot statement afresh (the plan cache's first custom plans are per session),
    and its caches are cold when its turn comes. Taken from the right, a process with one call
    in flight keeps to one backend, and the others stay idle; when it shrinks, the pool then
    closes the connection returned last, not the one idle longest (docs/performance.md,
    "One-item calls"). Each connection is stamped as it goes in, for ``_idle_check``."""

    def popleft(self) -> _T:
        return self.pop()

    def append(self, conn: _T) -> None:
        conn._harvest_idle_since = time.monotonic()  # type: ignore[attr-defined]
        super().append(conn)


# A connection idle this long is pinged before it is lent. Lent last-returned-first, the
# connections a burst needs beyond the usual one sit idle for as long as the quiet lasts, and a
# server's idle_session_timeout, a proxy or a NAT may have closed them meanwhile: the ping
# finds that, and the pool lends another instead of the call failing. (A connection in steady
# use pays nothing: it was returned moments ago.)
IDLE_CHECK_SECS = 30.0


def _idle_too_long(conn: Any) -> bool:
    since = getattr(conn, "_harvest_idle_since", None)
    return since is not None and time.monotonic() - since > IDLE_CHECK_SECS


# A connection idle in the pool has nothing to read unless its server spoke since it was
# returned: a backend that ended (a server restart or shutdown, pg_terminate_backend,
# idle_session_timeout) sends its FATAL error (57P01, 57P05, ...) and closes the socket. The
# call lent it would send its statement into a dead connection and raise AdminShutdown or
# "server closed the connection unexpectedly" though nothing ran. One poll of the socket (no
# wait, no round trip) finds that before anything is sent: the connection is then pinged
# (what else it may have read, a notice, leaves it usable) and, dead, replaced by the pool.
def _server_spoke(conn: Any) -> bool:
    if conn.closed:  # the pool replaces it
        return True
    poller = getattr(conn, "_harvest_poller", None)
    if poller is None:
        poller = conn._harvest_poller = _Poller(conn.pgconn.socket)
    return poller.readable()


class _Poller:
    """One socket, polled for input without waiting (select() where there is no poll())."""

    def __init__(self, fd: int):
        self.fd = fd
        self.poll: Any = None
        if hasattr(select, "poll"):
            self.poll = select.poll()
            self.poll.register(fd, select.POLLIN)

    def readable(self) -> bool:
        if self.poll is None:
            return bool(select.select([self.fd], [], [], 0)[0])
        return bool(self.poll.poll(0))


def _needs_check(conn: Any) -> bool:
    return _idle_too_long(conn) or _server_spoke(conn)


# A dead connection found, the pool's other idle ones most likely went with it (a server
# restart ends every backend): they are checked at once (psycopg_pool's ``check``: each
# pinged, the dead replaced) before the pool lends the next. Found one at a time instead,
# each after the first would cost the call psycopg_pool's growing pause (1 s, 2 s, 4 s, ...)
# and a pool of many could time out.


# The pool whose idle connections are being checked: psycopg_pool's line for each dead one names
# only the connection, whose link to its pool is cut while it idles (_OutageLines names the pool).
_CHECKING: ContextVar[str | None] = ContextVar("harvest_pool_checking", default=None)


async def _async_idle_check(conn: Any) -> None:
    if _needs_check(conn):
        try:
            await AsyncConnectionPool.check_connection(conn)
        except Exception:
            if (pool := getattr(conn, "_pool", None)) is not None:
                token = _CHECKING.set(pool.name)
                try:
                    await pool.check()
                finally:
                    _CHECKING.reset(token)
            raise


def _idle_check(conn: Any) -> None:
    if _needs_check(conn):
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            if (pool := getattr(conn, "_pool", None)) is not None:
                token = _CHECKING.set(pool.name)
                try:
                    pool.check()
                finally:
                    _CHECKING.reset(token)
            raise


# A call made for a wait with a deadline (a result wait's read) waits for a pooled connection
# until that deadline, not for the pool's own wait (30 s): a database that cannot be reached
# would otherwise hold ``result(timeout=2)`` for 30 s. Set around the call by the waits'
# drivers (harvest.db.steps) with ``connections_by``; a context variable, so it follows the
# call through the routing and SQL API layers in a thread or an asyncio task. (A task created
# inside the block copies it: nothing long-lived may be started there, or its own calls would
# keep the deadline.) A deadline passed or near still gives the call this long: time to take a
# free connection, or to replace a dead one a restart left in the pool (a connect).
_connections_by: ContextVar[float | None] = ContextVar("harvest_connections_by", default=None)
LAST_CHANCE_SECS = 1.0


class connections_by:  # (named as the function it reads as: ``with connections_by(deadline):``)
    """Within the block, a pool lends a connection by ``deadline`` (``time.monotonic()``) or
    raises PoolTimeout then. None leaves it as it is: an enclosing block's deadline, else the
    pool's own wait (a call with no deadline costs nothing more)."""

    __slots__ = ("deadline", "token")

    def __init__(self, deadline: float | None):
        self.deadline = deadline
        self.token: Token[float | None] | None = None

    def __enter__(self) -> None:
        if self.deadline is not None:
            self.token = _connections_by.set(self.deadline)

    def __exit__(self, *exc_info: object) -> None:
        if self.token is not None:
            _connections_by.reset(self.token)


# A caller that would rather fail than wait out the pool's wait (30 s) for a server that is down
# (the worker's scanner: a tick the database cannot answer is counted and logged as an error, and
# the next comes one scan_interval later), and that must still wait its turn in a pool that is
# merely busy (every connection lent, the server fine: a shorter wait would send it to the back
# of the queue tick after tick, behind callers waiting their 30 s). Within the block an asyncio
# pool raises ServerUnreachable when no connection can be made now: its last connect failed,
# none has succeeded since, and it has no idle connection (at once, or while waiting, at its
# next failed connect). A busy pool fails no connect: the caller waits as any other.
_fails_when_unreachable: ContextVar[bool] = ContextVar("harvest_fails_when_unreachable", default=False)


@contextlib.contextmanager
def unless_unreachable() -> Iterator[None]:
    """Within the block, an asyncio pool of this module that can make no connection now fails
    the call (ServerUnreachable) instead of waiting for one (see above)."""
    token = _fails_when_unreachable.set(True)
    try:
        yield
    finally:
        _fails_when_unreachable.reset(token)


class _Waiters(collections.deque[Any]):
    """An asyncio pool's waiting callers, noting those waiting in an ``unless_unreachable`` block."""

    def __init__(self) -> None:
        super().__init__()
        self.unless_unreachable: list[Any] = []

    def append(self, client: Any) -> None:
        super().append(client)
        if _fails_when_unreachable.get():
            self.unless_unreachable = [c for c in self.unless_unreachable if c in self] + [client]

    def take_unless_unreachable(self) -> list[Any]:
        taken = [c for c in self.unless_unreachable if c in self]
        self.unless_unreachable = []
        return taken


def never_sent(exc: BaseException) -> bool:
    """Whether a call failed before it sent anything: no pooled connection in time
    (PoolTimeout), also as a shard's pool reports it (a DatabaseUnavailable raised from it)."""
    if isinstance(exc, DatabaseUnavailable):
        exc = exc.__context__ or exc
    return isinstance(exc, PoolTimeout)


def _pool_wait(timeout: float | None, own: float) -> float:
    wait = own if timeout is None else timeout
    deadline = _connections_by.get()
    if deadline is None:
        return wait
    return min(wait, max(deadline - time.monotonic(), LAST_CHANCE_SECS))


# psycopg_pool replaces the connections an outage took with attempts 1 s, 2 s, 4 s, ... apart,
# doubling until its reconnect_timeout (5 minutes), and a call with no connection to take waits
# for the next attempt: after an outage of a minute the pool's next attempt could come a minute
# after the server was back, every call timing out meanwhile (a shard restarted under a
# sharded API stayed "unreachable" that long). The gap is capped: a pool finds its server back
# within RECONNECT_CAP_SECS of its return. A server still down costs a refused connect (and
# a line a minute at most: _OutageLines) that often.
RECONNECT_CAP_SECS = 2.0


class _CappedBackoff(AttemptWithBackoff):
    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_CAP_SECS)


# psycopg_pool logs each failed connect on the ``psycopg.pool`` logger, the driver's error whole
# (libpq's, several lines): with attempts RECONNECT_CAP_SECS apart, a worker's four pools wrote
# four such warnings every 2 s of an outage. A filter on that logger (not a handler, not a
# level: a program's own logging setup is left as it is) lets a pool's first failed connect
# through as one line (failure_reason: no DSN, no password), then one line a minute while it
# stays down, with the count of the attempts not logged, and logs one line when it connects
# again. The same for the idle connections a server restart or failover broke, which psycopg_pool
# logs one by one as it finds them ("discarding broken connection: <object repr>", naming
# neither the pool nor why; one per idle connection): one line a pool a minute, with the
# count, the pool named by _CHECKING (the check Harvest asks for, _async_idle_check). Every other
# record of the logger passes untouched. Pools are told apart by name (``pool-N``, ``shard-1``):
# two pools of one name share one line a minute.
OUTAGE_LINE_EVERY_SECS = 60.0
_CONNECT_FAILED = "error connecting in %r: %s"
_DISCARDED = "discarding broken connection: %s"
# (a connection a call gave back broken: a restart mid-call, one per call in flight)
_DISCARDED_LENT = "discarding closed connection: %s"
_pool_log = logging.getLogger("psycopg.pool")


class _OutageLines(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.clock = time.monotonic  # (a test's to set)
        self.lock = threading.Lock()
        # pool name -> [when its last failure line was logged, attempts failed since]
        self.down: dict[str, list[Any]] = {}
        # pool name -> [when its last discard line was logged, discards since]
        self.discarded: dict[str, list[Any]] = {}
        # shard -> [when its last "tasks cut off" line was logged, tasks since] (harvest.worker)
        self.cut_off: dict[str, list[Any]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.msg in (_DISCARDED, _DISCARDED_LENT) and isinstance(args, tuple) and len(args) == 1:
            return self._discarded(record, args[0])
        if record.msg != _CONNECT_FAILED or not isinstance(args, tuple) or len(args) != 2:
            return True
        name, exc = str(args[0]), args[1]
        unlogged = self._due(self.down, name)
        if unlogged is None:
            return False
        reason = failure_reason(exc) if isinstance(exc, BaseException) else redact(" ".join(str(exc).split()))
        if isinstance(exc, BaseException) and server_full(exc):
            reason += f" ({SERVER_FULL_ADVICE})"
        if unlogged < 0:
            record.msg = "error connecting in %r: %s (logged again once a minute until it connects)"
            record.args = (name, reason)
        else:
            record.msg = "error connecting in %r: %s (%d more failed attempts since the last line)"
            record.args = (name, reason, unlogged)
        return True

    def _discarded(self, record: logging.LogRecord, conn: Any) -> bool:
        lent = record.msg == _DISCARDED_LENT
        name = _CHECKING.get() or str(getattr(getattr(conn, "_pool", None), "name", None) or "?")
        unlogged = self._due(self.discarded, name)
        if unlogged is None:
            return False
        record.msg = (
            "pool %r: discarding broken idle connections (their server closed them: a restart, a "
            "failover, a terminated backend); new ones replace them "
        )
        if lent:
            record.msg = record.msg.replace("broken idle connections", "broken connections")
        if unlogged < 0:
            record.msg += "(logged again once a minute while more are found)"
            record.args = (name,)
        else:
            record.msg += "(%d more since the last line)"
            record.args = (name, unlogged)
        return True

    def _due(self, lines: dict[str, list[Any]], name: str) -> int | None:
        """Whether pool ``name``'s line of ``lines`` is due: None (not yet: counted), -1 (its first),
        or how many went unlogged since its last line, a minute ago or more."""
        now = self.clock()
        with self.lock:
            state = lines.get(name)
            if state is not None and now - state[0] < OUTAGE_LINE_EVERY_SECS:
                state[1] += 1
                return None
            lines[name] = [now, 0]
        return -1 if state is None else int(state[1])

    def task_cut_off(self, shard: int) -> int | None:
        """A worker's task whose handler an outage of ``shard`` ended (its in-flight calls lost
        their connections: a server shutdown's AdminShutdown, one per task in flight): whether its
        line is due, as :meth:`_due` answers. One line an outage (a minute), not one a task."""
        return self._due(self.cut_off, str(shard))

    def connected(self, name: str) -> None:
        """A connect of pool ``name`` succeeded: the line saying so, if its failures were logged."""
        if not self.down:  # (every connect outside an outage: no lock taken)
            return
        with self.lock:
            state = self.down.pop(name, None)
        if state is not None:
            _pool_log.warning(
                "pool %r connected again (%d more failed attempts since the last line)", name, state[1]
            )

    def forget(self, name: str) -> None:
        """Pool ``name`` closed: its failures are no longer counted (a pool opened again by
        that name logs its first one)."""
        with self.lock:
            self.down.pop(name, None)
            self.discarded.pop(name, None)


OUTAGE_LINES = _OutageLines()


def _quiet_outages() -> None:
    # (again at each pool's opening: addFilter adds a filter once, and a logging.config call
    # made since the import may have replaced the logger's filters)
    _pool_log.addFilter(OUTAGE_LINES)


_quiet_outages()


def cannot_be_reached(reason: str | None) -> str:
    """What a fail-fast pool's failed connect says, one wording for one database (``the database
    cannot be reached now (...)``) and a shard's (``shard 1 is unavailable: its database ...``)."""
    return "cannot be reached now" + (f" ({reason})" if reason else "")


class ServerUnreachable(PoolTimeout):
    """A pool opened with ``fail_fast`` lends no connection because its last attempt to connect
    failed (the server refused it, was not there, or refused the login): raised at once instead
    of after the caller's wait. (A PoolTimeout: nothing was sent, the call may be made again.)"""

    def __init__(self, reason: str | None = None) -> None:
        # What the last connect met, in one line with no secret (a refused login reads as one,
        # a server down as one): harvest.shard.pools names it with the shard.
        self.reason = reason
        super().__init__(self.words("the database"))
        # The server refused the login or the database (retrying cannot change it): the one
        # thing of the cause a 503 says to anyone (harvest.web.errors.outage_answer).
        self.refused = reason is not None and refused_connect(reason)

    def words(self, whose: str) -> str:
        """The refusal in one line, for one database (``whose``: "the database") and a shard's
        ShardUnavailable ("its database"): one wording for both."""
        return f"{whose} {cannot_be_reached(self.reason)}"


class ServerFull(ServerUnreachable):
    """A fail-fast refusal (see ServerUnreachable) whose last connect the server turned away at
    max_connections (53300): the server is up, with no connection slot left."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason)  # (its message from words(), as overridden below)
        self.refused = False  # (up and full: a retry may find a slot; no login was refused)

    def words(self, whose: str) -> str:
        """Up but full, and the remedy (not "cannot be reached"), whoever's database it is."""
        return f"{SERVER_FULL_ADVICE} ({self.reason})" if self.reason else SERVER_FULL_ADVICE


def met_full_server(exc: BaseException | None) -> bool:
    """Whether a failure met a server up and full (53300 at connect: a pool's ServerFull, or
    the driver's error itself, also behind a Harvest error it was translated to)."""
    while exc is not None:
        if isinstance(exc, ServerFull) or server_full(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _refusal(pool: Any) -> ServerUnreachable:
    """What a pool whose last connect failed raises for a caller it does not make wait."""
    return (ServerFull if pool._full else ServerUnreachable)(pool._last_failure)


def _waited_out(pool: Any, exc: PoolTimeout) -> PoolTimeout:
    """A caller's wait for a connection ran out: when the pool's last connect failed, the
    PoolTimeout says why (a server down, or up and full), not only how long it waited."""
    exc = _unwrapped(exc)
    if type(exc) is not PoolTimeout or not pool._down or not pool._last_failure:
        return exc
    why = SERVER_FULL_ADVICE if pool._full else "its last connect failed"
    return PoolTimeout(f"{exc}: {why} ({pool._last_failure})")


def _connect_failure(exc: BaseException, conninfo: object) -> str:
    """A failed connect in one line, redacted (its DSN's password in any spelling too, when the
    pool's conninfo is a string; every pool here is given one)."""
    return redact(error_line(exc), conninfo if isinstance(conninfo, str) else None)


def _unwrapped(exc: PoolTimeout) -> PoolTimeout:
    """The ServerUnreachable psycopg_pool's getconn re-raised as a plain PoolTimeout (it words
    every PoolTimeout as its own timeout's), else ``exc``."""
    return exc.__context__ if isinstance(exc.__context__, ServerUnreachable) else exc


# The failure of the connect an _add_connection made (set by _connect, read after psycopg_pool
# has logged it): a context variable, as each attempt runs in a pool's thread or task.
_failed_connect: ContextVar[BaseException | None] = ContextVar("harvest_failed_connect", default=None)


# A pool with fail_fast (the CLI's and the HTTP API's shards, whose callers wait for every shard
# of a fan-out and name the ones that do not answer) does not make its callers wait out their
# timeout for a server that refused it: a failed connect while the pool has no connection lent
# fails every caller waiting, and a caller that comes before the next attempt succeeds fails
# at once. The attempts go on in the background (at most RECONNECT_CAP_SECS apart), so the pool
# lends again within that of the server's return. With a connection lent the server was there
# a moment ago, and a failed connect may only say it has no room for one more (SQLSTATE class
# 53, which libpq does not report for a connect): the callers wait for a connection to come
# back. Pools without fail_fast (a worker's, a client's) ride out a restart within their wait.
class _Pool(ConnectionPool[Any]):
    fail_fast = False
    _away = False  # (fail_fast) the last connect failed and none has succeeded since
    _last_failure: str | None = None  # (fail_fast) what that connect met (ServerUnreachable.reason)
    _lent = 0  # (fail_fast) connections lent and not yet given back
    _down = False  # (every pool) its last connect failed and none has succeeded since
    _full = False  # (every pool) that connect was turned away at max_connections (server_full)

    def getconn(self, timeout: float | None = None) -> Any:
        try:
            conn = super().getconn(_pool_wait(timeout, self.timeout))
        except PoolTimeout as exc:
            raise _waited_out(self, exc) from None
        if self.fail_fast:
            with self._lock:
                self._lent += 1
        return conn

    def putconn(self, conn: Any) -> None:
        if self.fail_fast:
            with self._lock:
                self._lent -= 1
        super().putconn(conn)

    def _get_ready_connection(self, timeout: float | None) -> Any:
        # (under the pool's lock, as _add_connection's failure: a caller either fails here or
        # is waiting when that failure fails the waiting)
        if self._away and not self._pool:
            raise _refusal(self)
        return super()._get_ready_connection(timeout)

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        token = _failed_connect.set(None)
        try:
            super()._add_connection(attempt or _CappedBackoff(timeout=self.reconnect_timeout), growing)
            failure = _failed_connect.get()
        finally:
            _failed_connect.reset(token)
        # (after psycopg_pool logged the failure: a caller told of it never ends first)
        if self.fail_fast and failure is not None:
            with self._lock:
                self._away = self._lent == 0
                waiting = list(self._waiting) if self._away else []
            for client in waiting:
                client.fail(_refusal(self))

    def _connect(self, timeout: float | None = None) -> Any:
        try:
            conn = super()._connect(timeout)
        except Exception as exc:
            _failed_connect.set(exc)
            self._last_failure = _connect_failure(exc, self.conninfo)
            self._down, self._full = True, server_full(exc)
            raise
        self._away = self._down = self._full = False
        OUTAGE_LINES.connected(self.name)
        return conn

    def reconnect_failed(self) -> None:
        self._away = False  # psycopg_pool gave up retrying: the next caller's wait tries again
        super().reconnect_failed()

    def close(self, timeout: float = 5.0) -> None:
        super().close(timeout)
        OUTAGE_LINES.forget(self.name)


class _AsyncPool(AsyncConnectionPool[Any]):
    fail_fast = False
    _away = False  # (see _Pool)
    _last_failure: str | None = None  # (see _Pool)
    _lent = 0  # (fail_fast; one event loop: no lock needed)
    _down = False  # (see _Pool)
    _full = False  # (see _Pool)

    async def getconn(self, timeout: float | None = None) -> Any:
        try:
            conn = await super().getconn(_pool_wait(timeout, self.timeout))
        except PoolTimeout as exc:
            raise _waited_out(self, exc) from None
        if self.fail_fast:  # (as _Pool: nothing more on a client's or a worker's checkouts)
            self._lent += 1
        return conn

    async def putconn(self, conn: Any) -> None:
        if self.fail_fast:
            self._lent -= 1
        await super().putconn(conn)

    async def _get_ready_connection(self, timeout: float | None) -> Any:
        if not self._pool and (self._away or (self._down and _fails_when_unreachable.get())):  # (see _Pool)
            raise _refusal(self)
        return await super()._get_ready_connection(timeout)

    async def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        token = _failed_connect.set(None)
        try:
            await super()._add_connection(attempt or _CappedBackoff(timeout=self.reconnect_timeout), growing)
            failure = _failed_connect.get()
        finally:
            _failed_connect.reset(token)
        if failure is None:
            return
        async with self._lock:
            if self.fail_fast:  # (see _Pool)
                self._away = self._lent == 0
            waiting = list(self._waiting) if self._away else []
            if not self._pool and isinstance(self._waiting, _Waiters):  # (unless_unreachable)
                waiting += self._waiting.take_unless_unreachable()
        for client in waiting:
            await client.fail(_refusal(self))

    async def _connect(self, timeout: float | None = None) -> Any:
        try:
            conn = await super()._connect(timeout)
        except Exception as exc:
            _failed_connect.set(exc)
            self._last_failure = _connect_failure(exc, self.conninfo)
            self._down, self._full = True, server_full(exc)
            raise
        self._away = self._down = self._full = False
        OUTAGE_LINES.connected(self.name)
        return conn

    async def reconnect_failed(self) -> None:
        self._away = False  # (see _Pool)
        await super().reconnect_failed()

    async def close(self, timeout: float = 5.0) -> None:
        await super().close(timeout)
        OUTAGE_LINES.forget(self.name)

    async def wait(self, timeout: float = 30.0) -> None:
        if not self.fail_fast:
            await super().wait(timeout)
            return
        # (psycopg_pool's wait sees no failed connect: it waits out its timeout)
        deadline = time.monotonic() + timeout
        while len(self._pool) < self._min_size and not self._away:
            if time.monotonic() >= deadline:
                await self.close()
                raise PoolTimeout(f"pool initialization incomplete after {timeout} sec")
            await asyncio.sleep(0.005)


def _most_recent_first(pool: Any) -> None:
    # (psycopg_pool has no setting for the order; its idle connections are this deque.)
    pool._pool = _MostRecentFirst(pool._pool)


def open_pool(
    dsn: str, *, max_size: int, min_size: int = 1, fail_fast: bool = False, name: str | None = None
) -> ConnectionPool:
    """An open synchronous pool (it fills in the background). ``fail_fast``: a caller waiting
    for a connection fails as soon as a connect fails (ServerUnreachable; see _Pool). ``name``:
    what psycopg_pool's log lines call it (``shard-1``; default ``pool-N``)."""
    pool = _Pool(
        dsn,
        name=name,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True},
        open=False,
        connection_class=RedactingConnection,
        check=_idle_check,
    )
    pool.fail_fast = fail_fast
    _most_recent_first(pool)
    _quiet_outages()
    pool.open()
    return pool


async def open_async_pool(
    dsn: str,
    *,
    max_size: int,
    min_size: int = 1,
    timeout: float = 30.0,
    application_name: str | None = None,
    fail_fast: bool = False,
    name: str | None = None,
) -> AsyncConnectionPool[Any]:
    """An asyncio pool, returned once ``min_size`` connections are up (else PoolTimeout
    after ``timeout`` seconds, and the pool is closed). ``application_name`` names the
    connections (the audit log's source: ``harvest-api`` for the HTTP API's pools).
    ``fail_fast``: ServerUnreachable at the first failed connect, not after ``timeout``, and
    then as :func:`open_pool`'s; ``name`` as :func:`open_pool`'s."""
    kwargs: dict[str, Any] = {"autocommit": True}
    if application_name:
        kwargs["application_name"] = application_name
    pool = _AsyncPool(
        dsn,
        name=name,
        min_size=min_size,
        max_size=max_size,
        kwargs=kwargs,
        open=False,
        connection_class=RedactingAsyncConnection,
        check=_async_idle_check,
    )
    pool.fail_fast = fail_fast
    _most_recent_first(pool)
    pool._waiting = _Waiters()
    _quiet_outages()
    try:  # (opened for a wait's call, within the wait's deadline: connections_by)
        await pool.open(wait=True, timeout=_pool_wait(None, timeout))
        if pool._away and not pool._pool:
            raise _refusal(pool)
    except BaseException:
        await pool.close()
        raise
    return pool


class RoledPool:
    """An async pool seen through one caller's role: each connection it lends is in a
    transaction of its own that runs as ``role`` with the audit source ``source``
    (:func:`harvest.db.connection.set_role`: SET LOCAL, committed when the connection is given
    back, rolled back on an error). ``AsyncSqlApi(RoledPool(pool, "harvest_reader"))`` makes
    every call of one HTTP request under the request's role, each call its own transaction when
    the connection is lent idle (a serialization failure or a deadlock is then run again:
    harvest.db.sqlapi._lent; lent inside its holder's transaction, it is the holder's), which
    :meth:`one_call` makes in one round trip. ``pool`` lends idle connections (a pool's, or one
    held connection: ``AsyncSqlApi.on_connection(conn).pool``). Closing it closes nothing: the
    pool is the caller's."""

    def __init__(
        self, pool: Any, role: str, source: str = "api", *, actor: str | None = None, route: str | None = None
    ):
        self.pool, self.role, self.source = pool, role, source
        self.actor, self.route = actor, route
        self.settings = role_settings(role, source, actor=actor, route=route)  # (checks both names)

    @contextlib.asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[Any]:
        async with (
            self.pool.connection(timeout=timeout) as conn,
            set_role(conn, self.role, self.source, actor=self.actor, route=self.route),
        ):
            yield conn

    @contextlib.asynccontextmanager
    async def one_call(self) -> AsyncIterator[tuple[Any, tuple[LiteralString, dict[str, Any]]]]:
        """An idle connection for one statement, and the role's settings
        (:func:`harvest.db.connection.role_settings`) to send before it in the same implicit
        transaction (harvest.db.sqlapi: a pipeline, one Sync after both): the role ends with that
        transaction, committed as the statement ends, in the round trip of the statement. (A
        transaction begun for the role instead costs two round trips more, BEGIN and COMMIT, and
        holds the statement's row locks until the COMMIT comes: signals to one run queued behind
        each request's way back to the event loop.)"""
        async with self.pool.connection() as conn:
            yield conn, self.settings

    def refused(self, exc: BaseException) -> BaseException | None:
        """What a failed :meth:`one_call` means when its role does not exist (else None)."""
        return role_missing(exc, self.role)

    async def close(self) -> None:
        """The pool is the caller's: nothing to close."""
