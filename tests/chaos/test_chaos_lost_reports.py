"""A worker process whose result commits lose their backend mid-statement sends them again
(harvest/db/resend.py): each activity runs once, no attempt waits out its start_to_close.

A trigger makes the insert of an ActivityCompleted event wait for an advisory lock the test
holds; the test terminates the backends that wait on it, ROUNDS times, then lets go. Before,
the first terminated batch was tried once more item by item and its handlers crashed ("crashed
the handler; its lease will expire"): their attempts waited for start_to_close (300 s here)."""

from __future__ import annotations

import time

import psycopg
import pytest
from apps import wf_single
from harness import check_history, count_events, history, runs

pytestmark = pytest.mark.chaos

GATE = 7_340_002
ROUNDS = 3
RUNS = 5


def _terminate_waiting(admin: psycopg.Connection, rounds: int) -> int:
    """Terminate the backends waiting on GATE, ``rounds`` times (each round waits for the next
    send to arrive and for its backends to end); the number terminated."""
    ended = 0
    for round_ in range(1, rounds + 1):
        deadline = time.monotonic() + 30  # (a bound on a hang, not a measure of speed)
        waiting = "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s"
        while not (pids := [r[0] for r in admin.execute(waiting, [GATE]).fetchall()]):
            assert time.monotonic() < deadline, f"round {round_}: no result was sent (again)"
            time.sleep(0.01)
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
        while admin.execute(alive, [pids]).fetchone()[0]:
            time.sleep(0.01)
        ended += len(pids)
    return ended


def test_results_whose_backends_are_terminated_mid_commit_are_sent_again(chaos_db, workers, client):
    with psycopg.connect(chaos_db, autocommit=True) as admin:
        admin.execute(
            f"""
            CREATE FUNCTION public.chaos_gate() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_advisory_xact_lock({GATE}); RETURN NEW; END $$;
            CREATE TRIGGER chaos_gate BEFORE INSERT ON harvest.events FOR EACH ROW
            WHEN (NEW.event_type = 'ActivityCompleted') EXECUTE FUNCTION public.chaos_gate();
            """
        )
        admin.execute("SELECT pg_advisory_lock(%s)", [GATE])
        worker = workers.start(concurrency=8)
        handles = [client.start_workflow(wf_single, "sleep:0", 300.0, None) for _ in range(RUNS)]
        assert _terminate_waiting(admin, ROUNDS) >= ROUNDS
        admin.execute("SELECT pg_advisory_unlock(%s)", [GATE])
        assert [h.result(timeout=60) for h in handles] == ["run1"] * RUNS
        admin.execute("DROP TRIGGER chaos_gate ON harvest.events")
    for handle in handles:
        done = runs(chaos_db, handle.execution_id)
        assert [(r["attempt"], r["finished_at"] is not None) for r in done] == [(1, True)]  # ran once
        events = history(chaos_db, handle.execution_id)
        check_history(events)
        assert count_events(events, "ActivityCompleted") == 1
        assert count_events(events, "ActivityFailed") == 0  # no StartToCloseTimeout
    log = workers.log(worker)
    assert "sending it again" in log
    assert "crashed the handler" not in log
    assert "was cut off by an outage" not in log  # (what a handler an outage ended says)
