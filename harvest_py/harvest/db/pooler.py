"""A connection pooler that shares server connections between clients (docs/operations.md,
"Behind a connection pooler").

PgBouncer in transaction mode (and RDS Proxy, Supavisor, PgCat in theirs) lends a client a
server connection for one transaction, then lends it to another client. What a session keeps
outlives the transaction on that server connection, not on the client's: psycopg's prepared
statements (another client's ``_pg3_0`` already exists there, or ours is gone:
DuplicatePreparedStatement and InvalidSqlStatementName, which stopped a worker), a LISTEN (its
notifications never come back: every wait fell to its poll interval), a session advisory lock
(the migrator's, the metrics sampler's: taken for one client, held by a server connection that
another then holds too), a SET (a role, a setting, landing on another client's calls).

So a database URL that goes through such a pooler is *pooled* here: its pools' connections
prepare nothing and set nothing for the session, and a connection Harvest holds as a session
of its own (:func:`harvest.db.connection.connect`: LISTEN, the sampler's lock, migrations) goes
to the URL's *session URL* (the database directly, or a session-mode pool) when one was
declared. A URL is declared pooled with its session URL (``session_url``, ``HARVEST_SESSION_URL``:
:func:`declare`), or found pooled by :func:`shares_server_connections` where a process can spend
two connects on asking (``harvest worker``, ``harvest migrate run``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from harvest.core.errors import ConfigError

SESSION_URL_ENV = "HARVEST_SESSION_URL"

log = logging.getLogger("harvest.db")

_lock = threading.Lock()
# pooled database URL -> its session URL (None: none declared; own connections go through the pooler)
_pooled: dict[str, str | None] = {}


def declare(dsn: str, session_url: str | None = None) -> None:
    """``dsn`` goes through a pooler that shares server connections (transaction mode): its pools
    prepare no statement and set nothing for the session; with ``session_url``, the connections
    Harvest holds as sessions of their own (:func:`session_dsn`) go there instead."""
    if session_url is not None and not session_url.strip():
        raise ConfigError("session_url is empty: give the database's direct (or session-mode) URL")
    if session_url == dsn:
        raise ConfigError(
            "session_url is the database URL itself: give the database's direct (or session-mode pool's) "
            "URL, which LISTEN, advisory locks and migrations need (docs/operations.md, "
            '"Behind a connection pooler")'
        )
    with _lock:
        declared = _pooled.get(dsn)
        if session_url and declared and declared != session_url:
            # (HARVEST_SESSION_URL, shard 0's, with a shard's url given to Client(): a LISTEN and a
            # migration would go to another database than the pooled calls)
            raise ConfigError(
                "two session URLs for one pooled database URL: each database URL has one (session_url "
                "for shard 0's, shards.session_urls.N for shard N's; HARVEST_SESSION_URL pairs with the "
                "URL given to Client, AsyncClient and Worker): docs/operations.md, "
                '"Behind a connection pooler"'
            )
        _pooled[dsn] = session_url or declared


def declare_shards(urls: Mapping[int, str], session_urls: Mapping[int, str], what: str) -> None:
    """Declare each shard's URL in ``urls`` pooled with its session URL in ``session_urls`` (shard
    number -> URL: ``[shards.session_urls]`` given in Python, ``what`` names the argument for an
    error). A shard of ``session_urls`` with no URL in ``urls``, or not a URL, is a ConfigError."""
    if not isinstance(session_urls, Mapping):
        raise ConfigError(
            f"{what} maps a shard number to its session URL ({{0: 'postgresql://db-direct/app'}}), "
            f"got {type(session_urls).__name__}"
        )
    for shard, session_url in session_urls.items():
        if shard not in urls:
            known = ", ".join(str(s) for s in sorted(urls)) or "none"
            raise ConfigError(
                f"{what}[{shard!r}]: no database URL of shard {shard!r} to pair it with (this one's shards: "
                f"{known}); a session URL pairs with the pooled URL of the same shard"
            )
        if not isinstance(session_url, str):
            raise ConfigError(
                f"{what}[{shard!r}] must be a database URL string (the database's direct or session-mode "
                f"URL), got {type(session_url).__name__}"
            )
        declare(urls[shard], session_url)


def session_setting(shard: int | None = None) -> str:
    """The settings that give shard ``shard``'s session URL (None: any database's), for a message:
    ``session_url`` is one database's and shard 0's (``database_url``'s) only,
    ``shards.session_urls.N`` each shard's."""
    n = "N" if shard is None else str(shard)
    per_shard = f"shards.session_urls.{n} (HARVEST_SHARDS__SESSION_URLS__{n})"
    if shard is None:
        return f"session_url ({SESSION_URL_ENV}) for one database or shard 0, {per_shard} for shard N"
    return f"session_url ({SESSION_URL_ENV}) or {per_shard}" if shard == 0 else per_shard


def forget(dsn: str) -> None:
    """``dsn`` is no longer pooled, nor asked (a test's, a process that declared it by mistake)."""
    with _lock:
        _pooled.pop(dsn, None)
        _asked.discard(dsn)


def is_pooled(dsn: str) -> bool:
    """Whether ``dsn`` was declared (or found) to go through a transaction-mode pooler."""
    return dsn in _pooled


def session_dsn(dsn: str) -> str:
    """The URL a session of Harvest's own on ``dsn`` connects to: its declared session URL, else
    ``dsn`` itself."""
    return _pooled.get(dsn) or dsn


def needs_session(dsn: str) -> bool:
    """Whether ``dsn`` is pooled with no session URL: what needs a session (LISTEN, a session
    lock) cannot have one through it."""
    return dsn in _pooled and _pooled[dsn] is None


_PID = "SELECT pg_catalog.pg_backend_pid()"
# Rounds of shares_server_connections' reads before it answers no (each: three reads).
PROBE_ROUNDS = 5


def shares_server_connections(
    dsn: str,
    connect_timeout: int = 10,
    first: psycopg.Connection | None = None,
    connect: Callable[[str], psycopg.Connection] | None = None,
) -> bool:
    """Whether two sessions opened on ``dsn`` are lent one server connection in turn: a pooler in
    transaction (or statement) mode. Two connects and three reads: the first session's backend,
    the second's (a pooler lends it the server connection the first just gave back), the
    first's again (a pooler that lent the second another one may lend the first another too).
    Directly or through a session-mode pool, two sessions never share a backend and a session
    keeps its own: never a false answer of yes. A pooler may lend the second another server
    connection while the first's is on its way back to the pool (a busy machine), so the reads
    are asked up to PROBE_ROUNDS times until one round shows a share; only a proxy that is no
    such pooler (a NAT, a session-mode pool) pays every round. ``first``: a connection to
    ``dsn`` the caller holds (autocommit, idle), to stand for the first session: one connect fewer.
    ``connect``: opens each session (harvest.db.connection.probe_connect: a failed connect is a
    HarvestError), else psycopg's own."""

    # (plain psycopg connections, no prepared statement: the answer decides that)
    def session() -> psycopg.Connection:
        if connect is not None:
            return connect(dsn)
        return psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout, prepare_threshold=None)

    with contextlib.ExitStack() as stack:
        if first is None:
            first = stack.enter_context(session())
        second = stack.enter_context(session())
        for _ in range(PROBE_ROUNDS):
            before = _backend(first)
            other = _backend(second)
            if before == other or before != _backend(first):
                return True
    return False


