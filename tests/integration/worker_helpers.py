"""A real worker on its own event loop in a background thread (the integration and web suites)."""

from __future__ import annotations

import asyncio
import threading

from harvest import Worker


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
