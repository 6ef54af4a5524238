"""Every way Harvest opens a database connection sets, on both ends, the keepalives and TCP user
timeout that give a silent peer up in about 30 s (harvest.db.connection: ``network_options`` on
this end, ``set_server_end`` on the server's), except where the DSN or the server's own
configuration sets them. What the settings do on a real cut: tests/chaos/test_chaos_network.py."""

from __future__ import annotations

import asyncio
import logging

import pytest
from psycopg import conninfo
from psycopg_pool import PoolTimeout
from silent_peer_helpers import EXPECTED, socket_settings

from harvest.core.errors import DatabaseUnavailable
from harvest.db import connection
from harvest.db.connection import (
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE_SECS,
    KEEPALIVE_INTERVAL_SECS,
    NETWORK_DEFAULTS,
    SILENT_PEER_SECS,
    connect,
    connect_async,
    dsn_with_role,
    network_options,
    with_startup_options,
)
from harvest.db.pools import open_async_pool, open_pool

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


def both_ends(conn) -> tuple[tuple[int, ...], tuple[str, ...]]:
    return socket_settings(conn.pgconn.socket), conn.execute(SHOW_SERVER).fetchone()


async def both_ends_async(conn) -> tuple[tuple[int, ...], tuple[str, ...]]:
    return socket_settings(conn.pgconn.socket), await (await conn.execute(SHOW_SERVER)).fetchone()


def test_connect_and_the_sync_pool_set_both_ends(db: str) -> None:
    with connect(db, autocommit=True) as conn:
        assert both_ends(conn) == (EXPECTED, SERVER_EXPECTED)
    # Not autocommit: the server's settings are committed, the caller gets an idle connection.
    with connect(db) as conn:
        assert conn.info.transaction_status.name == "IDLE"
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


def test_a_faces_listen_connection_sets_both_ends_as_its_callers_role(db: str) -> None:
    with connect(dsn_with_role(db, "harvest_reader"), autocommit=True) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("harvest_reader",)
        assert both_ends(conn) == (EXPECTED, SERVER_EXPECTED)


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


def test_the_servers_own_configuration_wins(db: str) -> None:
    name = conninfo.conninfo_to_dict(db)["dbname"]
    with connect(db, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET tcp_keepalives_idle = 60')
    with connect(db, autocommit=True) as conn:
        # One of the four configured: the server's end keeps all of its own (the OS's for the
        # rest, no user timeout); this end still has Harvest's.
        ours, server = both_ends(conn)
        assert ours == EXPECTED
        assert server[0] == "60" and server[3] == "0", server


def test_network_options_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    assert network_options("postgresql://h/db") == dict(NETWORK_DEFAULTS)
    assert network_options("postgresql://h/db?keepalives=1") == dict(NETWORK_DEFAULTS)  # libpq's default
    assert network_options("postgresql://h/db?keepalives=0") == {}  # no probes asked for
    assert network_options("postgresql://h/db?keepalives_count=9") == {}
    # A service's file may set them: none added. An unparseable DSN gets none (connecting reports it).
    assert network_options("service=harvest") == {}
    assert network_options("postgresql://h/db?nonsense=1") == {}
    monkeypatch.setenv("PGSERVICE", "harvest")
    assert network_options("postgresql://h/db") == {}


def test_over_a_unix_socket_nothing_is_set_and_hostaddr_means_tcp(db: str) -> None:
    with connect(db, autocommit=True) as conn:
        (directory,) = conn.execute("SHOW unix_socket_directories").fetchone()
    over_socket = conninfo.make_conninfo(db, host=directory.split(",")[0].strip())
    with connect(over_socket, autocommit=True) as conn:
        assert conn.info.hostaddr == ""
        assert conn.execute("SHOW tcp_user_timeout").fetchone() == ("0",)
    # host names the server (a socket directory here), hostaddr is where it connects: TCP.
    over_tcp = conninfo.make_conninfo(over_socket, hostaddr="127.0.0.1")
    with connect(over_tcp, autocommit=True) as conn:
        assert both_ends(conn) == (EXPECTED, SERVER_EXPECTED)


def test_a_session_path_cannot_turn_the_statement_aside(db: str) -> None:
    # A schema before pg_catalog in the login's search_path, with a set_config and operators of
    # its own: the statement names pg_catalog's, so the server's end is set all the same.
    name = conninfo.conninfo_to_dict(db)["dbname"]
    with connect(db, autocommit=True) as conn:
        conn.execute(
            """
            CREATE SCHEMA aside;
            CREATE FUNCTION aside.set_config(text, text, boolean) RETURNS text
                LANGUAGE sql AS $$ SELECT 'turned aside' $$;
            CREATE FUNCTION aside.never(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT false $$;
            CREATE FUNCTION aside.always(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
            CREATE OPERATOR aside.= (LEFTARG = text, RIGHTARG = text, FUNCTION = aside.never);
            CREATE OPERATOR aside.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = aside.always);
            """
        )
        conn.execute(f'ALTER DATABASE "{name}" SET search_path = aside, pg_catalog')
    with connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT set_config('x.y', 'z', false)").fetchone() == ("turned aside",)
        assert both_ends(conn)[1] == SERVER_EXPECTED


def test_a_refusal_leaves_the_connection_as_it_was(
    db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(connection, "_SET_SERVER_END", "SELECT 1 / 0 WHERE %(idle)s::text IS NOT NULL")
    monkeypatch.setattr(connection, "_server_end_warned", False)
    with caplog.at_level(logging.WARNING, logger="harvest.db"), connect(db) as conn:
        assert not conn.autocommit and conn.info.transaction_status.name == "IDLE"
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert "could not be set: division by zero (SQLSTATE 22012)" in caplog.text
    with caplog.at_level(logging.WARNING, logger="harvest.db"), connect(db):
        pass
    assert caplog.text.count("could not be set") == 1  # once a process


def test_a_connection_lost_while_setting_them_is_a_failed_connect(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        connection,
        "_SET_SERVER_END",
        "SELECT pg_terminate_backend(pg_backend_pid()) WHERE %(idle)s::text IS NOT NULL",
    )
    with pytest.raises(DatabaseUnavailable, match="cannot connect to database"):
        connect(db)
    with pytest.raises(DatabaseUnavailable, match="cannot connect to database"):
        asyncio.run(connect_async(db))
    # A pool counts it as a failed connect and tries again: none is ever lent.
    pool = open_pool(db, max_size=1)
    try:
        with pytest.raises(PoolTimeout):
            pool.wait(timeout=1.5)
    finally:
        pool.close()


def test_startup_options_are_added_after_the_dsns_or_pgoptions(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A face's LISTEN DSN (and the test clock's) add their settings after what the DSN or, when
    # it has no options, PGOPTIONS gives: libpq reads PGOPTIONS only when the DSN has none.
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=5MB")
    for dsn in (dsn_with_role(db, "harvest_reader"), with_startup_options(db, "-c lock_timeout=7s")):
        with connect(dsn, autocommit=True) as conn:
            assert conn.execute("SHOW work_mem").fetchone() == ("5MB",)
    own = conninfo.make_conninfo(db, options="-c work_mem=6MB")
    with connect(with_startup_options(own, "-c lock_timeout=7s"), autocommit=True) as conn:
        assert conn.execute(
            "SELECT current_setting('work_mem'), current_setting('lock_timeout')"
        ).fetchone() == (
            "6MB",
            "7s",
        )
