"""A thread pool whose threads do not hold the process at its exit (:class:`DaemonThreads`), for
the code of ``def`` activities: the worker's activity threads (harvest.worker.executors) and the
threads of local ``def`` activities (harvest.runtime.local)."""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

__all__ = ["DaemonThreads"]


class DaemonThreads(Executor):
    """A thread pool whose threads do not hold the process at its exit.

    A stopping worker releases the tasks still running after its shutdown grace (another
    worker runs them again), but a thread cannot be stopped: its code runs on. The threads of
    a ``ThreadPoolExecutor`` (the loop's default executor too) are joined when the interpreter
    exits, so a worker stopped (SIGTERM) while a ``def`` activity slept or blocked for minutes
    did not exit until the activity ended, whatever its grace. These threads are daemons: the
    process exits, and a released task's thread ends with it, as a killed worker's would.
    Threads start on demand up to ``max_workers``, as the standard pool's."""

    def __init__(self, max_workers: int, name: str):
        self.max_workers, self.name = max_workers, name
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # threads waiting for work
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._shut = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._work.put((future, functools.partial(fn, *args, **kwargs)))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self.max_workers:
                thread = threading.Thread(
                    target=self._serve, name=f"{self.name}_{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        return future

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            future, call = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = call()
                except BaseException as exc:  # the future carries it to the awaiting task
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, call
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shut = True
            if cancel_futures:
                while True:
                    try:
                        item = self._work.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            for _ in self._threads:
                self._work.put(None)
        if wait:
            for thread in self._threads:
                thread.join()
