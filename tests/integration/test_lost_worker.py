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
import time

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


# A fixed worker id (a StatefulSet pod's name): lost_after an hour and start_to_close ten minutes,
# so only the register of the id by a new process can bring the attempt back within the test.
FIXED = "heartbeat_interval={beat}, lost_after=3600, poll_interval=0.2, run_retention=False"


def _fixed_id_process(db: str, worker_id: str, stderr, beat: float = 5) -> subprocess.Popen:
    options = f"worker_id={worker_id!r}, " + FIXED.format(beat=beat)
    return worker_process(db, "test_lost_worker", options, stderr=stderr)


def _worker_row(db: str, worker_id: str) -> tuple[str, int]:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute("SELECT status, pid FROM harvest.workers WHERE id = %s", (worker_id,)).fetchone()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.chaos
def test_a_worker_restarted_under_its_fixed_id_takes_its_dead_predecessors_activity_back(db, tmp_path):
    """The restarted process's register (a new incarnation of the id) fails the killed one's
    attempt with WorkerLost and the retry runs on it: before, its register reset the id's
    lost_at and the attempt waited for its start_to_close."""
    log_path = tmp_path / "second.log"
    first = _fixed_id_process(db, "pod-0", subprocess.DEVNULL)
    second = None
    try:
        with Client(db) as client:
            handle = client.start_workflow(chores, str(tmp_path / "never"), workflow_id="lost-restart")
            wait_until(lambda: _running_attempt(db, first.pid), "the first attempt on the first process")
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=10)
            with log_path.open("wb") as log_file:
                second = _fixed_id_process(db, "pod-0", log_file)
            assert handle.result(timeout=60) == {"attempt": 2, "pid": second.pid}
        assert _completions(db, handle.execution_id) == 1
        assert "the 1 task(s) it held are taken back (WorkerLost)" in log_path.read_text()
        assert _worker_row(db, "pod-0") == ("active", second.pid)
    finally:
        _stop(first)
        if second is not None:
            _stop(second)


@pytest.mark.chaos
def test_of_two_live_processes_sharing_a_worker_id_the_older_stops_its_late_result_refused(db, tmp_path):
    """A misconfiguration: a second live process registers the id. Its register takes back the
    first one's attempt (the registry cannot tell a live duplicate from a dead predecessor), the
    first one's heartbeat learns it was superseded and it stops, saying why, without stopping or
    draining the second one's row; its attempt, finished late, is refused by its fencing token."""
    flag = tmp_path / "go"
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    with first_log.open("wb") as log_file:
        first = _fixed_id_process(db, "pod-dup", log_file, beat=0.2)
    second = None
    try:
        with Client(db) as client:
            handle = client.start_workflow(chores, str(flag), workflow_id="lost-duplicate")
            wait_until(lambda: _running_attempt(db, first.pid), "the first attempt on the first process")
            with second_log.open("wb") as log_file:
                second = _fixed_id_process(db, "pod-dup", log_file, beat=0.2)
            # (the retry's claim may race the first one's next heartbeat: either may run it)
            assert handle.result(timeout=60)["attempt"] == 2
            wait_until(
                lambda: "another live process registered the same worker id" in first_log.read_text(),
                "the first process told it was superseded",
            )
            flag.touch()  # its attempt ends now: the completion carries the old claim's token
            assert first.wait(timeout=30) == 0
            assert "finished after its lease was lost" in first_log.read_text()
            assert _worker_row(db, "pod-dup") == ("active", second.pid)
            again = client.start_workflow(chores, str(flag), workflow_id="lost-duplicate-after")
            assert again.result(timeout=60) == {"attempt": 1, "pid": second.pid}
        assert _completions(db, handle.execution_id) == 1
    finally:
        _stop(first)
        if second is not None:
            _stop(second)


@workflow
async def noop(ctx) -> str:
    return "done"


def test_a_worker_silent_past_its_heartbeats_heartbeats_before_it_claims(db, start_worker):
    """A swept worker (expire_lost_workers cleared its lost_at) that comes back (thawed,
    reconnected) and claims before its heartbeat loop turns, then dies, would leave what it
    claimed to the leases: unwatched until it heartbeats. A claim after a silence of 2 heartbeat
    intervals heartbeats first, so the row is watched again before it holds anything."""
    running = start_worker(App([noop]), heartbeat_interval=60)  # (its heartbeat loop: a minute away)
    worker_id = running.worker.worker_id
    wait_until(lambda: _worker_row(db, worker_id), "the worker's registration")
    with psycopg.connect(db, autocommit=True) as conn:  # what a sweep of it leaves
        conn.execute("UPDATE harvest.workers SET lost_at = NULL WHERE id = %s", (worker_id,))
    for lane in running.worker.lanes:  # silent since long before the sweep
        lane.beat_at = -1e9
    with Client(db) as client:
        assert client.start_workflow(noop).result(timeout=30) == "done"
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute("SELECT lost_at FROM harvest.workers WHERE id = %s", (worker_id,)).fetchone()
        (lost_at,) = row
    assert lost_at is not None, "the claim was made by a worker nobody watches"


@pytest.mark.chaos
def test_a_worker_thawed_after_a_freeze_past_its_lost_after_does_not_sweep_itself(db, tmp_path):
    """A worker frozen (SIGSTOP) past its lost_after with no other scanner about: thawed, its scan
    (every 0.1 s) is due before its heartbeat (every 1 s), and its scans, answered before the
    freeze, had no break in its eyes: it took back its own attempt (WorkerLost) before its
    heartbeat moved its lost_at. It heartbeats first now."""
    flag = tmp_path / "go"
    options = (
        "heartbeat_interval=1.0, lost_after=3.0, poll_interval=0.2, scan_interval=0.1, run_retention=False"
    )
    proc = worker_process(db, "test_lost_worker", options, stderr=subprocess.DEVNULL)
    try:
        with Client(db) as client:
            handle = client.start_workflow(chores, str(flag), workflow_id="lost-thawed")
            wait_until(lambda: _running_attempt(db, proc.pid), "the first attempt on the worker process")
            time.sleep(4.0)  # its scans answer for its lost_after: it sweeps lost workers
            os.kill(proc.pid, signal.SIGSTOP)
            time.sleep(4.0)  # frozen past its lost_after
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(2.0)  # (a scan pass and a heartbeat after the thaw)
            assert _running_attempt(db, proc.pid), "the thawed worker took back its own attempt"
            flag.touch()
            assert handle.result(timeout=30) == {"attempt": 1, "pid": proc.pid}
    finally:
        _stop(proc)
