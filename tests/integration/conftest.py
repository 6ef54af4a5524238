"""Integration fixtures: a real worker running in a background thread against the test database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from outage_helpers import Outage, migrated_server
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from worker_helpers import RunningWorker

from harvest import App, Client, Worker
from harvest.db.embedded import EmbeddedPostgres


@pytest.fixture
def start_worker(db: str) -> Iterator:
    """start_worker(app, dsn=None, **worker_options) -> RunningWorker, stopped after the test
    (``dsn``: another URL of the test database, e.g. one on the engine's test clock)."""
    running: list[RunningWorker] = []

    def start(app: App, dsn: str | None = None, **options) -> RunningWorker:
        options.setdefault("poll_interval", 0.5)
        options.setdefault("scan_interval", 0.2)
        options.setdefault("run_retention", False)  # a test that wants the janitor asks for it
        worker = RunningWorker(Worker(app, dsn or db, **options)).start()
        running.append(worker)
        return worker

    yield start
    for worker in running:
        worker.stop()


@pytest.fixture
def outage(db: str) -> Iterator[tuple[Outage, str]]:
    """A TCP forwarder to the test database that can go down and come back on its port (see
    outage_helpers.Outage), and a URL of the database through it."""
    params = conninfo_to_dict(db)
    proxy = Outage(str(params.get("host", "127.0.0.1")), int(params.get("port", 5432)))
    yield proxy, make_conninfo(db, host="127.0.0.1", port=proxy.port)
    proxy.down()


@pytest.fixture
def client(db: str) -> Iterator[Client]:
    with Client(db) as instance:
        yield instance


@pytest.fixture(scope="module")
def own_server() -> Iterator[EmbeddedPostgres]:
    """A migrated PostgreSQL server of the test module's own, which its tests may stop and
    start again (``pause``, ``resume``: outages) without touching the shared test server."""
    with migrated_server(synchronous_commit="off") as pg:
        yield pg
