"""A worker's report whose connection failed under it is sent again until the database answers
(harvest/db/resend.py), on real connections whose backends are terminated mid-statement.

A trigger makes the report's statement wait for an advisory lock the test holds (its event's
insert: ActivityCompleted for a result, ActivityFailed for a failure, WorkflowCompleted for a
decision); the test terminates the waiting backend, SENDS times, then lets go. Before, the first
terminated send crashed the handler (a result batch was tried once more item by item) and the
attempt waited for its lease: start_to_close (here 300 s), then a StartToCloseTimeout and a
second execution of the activity; a decision, its workflow lease (30 s) and a replay."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from harvest import App, Client, RetryPolicy, activity, workflow
from harvest.core.errors import WorkflowFailed

GATE = 7_340_001  # the advisory lock the gated inserts wait for
SENDS = 3  # sends terminated mid-statement before the gate opens

ran: list[str] = []


@activity(start_to_close="300s")
def answer(ctx, n: int) -> int:
    ran.append("answer")
    return n + 1


@activity(start_to_close="300s", retry=RetryPolicy.none(), dead_letter=False)
def refuse(ctx) -> None:
    ran.append("refuse")
    raise ValueError("no")


@activity(start_to_close="300s")
async def beats(ctx) -> str:
    ran.append("beats")
    await ctx.aheartbeat({"beat": 1})
    return "beaten"


@workflow
async def one_heartbeat(ctx) -> str:
    return await ctx.execute_activity(beats)


@workflow
async def one_answer(ctx, n: int) -> int:
    return await ctx.execute_activity(answer, n)


@workflow
async def one_refusal(ctx) -> None:
    await ctx.execute_activity(refuse)


@workflow
async def no_activity(ctx, n: int) -> int:
    ran.append("decided")  # once per decision the workflow code makes (a replay runs it again)
    return n * 2


APP = App(workflows=[one_answer, one_refusal, no_activity, one_heartbeat], activities=[answer, refuse, beats])


class Gate:
    """The trigger and the lock its statements wait for; ``terminate_waiting`` ends the backends
    that wait on it, one send at a time."""

    def __init__(self, db: str, event_type: str):
        self.admin = psycopg.connect(db, autocommit=True)
        if event_type == "heartbeat":  # a heartbeat writes no event: its task's update waits
            table, when = "tasks", "NEW.heartbeat_details IS DISTINCT FROM OLD.heartbeat_details"
        else:
            table, when = "events", f"NEW.event_type = '{event_type}'"
        self.table = table
        self.admin.execute(
            f"""
            CREATE FUNCTION public.resend_gate() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_advisory_xact_lock({GATE}); RETURN NEW; END $$;
            CREATE TRIGGER resend_gate BEFORE {"UPDATE" if table == "tasks" else "INSERT"} ON harvest.{table}
            FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION public.resend_gate();
            """
        )
        self.admin.execute("SELECT pg_advisory_lock(%s)", [GATE])

    def _waiting(self) -> list[int]:
        return [
            row[0]
            for row in self.admin.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s",
                [GATE],
            ).fetchall()
        ]

    def terminate_waiting(self, sends: int) -> None:
        for send in range(1, sends + 1):
            deadline = time.monotonic() + 20  # (a bound on a hang, not a measure of speed)
            while not (pids := self._waiting()):
                assert time.monotonic() < deadline, f"send {send} of the report never came"
                time.sleep(0.01)
            for pid in pids:
                self.admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            while self.admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]
            ).fetchone()[0]:
                time.sleep(0.01)

    def open(self) -> None:
        self.admin.execute("SELECT pg_advisory_unlock(%s)", [GATE])

    def close(self) -> None:
        self.admin.execute(f"DROP TRIGGER IF EXISTS resend_gate ON harvest.{self.table}")
        self.admin.execute("DROP FUNCTION IF EXISTS public.resend_gate()")
        self.admin.close()


@pytest.fixture
def gate(db: str) -> Iterator:
    made: list[Gate] = []

    def make(event_type: str) -> Gate:
        made.append(Gate(db, event_type))
        return made[-1]

    yield make
    for one in made:
        one.close()


def _events(db: str, execution_id: str) -> list[str]:
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT event_type FROM harvest.events WHERE execution_id = %s ORDER BY event_id", [execution_id]
        ).fetchall()
    return [row[0] for row in rows]


def test_a_result_whose_connection_failed_is_sent_again_and_the_activity_runs_once(
    db: str, gate, start_worker, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    ran.clear()
    closed = gate("ActivityCompleted")
    start_worker(APP)
    handle = client.start_workflow(one_answer, 41)
    closed.terminate_waiting(SENDS)
    closed.open()
    assert handle.result(timeout=60) == 42
    assert ran == ["answer"]  # one execution, no second attempt
    events = _events(db, handle.execution_id)
    assert events.count("ActivityCompleted") == 1 and "ActivityFailed" not in events
    # (a handler an outage ended says "cut off by an outage" instead: harvest.worker.worker._cut_off)
    assert not [
        r for r in caplog.records if "crashed the handler" in r.getMessage() or "cut off" in r.getMessage()
    ]


def test_a_failure_whose_connection_failed_is_sent_again(db: str, gate, start_worker, client: Client) -> None:
    ran.clear()
    closed = gate("ActivityFailed")
    start_worker(APP)
    handle = client.start_workflow(one_refusal)
    closed.terminate_waiting(SENDS)
    closed.open()
    with pytest.raises(WorkflowFailed):
        handle.result(timeout=60)
    assert ran == ["refuse"]
    events = _events(db, handle.execution_id)
    assert events.count("ActivityFailed") == 1  # ValueError's, not a StartToCloseTimeout's
    with psycopg.connect(db) as conn:
        (failure,) = conn.execute(
            "SELECT event_data -> 'failure' ->> 'error_type' FROM harvest.events"
            " WHERE execution_id = %s AND event_type = 'ActivityFailed'",
            [handle.execution_id],
        ).fetchone()
    assert failure == "ValueError"


def test_a_decision_whose_connection_failed_is_sent_again_without_waiting_for_its_lease(
    db: str, gate, start_worker, client: Client
) -> None:
    ran.clear()
    closed = gate("WorkflowCompleted")
    worker = start_worker(APP)
    worker.worker.claim_decides = False  # the decision goes by the decision batch, not in its claim
    handle = client.start_workflow(no_activity, 21)
    closed.terminate_waiting(SENDS)
    closed.open()
    assert handle.result(timeout=60) == 42
    assert ran == ["decided"]  # decided once: no lease expiry, no replay


def test_a_heartbeat_whose_connection_failed_is_sent_again(
    db: str, gate, start_worker, client: Client
) -> None:
    ran.clear()
    closed = gate("heartbeat")
    start_worker(APP)
    handle = client.start_workflow(one_heartbeat)
    closed.terminate_waiting(SENDS)
    closed.open()
    assert handle.result(timeout=60) == "beaten"
    assert ran == ["beats"]  # the heartbeat's lost connection did not fail the attempt
    assert "ActivityFailed" not in _events(db, handle.execution_id)
