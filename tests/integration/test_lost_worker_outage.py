"""After a database outage longer than lost_after, no live worker's tasks are taken for lost
(docs/activities.md, "When a worker dies"): the outage stopped every worker's heartbeats with
the scanners' passes, so the first pass back finds the whole fleet silent past its lost_after;
a scanner sweeps lost workers only once its own scans have answered for its lost_after, and the
workers heartbeat again well within that. A real server, stopped and started."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import psycopg
import pytest
from worker_helpers import RunningWorker, wait_until, worker_process

from harvest import App, Client, RetryPolicy, Worker, activity, workflow

BEAT = 0.5  # the workers' heartbeat interval
LOST_AFTER = 4.0  # silent this long, a worker is lost (and a scanner back sweeps after it)


@activity(start_to_close="10m", retry=RetryPolicy(max_attempts=3, initial_interval=0.05))
async def waits(ctx, flag: str) -> int:
    while not os.path.exists(flag):
        await asyncio.sleep(0.05)
    return ctx.attempt()


@workflow
async def waiting(ctx, flag: str) -> int:
    return await ctx.execute_activity(waits, flag)


APP = App([waiting], [waits])
OPTIONS = f"heartbeat_interval={BEAT}, lost_after={LOST_AFTER}, scan_interval=0.1, run_retention=False"


def _attempts(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT status, attempt, last_failure ->> 'error_type' FROM harvest.tasks WHERE kind = 'activity'"
        ).fetchall()


def _outage(
    own_server, tmp_path, monkeypatch, sweeper_beat: float, sweeper_lost_after: float, thaw_after: float
) -> None:
    """The holder, a worker process (BEAT, LOST_AFTER), runs an activity attempt; a sweeper
    worker scans. The database stops for longer than the holder's lost_after and starts again.
    The holder is paused (SIGSTOP) through the outage and until the sweeper's scans back have
    answered for ``thaw_after`` seconds, so those passes find the holder silent past its
    lost_after: they must leave it, and it heartbeats again once resumed."""
    flag = tmp_path / "go"
    holder = worker_process(own_server.dsn, "test_lost_worker_outage", OPTIONS, stderr=subprocess.DEVNULL)
    sweeper = None
    try:
        running = [("running", 1, None)]
        with Client(own_server.dsn) as client:
            handle = client.start_workflow(waiting, str(flag))
            wait_until(lambda: _attempts(own_server.dsn) == running, "the attempt on the holder")
        options = {"heartbeat_interval": sweeper_beat, "lost_after": sweeper_lost_after, "scan_interval": 0.1}
        sweeper = RunningWorker(Worker(App(), own_server.dsn, queues=["sweeper"], **options)).start()
        answered: list[float] = []  # (monotonic() of each of the sweeper's scans that answered)
        scanned = sweeper.worker.metrics.scanned

        def counted(shard: int, ok: bool, *args, **kwargs) -> None:
            if ok:
                answered.append(time.monotonic())
            scanned(shard, ok, *args, **kwargs)

        monkeypatch.setattr(sweeper.worker.metrics, "scanned", counted)
        time.sleep(LOST_AFTER + BEAT)  # the sweeper's scans have answered for every lost_after
        own_server.pause()
        os.kill(holder.pid, signal.SIGSTOP)
        time.sleep(LOST_AFTER + BEAT)  # an outage past lost_after: every worker silent past it
        own_server.resume()
        back = time.monotonic()

        # The sweeper's scans back (every 0.1 s) have answered for thaw_after: the holder is
        # silent past its lost_after in each.
        def answered_since(start: float) -> float:
            after = [t for t in answered if t > start]
            return after[-1] - after[0] if after else -1.0

        wait_until(lambda: answered_since(back) >= thaw_after, "the sweeper's scans back")
        os.kill(holder.pid, signal.SIGCONT)
        time.sleep(LOST_AFTER + 2 * BEAT)  # the sweeper's scans have answered for lost_after again
        assert _attempts(own_server.dsn) == running, "the live holder's attempt was taken"
        flag.touch()
        with Client(own_server.dsn) as client:
            assert client.get_handle(handle.execution_id).result(timeout=30) == 1
    finally:
        flag.touch()
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait(timeout=10)
        if sweeper is not None:
            sweeper.stop()


@pytest.mark.chaos
def test_no_live_workers_task_is_taken_for_lost_after_the_database_comes_back(
    own_server, tmp_path, monkeypatch
) -> None:
    """The sweeper's first pass back (its lost_after the holder's) leaves the holder."""
    _outage(own_server, tmp_path, monkeypatch, BEAT, LOST_AFTER, thaw_after=0.0)


@pytest.mark.chaos
def test_a_scanner_of_a_shorter_lost_after_waits_for_the_lost_workers_own(
    own_server, tmp_path, monkeypatch
) -> None:
    """A mixed fleet: the sweeper heartbeats every 0.2 s (lost after 0.6 s), the holder every
    0.5 s (lost after 4 s), paused until the sweeper's scans back have answered for 0.8 s, past
    the sweeper's own lost_after: the sweeper waits for the holder's."""
    _outage(own_server, tmp_path, monkeypatch, 0.2, 0.6, thaw_after=0.8)
