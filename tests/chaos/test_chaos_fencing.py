"""Fencing: a worker whose lease expired can never commit, at the SQL API and in a real worker."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import psycopg
import pytest
from apps import FAST_RETRY, wf_single
from harness import check_history, count_events, history, runs, wait_until
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from harvest.core.errors import StaleTask
from harvest.db.sqlapi import translated_errors

pytestmark = pytest.mark.chaos


class Session:
    """One SQL session whose engine clock (harvest.fake_now) the test moves."""

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn

    def call(self, sql: str, *params) -> list[dict]:
        with translated_errors(), self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def set_now(self, when: dt.datetime) -> None:
        self.call("SELECT set_config('harvest.fake_now', %s, false)", when.isoformat())

    def claim(self, worker_id: str) -> list[dict]:
        return self.call("SELECT * FROM harvest.claim_tasks(%s, ARRAY['default'], 10, 2)", worker_id)

    def complete_activity(self, task: dict, result) -> None:
        self.call(
            "SELECT harvest.complete_activity(%s, %s, %s)",
            task["task_id"],
            task["fencing_token"],
            Jsonb(result),
        )

    def stale(self, sql: str, *params) -> str:
        """Run a call that must be refused as stale; return the message."""
        with pytest.raises(psycopg.Error) as raw:
            self.conn.execute(sql, params)
        assert raw.value.sqlstate == "HR004", raw.value
        with pytest.raises(StaleTask) as mapped:
            self.call(sql, *params)
        return str(mapped.value)


@pytest.fixture
def session(chaos_db: str) -> Iterator[Session]:
    with psycopg.connect(chaos_db, autocommit=True) as conn:
        yield Session(conn)


def _schedule(session: Session, execution_id: str) -> None:
    """Play the decider by hand: schedule one activity with a 1 s start_to_close."""
    [wf_task] = session.claim("decider")
    assert wf_task["kind"] == "workflow" and str(wf_task["execution_id"]) == execution_id
    command = {
        "type": "schedule_activity",
        "seq": 1,
        "name": "gated",
        "input": ["forever"],
        "queue": "default",
        "options": {
            "start_to_close": 1,
            "schedule_to_close": None,
            "heartbeat_timeout": None,
            "retry": FAST_RETRY.to_json(),
            "priority": 0,
            "dead_letter": True,
        },
    }
    session.call(
        "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s, 'decider')",
        wf_task["task_id"],
        wf_task["fencing_token"],
        Jsonb([command]),
    )


def test_late_activity_completion_is_refused_by_fencing(chaos_db, client, session):
    handle = client.start_workflow(wf_single, "forever", 1.0, None)
    _schedule(session, handle.execution_id)

    [old] = session.claim("w-old")
    assert (old["kind"], old["attempt"]) == ("activity", 1)
    now = old["lease_expires_at"]

    # 1. The lease ran out, nobody has noticed yet: the holder's result is refused all the same.
    session.set_now(now + dt.timedelta(seconds=0.5))
    assert "lease expired" in session.stale(
        "SELECT harvest.complete_activity(%s, %s, '\"old\"')", old["task_id"], old["fencing_token"]
    )
    session.stale("SELECT harvest.heartbeat_activity(%s, %s, NULL)", old["task_id"], old["fencing_token"])

    # 2. The scanner fails the attempt and schedules a retry; another worker claims it.
    expired = session.call("SELECT * FROM harvest.expire_tasks(100)")
    assert [(r["task_id"], r["outcome"]) for r in expired] == [(old["task_id"], "retry_scheduled")]
    session.set_now(now + dt.timedelta(seconds=5))
    [new] = session.claim("w-new")
    assert new["task_id"] == old["task_id"] and new["attempt"] == 2
    assert new["fencing_token"] > old["fencing_token"]
    assert "stale" in session.stale(
        "SELECT harvest.complete_activity(%s, %s, '\"old\"')", old["task_id"], old["fencing_token"]
    )
    session.stale(
        "SELECT harvest.fail_activity(%s, %s, %s)",
        old["task_id"],
        old["fencing_token"],
        Jsonb({"error_type": "Late", "message": "late", "non_retryable": True}),
    )

    # 3. The current holder commits; afterwards neither token works.
    session.complete_activity(new, "new")
    for task in (old, new):
        assert "gone" in session.stale(
            "SELECT harvest.complete_activity(%s, %s, '\"again\"')", task["task_id"], task["fencing_token"]
        )

    events = history(chaos_db, handle.execution_id)
    # (started_at: when the final attempt started, for the usage report)
    completed = [
        {k: v for k, v in e["event_data"].items() if k != "started_at"}
        for e in events
        if e["event_type"] == "ActivityCompleted"
    ]
    assert completed == [{"seq": 1, "result": "new", "attempt": 2}]
    check_history(events, completed=False)


def test_late_workflow_task_commit_is_refused_by_fencing(chaos_db, client, session):
    handle = client.start_workflow(wf_single, "forever", 1.0, None)
    [old] = session.claim("decider-old")
    now = old["lease_expires_at"]
    session.set_now(now + dt.timedelta(seconds=1))
    assert [r["outcome"] for r in session.call("SELECT * FROM harvest.expire_tasks(100)")] == ["released"]
    [new] = session.claim("decider-new")
    assert new["task_id"] == old["task_id"] and new["fencing_token"] > old["fencing_token"]

    command = {
        "type": "schedule_activity",
        "seq": 1,
        "name": "gated",
        "input": ["forever"],
        "queue": "default",
        "options": {"start_to_close": 1},
    }
    session.call(
        "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s, 'decider-new')",
        new["task_id"],
        new["fencing_token"],
        Jsonb([command]),
    )
    # The old decider answers the same batch late: refused, its commands are not applied.
    session.stale(
        "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s, 'decider-old')",
        old["task_id"],
        old["fencing_token"],
        Jsonb([command]),
    )
    session.stale(
        "SELECT harvest.fail_workflow_task(%s, %s, %s, 0)",
        old["task_id"],
        old["fencing_token"],
        Jsonb({"error_type": "X", "message": "x"}),
    )
    events = history(chaos_db, handle.execution_id)
    assert [e["event_type"] for e in events] == [
        "WorkflowStarted",
        "WorkflowTaskCompleted",
        "ActivityScheduled",
    ]
    assert events[1]["event_data"]["worker_id"] == "decider-new"
    assert session.call("SELECT count(*) AS n FROM harvest.tasks WHERE kind = 'activity'")[0]["n"] == 1


def test_real_worker_finishing_after_its_lease_is_refused(chaos_db, workers, client):
    """A heartbeat_timeout of 1 s bounds the lease; the first attempt runs on without heartbeats.

    (With start_to_close alone the worker cancels its own attempt at the deadline, so a
    late *completion* needs the shorter heartbeat lease.)
    """
    workers.start()
    workers.start()
    handle = client.start_workflow(wf_single, "until_retry_done", 20.0, 1.0)
    assert handle.result(timeout=20) == "run2"
    wait_until(
        lambda: "finished after its lease was lost" in workers.all_logs(),
        10,
        "the late completion to be refused",
    )
    done = runs(chaos_db, handle.execution_id)
    assert [(r["attempt"], r["result"]) for r in done] == [(1, "late"), (2, "run2")]
    events = history(chaos_db, handle.execution_id)
    check_history(events)
    assert count_events(events, "ActivityCompleted") == 1
    # (started_at: when the final attempt started, for the usage report)
    completed = [
        {k: v for k, v in e["event_data"].items() if k != "started_at"}
        for e in events
        if e["event_type"] == "ActivityCompleted"
    ]
    assert completed == [{"seq": 1, "result": "run2", "attempt": 2}]
