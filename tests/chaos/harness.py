"""Helpers for the chaos tests: worker processes, waiting, and history invariants."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

HERE = Path(__file__).resolve().parent
RUN_WORKER = HERE / "run_worker.py"

COMMAND_EVENTS = ("ActivityScheduled", "TimerStarted", "MarkerRecorded")
RESOLUTION_EVENTS = ("ActivityCompleted", "ActivityFailed", "TimerFired")


def query(dsn: str, sql: str, params: Any = None) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else []


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class WorkerProcs:
    """Worker subprocesses of one test; every one is killed at teardown."""

    def __init__(self, dsn: str, log_dir: Path):
        self.dsn = dsn
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []
        self.log_paths: dict[int, Path] = {}

    def start(
        self,
        *,
        concurrency: int = 4,
        workflow_lease: float = 2.0,
        shutdown_grace: float = 2.0,
        wait: bool = True,
        env: dict[str, str] | None = None,
        database_url: str | None = None,
        prefix: Sequence[str] = (),
        args: Sequence[str] = (),
    ) -> subprocess.Popen:
        """A worker process on the test's database; ``database_url`` is another way to it (the
        test still reads it at ``self.dsn``), ``prefix`` a command the worker runs under (as
        ``ip netns exec NAME``, which keeps the pid), ``args`` more of run_worker.py's options."""
        n = len(self.procs) + 1
        url = database_url or self.dsn
        env = dict(os.environ, HARVEST_DATABASE_URL=url, PYTHONUNBUFFERED="1", **(env or {}))
        path = self.log_dir / f"worker-{n}.log"
        with open(path, "wb") as log:
            proc = subprocess.Popen(
                [
                    *prefix,
                    sys.executable,
                    str(RUN_WORKER),
                    "--concurrency",
                    str(concurrency),
                    "--workflow-lease",
                    str(workflow_lease),
                    "--shutdown-grace",
                    str(shutdown_grace),
                    *args,
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.procs.append(proc)
        self.log_paths[proc.pid] = path
        if wait:
            self.wait_registered(proc)
        return proc

    def wait_registered(self, proc: subprocess.Popen, timeout: float = 60.0) -> None:
        """Until ``proc`` has registered as an active worker; a bound on a hang, long enough for
        a worker process's start at CI's load (seconds of imports and connects at load 15)."""

        def registered() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"worker {proc.pid} exited with {proc.returncode}:\n{self.log(proc)}")
            return bool(
                query(
                    self.dsn,
                    "SELECT 1 FROM harvest.workers WHERE pid = %s AND status = 'active'",
                    (proc.pid,),
                )
            )

        wait_until(registered, timeout, f"worker {proc.pid} to register")

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        if proc.poll() is None:
            os.kill(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait(timeout=10)

    def alive(self) -> list[subprocess.Popen]:
        return [p for p in self.procs if p.poll() is None]

    def log(self, proc: subprocess.Popen) -> str:
        return self.log_paths[proc.pid].read_text(errors="replace")

    def all_logs(self) -> str:
        parts = []
        for proc in self.procs:
            parts.append(f"----- worker pid {proc.pid} (exit {proc.poll()}) -----\n{self.log(proc)}")
        return "\n".join(parts)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not hang
                pass


def create_side_tables(dsn: str) -> None:
    from apps import RUNS_DDL

    query(dsn, RUNS_DDL)


def runs(dsn: str, execution_id: str | None = None) -> list[dict[str, Any]]:
    if execution_id is None:
        return query(dsn, "SELECT * FROM chaos_runs ORDER BY id")
    return query(dsn, "SELECT * FROM chaos_runs WHERE execution_id = %s ORDER BY id", (execution_id,))


def history(dsn: str, execution_id: str) -> list[dict[str, Any]]:
    return query(
        dsn,
        "SELECT event_id, event_type, event_data FROM harvest.events "
        "WHERE execution_id = %s ORDER BY event_id",
        (execution_id,),
    )


def count_events(events: list[dict[str, Any]], event_type: str, seq: int | None = None) -> int:
    return sum(
        1
        for e in events
        if e["event_type"] == event_type and (seq is None or e["event_data"].get("seq") == seq)
    )


def check_history(events: list[dict[str, Any]], *, completed: bool = True) -> None:
    """The invariants every history must keep, however its workers died."""
    ids = [e["event_id"] for e in events]
    assert ids == list(range(1, len(ids) + 1)), f"event ids are not gapless: {ids}"
    assert events[0]["event_type"] == "WorkflowStarted"
    commands = Counter(e["event_data"]["seq"] for e in events if e["event_type"] in COMMAND_EVENTS)
    dup = {seq: n for seq, n in commands.items() if n > 1}
    assert not dup, f"command applied more than once (seq: count): {dup}\n{events}"
    scheduled = {e["event_data"]["seq"] for e in events if e["event_type"] == "ActivityScheduled"}
    timers = {e["event_data"]["seq"] for e in events if e["event_type"] == "TimerStarted"}
    resolved = Counter(
        (e["event_type"] == "TimerFired", e["event_data"]["seq"])
        for e in events
        if e["event_type"] in RESOLUTION_EVENTS
    )
    dup = {k: n for k, n in resolved.items() if n > 1}
    assert not dup, f"an invocation was resolved more than once: {dup}\n{events}"
    for is_timer, seq in resolved:
        assert seq in (timers if is_timer else scheduled), f"resolution of unknown seq {seq}"
    ends = [
        e for e in events if e["event_type"] in ("WorkflowCompleted", "WorkflowFailed", "WorkflowTerminated")
    ]
    if completed:
        assert [e["event_type"] for e in ends] == ["WorkflowCompleted"], ends
        assert events[-1]["event_type"] == "WorkflowCompleted", "events after the end"
        assert resolved.keys() == {(False, s) for s in scheduled} | {(True, s) for s in timers}, (
            "a completed run left an invocation unresolved"
        )
    else:
        assert len(ends) <= 1


def workflow_task(dsn: str, execution_id: str) -> dict[str, Any] | None:
    """The run's workflow task (status, attempt, lease owner), locked or not; None if it has none."""
    rows = query(
        dsn,
        "SELECT status, attempt, lease_owner FROM harvest.tasks "
        "WHERE execution_id = %s AND kind = 'workflow'",
        (execution_id,),
    )
    return rows[0] if rows else None


def unlocked_workflow_task(dsn: str, execution_id: str) -> dict[str, Any] | None:
    """The run's workflow task when no transaction holds it locked (an open claim does), else None."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT status, attempt, lease_owner FROM harvest.tasks "
            "WHERE execution_id = %s AND kind = 'workflow' FOR UPDATE SKIP LOCKED",
            (execution_id,),
        ).fetchone()
        conn.rollback()
    return None if row is None else {"status": row[0], "attempt": row[1], "lease_owner": row[2]}


def hold_in_an_open_claim(
    workers: WorkerProcs, hold: Path, start_run: Callable[[], Any], tries: int = 3, **start: Any
) -> tuple[subprocess.Popen, Any]:
    """Worker A (``workers.start(**start)``, run with CHAOS_HOLD_DECISION) holding the first
    decision of a run (``start_run()``'s handle) in a claim still open (docs/internals.md, "A
    claim that decides"). Only a claim woken by a notification on an idle worker stays open, so
    the run starts once A sleeps; but A's last look for work after its sleep mark commits alone,
    and on a loaded machine (CI runs its suites side by side) it can come after the settle below
    and take the run. Then that A is killed, its run terminated (left alone, its lease would
    expire and the next A, holding every first decision, would take it and hold it instead of
    the next try's run), and the next try starts another A and another run.

    The waits are long: under CI's load (15 on two cores) a worker process takes seconds to
    start, and a wait here bounds a hang, it measures nothing."""
    entered = hold.with_name(hold.name + ".entered")
    for _ in range(tries):
        entered.unlink(missing_ok=True)
        a = workers.start(env={"CHAOS_HOLD_DECISION": str(hold)}, **start)
        wait_until(
            lambda pid=a.pid: query(
                workers.dsn, "SELECT 1 FROM harvest.workers WHERE pid = %s AND sleeping", (pid,)
            ),
            60,
            "worker A to be idle, waiting for a notification",
        )
        time.sleep(0.3)  # (the sleep mark is set just before A's last claim ahead of its wait)
        handle = start_run()
        wait_until(entered.exists, 60, "worker A to hold the run's first decision")
        if unlocked_workflow_task(workers.dsn, handle.execution_id) is None:
            return a, handle  # locked: the claim that handed it over is still open
        workers.kill(a)
        handle.terminate("the chaos harness: taken in a committed claim, not held in an open one")
    raise AssertionError(f"worker A never held a decision in an open claim in {tries} tries")


# The history of a run of one activity decided by one worker, as wf_held_decision's.
ONE_ACTIVITY_HISTORY = [
    "WorkflowStarted",
    "WorkflowTaskCompleted",
    "ActivityScheduled",
    "ActivityCompleted",
    "WorkflowTaskCompleted",
    "WorkflowCompleted",
]


def check_decided_once(dsn: str, execution_id: str) -> None:
    """A one-activity run (wf_held_decision) whose history is what one worker would have written,
    its activity run once, however many workers tried."""
    events = history(dsn, execution_id)
    check_history(events)
    assert [e["event_type"] for e in events] == ONE_ACTIVITY_HISTORY
    assert query(dsn, "SELECT count(*) AS n FROM chaos_runs WHERE execution_id = %s", (execution_id,)) == [
        {"n": 1}
    ]


def check_all_histories(dsn: str) -> int:
    """check_history over every execution of the database; returns how many."""
    rows = query(
        dsn,
        "SELECT execution_id, event_id, event_type, event_data FROM harvest.events "
        "ORDER BY execution_id, event_id",
    )
    by_execution: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        by_execution.setdefault(row["execution_id"], []).append(row)
    for events in by_execution.values():
        check_history(events)
    return len(by_execution)


def overlapping_runs(dsn: str) -> list[dict[str, Any]]:
    """Pairs of finished runs of one invocation whose time intervals overlap."""
    return query(
        dsn,
        """
        SELECT a.execution_id, a.seq, a.id AS first_run, b.id AS second_run,
               a.started_at AS a_start, a.finished_at AS a_end, b.started_at AS b_start,
               b.finished_at AS b_end
        FROM chaos_runs AS a JOIN chaos_runs AS b
          ON a.execution_id = b.execution_id AND a.seq = b.seq AND a.kind = b.kind AND a.id < b.id
        WHERE a.finished_at IS NOT NULL AND b.finished_at IS NOT NULL
          AND tstzrange(a.started_at, a.finished_at) && tstzrange(b.started_at, b.finished_at)""",
    )
