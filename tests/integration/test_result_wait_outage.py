"""A result wait, and a query's or an update's answer wait, ride out a database outage: a read
whose connection failed is made again until the database answers or the wait's timeout passes,
and a read waits for a pooled connection until that timeout only (docs/failures.md, "A result
wait rides out an outage"). A server of the test's own is stopped and started under the wait, with the
client pool's wait for a connection cut to 1 s so that the outage outlasts it (a shorter one is
absorbed by that wait: no read fails); failed reads are also injected."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import psycopg
import pytest
from outage_helpers import wait_until
from worker_helpers import RunningWorker

from harvest import App, AsyncClient, Client, Worker, activity, query, workflow
from harvest.client import outage as outage_module
from harvest.core.errors import ConnectionRejected, DatabaseUnavailable, QueryTimeout, TimeoutError_
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.pools import LAST_CHANCE_SECS
from harvest.db.sqlapi import AsyncSqlApi, SqlApi


@activity(queue="outage_q")
async def double(ctx, n: int) -> int:
    return n * 2


@workflow(queue="outage_q")
async def doubled(ctx, n: int) -> int:
    return await ctx.execute_activity(double, n)


@workflow(queue="outage_q")
async def waits_for_close(ctx, n: int) -> int:
    ctx.state["n"] = n
    await ctx.wait_for_signal("close")
    return n


@query(workflow="waits_for_close")
def number(ctx) -> int:
    return ctx.state["n"]


APP = App(workflows=[doubled, waits_for_close], activities=[double], queries=[number])


def _down_while(own_server: EmbeddedPostgres, waiting: threading.Event, seconds: float) -> None:
    """Stop the server once the wait is under way, keep it down ``seconds``, start it again."""
    assert waiting.wait(10)
    time.sleep(0.5)  # the wait has read the run and sleeps on its notification
    own_server.pause()
    time.sleep(seconds)
    own_server.resume()


class _InThread:
    """A wait made in a thread of its own: ``got`` holds its value ("value") or its exception
    ("error"), and how long it took ("took"); ``waiting`` is set as it begins."""

    def __init__(self, call: Any):
        self.got: dict[str, Any] = {}
        self.waiting = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(call,))
        self.thread.start()

    def _run(self, call: Any) -> None:
        self.waiting.set()
        started = time.monotonic()
        try:
            self.got["value"] = call()
        except BaseException as exc:
            self.got["error"] = exc
        self.got["took"] = time.monotonic() - started

    def join(self, secs: float) -> dict[str, Any]:
        self.thread.join(secs)
        return self.got


POOL_WAIT_SECS = 1.0
# A wait's last read still gets a second for a connection (pools.LAST_CHANCE_SECS), and a
# loaded machine's slack.
SLACK_SECS = LAST_CHANCE_SECS + 1.0  # the client pool's wait for a connection, 30 s by default


@pytest.fixture(autouse=True)
def _warn_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # The warning is rate-limited per process; each test here looks for its own.
    monkeypatch.setattr(outage_module, "_warned_at", None)


def test_a_result_wait_rides_out_a_server_restart(
    own_server: EmbeddedPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    with Client(own_server.dsn) as client, caplog.at_level(logging.INFO, logger="harvest.client"):
        client._target.pool.timeout = POOL_WAIT_SECS
        handle = client.start_workflow(doubled, 21)
        waiter = _InThread(lambda: handle.result(timeout=60))
        _down_while(own_server, waiter.waiting, 2.5)
        running = RunningWorker(Worker(APP, own_server.dsn, queues=["outage_q"])).start()
        try:
            got = waiter.join(60)
        finally:
            running.stop()
    assert got.get("value") == 42, got
    lines = [r.getMessage() for r in caplog.records if r.name == "harvest.client"]
    assert len(lines) == 2, lines
    assert f"the result wait for workflow {handle.execution_id} could not read the database" in lines[0]
    assert "reads the database again after" in lines[1]


def test_closing_the_client_ends_a_wait_in_an_outage(own_server: EmbeddedPostgres) -> None:
    client = Client(own_server.dsn)
    client._target.pool.timeout = POOL_WAIT_SECS
    handle = client.start_workflow(doubled, 3)
    own_server.pause()
    try:
        waiter = _InThread(handle.result)  # no timeout
        time.sleep(2 * POOL_WAIT_SECS)  # a read or two has failed
        client.close()
        got = waiter.join(15)
        assert not waiter.thread.is_alive(), "the wait went on after its client was closed"
        assert "error" in got, got
    finally:
        own_server.resume()


def test_an_async_result_wait_rides_out_a_server_restart(own_server: EmbeddedPostgres) -> None:
    async def main() -> int:
        client = await AsyncClient.connect(own_server.dsn)
        try:
            client._target.pool.timeout = POOL_WAIT_SECS
            handle = await client.start_workflow(doubled, 4)
            waiting = threading.Event()
            outage = threading.Thread(target=_down_while, args=(own_server, waiting, 2.5))
            outage.start()
            waiting.set()
            result = asyncio.ensure_future(handle.result(timeout=60))
            await asyncio.to_thread(outage.join)
            running = RunningWorker(Worker(APP, own_server.dsn, queues=["outage_q"])).start()
            try:
                return await result
            finally:
                await asyncio.to_thread(running.stop)
        finally:
            await client.close()

    assert asyncio.run(main()) == 8


LOST = "consuming input failed: server closed the connection unexpectedly"


def _failing_reads(
    monkeypatch: pytest.MonkeyPatch, cls: Any, failures: int, error: Exception, read: str = "wait_for_result"
) -> list[int]:
    """``cls``'s method ``read`` fails its first ``failures`` calls with ``error``; returns the
    calls seen so far (a one-item list, counted)."""
    real = getattr(cls, read)
    calls = [0]

    def sync_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] <= failures:
            raise error
        return real(self, *args, **kwargs)

    async def async_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] <= failures:
            raise error
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(cls, read, async_read if cls is AsyncSqlApi else sync_read)
    return calls


def test_failed_reads_are_made_again_with_one_warning_and_one_line_when_back(
    own_server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with Client(own_server.dsn) as client, caplog.at_level(logging.INFO, logger="harvest.client"):
        running = RunningWorker(Worker(APP, own_server.dsn, queues=["outage_q"])).start()
        try:
            handle = client.start_workflow(doubled, 5)
            calls = _failing_reads(monkeypatch, SqlApi, 4, psycopg.OperationalError(LOST))
            assert handle.result(timeout=60) == 10
        finally:
            running.stop()
    assert calls[0] >= 5
    lines = [r.getMessage() for r in caplog.records if r.name == "harvest.client"]
    assert len(lines) == 2, lines
    assert f"the result wait for workflow {handle.execution_id} could not read the database" in lines[0]
    assert "server closed the connection unexpectedly" in lines[0]
    assert "reads the database again after" in lines[1]


def test_an_async_wait_makes_failed_reads_again(
    own_server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> int:
        client = await AsyncClient.connect(own_server.dsn)
        running = RunningWorker(Worker(APP, own_server.dsn, queues=["outage_q"])).start()
        try:
            handle = await client.start_workflow(doubled, 6)
            _failing_reads(monkeypatch, AsyncSqlApi, 3, psycopg.OperationalError(LOST))
            return await handle.result(timeout=60)
        finally:
            await asyncio.to_thread(running.stop)
            await client.close()

    assert asyncio.run(main()) == 12


def test_a_timeout_that_passes_in_an_outage_is_a_timeout_naming_it(
    own_server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(own_server.dsn) as client:
        handle = client.start_workflow(doubled, 1)  # no worker: it never ends
        _failing_reads(monkeypatch, SqlApi, 10_000, psycopg.OperationalError(LOST))
        started = time.monotonic()
        with pytest.raises(
            TimeoutError_,
            match=r"no outcome of workflow .* within 1\.5s \(its last read of the database "
            r"failed: .*server closed the connection unexpectedly\)",
        ):
            handle.result(timeout=1.5)
        assert time.monotonic() - started < 5


def test_a_connection_rejected_is_not_waited_out(
    own_server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(own_server.dsn) as client:
        handle = client.start_workflow(doubled, 2)
        refused = ConnectionRejected("cannot connect to database x: password authentication failed")
        calls = _failing_reads(monkeypatch, SqlApi, 10_000, refused)
        with pytest.raises(ConnectionRejected):
            handle.result(timeout=30)
        assert calls[0] == 1


def test_a_result_wait_whose_timeout_passes_with_the_server_down_times_out_on_time(
    own_server: EmbeddedPostgres,
) -> None:
    """The client's own pool (its 30 s wait for a connection untouched): the wait's reads wait
    for a connection until the wait's deadline only. Before: the pool's PoolTimeout after 30 s;
    then TimeoutError_, still after the pool's 30 s."""
    with Client(own_server.dsn) as client:
        handle = client.start_workflow(doubled, 1)
        own_server.pause()
        try:
            started = time.monotonic()
            with pytest.raises(
                TimeoutError_, match=r"no outcome of workflow .* within 2s .*couldn't get a connection"
            ):
                handle.result(timeout=2)
            took = time.monotonic() - started
        finally:
            own_server.resume()
    assert took < 2 + SLACK_SECS, f"a 2 s wait took {took:.1f}s"


