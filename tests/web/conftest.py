"""Web fixtures: the management API through its ASGI app (httpx, Starlette's TestClient) on a
cloned test database, and a real worker beside it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from worker_helpers import RunningWorker

from harvest import App, Worker
from harvest.config import load_config


def api_client(dsn: str | None, *, env: dict[str, str] | None = None, **options):
    """A TestClient over management_app (its lifespan run), with the config of ``env`` only."""
    from starlette.testclient import TestClient

    from harvest.web.app import management_app

    options.setdefault("profile", "dev")
    app = management_app(dsn=dsn, config=load_config(env=env or {}), **options)
    return TestClient(app, headers={"Accept": "application/json"})


@pytest.fixture
def start_worker(db: str) -> Iterator:
    running: list[RunningWorker] = []

    def start(app: App, **options) -> RunningWorker:
        options.setdefault("poll_interval", 0.2)
        options.setdefault("scan_interval", 0.2)
        worker = RunningWorker(Worker(app, db, **options)).start()
        running.append(worker)
        return worker

    yield start
    for worker in running:
        worker.stop()
