"""A bulk pause (harvest.pause_workflows, a bounded step a transaction) races runs completing,
being signalled, cancelled and terminated on other connections, and its own process is SIGKILLed
in the middle of a step: no run is left half-paused (a PAUSED run with a pending task, a RUNNING
one with a paused task), none is missed or paused twice, the batch goes on from its last committed
cursor in a new process, and after a bulk resume every run ends (docs/lifecycle.md, "Pausing many
runs")."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
from apps import wf_entity, wf_short, wf_signals
from harness import query, wait_until

import harvest

pytestmark = pytest.mark.chaos

RUNNER = Path(__file__).with_name("run_batch.py")

# A run whose state and tasks disagree: PAUSED with a task a worker may claim, or RUNNING with a
# task no claim reads (lifecycle.sql: a pause moves both in one transaction).
HALF_PAUSED = (
    "SELECT e.id::text, e.status, t.kind, t.status AS task_status FROM harvest.executions AS e"
    " JOIN harvest.tasks AS t ON t.execution_id = e.id"
    " WHERE (e.status = 'PAUSED' AND t.status = 'pending') OR (e.status <> 'PAUSED' AND t.status = 'paused')"
)


def _batch(db: str, action: str, after: str, limit: int, hold: float, batch: str, cursor: str | None = None):
    env = {**os.environ, "HARVEST_DATABASE_URL": db}
    args = [
        sys.executable,
        str(RUNNER),
        action,
        after,
        str(limit),
        str(hold),
        batch,
        *([cursor] if cursor else []),
    ]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _lines(out: str, what: str) -> list:
    return [json.loads(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith(what + " ")]


def test_a_bulk_pause_killed_mid_step_races_completions_signals_and_cancels(
    chaos_db, workers, client
) -> None:
    db = chaos_db
    after = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)).isoformat()
    workers.start(concurrency=8)
    short = [client.start_workflow(wf_short, n, 4) for n in range(30)]  # some end while the batch runs
    waiting = [client.start_workflow(wf_signals, 10**6, []) for _ in range(30)]  # signalled, never done
    # Continued as new every four signals: a successor started after the batch began is not
    # selected (docs/lifecycle.md), and one a paused run's decision in flight starts runs.
    rotating = [client.start_workflow(wf_entity, 10**6, [], []) for _ in range(10)]
    ids = {h.execution_id for h in short + waiting + rotating}
    stop = threading.Event()
    errors: list[BaseException] = []
    seen_half: list[tuple] = []

    def racer(act) -> None:
        rng = random.Random(len(errors))
        try:
            with harvest.Client(db) as own:
                while not stop.is_set():
                    act(own, rng)
        except BaseException as exc:
            errors.append(exc)

    def signaller(own: harvest.Client, rng: random.Random) -> None:
        handle = own.get_handle(rng.choice(waiting + rotating).execution_id)
        try:
            handle.signal("item", rng.randrange(100))
        except harvest.WorkflowNotRunning:
            pass

    ended: list[str] = []

    def ender(own: harvest.Client, rng: random.Random) -> None:
        if len(ended) >= 8:
            stop.wait(0.05)
            return
        run = rng.choice(waiting).execution_id
        handle = own.get_handle(run)
        try:
            handle.cancel("raced") if rng.random() < 0.5 else handle.terminate("raced")
            ended.append(run)
        except harvest.WorkflowNotRunning:
            pass
        stop.wait(0.02)

    def sampler() -> None:
        # One snapshot a read, on a session of its own, as often as it can.
        with psycopg.connect(db, autocommit=True) as conn:
            while not stop.is_set():
                seen_half.extend(conn.execute(HALF_PAUSED).fetchall())

    threads = [threading.Thread(target=racer, args=(f,), daemon=True) for f in (signaller, signaller, ender)]
    threads.append(threading.Thread(target=sampler, daemon=True))
    for t in threads:
        t.start()
    victim = _batch(db, "pause", after, 5, 0.2, "chaos-pause")
    committed: list[dict] = []
    for line in victim.stdout:
        if line.startswith("COMMITTED "):
            committed.append(json.loads(line.split(" ", 1)[1]))
        if line.startswith("HOLDING ") and len(committed) == 3:
            os.kill(victim.pid, signal.SIGKILL)  # mid-step: its pauses not committed
            break
    victim.wait(10)
    assert len(committed) == 3 and committed[-1]["next_cursor"], committed
    rest = _batch(db, "pause", after, 5, 0.05, "chaos-pause", committed[-1]["next_cursor"])
    out = rest.communicate(timeout=60)[0]
    assert rest.returncode == 0 and "DONE" in out, out
    committed += _lines(out, "COMMITTED")
    stop.set()
    for t in threads:
        t.join(20)
    assert not errors, errors
    assert not seen_half, seen_half[:5]

    # Each run found once: every step's failures empty, the acted ids distinct, one WorkflowPaused
    # a paused run, and every run still live paused (none missed behind the kill).
    # The runs the batch selects: made before its first step (its as_of), successors included.
    selected = {
        r["id"]
        for r in query(
            db,
            "SELECT e.id::text FROM harvest.executions AS e WHERE e.created_at <= (SELECT"
            " min((a.details ->> 'as_of')::timestamptz) FROM harvest.audit_log AS a"
            " WHERE a.operation = 'workflow.bulk_pause')",
        )
    }
    assert ids <= selected
    acted = [r for step in committed for r in step["execution_ids"]]
    assert all(not step["failures"] for step in committed), committed
    assert len(acted) == len(set(acted)) and set(acted) <= selected
    paused_events = query(
        db,
        "SELECT execution_id::text AS id, count(*) AS n FROM harvest.events"
        " WHERE event_type = 'WorkflowPaused' GROUP BY 1",
    )
    assert {r["id"] for r in paused_events} == set(acted)
    assert all(r["n"] == 1 for r in paused_events), paused_events
    states = {r["id"]: r["status"] for r in query(db, "SELECT id::text, status FROM harvest.executions")}
    assert not [i for i in selected if states[i] == "RUNNING"], "a run the batch missed is running"
    assert {i for i, state in states.items() if state == "PAUSED"} == {
        i for i in acted if states[i] == "PAUSED"
    }
    assert sum(s["acted"] for s in committed) == len(acted)
    assert not query(db, HALF_PAUSED)

    # Resumed (by filter), each live run finishes: the paused tasks went back to the queue.
    resumed = client.resume_workflows(
        created_after=dt.datetime.fromisoformat(after), reason="over", batch_size=7
    )
    assert resumed["acted"] == sum(1 for state in states.values() if state == "PAUSED"), resumed
    assert not query(db, HALF_PAUSED)
    for h in waiting + rotating:  # its workflow code handles the cancel: it runs again
        try:
            client.get_handle(h.execution_id).cancel("over")
        except harvest.WorkflowNotRunning:
            pass

    def all_ended() -> bool:
        live = query(
            db,
            "SELECT count(*) AS n FROM harvest.executions WHERE status IN ('RUNNING', 'PAUSED')",
        )
        return live[0]["n"] == 0

    wait_until(all_ended, 60, "every resumed run to end")
    final = query(db, "SELECT status, count(*) AS n FROM harvest.executions GROUP BY 1")
    assert any(r["status"] == "CONTINUED_AS_NEW" for r in final), "no run continued as new"
    assert {r["status"] for r in final} <= {"COMPLETED", "CANCELLED", "TERMINATED", "CONTINUED_AS_NEW"}, final
