"""SIGKILL the worker of a workflow that signals another, around the signal's decision.

Killed before its decision commits, the sender's workflow task runs again and decides the
signal again: the target receives it once. Killed after the decision committed while the
target was busy (its row locked, so the relay waited), the next worker's scanner delivers
the relay and reports it to the sender: again once. Either way the sender's history
replays.
"""

from __future__ import annotations

import psycopg
import pytest
from apps import app, wf_ext_sender, wf_signals
from harness import check_history, history, query, runs, wait_until

from harvest.testing import WorkflowReplayer

pytestmark = pytest.mark.chaos


def _types(dsn: str, execution_id: str) -> list[str]:
    return [e["event_type"] for e in history(dsn, execution_id)]


def _signals(dsn: str, execution_id: str) -> list[dict]:
    return [e["event_data"] for e in history(dsn, execution_id) if e["event_type"] == "SignalReceived"]


def _check(dsn: str, sender: str, target: str) -> None:
    received = _signals(dsn, target)
    assert [(s["payload"], s["sender_execution_id"]) for s in received] == [("from-sender", sender)], received
    events = history(dsn, sender)
    check_history(events)
    assert _types(dsn, sender).count("ExternalSignalRequested") == 1
    assert _types(dsn, sender).count("ExternalSignalDelivered") == 1
    WorkflowReplayer(app).replay_or_raise(events)
    assert query(dsn, "SELECT count(*) AS n FROM harvest.relays")[0]["n"] == 0


def test_sender_killed_before_its_decision_commits_signals_once(chaos_db, workers, client):
    a = workers.start(concurrency=2)
    target = client.start_workflow(wf_signals, 1, [])
    sender = client.start_workflow(wf_ext_sender, target.execution_id, True)
    wait_until(
        lambda: [r for r in runs(chaos_db, sender.execution_id) if r["kind"] == "local"],
        15,
        "the sender's step to hold its decision",
    )
    assert _signals(chaos_db, target.execution_id) == [], "the decision has not committed"
    workers.kill(a)
    workers.start(concurrency=2)  # the sender's workflow task lease runs out; the step runs again
    assert sender.result(timeout=30) == "sent"
    assert target.result(timeout=30) == ["from-sender"]
    _check(chaos_db, sender.execution_id, target.execution_id)


def test_sender_killed_after_deciding_before_delivery_signals_once(chaos_db, workers, client):
    a = workers.start(concurrency=2)
    target = client.start_workflow(wf_signals, 1, [])
    wait_until(
        lambda: len(history(chaos_db, target.execution_id)) >= 2, 15, "the target to wait for its signal"
    )
    with psycopg.connect(chaos_db) as blocker:
        blocker.execute("SELECT 1 FROM harvest.executions WHERE id = %s FOR UPDATE", (target.execution_id,))
        sender = client.start_workflow(wf_ext_sender, target.execution_id, False)
        wait_until(
            lambda: "ExternalSignalRequested" in _types(chaos_db, sender.execution_id),
            15,
            "the sender's decision",
        )
        assert query(chaos_db, "SELECT count(*) AS n FROM harvest.relays")[0]["n"] == 1, "the relay waits"
        workers.kill(a)
        blocker.rollback()
    assert _signals(chaos_db, target.execution_id) == [], "nothing delivers while no worker runs"
    workers.start(concurrency=2)
    assert sender.result(timeout=30) == "sent"
    assert target.result(timeout=30) == ["from-sender"]
    _check(chaos_db, sender.execution_id, target.execution_id)
