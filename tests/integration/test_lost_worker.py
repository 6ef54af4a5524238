"""A lost worker's activities come back when it is known lost, not at their start_to_close
(docs/activities.md, "When a worker dies"): a worker process killed mid-activity (SIGKILL: an OOM
kill, a pod killed after its grace) or frozen (SIGSTOP: alive, but silent as if cut off from the
database) stops heartbeating; lost_after (6 x heartbeat_interval) later the scanner of another
worker fails the attempt with WorkerLost and the retry runs there, although the activity has no
heartbeat_timeout and a 10-minute start_to_close. The frozen worker, thawed, finishes its attempt
and is refused: its claim's fencing token is no longer the task's."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess

import psycopg
import pytest
from worker_helpers import wait_until, worker_process

from harvest import App, Client, RetryPolicy, activity, workflow

BEAT = 0.2  # the workers' heartbeat interval: lost 1.2 s after the last heartbeat


@activity(start_to_close="10m", retry=RetryPolicy(max_attempts=3, initial_interval=0.05))
async def chore(ctx, flag: str) -> dict:
    if ctx.attempt() == 1:  # the first attempt, in the process the test kills or freezes, waits
        while not os.path.exists(flag):
            await asyncio.sleep(0.05)
    return {"attempt": ctx.attempt(), "pid": os.getpid()}


@workflow
async def chores(ctx, flag: str) -> dict:
    return await ctx.execute_activity(chore, flag)


APP = App([chores], [chore])


def _worker_process(db: str, stderr) -> subprocess.Popen:
    return worker_process(
        db,
        "test_lost_worker",
        f"heartbeat_interval={BEAT}, poll_interval=0.2, scan_interval=0.2, run_retention=False",
        stderr=stderr,
    )


def _running_attempt(db: str, pid: int) -> bool:
    """The process ``pid``'s worker holds the activity's first attempt."""
    with psycopg.connect(db, autocommit=True) as conn:
        return bool(
            conn.execute(
                "SELECT 1 FROM harvest.tasks AS t JOIN harvest.workers AS w ON w.id = t.lease_owner"
                " WHERE t.kind = 'activity' AND t.status = 'running' AND t.attempt = 1 AND w.pid = %s",
                (pid,),
            ).fetchone()
        )


def _completions(db: str, execution_id: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM harvest.events"
            " WHERE execution_id = %s AND event_type = 'ActivityCompleted'",
            (execution_id,),
        ).fetchone()[0]


@pytest.mark.chaos
def test_a_killed_workers_activity_runs_again_on_another_worker_once_it_is_lost(db, start_worker, tmp_path):
    proc = _worker_process(db, subprocess.DEVNULL)
    try:
        with Client(db) as client:
            handle = client.start_workflow(chores, str(tmp_path / "never"), workflow_id="lost-kill")
            wait_until(lambda: _running_attempt(db, proc.pid), "the first attempt on the worker process")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            start_worker(APP, heartbeat_interval=BEAT)
            # (without the lost-worker sweep the attempt waits for its 10-minute start_to_close)
            assert handle.result(timeout=60) == {"attempt": 2, "pid": os.getpid()}
        assert _completions(db, handle.execution_id) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.chaos
def test_a_frozen_workers_late_result_is_refused_after_its_activity_ran_elsewhere(db, start_worker, tmp_path):
    flag = tmp_path / "go"
    log_path = tmp_path / "frozen.log"
    with log_path.open("wb") as log_file:
        proc = _worker_process(db, log_file)
    try:
        with Client(db) as client:
            handle = client.start_workflow(chores, str(flag), workflow_id="lost-frozen")
            wait_until(lambda: _running_attempt(db, proc.pid), "the first attempt on the worker process")
            os.kill(proc.pid, signal.SIGSTOP)  # alive, but it neither heartbeats nor reports
            start_worker(APP, heartbeat_interval=BEAT)
            assert handle.result(timeout=60) == {"attempt": 2, "pid": os.getpid()}
            # Thawed, the first attempt finishes: its completion carries the old claim's token.
            flag.touch()
            os.kill(proc.pid, signal.SIGCONT)
            wait_until(
                lambda: "finished after its lease was lost" in log_path.read_text(),
                "the thawed worker's refused completion",
            )
            assert handle.result(timeout=5) == {"attempt": 2, "pid": os.getpid()}
        assert _completions(db, handle.execution_id) == 1
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=10)