def _backend(conn: psycopg.Connection) -> int:
    row = conn.execute(_PID, prepare=False).fetchone()  # (a prepared statement would be the pooler's)
    assert row is not None
    return int(row[0])


# The port the server sees this session come from: -1 over a Unix socket.
_CLIENT_PORT = (
    "SELECT client_port FROM pg_catalog.pg_stat_activity AS a"
    " WHERE a.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()"
)
# DSNs already asked (detect): a process asks once.
_asked: set[str] = set()


def _local_port(conn: psycopg.Connection | psycopg.AsyncConnection) -> int:
    """This end's TCP port of ``conn``, -1 over a Unix socket."""
    with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return -1
        return int(sock.getsockname()[1])


def _proxied(conn: psycopg.Connection | psycopg.AsyncConnection, client_port: Any) -> bool:
    """Whether the server sees ``conn``'s session come from another port than this end's: a proxy
    (a pooler in any mode, or a TCP proxy) stands between. Unknown (no row, a Unix socket at
    both ends): no."""
    theirs = -1 if client_port is None else int(client_port)
    return theirs != _local_port(conn)


def _found(dsn: str, shared: bool) -> bool:
    if shared:  # (declared before it is marked asked: a pool's connect between sees one or the other)
        declare(dsn)
    with _lock:
        _asked.add(dsn)
    if shared:
        log.warning(
            "the database URL goes through a connection pooler in transaction mode (two sessions were "
            "lent one server connection): Harvest's pooled connections now prepare no statement and set "
            "nothing for the session, but LISTEN and the metrics sampler's lock need a session of their "
            "own: set its session URL, %s, to the database's direct or session-mode URL, or runs wait for "
            'the poll interval instead of a wake-up (docs/operations.md, "Behind a connection pooler")',
            session_setting(),
        )
    return shared


def detect(dsn: str, conn: psycopg.Connection | None = None) -> bool:
    """Whether ``dsn`` is pooled: declared so, else found so (then declared, with no session URL,
    and a warning says what that costs and what to set). ``conn``: a connection to ``dsn`` the
    caller holds (autocommit, idle), else one is opened. Asked once a process: whether its
    session comes to the server from another port than this end's (one read), and only then
    :func:`shares_server_connections` (two connects more). A database that cannot be reached
    now answers no: the caller's own connect reports it."""
    if is_pooled(dsn) or dsn in _asked:
        return is_pooled(dsn)
    try:
        with contextlib.ExitStack() as stack:
            if conn is None:
                conn = stack.enter_context(
                    psycopg.connect(dsn, autocommit=True, connect_timeout=10, prepare_threshold=None)
                )
            return _found(dsn, transaction_pooled(dsn, conn))
    except psycopg.Error:
        return False


def transaction_pooled(
    dsn: str, conn: psycopg.Connection, connect: Callable[[str], psycopg.Connection] | None = None
) -> bool:
    """Whether ``conn`` (to ``dsn``, autocommit, idle) reaches the server through a pooler that
    shares server connections: its session comes from another port than this end's (one read),
    and then :func:`shares_server_connections` says so (one connect more, by ``connect``)."""
    row = conn.execute(_CLIENT_PORT, prepare=False).fetchone()
    return _proxied(conn, row[0] if row else None) and shares_server_connections(
        dsn, first=conn, connect=connect
    )


async def detect_async(dsn: str, conn: psycopg.AsyncConnection | None = None) -> bool:
    """:func:`detect` on an asyncio connection to ``dsn`` the caller holds (autocommit, idle),
    else on one of its own (the probe's own connects in a thread)."""
    if is_pooled(dsn) or dsn in _asked:
        return is_pooled(dsn)
    if conn is None:
        return await asyncio.to_thread(detect, dsn)
    try:
        cur = await conn.execute(_CLIENT_PORT, prepare=False)
        row = await cur.fetchone()
        if not _proxied(conn, row[0] if row else None):
            return _found(dsn, False)
        return _found(dsn, await asyncio.to_thread(shares_server_connections, dsn))
    except psycopg.Error:
        return False
