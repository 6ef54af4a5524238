"""A batch of activity results locks each run's row once (functions/activities.sql,
complete_activities): a run's later results lock their task only, and anything the full
lock would refuse (a task taken again by another worker, or deleted while the batch
waited for the run) is refused the same way, on real connections.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb
from race_helpers import Racer, in_thread, race_behind_a_held_lock, run_row

from harvest.db.sqlapi import OPEN_CLAIM_LOCK_TIMEOUT

SCHEDULE = "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s, %s)"
WORKFLOW_TASK = (
    "SELECT id, status, lease_owner FROM harvest.tasks WHERE execution_id = %s AND kind = 'workflow'"
)


def _run_with_activities(
    conn: psycopg.Connection, workflow_id: str, n: int, decided_by: str | None = None
) -> str:
    """A run on queue wq that scheduled n activities on fq (its decision's worker: decided_by);
    returns its execution id."""
    conn.execute("SELECT harvest.start_workflow('fan', '[]', %s, 'wq')", (workflow_id,))
    task_id, token, execution_id = conn.execute(
        "SELECT task_id, fencing_token, execution_id FROM harvest.claim_tasks('decider', ARRAY['wq'], 1)"
    ).fetchone()
    commands = [
        {"type": "schedule_activity", "seq": i, "name": "noop", "queue": "fq"} for i in range(1, n + 1)
    ]
    conn.execute(SCHEDULE, (task_id, token, Jsonb(commands), decided_by))
    return str(execution_id)


def _claim(conn: psycopg.Connection, worker: str, n: int) -> list[tuple[int, int, int]]:
    return conn.execute(
        "SELECT task_id, fencing_token, seq FROM harvest.claim_tasks(%s, ARRAY['fq'], %s) ORDER BY seq",
        (worker, n),
    ).fetchall()


def _complete(conn: psycopg.Connection, worker: str, tasks: list[tuple[int, int, int]], results: list[str]):
    return dict(
        conn.execute(
            "SELECT task_id, outcome FROM harvest.complete_activities(%s, %s, %s, %s::jsonb[], true)",
            (worker, [t[0] for t in tasks], [t[1] for t in tasks], [Jsonb(r) for r in results]),
        ).fetchall()
    )


def _completed(conn: psycopg.Connection, execution_id: str) -> list[tuple[str, str]]:
    return conn.execute(
        "SELECT event_data ->> 'seq', event_data ->> 'result' FROM harvest.events"
        " WHERE execution_id = %s AND event_type = 'ActivityCompleted' ORDER BY event_id",
        (execution_id,),
    ).fetchall()


def test_a_later_result_of_a_run_taken_again_by_another_worker_is_refused_as_stale(conn):
    for worker in ("a", "b"):
        conn.execute("SELECT harvest.register_worker(%s, ARRAY['fq'], 'host', 1)", (worker,))
    run = _run_with_activities(conn, "fan-stale", 3)
    held = _claim(conn, "a", 3)
    # The second task goes back to the queue (as a lease expiry's requeue does) and worker b takes it.
    conn.execute(
        "UPDATE harvest.tasks SET status = 'pending', lease_owner = NULL WHERE id = %s", (held[1][0],)
    )
    taken = _claim(conn, "b", 1)
    assert [t[0] for t in taken] == [held[1][0]] and taken[0][1] != held[1][1]

    outcomes = _complete(conn, "a", held, ["a1", "a2", "a3"])
    assert outcomes == {held[0][0]: "completed", held[1][0]: "stale", held[2][0]: "completed"}
    assert _complete(conn, "b", taken, ["b2"]) == {taken[0][0]: "completed"}
    assert _completed(conn, run) == [("1", "a1"), ("3", "a3"), ("2", "b2")]


def test_a_task_deleted_while_the_batch_waited_for_its_run_is_refused_as_gone(db, conn):
    conn.execute("SELECT harvest.register_worker('a', ARRAY['fq'], 'host', 1)")
    run = _run_with_activities(conn, "fan-gone", 3)
    held = _claim(conn, "a", 3)

    def drop_the_third_task_then_let_go(holder: psycopg.Connection) -> None:
        holder.execute("DELETE FROM harvest.tasks WHERE id = %s", (held[2][0],))
        holder.commit()

    # Another transaction holds the run's row (as a decision does) while the batch starts, then
    # drops the run's third task and lets go of the run.
    outcome = race_behind_a_held_lock(
        db,
        conn,
        run_row(run),
        Racer("batch", lambda c: _complete(c, "a", held, ["1", "2", "3"]), waits_on="the run's row"),
        let_go=drop_the_third_task_then_let_go,
        end_within=30,
    )
    assert outcome["batch"] == {held[0][0]: "completed", held[1][0]: "completed", held[2][0]: "gone"}
    assert _completed(conn, run) == [("1", "1"), ("2", "2")]


def _decided_with_activity(conn: psycopg.Connection, workflow_id: str) -> tuple[str, tuple[int, int, int]]:
    """A run on wq decided by worker "decider", whose one activity (fq) decider holds: its
    execution id and the activity's (task id, fencing token, seq)."""
    run = _run_with_activities(conn, workflow_id, 1, decided_by="decider")
    return run, _claim(conn, "decider", 1)[0]


def _wake(conn: psycopg.Connection, how: str, run: str, held: tuple[int, int, int]) -> tuple[str, object]:
    """Wake the run the way ``how`` names: the decider's result with hand-off (the task handed
    back), the same result without hand-off (queued), or a signal. (outcome, handed)."""
    if how == "signal":
        conn.execute("SELECT harvest.signal_workflow(%s, 'ping', '2')", (run,))
        return "completed", None
    return conn.execute(
        "SELECT outcome, handed FROM harvest.complete_activities(%s, %s, %s, %s::jsonb[], %s)",
        ("decider", [held[0]], [held[1]], [Jsonb("r")], how == "handed result"),
    ).fetchone()


@pytest.mark.parametrize("how", ["handed result", "queued result", "signal"])
def test_a_wake_up_does_not_wait_for_a_claim_deciding_the_runs_workflow_task(db, conn, how: str):
    """A worker's open claim holds its run's workflow task until its decision, made in the
    claim's transaction, locks the run (worker.py, _claim_deciding; lock_timeout 20 ms). A
    result batch or a signal of that run, holding the run's row, used to wait for the task's
    row when it woke the run (INSERT ... ON CONFLICT in _hand_workflow_task and
    _ensure_workflow_task): the two waited on each other until the claim's lock_timeout rolled
    the claim and its decision back. The wake-up now reads the run's task first, sees one, and
    adds none; the decision then commits."""
    for worker in ("decider", "other"):
        conn.execute("SELECT harvest.register_worker(%s, ARRAY['wq', 'fq'], 'host', 1)", (worker,))
    run, held = _decided_with_activity(conn, "claim-in-flight")
    conn.execute("SELECT harvest.signal_workflow(%s, 'ping', '1')", (run,))
    outcome: dict = {}
    with psycopg.connect(db) as claim, psycopg.connect(db, autocommit=True) as waker:
        claim.execute(OPEN_CLAIM_LOCK_TIMEOUT)
        task_id, token, through = claim.execute(
            "SELECT c.task_id, c.fencing_token, e.last_event_id"
            " FROM harvest.claim_tasks('other', ARRAY['wq'], 1) AS c"
            " JOIN harvest.executions AS e ON e.id = c.execution_id"
        ).fetchone()
        thread = in_thread(lambda: _wake(waker, how, run, held), outcome)
        thread.join(10)
        waited = thread.is_alive()
        if waited:  # (let it go before failing: the connections close at the block's end)
            claim.rollback()
            thread.join(10)
        assert not waited, f"the {how} waited for the claim in flight"
        assert outcome["result"] == ("completed", None)
        claim.execute(
            "SELECT * FROM harvest.complete_workflow_tasks('other', %s, %s, %s, %s::jsonb[], %s)",
            ([task_id], [token], [through], [Jsonb([])], [0]),
        )
        claim.commit()
    # The claim's decision stands; what the wake-up appended while it was in flight wakes the
    # run again (a pending workflow task, as for any event a decision did not see).
    assert conn.execute(WORKFLOW_TASK, (run,)).fetchone()[1:] == ("pending", None)
    decisions = conn.execute(
        "SELECT count(*) FROM harvest.events WHERE execution_id = %s AND event_type = %s",
        (run, "WorkflowTaskCompleted"),
    ).fetchone()[0]
    assert decisions == 2
