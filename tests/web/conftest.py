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
