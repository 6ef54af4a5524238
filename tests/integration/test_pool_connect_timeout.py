"""Every connect is bounded (harvest.db.connection.connect_timeout_option): a server that
accepts the TCP connection and never answers (a stopped or hung server, a proxy with nothing
behind it) fails a pool's attempt after 10 s, so the pool tries again, instead of after
psycopg's 130 s. A DSN's own connect_timeout, or PGCONNECT_TIMEOUT, is kept, by pools and by
connect() alike; a caller's own limit (a probe's) wins."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from harvest.core.errors import DatabaseUnavailable
from harvest.db import connection
from harvest.db.connection import RedactingAsyncConnection, RedactingConnection, connect_timeout_option
from harvest.db.pools import open_pool


@pytest.fixture
def mute_server() -> Iterator[tuple[str, list[socket.socket]]]:
    """A DSN of a server that accepts connections and never answers; the accepted sockets."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                sock, _ = server.accept()
            except OSError:
                return
            accepted.append(sock)

    threading.Thread(target=accept, daemon=True).start()
    port = server.getsockname()[1]
    yield f"host=127.0.0.1 port={port} dbname=x user=x sslmode=disable", accepted
    server.close()
    for sock in accepted:
        sock.close()


def test_the_default_applies_unless_the_dsn_or_the_environment_gives_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    assert connect_timeout_option("host=db dbname=x") == {"connect_timeout": connection.CONNECT_TIMEOUT_SECS}
    assert connect_timeout_option("postgresql://db/x?connect_timeout=60") == {}
    # psycopg reads no service file for it: a service's connection gets the default too.
    assert connect_timeout_option("service=prod") == {"connect_timeout": connection.CONNECT_TIMEOUT_SECS}
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "45")
    assert connect_timeout_option("host=db dbname=x") == {}


def test_a_pools_connect_to_a_server_that_never_answers_gives_up(
    mute_server: tuple[str, list[socket.socket]], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn, _ = mute_server
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.setattr(connection, "CONNECT_TIMEOUT_SECS", 1)
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        RedactingConnection.connect(dsn)
    assert time.monotonic() - started < 5

    async def attempt() -> None:
        await RedactingAsyncConnection.connect(dsn)

    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        asyncio.run(attempt())
    assert time.monotonic() - started < 5


def test_a_pool_keeps_trying_a_server_that_never_answers(
    mute_server: tuple[str, list[socket.socket]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each attempt ends, so the pool makes new ones (before: its first ones hung for ever)."""
    dsn, accepted = mute_server
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.setattr(connection, "CONNECT_TIMEOUT_SECS", 1)
    pool = open_pool(dsn, max_size=1)
    try:
        deadline = time.monotonic() + 20
        while len(accepted) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(accepted) >= 3, f"the pool made {len(accepted)} attempt(s)"
    finally:
        pool.close(timeout=1)


def test_a_dsns_own_connect_timeout_is_kept(
    mute_server: tuple[str, list[socket.socket]], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn, _ = mute_server
    monkeypatch.setattr(connection, "CONNECT_TIMEOUT_SECS", 30)
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        RedactingConnection.connect(dsn + " connect_timeout=2")
    assert 1.5 <= time.monotonic() - started < 10


def test_connect_keeps_the_dsns_connect_timeout_and_a_callers_own(
    mute_server: tuple[str, list[socket.socket]], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn, _ = mute_server
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.setattr(connection, "CONNECT_TIMEOUT_SECS", 30)
    for given, expected in ((dsn + " connect_timeout=2", None), (dsn, 2)):
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable):
            connection.connect(given, connect_timeout=expected)
        assert 1.5 <= time.monotonic() - started < 10
