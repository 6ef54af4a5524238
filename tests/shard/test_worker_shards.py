"""A worker on several shards (WorkerOptions.shard_assignments), on three real PostgreSQL servers:
it registers and heartbeats on each assigned shard, runs the workflows started on each, finishes
every task on the shard it came from, keeps serving the others while one server is down (one
warning for the outage, one line when it is back), serves the stopped one again after its
restart with nothing lost or doubled, drains on every shard, and refuses to start when an
assigned shard has no url."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator

import psycopg
import pytest
from stopping import assert_thread_stopped

from harvest import App, Client, Worker, activity, workflow
from harvest.core.errors import ConfigError, ConnectionRejected
from harvest.core.ids import shard_of
from harvest.telemetry.metrics import process_metrics

pytestmark = pytest.mark.shard

RAN: Counter[str] = Counter()
RAN_LOCK = threading.Lock()


@activity
async def double(ctx, n: int) -> int:
    with RAN_LOCK:
        RAN[ctx.workflow_id] += 1
    return n * 2


@workflow
async def doubled(ctx, n: int) -> int:
    return await ctx.execute_activity(double, n)


@workflow
async def doubled_later(ctx, n: int) -> int:
    await ctx.sleep(1.0)  # a durable timer on the run's shard: its scanner fires it
    return await ctx.execute_activity(double, n)


APP = App(workflows=[doubled, doubled_later], activities=[double])


class Running:
    """A Worker on its own event loop in a thread; stopped (drained) at teardown."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def go() -> None:
            self.loop = asyncio.get_running_loop()
            await self.worker.run()

        try:
            asyncio.run(go())
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        if self.loop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.worker.request_stop)
        self._thread.join(60)
        if self.error is not None:
            raise self.error
        assert_thread_stopped(self._thread, self.loop, f"worker {self.worker.worker_id} (60 s after stop)")


@pytest.fixture
def run_worker(shards) -> Iterator:
    running: list[Running] = []

    def start(assigned: dict[int, str], **options) -> Running:
        options.setdefault("poll_interval", 0.3)
        options.setdefault("scan_interval", 0.2)
        options.setdefault("heartbeat_interval", 0.5)
        options.setdefault("workflow_lease", 3.0)
        item = Running(Worker(APP, shards=assigned, **options))
        item._thread.start()
        running.append(item)
        return item

    yield start
    for item in running:
        item.stop()


