"""What the outage tests share (their server: the ``own_server`` fixture in conftest.py; a
forwarder that goes down: Outage, the ``outage`` fixture; a server with room for a handful of
sessions, ``small_server``, and :func:`full`, which fills it)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import psycopg

from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], what: str, timeout: float = 30.0) -> T:
    """Poll ``predicate`` every 20 ms until it is true, and return that value; fail naming
    ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)
    return value


class Outage:
    """A TCP forwarder to the test's server that can go down (its listener closed, every
    forwarded connection cut) and come back on the same port."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.port = 0
        self.listener: socket.socket | None = None
        self.links: list[socket.socket] = []
        self.lock = threading.Lock()
        self.up()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        assert self.listener is not None
        try:  # (close alone leaves a listener that a thread is accepting on listening, on Linux)
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            for sock in self.links:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            self.links.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            with self.lock:
                self.links += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@contextlib.contextmanager
def migrated_server(**settings: str) -> Iterator[EmbeddedPostgres]:
    """A migrated PostgreSQL server of the caller's own (in memory, fsync off), with ``settings``."""
    pg = EmbeddedPostgres(settings={"fsync": "off", **settings}, in_memory=True)
    pg.start()
    try:
        Migrator(pg.dsn).run()
        yield pg
    finally:
        pg.stop()


def small_server() -> contextlib.AbstractContextManager[EmbeddedPostgres]:
    """A migrated server with room for 14 sessions and no slot kept for superusers (the tests
    connect as one: a full server refuses them too)."""
    return migrated_server(max_connections="14", superuser_reserved_connections="0", reserved_connections="0")


@contextlib.contextmanager
def full(dsn: str, application_name: str) -> Iterator[None]:
    """Every free slot of the server taken by an idle session, then every backend of the pool
    under test (its ``application_name``) ended: its next connect meets 53300."""
    held: list[psycopg.Connection] = []

    def fill(for_secs: float = 0.0) -> None:
        """Take every free slot; keep taking the slots that free for ``for_secs`` more."""
        until = time.monotonic() + for_secs
        refused = None
        while refused is None or time.monotonic() < until:
            try:
                held.append(psycopg.connect(dsn, autocommit=True, connect_timeout=5))
            except psycopg.OperationalError as exc:
                refused = str(exc)
        assert "too many clients" in refused, refused

    try:
        fill()
        end = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
        left = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        # The slots the ended backends free are taken at once, before the pool's next connect
        # (its attempts are a second or more apart); one it took anyway is ended again.
        for _ in range(20):
            held[0].execute(end, (application_name,))
            fill(for_secs=0.5)
            if held[0].execute(left, (application_name,)).fetchone()[0] == 0:
                break
        yield
    finally:
        for conn in held:
            conn.close()
