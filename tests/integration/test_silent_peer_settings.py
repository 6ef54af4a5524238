"""Every way Harvest opens a database connection sets the keepalive and TCP user timeout that
give a silent server up in about 30 s (harvest.db.connection.NETWORK_DEFAULTS); a DSN's own
setting wins. What the settings do on a real cut: tests/chaos/test_chaos_network.py."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from psycopg import conninfo

from harvest.db.connection import (
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE_SECS,
    KEEPALIVE_INTERVAL_SECS,
    SILENT_PEER_SECS,
    connect,
    connect_async,
    network_options,
)
from harvest.db.pools import open_async_pool, open_pool

EXPECTED = (1, KEEPALIVE_IDLE_SECS, KEEPALIVE_INTERVAL_SECS, KEEPALIVE_COUNT, SILENT_PEER_SECS * 1000)


def socket_settings(fd: int) -> tuple[int, ...]:
    """What the kernel has for the connection's socket (a duplicate, closed after reading)."""
    with socket.socket(fileno=os.dup(fd)) as sock:
        return (
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        )


def test_connect_and_the_sync_pool_set_them(db: str) -> None:
    with connect(db, autocommit=True) as conn:
        assert socket_settings(conn.pgconn.socket) == EXPECTED
    pool = open_pool(db, max_size=1)
    try:
        with pool.connection() as conn:
            assert socket_settings(conn.pgconn.socket) == EXPECTED
    finally:
        pool.close()


def test_connect_async_and_the_async_pool_set_them(db: str) -> None:
    async def main() -> list[tuple[int, ...]]:
        seen = []
        async with await connect_async(db, autocommit=True) as conn:
            seen.append(socket_settings(conn.pgconn.socket))
        pool = await open_async_pool(db, max_size=1)
        try:
            async with pool.connection() as conn:
                seen.append(socket_settings(conn.pgconn.socket))
        finally:
            await pool.close()
        return seen

    assert asyncio.run(main()) == [EXPECTED, EXPECTED]


def test_a_dsn_keeps_its_own_settings(db: str) -> None:
    own = conninfo.make_conninfo(db, keepalives_idle="77", tcp_user_timeout="0")
    with connect(own, autocommit=True) as conn:
        assert socket_settings(conn.pgconn.socket) == (1, 77, KEEPALIVE_INTERVAL_SECS, KEEPALIVE_COUNT, 0)
    pool = open_pool(own, max_size=1)
    try:
        with pool.connection() as conn:
            assert socket_settings(conn.pgconn.socket)[1] == 77
    finally:
        pool.close()


def test_network_options_leave_out_what_the_dsn_sets() -> None:
    options: dict[str, Any] = network_options("postgresql://h/db?keepalives_count=9")
    assert "keepalives_count" not in options
    assert options["keepalives_idle"] == str(KEEPALIVE_IDLE_SECS)
    assert options["tcp_user_timeout"] == str(SILENT_PEER_SECS * 1000)
    # An unparseable DSN gets none: connecting reports the DSN itself (without its password).
    assert network_options("postgresql://h/db?nonsense=1") == {}