def test_an_async_result_wait_whose_timeout_passes_with_the_server_down_times_out_on_time(
    own_server: EmbeddedPostgres,
) -> None:
    async def main() -> float:
        client = await AsyncClient.connect(own_server.dsn)
        try:
            handle = await client.start_workflow(doubled, 1)
            await asyncio.to_thread(own_server.pause)
            try:
                started = time.monotonic()
                with pytest.raises(TimeoutError_, match=r"no outcome of workflow .* within 2s "):
                    await handle.result(timeout=2)
                return time.monotonic() - started
            finally:
                await asyncio.to_thread(own_server.resume)
        finally:
            await client.close()

    took = asyncio.run(main())
    assert took < 2 + SLACK_SECS, f"a 2 s wait took {took:.1f}s"


def _first_task_done(handle: Any) -> None:
    """The run has made its first decision (a query answered before it finds no state)."""
    wait_until(
        lambda: any(e["event_type"] == "WorkflowTaskCompleted" for e in handle.history()),
        "the run's first workflow task completed",
    )


def test_a_query_wait_rides_out_a_server_restart(
    own_server: EmbeddedPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    with Client(own_server.dsn) as client, caplog.at_level(logging.INFO, logger="harvest.client"):
        client._target.pool.timeout = POOL_WAIT_SECS
        handle = client.start_workflow(waits_for_close, 7)
        running = RunningWorker(Worker(APP, own_server.dsn, queues=["outage_q"])).start()
        try:  # the run waits for its signal; then no worker answers until the outage is over
            _first_task_done(handle)
        finally:
            running.stop()
        asker = _InThread(lambda: handle.query("number", timeout=60))
        _down_while(own_server, asker.waiting, 2.5)
        running = RunningWorker(Worker(APP, own_server.dsn, queues=["outage_q"])).start()
        try:
            got = asker.join(60)
            handle.signal("close")
            assert handle.result(timeout=30) == 7
        finally:
            running.stop()
    assert got.get("value") == 7, got
    lines = [r.getMessage() for r in caplog.records if r.name == "harvest.client"]
    assert len(lines) == 2, lines
    assert "the wait for an answer to query 'number' on execution" in lines[0]
    assert "could not read the database" in lines[0]
    assert "reads the database again after" in lines[1]


def _until_recorded(dsn: str, execution_id: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = "SELECT count(*) FROM harvest.query_requests WHERE execution_id = %s"
        wait_until(
            lambda: conn.execute(query, (execution_id,)).fetchone()[0], "the query's request recorded", 10
        )


def test_a_query_whose_timeout_passes_with_the_server_down_times_out_on_time(
    own_server: EmbeddedPostgres,
) -> None:
    """The client's own pool, its 30 s wait untouched. Before: the pool's PoolTimeout after 30 s."""
    with Client(own_server.dsn) as client:
        handle = client.start_workflow(waits_for_close, 1)  # no worker: never answered
        asker = _InThread(lambda: handle.query("number", timeout=3))
        _until_recorded(own_server.dsn, handle.execution_id)  # the request is sent: then the outage
        own_server.pause()
        try:
            got = asker.join(30)
        finally:
            own_server.resume()
        handle.terminate()
    assert isinstance(got.get("error"), QueryTimeout), got
    assert "no answer to query 'number'" in str(got["error"])
    assert "its last read of the database failed: couldn't get a connection" in str(got["error"])
    assert "live worker" not in str(got["error"])  # (read before the outage)
    assert got["took"] < 3 + SLACK_SECS, got


def test_an_async_query_wait_makes_failed_reads_again(
    own_server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> int:
        client = await AsyncClient.connect(own_server.dsn)
        running = RunningWorker(Worker(APP, own_server.dsn, queues=["outage_q"])).start()
        try:
            handle = await client.start_workflow(waits_for_close, 9)
            while not any(e["event_type"] == "WorkflowTaskCompleted" for e in await handle.history()):
                await asyncio.sleep(0.05)  # the run's first decision (a query before it finds no state)
            lost = psycopg.OperationalError(LOST)
            calls = _failing_reads(monkeypatch, AsyncSqlApi, 3, lost, "get_query_request")
            answer = await handle.query("number", timeout=60)
            assert calls[0] >= 4
            await handle.signal("close")
            await handle.result(timeout=30)
            return int(answer)
        finally:
            await asyncio.to_thread(running.stop)
            await client.close()

    assert asyncio.run(main()) == 9


def test_a_query_sent_with_the_server_down_times_out_on_time(own_server: EmbeddedPostgres) -> None:
    """The request cannot be sent: no pooled connection by the wait's deadline, so nothing was
    sent. Before: the pool's PoolTimeout after its 30 s (and the LISTEN connection's 5 s)."""
    with Client(own_server.dsn) as client:
        handle = client.start_workflow(waits_for_close, 1)
        own_server.pause()
        try:
            started = time.monotonic()
            with pytest.raises(
                QueryTimeout, match=r"within 2s \(the request was not sent: couldn't get a connection"
            ):
                handle.query("number", timeout=2)
            took = time.monotonic() - started
        finally:
            own_server.resume()
        handle.terminate()
    assert took < 2 + SLACK_SECS, f"a 2 s query took {took:.1f}s"


def test_a_wait_whose_pool_is_busy_says_so_on_time(own_server: EmbeddedPostgres) -> None:
    """Every connection of the client's pool held past the wait's timeout: the wait ends at its
    timeout, and says that its read could not get a connection, not that the run is running."""
    with Client(own_server.dsn, pool_size=1) as client:
        running = RunningWorker(Worker(APP, own_server.dsn, queues=["outage_q"])).start()
        try:
            handle = client.start_workflow(doubled, 2)
            assert handle.result(timeout=30) == 4
        finally:
            running.stop()
        with client._target.pool.connection():  # the only one, held
            started = time.monotonic()
            with pytest.raises(TimeoutError_) as timed_out:
                handle.result(timeout=1)
            took = time.monotonic() - started
    assert "couldn't get a connection" in str(timed_out.value)
    assert "still running" not in str(timed_out.value)
    assert took < 1 + SLACK_SECS


def test_execute_workflow_with_the_server_down_times_out_on_time(own_server: EmbeddedPostgres) -> None:
    """The start itself cannot be made: the pool's error after its wait (cut to 1 s here), after
    the client's LISTEN connection was given at most the result's timeout to come up (before:
    5 s)."""
    with Client(own_server.dsn) as client:
        client._target.pool.timeout = POOL_WAIT_SECS
        own_server.pause()
        try:
            started = time.monotonic()
            with pytest.raises(psycopg.OperationalError, match="couldn't get a connection"):
                client.execute_workflow(doubled, 1, result_timeout=0.5)
            took = time.monotonic() - started
        finally:
            own_server.resume()
    assert took < POOL_WAIT_SECS + SLACK_SECS, f"took {took:.1f}s"


def test_a_handle_by_workflow_id_looks_its_run_up_within_the_calls_timeout(
    own_server: EmbeddedPostgres,
) -> None:
    """A handle got by workflow_id finds its run before the wait: that lookup waits for a pooled
    connection until the call's timeout too. Before: the pool's 30 s, whatever the timeout."""
    with Client(own_server.dsn) as client:
        client.start_workflow(waits_for_close, 1, workflow_id="found-by-key")
        by_key = client.get_handle(workflow_id="found-by-key")
        own_server.pause()
        try:
            for call in (lambda: by_key.result(timeout=2), lambda: by_key.query("number", timeout=2)):
                started = time.monotonic()
                with pytest.raises(
                    DatabaseUnavailable, match=r"workflow_id 'found-by-key': its run could not be looked up"
                ):
                    call()
                took = time.monotonic() - started
                assert took < 2 + SLACK_SECS, f"a 2 s call took {took:.1f}s"
        finally:
            own_server.resume()
        assert by_key.describe()["workflow_id"] == "found-by-key"  # the same handle, the database back
        by_key.terminate()


def test_an_async_handle_by_workflow_id_looks_its_run_up_within_the_calls_timeout(
    own_server: EmbeddedPostgres,
) -> None:
    async def main() -> float:
        client = await AsyncClient.connect(own_server.dsn)
        try:
            await client.start_workflow(waits_for_close, 1, workflow_id="found-by-key-async")
            by_key = client.get_handle(workflow_id="found-by-key-async")
            await asyncio.to_thread(own_server.pause)
            try:
                started = time.monotonic()
                with pytest.raises(DatabaseUnavailable, match=r"its run could not be looked up"):
                    await by_key.result(timeout=2)
                return time.monotonic() - started
            finally:
                await asyncio.to_thread(own_server.resume)
                await by_key.terminate()
        finally:
            await client.close()

    took = asyncio.run(main())
    assert took < 2 + SLACK_SECS, f"a 2 s wait took {took:.1f}s"