def _wait_registered(shards, worker_id: str, on: list[int], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    for shard in on:
        with shards.connect(shard) as conn:
            while True:
                row = conn.execute(
                    "SELECT count(*) FROM harvest.registered_workflows WHERE workflow_name = 'doubled'"
                ).fetchone()
                worker = conn.execute("SELECT 1 FROM harvest.workers WHERE id = %s", (worker_id,)).fetchone()
                if row[0] and worker:
                    break
                assert time.monotonic() < deadline, f"the worker never registered on shard {shard}"
                time.sleep(0.05)


def _completions(shards, shard: int) -> Counter[str]:
    """WorkflowCompleted events per workflow id on a shard (each must be exactly 1)."""
    with shards.connect(shard) as conn:
        rows = conn.execute(
            "SELECT e.workflow_id, count(*) FROM harvest.events AS v JOIN harvest.executions AS e "
            "ON e.id = v.execution_id WHERE v.event_type = 'WorkflowCompleted' GROUP BY 1"
        ).fetchall()
    return Counter(dict(rows))


def test_a_worker_assigned_to_two_shards_runs_the_workflows_started_on_each(shards, run_worker) -> None:
    RAN.clear()
    dsns = {0: shards.dsns[0], 1: shards.dsns[1]}
    running = run_worker(dsns)
    worker = running.worker
    assert worker.shard_assignments == (0, 1), "auto: every shard with a url"
    _wait_registered(shards, worker.worker_id, [0, 1])
    handles = []
    for shard in (0, 1):
        with Client(shards.dsns[shard]) as client:
            for i in range(5):
                handles.append((shard, client.start_workflow(doubled, i, workflow_id=f"s{shard}-{i}")))
    for shard, handle in handles:
        assert shard_of(handle.execution_id) == shard
        with Client(shards.dsns[shard]) as client:
            assert client.get_handle(handle.execution_id).result(timeout=30) in range(0, 10, 2)
    for shard in (0, 1):
        assert _completions(shards, shard) == {f"s{shard}-{i}": 1 for i in range(5)}
        with shards.connect(shard) as conn:
            status, metadata = conn.execute(
                "SELECT status, metadata FROM harvest.workers WHERE id = %s", (worker.worker_id,)
            ).fetchone()
            assert status == "active"
            assert metadata["shard_assignments"] == [0, 1]
    with shards.connect(2) as conn:  # not assigned: no row, no registration there
        assert conn.execute("SELECT count(*) FROM harvest.workers").fetchone()[0] == 0
    assert {f"s{shard}-{i}": 1 for shard in (0, 1) for i in range(5)} == RAN
    # Each shard's tasks were dispatched from its own lane: a workflow task, an activity, a
    # workflow task per run at least (hand-off may run some without a claim).
    assert [lane.dispatched >= 5 * 2 for lane in worker.lanes] == [True, True]
    running.stop()
    for shard in (0, 1):  # the drain covered every shard
        with shards.connect(shard) as conn:
            assert conn.execute(
                "SELECT status FROM harvest.workers WHERE id = %s", (worker.worker_id,)
            ).fetchone() == ("stopped",)


def test_explicit_assignments_poll_only_those_shards(shards, run_worker) -> None:
    running = run_worker(dict(shards.dsns), shard_assignments=[1])
    _wait_registered(shards, running.worker.worker_id, [1])
    for shard in (0, 2):
        with shards.connect(shard) as conn:
            assert conn.execute("SELECT count(*) FROM harvest.workers").fetchone()[0] == 0


def test_a_worker_refuses_to_start_when_an_assigned_shard_has_no_url(shards) -> None:
    with pytest.raises(ConfigError) as caught:
        Worker(APP, shards={0: shards.dsns[0]}, shard_assignments=[0, 1])
    message = str(caught.value)
    assert "worker.shard_assignments" in message and "shards.urls.1" in message
    assert "\n" not in message


def test_a_worker_refuses_a_pool_that_reaches_another_shards_database(shards) -> None:
    # Shard 1's url pointing at shard 0's database: the pool's identity check stops the start.
    worker = Worker(APP, shards={0: shards.dsns[0], 1: shards.dsns[0]})
    with pytest.raises(ConfigError) as caught:
        asyncio.run(worker.run())
    assert "shard 1" in str(caught.value) and "shard 0" in str(caught.value)


def test_a_worker_refused_by_one_shard_names_that_shard(shards) -> None:
    # A login that one shard's server refuses (a role created on shard 0's server only: roles
    # belong to a server) ends the start at once; the line says which shard refused, not only
    # its host and database.
    refused = shards.dsns[1].rsplit("/", 1)[0] + "/no_such_database"
    worker = Worker(APP, shards={0: shards.dsns[0], 1: refused})
    with pytest.raises(ConnectionRejected) as caught:
        asyncio.run(worker.run())
    message = str(caught.value)
    assert message.startswith("shard 1: cannot connect to database "), message
    assert "no_such_database" in message and "\n" not in message


def _scan_errors(shard: int) -> float:
    found = process_metrics().registry.get_sample_value(
        "harvest_scanner_tick_total", {"shard": str(shard), "outcome": "error"}
    )
    return 0.0 if found is None else found


def test_a_stopped_shard_does_not_stall_the_others_and_is_served_again_after_restart(
    shards, run_worker, caplog
) -> None:
    RAN.clear()
    caplog.set_level(logging.INFO, logger="harvest.worker")
    running = run_worker({0: shards.dsns[0], 1: shards.dsns[1]})
    worker = running.worker
    _wait_registered(shards, worker.worker_id, [0, 1])
    # Runs on shard 1 that are waiting on a timer when their server goes down.
    with Client(shards.dsns[1]) as client:
        waiting = [client.start_workflow(doubled_later, i, workflow_id=f"late-{i}") for i in range(4)]
    with shards.connect(1) as conn:  # each has made its first step (the timer is set)
        deadline = time.monotonic() + 20
        while conn.execute(
            "SELECT count(*) FROM harvest.events WHERE event_type = 'TimerStarted'"
        ).fetchone()[0] < len(waiting):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    shards.stop(1)
    try:
        # Shard 0 keeps being served while shard 1 is down.
        with Client(shards.dsns[0]) as client:
            during = [client.start_workflow(doubled, i, workflow_id=f"during-{i}") for i in range(6)]
            assert [h.result(timeout=30) for h in during] == [i * 2 for i in range(6)]
        lane = next(lane for lane in worker.lanes if lane.shard == 1)
        assert lane.down, "the worker noticed the outage"
        # Its scanner counts each tick the down shard cannot answer as an error (it skipped them
        # uncounted: only the last-tick gauge went stale).
        errors = _scan_errors(1)
        deadline = time.monotonic() + 10
        while _scan_errors(1) - errors < 3:
            assert time.monotonic() < deadline, "error ticks while the shard is down"
            time.sleep(0.05)
    finally:
        shards.start(1)
    # Shard 1 is served again: its waiting runs finish, each exactly once, and new runs start there.
    with Client(shards.dsns[1]) as client:
        assert [client.get_handle(h.execution_id).result(timeout=60) for h in waiting] == [0, 2, 4, 6]
        after = client.start_workflow(doubled, 21, workflow_id="after")
        assert after.result(timeout=30) == 42
    assert _completions(shards, 0) == {f"during-{i}": 1 for i in range(6)}
    assert _completions(shards, 1) == {**{f"late-{i}": 1 for i in range(4)}, "after": 1}
    with shards.connect(1) as conn:
        completed = conn.execute(
            "SELECT count(*) FROM harvest.events WHERE event_type = 'ActivityCompleted'"
        ).fetchone()[0]
        assert completed == 5, "one recorded activity result per run"
    lines = [r.getMessage() for r in caplog.records if r.name == "harvest.worker"]
    assert sum("shard 1 is unavailable" in line for line in lines) == 1, "logged once per outage"
    assert sum("shard 1 is back" in line for line in lines) == 1
    assert not any("shard 0 is unavailable" in line for line in lines)
    # No connection string (and so no credential) in any log line: errors name host:port/db.
    assert not any("postgresql://" in line or "@127.0.0.1" in line for line in lines)


def test_a_shard_down_at_boot_is_picked_up_when_it_comes_back(shards, run_worker) -> None:
    shards.stop(1)
    try:
        running = run_worker({0: shards.dsns[0], 1: shards.dsns[1]})
        _wait_registered(shards, running.worker.worker_id, [0])
        with Client(shards.dsns[0]) as client:
            assert client.start_workflow(doubled, 1, workflow_id="boot-0").result(timeout=30) == 2
    finally:
        shards.start(1)
    _wait_registered(shards, running.worker.worker_id, [1])  # set up and registered once back
    with Client(shards.dsns[1]) as client:
        assert client.start_workflow(doubled, 2, workflow_id="boot-1").result(timeout=30) == 4


def test_a_remote_drain_on_one_shard_drains_the_worker_on_every_shard(shards, run_worker) -> None:
    running = run_worker({0: shards.dsns[0], 1: shards.dsns[1]})
    worker_id = running.worker.worker_id
    _wait_registered(shards, worker_id, [0, 1])
    with psycopg.connect(shards.dsns[1], autocommit=True) as conn:
        conn.execute("SELECT harvest.drain_worker(%s, NULL, 'tests')", (worker_id,))
    running._thread.join(30)
    assert not running._thread.is_alive(), "the drain stopped the worker"
    for shard in (0, 1):
        with shards.connect(shard) as conn:
            assert conn.execute(
                "SELECT status FROM harvest.workers WHERE id = %s", (worker_id,)
            ).fetchone() == ("stopped",)


APP_MODULE = """
from harvest import App, activity, workflow

@activity
async def double(ctx, n: int) -> int:
    return n * 2

@workflow
async def doubled(ctx, n: int) -> int:
    return await ctx.execute_activity(double, n)

app = App(workflows=[doubled], activities=[double])
"""


def _harvest_worker(tmp_path, env: dict[str, str], *args: str) -> subprocess.Popen:
    (tmp_path / "sw_app.py").write_text(APP_MODULE)
    full = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")}
    full.update(env, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, "-c", "from harvest.cli import main; main()", "worker", "sw_app:app", *args],
        cwd=tmp_path,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_harvest_worker_polls_the_configured_shards_and_drains_them_on_sigterm(shards, tmp_path) -> None:
    env = {
        "HARVEST_SHARDS__URLS__0": shards.dsns[0],
        "HARVEST_SHARDS__URLS__1": shards.dsns[1],
        "HARVEST_WORKER__SHARD_ASSIGNMENTS": "auto",
        "HARVEST_WORKER__HEARTBEAT_INTERVAL": "0.5",
    }
    process = _harvest_worker(tmp_path, env)
    try:
        deadline = time.monotonic() + 30
        ids: dict[int, str] = {}
        while len(ids) < 2:
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "harvest worker never registered on both shards"
            for shard in (0, 1):
                with shards.connect(shard) as conn:
                    row = conn.execute("SELECT id FROM harvest.workers WHERE status = 'active'").fetchone()
                    if row:
                        ids[shard] = row[0]
            time.sleep(0.1)
        assert ids[0] == ids[1], "one worker, one row on each shard"
        for shard in (0, 1):
            with Client(shards.dsns[shard]) as client:
                assert client.start_workflow("doubled", 5 + shard).result(timeout=30) == (5 + shard) * 2
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "on shard(s) 0, 1" in stderr
    for shard in (0, 1):
        with shards.connect(shard) as conn:
            assert conn.execute("SELECT status FROM harvest.workers WHERE id = %s", (ids[0],)).fetchone() == (
                "stopped",
            )


def test_harvest_worker_refuses_an_assigned_shard_with_no_url_in_one_line(shards, tmp_path) -> None:
    env = {"HARVEST_DATABASE_URL": shards.dsns[0], "HARVEST_WORKER__SHARD_ASSIGNMENTS": "0,3"}
    process = _harvest_worker(tmp_path, env)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert lines == [
        (
            "error: worker.shard_assignments names shard 3, which has no url: add shards.urls.3 "
            "(HARVEST_SHARDS__URLS__3) or remove it from worker.shard_assignments"
        )
    ]
