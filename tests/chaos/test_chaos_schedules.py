"""Three schedulers race on one every-second schedule and one is SIGKILLed in the middle of a
tick (its firings and run starts written, not committed): no slot fires twice, none is lost.

Each scheduler is a real process (tests/chaos/run_scheduler.py) on the real clock; the proof is
in the database: one firing and one run per slot (workflow id ``sched:race:{unix_ts}``), every
second from the first slot to the last, none missed, and the slots the killed process held were
fired once, by another scheduler.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from harvest.db.sqlapi import SqlApi

pytestmark = pytest.mark.chaos

RUNNER = Path(__file__).with_name("run_scheduler.py")


def _spawn(db: str, seconds: float, hold: float) -> subprocess.Popen:
    env = {**os.environ, "HARVEST_DATABASE_URL": db}
    return subprocess.Popen(
        [sys.executable, str(RUNNER), str(seconds), str(hold)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def kill_mid_tick(victim: subprocess.Popen) -> list[str]:
    """SIGKILL ``victim`` (a run_scheduler.py) once it holds a tick open (its firings and run
    starts written, not committed): the slots it held."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = victim.stdout.readline()
        assert line, "the victim ended before it held a tick"
        if line.startswith("HOLDING"):
            os.kill(victim.pid, signal.SIGKILL)  # mid-tick: its firings are not committed
            victim.wait(10)
            return json.loads(line.split(" ", 1)[1])
    raise AssertionError("the victim never held a tick open")


def test_three_racing_schedulers_and_a_kill_mid_tick_fire_each_slot_once(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        SqlApi(conn).create_schedule("race", "race_wf", cron="* * * * * *", overlap="allow_all")
    # The victim runs until it is killed: among three racers it may lose every slot for a while
    # (each second one of them wins), and after the other two stop it wins the next tick alone.
    procs = [_spawn(db, 30, 0.3), _spawn(db, 8, 0.3), _spawn(db, 8, 0.3)]
    victim = procs[0]
    held = kill_mid_tick(victim)
    # A scheduler started after the kill joins the two survivors.
    procs.append(_spawn(db, 4, 0.1))
    outputs = [p.communicate(timeout=60)[0] for p in procs[1:]]
    done = [
        json.loads(line.split(" ", 1)[1])
        for out in outputs
        for line in out.splitlines()
        if line.startswith("DONE")
    ]
    assert len(done) == 3, outputs

    with psycopg.connect(db) as conn:
        firings = conn.execute(
            "SELECT f.slot_at, f.status, f.workflow_id, f.execution_id FROM harvest.schedule_firings AS f "
            "ORDER BY f.slot_at"
        ).fetchall()
        runs = conn.execute(
            "SELECT workflow_id, count(*) FROM harvest.executions WHERE workflow_id LIKE 'sched:race:%' "
            "GROUP BY workflow_id"
        ).fetchall()
        schedule = conn.execute("SELECT last_slot_at, missed_slots FROM harvest.schedules").fetchone()
    slots = [f[0] for f in firings]
    assert len(slots) >= 8, "the schedule fired every second while the schedulers ran"
    assert all(f[1] == "started" for f in firings)
    # No double fire: one run per workflow id, one workflow id per firing.
    assert all(n == 1 for _, n in runs)
    assert {w for w, _ in runs} == {f[2] for f in firings}
    assert {f"sched:race:{int(s.timestamp())}" for s in slots} == {f[2] for f in firings}
    # No lost slot: every second from the first to the last, none missed.
    assert [int(s.timestamp()) for s in slots] == list(
        range(int(slots[0].timestamp()), int(slots[-1].timestamp()) + 1)
    )
    assert schedule[0] == slots[-1] and schedule[1] == 0
    # The killed tick's slots were fired once, by another scheduler.
    fired = {s.astimezone(dt.UTC) for s in slots}
    assert {dt.datetime.fromisoformat(s) for s in held} <= fired
    # The schedulers did race: some tick found the row held by another (busy) or moved on (stale).
    assert sum(d["busy"] + d["stale"] for d in done) > 0, done


def test_a_scheduler_killed_holding_a_dag_slot_lets_a_waiting_trigger_through_once(db: str) -> None:
    """A DAG bounded to one RUNNING run, its schedule every second. A scheduler fires a slot (the
    run's start written, the schedule's and the DAG's rows locked, not committed); a trigger of
    the DAG waits for it; the scheduler is SIGKILLed. Its firing rolls back, the trigger starts
    the one run, and the survivor fires the killed slot again: skipped (max_active_runs), so one
    run. (The firing did not lock the DAG's row nor count the triggered run: two ran.)"""
    with psycopg.connect(db, autocommit=True) as conn:
        dag = [{"dag_name": "gated", "queue": "default", "tasks": [], "max_active_runs": 1}]
        conn.execute("SELECT harvest.register_dags(%s::jsonb)", (json.dumps(dag),))
        SqlApi(conn).create_schedule("gated", "gated", cron="* * * * * *", kind="dag")
    victim = _spawn(db, 30, 30)
    line = victim.stdout.readline()
    assert line.startswith("HOLDING"), line
    held = json.loads(line.split(" ", 1)[1])
    outcome: dict[str, object] = {}

    def trigger() -> None:
        with psycopg.connect(db, autocommit=True, application_name="trigger") as conn:
            outcome["run"] = conn.execute("SELECT execution_id FROM harvest.trigger_dag('gated')").fetchone()

    thread = threading.Thread(target=trigger, daemon=True)
    thread.start()
    with psycopg.connect(db, autocommit=True) as watch:
        deadline = time.monotonic() + 10
        while not watch.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'trigger'"
            " AND datname = current_database() AND wait_event_type = 'Lock')"
        ).fetchone()[0]:  # type: ignore[index]  # one row
            assert time.monotonic() < deadline and thread.is_alive(), "the trigger did not wait for the tick"
            time.sleep(0.01)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)
    thread.join(10)
    assert outcome.get("run"), outcome
    survivor = _spawn(db, 2, 0.05)
    out = survivor.communicate(timeout=60)[0]
    assert "DONE" in out, out

    with psycopg.connect(db) as conn:
        running = conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE workflow_name = 'gated' AND status = 'RUNNING'"
        ).fetchone()
        killed = conn.execute(
            "SELECT status, reason FROM harvest.schedule_firings WHERE slot_at = %s", (held[0],)
        ).fetchone()
    assert running == (1,)
    assert killed == ("skipped", "max_active_runs")
