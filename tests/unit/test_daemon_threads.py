"""harvest.core.threads.DaemonThreads: a thread pool for ``def`` activities whose threads do not
hold the process at its exit (a stopped worker goes at its grace though a thread still blocks)."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from harvest.core.threads import DaemonThreads


def test_calls_run_on_daemon_threads_up_to_the_limit() -> None:
    pool = DaemonThreads(2, "t")
    gate, started = threading.Event(), threading.Semaphore(0)

    def held(n: int) -> tuple[int, bool, str]:
        started.release()
        gate.wait()
        me = threading.current_thread()
        return n, me.daemon, me.name

    futures = [pool.submit(held, n) for n in range(5)]
    assert started.acquire(timeout=10) and started.acquire(timeout=10)
    assert not started.acquire(timeout=0.2)  # two threads at most: the third call waits
    gate.set()
    results = [f.result(timeout=10) for f in futures]
    assert [r[0] for r in results] == list(range(5))
    assert all(daemon for _, daemon, _ in results)
    assert {name for _, _, name in results} <= {"t_0", "t_1"}
    pool.shutdown()


def test_an_exception_reaches_the_awaiting_task_and_the_context_is_copied() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    pool = DaemonThreads(1, "t")

    async def go() -> None:
        var.set("set")
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        assert await loop.run_in_executor(pool, ctx.run, var.get) == "set"

        def boom() -> None:
            raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            await loop.run_in_executor(pool, boom)

    asyncio.run(go())
    pool.shutdown()


def test_shutdown_cancels_what_waits_and_refuses_more() -> None:
    pool = DaemonThreads(1, "t")
    gate = threading.Event()
    running = pool.submit(gate.wait, 10)
    waiting = pool.submit(lambda: "never")
    pool.shutdown(wait=False, cancel_futures=True)
    assert waiting.cancelled()
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)
    gate.set()
    assert running.result(timeout=10) is True
    pool.shutdown(wait=True)  # its thread ends once its call returns
