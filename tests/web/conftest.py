"""Web fixtures: the management API through its ASGI app (httpx, Starlette's TestClient) on a
cloned test database, a real worker beside it, a live token per scope, and a login like the web
process's."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from web_helpers import rows_read
from worker_helpers import RunningWorker

from harvest import App, Worker


@pytest.fixture
def start_worker(db: str) -> Iterator:
    running: list[RunningWorker] = []

    def start(app: App, **options) -> RunningWorker:
        options.setdefault("poll_interval", 0.2)
        options.setdefault("scan_interval", 0.2)
        options.setdefault("run_retention", False)  # a test that wants the janitor asks for it
        worker = RunningWorker(Worker(app, db, **options)).start()
        running.append(worker)
        return worker

    yield start
    for worker in running:
        worker.stop()


@pytest.fixture
def tokens(db: str) -> dict[str, str]:
    """One live token per scope: {scope: secret}."""
    with psycopg.connect(db, autocommit=True) as conn:
        return {
            scope: conn.execute(
                "SELECT secret FROM harvest.create_api_token(%s, %s)", (f"t-{scope}", scope)
            ).fetchone()[0]
            for scope in ("read", "operate", "admin")
        }


@pytest.fixture
def web_login(pg_server, db: str) -> Iterator[str]:
    """The DSN of a login that is a member of the three request roles, as the web process's is."""
    user = f"u_web_{uuid.uuid4().hex[:8]}"
    with pg_server.admin() as admin:
        admin.execute(f'CREATE ROLE "{user}" LOGIN')
        admin.execute(f'GRANT harvest_reader, harvest_operator, harvest_admin TO "{user}"')
    yield conninfo.make_conninfo(db, user=user, password="")
    with pg_server.admin() as admin:
        admin.execute(f'DROP ROLE IF EXISTS "{user}"')


@pytest.fixture
def history_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The events each harvest.get_history call of the routes fetched from the database (what a
    page of a long history costs)."""
    return rows_read(monkeypatch, "get_history")
