"""Every way Harvest opens a database connection sets, on both ends, the keepalives and TCP user
timeout that give a silent peer up in about 30 s (harvest.db.connection: NETWORK_DEFAULTS on
this end, SERVER_NETWORK_DEFAULTS on the server's); a DSN that sets its own keeps them. What
the settings do on a real cut: tests/chaos/test_chaos_network.py."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from psycopg import conninfo

from harvest.db.connection import (
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE_SECS,
    KEEPALIVE_INTERVAL_SECS,
    SILENT_PEER_SECS,
    connect,
    connect_async,
    dsn_with_role,
    network_options,
)
from harvest.db.pools import open_async_pool, open_pool

# This end's socket: SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT, TCP_USER_TIMEOUT (ms).
EXPECTED = (1, KEEPALIVE_IDLE_SECS, KEEPALIVE_INTERVAL_SECS, KEEPALIVE_COUNT, SILENT_PEER_SECS * 1000)
# The server's end, as SHOW gives it.
SERVER_EXPECTED = (
    str(KEEPALIVE_IDLE_SECS),
    str(KEEPALIVE_INTERVAL_SECS),
    str(KEEPALIVE_COUNT),
    str(SILENT_PEER_SECS * 1000),
)
SHOW_SERVER = (
    "SELECT current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'), "
    "current_setting('tcp_keepalives_count'), current_setting('tcp_user_timeout')"
)


def socket_settings(fd: int) -> tuple[int, ...]:
    """What the kernel has for a connection's socket (read on a duplicate of ``fd``)."""
    with socket.socket(fileno=os.dup(fd)) as sock:
        return (
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        )


def both_ends(conn) -> tuple[tuple[int, ...], tuple[str, ...]]:
    return socket_settings(conn.pgconn.socket), conn.execute(SHOW_SERVER).fetchone()


async def both_ends_async(conn) -> tuple[tuple[int, ...], tuple[str, ...]]:
    return socket_settings(conn.pgconn.socket), await (await conn.execute(SHOW_SERVER)).fetchone()


def test_connect_and_the_sync_pool_set_both_ends(db: str) -> None:
    with connect(db, autocommit=True) as conn:
        assert both_ends(conn) == (EXPECTED, SERVER_EXPECTED)
    pool = open_pool(db, max_size=1)
    try:
        with pool.connection() as conn:
            assert both_ends(conn) == (EXPECTED, SERVER_EXPECTED)
    finally:
        pool.close()


def test_connect_async_and_the_async_pool_set_both_ends(db: str) -> None:
    async def main() -> list[tuple[tuple[int, ...], tuple[str, ...]]]:
        seen = []
        async with await connect_async(db, autocommit=True) as conn:
            seen.append(await both_ends_async(conn))
        pool = await open_async_pool(db, max_size=1, application_name="harvest-api")
        try:
            async with pool.connection() as conn:
                seen.append(await both_ends_async(conn))
        finally:
            await pool.close()
        return seen

    assert asyncio.run(main()) == [(EXPECTED, SERVER_EXPECTED)] * 2


def test_a_dsns_own_options_are_kept_beside_the_servers_settings(db: str) -> None:
    # A face's LISTEN connection starts as its caller's role through options.
    with connect(dsn_with_role(db, "harvest_reader"), autocommit=True) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("harvest_reader",)
        assert both_ends(conn)[1] == SERVER_EXPECTED


def test_pgoptions_is_kept_beside_the_servers_settings(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=5MB")
    with connect(db, autocommit=True) as conn:
        assert conn.execute("SHOW work_mem").fetchone() == ("5MB",)
        assert both_ends(conn)[1] == SERVER_EXPECTED


def test_a_dsn_that_sets_one_ends_settings_keeps_all_of_that_ends(db: str) -> None:
    # On Linux tcp_user_timeout decides when the probes end: a DSN asking for slower probes
    # would be cut at 30 s by the default, so a DSN's setting leaves that end's defaults out.
    own = conninfo.make_conninfo(db, keepalives_idle="77", options="-c tcp_keepalives_idle=66")
    with connect(own, autocommit=True) as conn:
        ours, server = both_ends(conn)
        assert ours[1] == 77 and ours[4] == 0, ours  # the OS's user timeout, not ours
        assert server[0] == "66" and server[3] == "0", server
    pool = open_pool(own, max_size=1)
    try:
        with pool.connection() as conn:
            assert both_ends(conn)[0][1] == 77
    finally:
        pool.close()


def test_network_options_rules() -> None:
    plain = network_options("postgresql://h/db")
    assert plain["keepalives_idle"] == str(KEEPALIVE_IDLE_SECS)
    assert plain["tcp_user_timeout"] == str(SILENT_PEER_SECS * 1000)
    assert plain["options"].split() == [
        "-c",
        f"tcp_keepalives_idle={KEEPALIVE_IDLE_SECS}",
        "-c",
        f"tcp_keepalives_interval={KEEPALIVE_INTERVAL_SECS}",
        "-c",
        f"tcp_keepalives_count={KEEPALIVE_COUNT}",
        "-c",
        f"tcp_user_timeout={SILENT_PEER_SECS * 1000}",
    ]
    # keepalives=0 asks for none: this end gets none of the defaults; the server's end still does.
    off = network_options("postgresql://h/db?keepalives=0")
    assert set(off) == {"options"}
    # The server's settings given as --name=value count as given too.
    assert "options" not in network_options("host=h options='--tcp_user_timeout=0'")
    # A service's file may set them: none added. An unparseable DSN gets none (connecting reports it).
    assert network_options("service=harvest") == {}
    assert network_options("postgresql://h/db?nonsense=1") == {}


def test_pgservice_leaves_the_settings_to_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGSERVICE", "harvest")
    assert network_options("postgresql://h/db") == {}
