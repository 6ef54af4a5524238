"""Integration fixtures: a real worker running in a background thread against the test database."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from harvest import App, Client, Worker


class RunningWorker:
    """A Worker on its own event loop in a thread; stopped (drained) at teardown."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def go() -> None:
            self.loop = asyncio.get_running_loop()
            self._ready.set()
            await self.worker.run()

        try:
            asyncio.run(go())
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    def start(self) -> RunningWorker:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self.loop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.worker.request_stop)
        self._thread.join(30)
        if self.error is not None:
            raise self.error


@pytest.fixture
def start_worker(db: str) -> Iterator:
    """start_worker(app, dsn=None, **worker_options) -> RunningWorker, stopped after the test
    (``dsn``: another URL of the test database, e.g. one on the engine's test clock)."""
    running: list[RunningWorker] = []

    def start(app: App, dsn: str | None = None, **options) -> RunningWorker:
        options.setdefault("poll_interval", 0.5)
        options.setdefault("scan_interval", 0.2)
        worker = RunningWorker(Worker(app, dsn or db, **options)).start()
        running.append(worker)
        return worker

    yield start
    for worker in running:
        worker.stop()


@pytest.fixture
def client(db: str) -> Iterator[Client]:
    with Client(db) as instance:
        yield instance
