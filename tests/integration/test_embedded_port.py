"""An embedded server whose chosen port another process binds before the server does (suites
starting servers side by side) starts on another port; a port the caller gave is not replaced."""

from __future__ import annotations

import socket

import psycopg
import pytest

from harvest.core.errors import ConfigError
from harvest.db import embedded
from harvest.db.embedded import EmbeddedPostgres


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_chosen_port_taken_before_the_bind_is_chosen_again(taken_port, monkeypatch) -> None:
    pg = EmbeddedPostgres()
    chosen = iter([embedded._free_port()])
    pg.port = taken_port  # as if another process bound it between the choice and the start
    monkeypatch.setattr(embedded, "_free_port", lambda: next(chosen))
    try:
        pg.start()
        assert pg.port != taken_port
        with psycopg.connect(pg.dsn, connect_timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pg.stop()


def test_a_port_the_caller_gave_is_not_replaced(taken_port) -> None:
    pg = EmbeddedPostgres(port=taken_port)
    try:
        with pytest.raises(ConfigError, match="Address already in use"):
            pg.start()
        assert pg.port == taken_port
    finally:
        pg.stop()
