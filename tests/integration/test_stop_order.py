"""A stop's order (Worker._stop): it takes no new work, then says and records its drain and
finishes the work in flight while its background services (the query responder, the
heartbeat, the scanner) still run, and only then cancels them. They used to be cancelled
first: a draining worker answered no query about the runs it was finishing, and a service slow
to take its cancellation (the metrics sampler in the middle of its first sample) held the drain
back until the work in flight had ended, so the drain never said what it was finishing."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from harvest import App, Client, Worker, activity, query, workflow

gate = threading.Event()
started = threading.Event()


@activity(start_to_close="60s")
async def held(ctx) -> str:
    started.set()
    while not gate.is_set():
        await asyncio.sleep(0.02)
    return "done"


@workflow
async def holds(ctx) -> str:
    ctx.state["phase"] = "holding"
    return await ctx.execute_activity(held)


@query(workflow="holds")
def phase(ctx) -> str:
    return ctx.state["phase"]


app = App(workflows=[holds], activities=[held], queries=[phase])


def wait_until(predicate, what: str, timeout: float = 30.0):
    """(The bound only tells a state reached from one never reached.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def worker_status(db: str, worker_id: str) -> str | None:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute("SELECT status FROM harvest.workers WHERE id = %s", (worker_id,)).fetchone()
    return row[0] if row else None


@pytest.fixture(autouse=True)
def closed_gate():
    gate.clear()
    started.clear()
    yield
    gate.set()  # (a failed test must not leave a worker draining until its grace)


class Said(logging.Handler):
    """What the worker logs about its drain, in order with what the test records, and the
    worker's tasks still running when it says it is finishing its in-flight ones (the handler
    runs on the worker's loop)."""

    def __init__(self, order: list[str]) -> None:
        super().__init__(logging.INFO)
        self.order = order
        self.running_at_drain: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "in-flight task(s)" in message:
            self.order.append(message.split(" (")[0].split(" ", 2)[2])
            if message.split(" ")[2] == "finishing":
                self.running_at_drain = {t.get_name() for t in asyncio.all_tasks() if not t.done()}


@pytest.fixture
def said() -> Iterator[Said]:
    handler = Said([])
    logger = logging.getLogger("harvest.worker")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def order(said: Said) -> list[str]:
    return said.order


def test_a_draining_worker_answers_queries_about_the_runs_it_is_finishing(
    db: str, start_worker, client: Client, order: list[str], said: Said
) -> None:
    running = start_worker(app, heartbeat_interval=0.2, shutdown_grace=60)
    worker_id = running.worker.worker_id
    handle = client.start_workflow(holds)
    assert started.wait(30), "the activity did not start"

    running.loop.call_soon_threadsafe(running.worker.request_stop)
    wait_until(lambda: worker_status(db, worker_id) == "draining", "the drain to be recorded")
    assert order == ["finishing 1 in-flight task(s)"]
    # The claim loop has ended; the background services run through the drain.
    assert {"queries-0", "heartbeat-0", "scanner-0", "task-listener-0"} <= said.running_at_drain
    # Its query responder still runs: the run it is finishing answers (it used to time out).
    assert handle.query("phase", timeout=20) == "holding"

    gate.set()
    running._thread.join(30)
    assert not running._thread.is_alive()
    assert worker_status(db, worker_id) == "stopped"
    start_worker(app)  # the run's next workflow task is another worker's
    assert handle.result(timeout=30) == "done"


def test_a_background_task_slow_to_take_its_cancellation_cannot_hide_the_work_in_flight(
    db: str, start_worker, client: Client, order: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The flake this order fixes (tests/examples/test_standalone_worker.py): a background task
    # (there, the sampler in its first sample) slow to take its cancellation, while the work in
    # flight ends. Here the scanner lets the activity finish as it is cancelled, and takes its
    # cancellation only once nothing is in flight.
    async def scan_slow_to_stop(self: Worker, lane) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            order.append("scanner cancelled")
            gate.set()
            for _ in range(1000):  # (bounded: 10 s)
                if not self._inflight:
                    break
                await asyncio.sleep(0.01)
            raise

    monkeypatch.setattr(Worker, "_scan", scan_slow_to_stop)
    running = start_worker(app, heartbeat_interval=0.2, shutdown_grace=60)
    worker_id = running.worker.worker_id
    handle = client.start_workflow(holds)
    assert started.wait(30), "the activity did not start"

    running.loop.call_soon_threadsafe(running.worker.request_stop)
    wait_until(lambda: worker_status(db, worker_id) in ("draining", "stopped"), "the drain to be recorded")
    # Said and recorded before any background task is cancelled, the activity still in flight.
    assert order == ["finishing 1 in-flight task(s)"]
    assert not gate.is_set()

    gate.set()
    running._thread.join(30)
    assert not running._thread.is_alive()
    assert order == ["finishing 1 in-flight task(s)", "scanner cancelled"]
    assert worker_status(db, worker_id) == "stopped"
    start_worker(app)
    assert handle.result(timeout=30) == "done"


def test_a_worker_stopped_while_its_database_is_down_stops_within_its_grace(
    own_server, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM in an outage: the stop's own calls (the claim in flight, the drain's record, the
    release of what is left, the stop) cannot reach the database. Each used to wait the pool's
    whole connect timeout (30 s) in turn, and the last one's failure ended run() with a
    PoolTimeout: the worker took a minute and a half past a 1 s grace to fail, past any
    orchestrator's kill. What those calls would have done, lease expiry does (docs/failures.md)."""
    grace = 1.0
    worker = Worker(app, own_server.dsn, queues=["default"], shutdown_grace=grace)
    loop_of: list[asyncio.AbstractEventLoop] = []
    ended: list[BaseException | None] = []
    stopped_at: list[float] = []

    def main() -> None:
        async def go() -> None:
            loop_of.append(asyncio.get_running_loop())
            await worker.run()

        try:
            asyncio.run(go())
        except BaseException as exc:
            ended.append(exc)
        else:
            ended.append(None)
        stopped_at.append(time.monotonic())

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        with Client(own_server.dsn) as client:
            client.start_workflow(holds)
        assert started.wait(30), "the activity never started"
        own_server.pause()
        with caplog.at_level(logging.WARNING, logger="harvest.worker"):
            asked = time.monotonic()
            loop_of[0].call_soon_threadsafe(worker.request_stop)
            thread.join(120)
    finally:
        gate.set()
        own_server.resume()
    assert ended, "the worker never stopped"
    assert ended[0] is None, f"the stop failed: {ended[0]!r}"
    took = stopped_at[0] - asked
    # The grace, then at most 10 s for what does not answer (docs/failures.md, "Graceful shutdown").
    assert took < grace + 10, f"the stop took {took:.1f}s with a {grace:.0f}s grace"
    lines = [r.getMessage() for r in caplog.records if r.name == "harvest.worker"]
    assert any("leases expire" in line for line in lines), lines


def test_the_scanner_and_the_janitor_finish_the_pass_they_are_in(
    db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """They end between two passes, not mid-call. They used to be cancelled in the middle of
    one: a call that failed as its cancellation reached the server (the janitor's "retention is
    not configured", every pass) made psycopg warn "query cancellation interrupted" and close
    the connection, in the output of a `harvest dev` stopped at that moment (a CI flake)."""
    from harvest.core.errors import InvalidArgument
    from harvest.db.sqlapi import AsyncSqlApi

    calls: list[str] = []
    entered = threading.Event()

    def slow(name: str, answer: object):
        async def call(self: AsyncSqlApi, *args: object, **kwargs: object) -> object:
            calls.append(f"{name} entered")
            entered.set()
            await asyncio.sleep(0.5)  # a pass longer than the stop takes to reach it
            calls.append(f"{name} finished")
            if isinstance(answer, BaseException):
                raise answer
            return answer

        return call

    monkeypatch.setattr(AsyncSqlApi, "run_retention", slow("retention", InvalidArgument("not configured")))
    monkeypatch.setattr(
        AsyncSqlApi,
        "scan",
        slow(
            "scan",
            {
                "expired_tasks": [],
                "timed_out_workflows": 0,
                "relays_delivered": 0,
                "mutex_grants": 0,
                "starts_released": 0,
                "tasks_repaced": 0,
            },
        ),
    )
    worker = Worker(
        app,
        db,
        run_worker=False,
        run_scanner=True,
        run_retention=True,
        scan_interval=0.05,
        retention_interval=60,
    )

    async def main() -> float:
        running = asyncio.create_task(worker.run())
        while calls.count("retention entered") < 1 or calls.count("scan entered") < 1:
            assert not running.done()
            await asyncio.sleep(0.01)
        worker.request_stop()
        asked = time.monotonic()
        await asyncio.wait_for(running, 30)
        return time.monotonic() - asked

    with caplog.at_level(logging.DEBUG):
        took = asyncio.run(main())
    assert calls.count("retention entered") == calls.count("retention finished") == 1, calls
    assert calls.count("scan entered") == calls.count("scan finished"), calls
    assert took < 3, f"the stop took {took:.1f}s: a pass ended, the next did not begin"  # (60 s apart)
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")]
