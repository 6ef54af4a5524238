"""A result wait rides out a database outage: a read whose connection failed is made again
until the database answers or the wait's timeout passes (docs/failures.md, "A result wait rides
out an outage"). A server of the test's own is stopped and started under the wait, with the
client pool's wait for a connection cut to 1 s so that the outage outlasts it (a shorter one is
absorbed by that wait: no read fails); failed reads are also injected."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from worker_helpers import RunningWorker

from harvest import App, AsyncClient, Client, Worker, activity, workflow
from harvest.client import client as client_module
from harvest.core.errors import ConnectionRejected, TimeoutError_
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator
from harvest.db.sqlapi import AsyncSqlApi, SqlApi


@activity(queue="outage_q")
async def double(ctx, n: int) -> int:
    return n * 2


@workflow(queue="outage_q")
async def doubled(ctx, n: int) -> int:
    return await ctx.execute_activity(double, n)


APP = App(workflows=[doubled], activities=[double])


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    pg = EmbeddedPostgres(settings={"fsync": "off", "synchronous_commit": "off"})
    pg.start()
    try:
        Migrator(pg.dsn).run()
        yield pg
    finally:
        pg.stop()


def _down_while(server: EmbeddedPostgres, waiting: threading.Event, seconds: float) -> None:
    """Stop the server once the wait is under way, keep it down ``seconds``, start it again."""
    assert waiting.wait(10)
    time.sleep(0.5)  # the wait has read the run and sleeps on its notification
    server.pause()
    time.sleep(seconds)
    server.resume()


POOL_WAIT_SECS = 1.0  # the client pool's wait for a connection, 30 s by default


@pytest.fixture(autouse=True)
def _warn_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # The warning is rate-limited per process; each test here looks for its own.
    monkeypatch.setattr(client_module, "_outage_warned_at", None)


def test_a_result_wait_rides_out_a_server_restart(
    server: EmbeddedPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    with Client(server.dsn) as client, caplog.at_level(logging.INFO, logger="harvest.client"):
        client._target.pool.timeout = POOL_WAIT_SECS
        handle = client.start_workflow(doubled, 21)
        got: dict[str, Any] = {}
        waiting = threading.Event()

        def wait() -> None:
            waiting.set()
            try:
                got["result"] = handle.result(timeout=60)
            except BaseException as exc:
                got["error"] = exc

        waiter = threading.Thread(target=wait)
        waiter.start()
        _down_while(server, waiting, 2.5)
        running = RunningWorker(Worker(APP, server.dsn, queues=["outage_q"])).start()
        try:
            waiter.join(60)
        finally:
            running.stop()
    assert got == {"result": 42}
    lines = [r.getMessage() for r in caplog.records if r.name == "harvest.client"]
    assert len(lines) == 2, lines
    assert f"the result wait for workflow {handle.execution_id} cannot read the database" in lines[0]
    assert "reads the database again after" in lines[1]


def test_closing_the_client_ends_a_wait_in_an_outage(server: EmbeddedPostgres) -> None:
    client = Client(server.dsn)
    client._target.pool.timeout = POOL_WAIT_SECS
    handle = client.start_workflow(doubled, 3)
    got: dict[str, Any] = {}

    def wait() -> None:
        try:
            got["result"] = handle.result()  # no timeout
        except BaseException as exc:
            got["error"] = exc

    server.pause()
    try:
        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(2 * POOL_WAIT_SECS)  # a read or two has failed
        client.close()
        waiter.join(15)
        assert not waiter.is_alive(), "the wait went on after its client was closed"
        assert "error" in got, got
    finally:
        server.resume()


def test_an_async_result_wait_rides_out_a_server_restart(server: EmbeddedPostgres) -> None:
    async def main() -> int:
        client = await AsyncClient.connect(server.dsn)
        try:
            client._target.pool.timeout = POOL_WAIT_SECS
            handle = await client.start_workflow(doubled, 4)
            waiting = threading.Event()
            outage = threading.Thread(target=_down_while, args=(server, waiting, 2.5))
            outage.start()
            waiting.set()
            result = asyncio.ensure_future(handle.result(timeout=60))
            await asyncio.to_thread(outage.join)
            running = RunningWorker(Worker(APP, server.dsn, queues=["outage_q"])).start()
            try:
                return await result
            finally:
                await asyncio.to_thread(running.stop)
        finally:
            await client.close()

    assert asyncio.run(main()) == 8


LOST = "consuming input failed: server closed the connection unexpectedly"


def _failing_reads(monkeypatch: pytest.MonkeyPatch, cls: Any, failures: int, error: Exception) -> list[int]:
    """``cls.wait_for_result`` fails its first ``failures`` calls with ``error``; returns the calls
    seen so far (a one-item list, counted)."""
    real = cls.wait_for_result
    calls = [0]

    def read(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] <= failures:
            raise error
        return real(self, *args, **kwargs)

    async def aread(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] <= failures:
            raise error
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(cls, "wait_for_result", aread if cls is AsyncSqlApi else read)
    return calls


def test_failed_reads_are_made_again_with_one_warning_and_one_line_when_back(
    server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with Client(server.dsn) as client, caplog.at_level(logging.INFO, logger="harvest.client"):
        running = RunningWorker(Worker(APP, server.dsn, queues=["outage_q"])).start()
        try:
            handle = client.start_workflow(doubled, 5)
            calls = _failing_reads(monkeypatch, SqlApi, 4, psycopg.OperationalError(LOST))
            assert handle.result(timeout=60) == 10
        finally:
            running.stop()
    assert calls[0] >= 5
    lines = [r.getMessage() for r in caplog.records if r.name == "harvest.client"]
    assert len(lines) == 2, lines
    assert f"the result wait for workflow {handle.execution_id} cannot read the database" in lines[0]
    assert "server closed the connection unexpectedly" in lines[0]
    assert "reads the database again after" in lines[1]


def test_an_async_wait_makes_failed_reads_again(
    server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> int:
        client = await AsyncClient.connect(server.dsn)
        running = RunningWorker(Worker(APP, server.dsn, queues=["outage_q"])).start()
        try:
            handle = await client.start_workflow(doubled, 6)
            _failing_reads(monkeypatch, AsyncSqlApi, 3, psycopg.OperationalError(LOST))
            return await handle.result(timeout=60)
        finally:
            await asyncio.to_thread(running.stop)
            await client.close()

    assert asyncio.run(main()) == 12


def test_a_timeout_that_passes_in_an_outage_is_a_timeout_naming_it(
    server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(server.dsn) as client:
        handle = client.start_workflow(doubled, 1)  # no worker: it never ends
        _failing_reads(monkeypatch, SqlApi, 10_000, psycopg.OperationalError(LOST))
        started = time.monotonic()
        with pytest.raises(
            TimeoutError_,
            match=r"still running after 1\.5s \(its last reads found the database "
            r"unreachable: .*server closed the connection unexpectedly\)",
        ):
            handle.result(timeout=1.5)
        assert time.monotonic() - started < 5


def test_a_connection_rejected_is_not_waited_out(
    server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(server.dsn) as client:
        handle = client.start_workflow(doubled, 2)
        refused = ConnectionRejected("cannot connect to database x: password authentication failed")
        calls = _failing_reads(monkeypatch, SqlApi, 10_000, refused)
        with pytest.raises(ConnectionRejected):
            handle.result(timeout=30)
        assert calls[0] == 1


@pytest.mark.chaos  # waits out the pool's 30 s wait for a connection
def test_a_result_wait_whose_timeout_passes_with_the_server_down_times_out(server: EmbeddedPostgres) -> None:
    """Before: the pool's PoolTimeout, a driver's error, after 30 s whatever the timeout."""
    with Client(server.dsn) as client:
        handle = client.start_workflow(doubled, 1)
        server.pause()
        try:
            with pytest.raises(TimeoutError_, match="still running after 2"):
                handle.result(timeout=2)
        finally:
            server.resume()
