"""The task writers of the hot paths answer "is the queue fair" in their own INSERT.

The tasks insert trigger (sql/triggers.sql, tasks_derived_columns) gives an unkeyed task on a
fair queue the key '' so the fairness skip-scan finds it; a writer none of whose rows names a
fairness key may answer that in its statement ('' or the marker E'\\x01' for none), and the
trigger then asks no query of its own for a row on a plain queue (the usual case; a row keyed
'' still has the trigger check that its queue is registered, as any keyed row). The starts,
the handed activities, the handed and the woken workflow tasks do (docs/performance.md, "SQL
path, eleventh cut"); each test checks the keys the rows get and that the trigger's own query
ran for no row on a plain queue, as auto_explain lists every statement a call runs, nested
ones included.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from stats_helpers import nested_plans

# complete_workflow_tasks, its rows' last_event_id and handed tasks.
DECIDE = (
    "SELECT last_event_id, handed FROM harvest.complete_workflow_tasks("
    "%s, %s, %s, %s, %s::jsonb[], %s::integer[], 50000, 52428800, NULL)"
)
OPTIONS = {"retry": {"maximum_attempts": 3}, "start_to_close_secs": 30}


def fair(conn: psycopg.Connection, queue: str) -> None:
    conn.execute("INSERT INTO harvest.fair_queues (queue) VALUES (%s)", (queue,))


def trigger_queries(conn: psycopg.Connection, sql: str, params: Any = None) -> tuple[list[tuple], int]:
    """Run sql; return its rows and how many times the insert trigger asked fair_queues itself
    (auto_explain's plan of each statement, nested ones included, sent as a NOTICE)."""
    rows, texts = nested_plans(conn, sql, params)
    asked = sum(1 for t in texts if "harvest.fair_queues" in t and "NEW.queue" in t)
    return rows, asked


def keys(conn: psycopg.Connection, kind: str, queue: str) -> list[str | None]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT fairness_key FROM harvest.tasks WHERE kind = %s AND queue = %s ORDER BY id", (kind, queue)
        ).fetchall()
    ]


def no_marker_left(conn: psycopg.Connection) -> bool:
    return conn.execute("SELECT count(*) FROM harvest.tasks WHERE fairness_key = E'\\x01'").fetchone() == (0,)


@pytest.mark.parametrize("batch", [1, 3], ids=["a start of one", "a batch of three"])
def test_the_plain_starts_workflow_tasks_are_answered_in_their_insert(
    conn: psycopg.Connection, batch: int
) -> None:
    """start_workflows' plain starts (_start_plain_batch, its one-start statement and its
    batch's): '' on a fair queue, no key on another, and no query of the trigger's."""
    fair(conn, "fair_q")
    for queue, expected in (("fair_q", ""), ("plain_q", None)):
        starts = [{"workflow_name": "wf", "queue": queue} for _ in range(batch)]
        rows, asked = trigger_queries(conn, "SELECT * FROM harvest.start_workflows(%s)", (Jsonb(starts),))
        assert len(rows) == batch
        if expected is None:
            assert asked == 0, f"the insert trigger asked fair_queues {asked} times for {batch} start(s)"
        assert keys(conn, "workflow", queue) == [expected] * batch
    assert no_marker_left(conn)


def test_a_start_by_workflow_id_is_answered_in_its_insert(conn: psycopg.Connection) -> None:
    """start_workflow (one start by its workflow id, the general path: _start_workflow)."""
    fair(conn, "fair_q")
    for queue, expected in (("fair_q", ""), ("plain_q", None)):
        _, asked = trigger_queries(
            conn, "SELECT * FROM harvest.start_workflow('wf', '[]', %s, %s)", (f"id-{queue}", queue)
        )
        assert asked == (0 if expected is None else 1)
        assert keys(conn, "workflow", queue) == [expected]
    assert no_marker_left(conn)


def claimed(conn: psycopg.Connection, queue: str, n: int) -> list[tuple]:
    conn.execute("SELECT harvest.register_worker('w', ARRAY[%s], 'host', 1)", (queue,))
    conn.execute(
        "SELECT * FROM harvest.start_workflows(%s)", (Jsonb([{"workflow_name": "wf", "queue": queue}] * n),)
    )
    tasks = conn.execute(
        "SELECT task_id, fencing_token, new_events_after + jsonb_array_length(new_events)"
        " FROM harvest.claim_tasks('w', ARRAY[%s], %s, 30)",
        (queue, n),
    ).fetchall()
    assert len(tasks) == n
    return tasks


def activity(seq: int, queue: str) -> dict:
    return {
        "type": "schedule_activity",
        "seq": seq,
        "name": "noop",
        "input": [seq],
        "queue": queue,
        "options": OPTIONS,
    }


def test_handed_activities_are_answered_in_their_insert(conn: psycopg.Connection) -> None:
    """A decision handing one activity (_hand_activities' one-row statement), one handing two
    (its statement of many), and a result batch's decisions made ahead handing one each
    (_hand_activities_of_runs): running, leased to the worker, no key, no query of the trigger's."""
    tasks = claimed(conn, "hand_q", 3)
    commands = [
        [activity(1, "hand_q")],
        [activity(1, "hand_q"), activity(2, "hand_q")],
        [activity(1, "hand_q")],
    ]
    decided, asked = trigger_queries(
        conn,
        DECIDE,
        (
            "w",
            [t[0] for t in tasks],
            [t[1] for t in tasks],
            [t[2] for t in tasks],
            [Jsonb(c) for c in commands],
            [2, 2, 2],
        ),
    )
    assert asked == 0
    assert sorted(len(row[1]) for row in decided) == [1, 1, 2]
    first = [(row[0], row[1][0]) for row in decided]
    results, asked = trigger_queries(
        conn,
        "SELECT decided FROM harvest.complete_activities("
        "%s, %s, %s, %s::jsonb[], true, 30, %s::jsonb[], 50000, 52428800)",
        (
            "w",
            [h["task_id"] for _, h in first],
            [h["fencing_token"] for _, h in first],
            [Jsonb(1) for _ in first],
            [
                Jsonb(
                    {
                        "after": after,
                        "result_text": "1",
                        "hand_off_slots": 1,
                        "commands": [activity(3, "hand_q")],
                    }
                )
                for after, _ in first
            ],
        ),
    )
    assert asked == 0
    assert all(len(row[0]["handed"]) == 1 for row in results), results
    assert keys(conn, "activity", "hand_q") == [None] * 4  # (the second of run 2 still open)
    assert conn.execute(
        "SELECT count(*) FROM harvest.tasks"
        " WHERE kind = 'activity' AND status = 'running' AND lease_owner = 'w'"
    ).fetchone() == (4,)
    assert no_marker_left(conn)


def idle_run(conn: psycopg.Connection, queue: str) -> str:
    """A run on queue whose first decision scheduled nothing: it waits, no workflow task open."""
    (task,) = claimed(conn, queue, 1)
    conn.execute(
        DECIDE,
        ("w", [task[0]], [task[1]], [task[2]], [Jsonb([])], [0]),
    )
    assert keys(conn, "workflow", queue) == []
    return conn.execute(
        "SELECT execution_id FROM harvest.events WHERE event_id = 1 AND event_data ->> 'task_queue' = %s",
        (queue,),
    ).fetchone()[0]


def test_woken_and_handed_workflow_tasks_are_answered_in_their_insert(conn: psycopg.Connection) -> None:
    """A signal waking a run (_ensure_workflow_task: '' on a fair queue, no key and no query of
    the trigger's on a plain one), and a result handing its run's workflow task back to the
    worker that decided last (_hand_workflow_task: no key, the hand-off rules refuse a fair
    queue; no query of the trigger's)."""
    fair(conn, "fair_q")
    for queue, expected in (("fair_q", ""), ("wake_q", None)):
        run = idle_run(conn, queue)
        _, asked = trigger_queries(
            conn, "SELECT 1 FROM harvest.signal_workflow(%s, 'go', %s)", (run, Jsonb(1))
        )
        assert asked == (0 if expected is None else 1)
        assert keys(conn, "workflow", queue) == [expected]

    (task,) = claimed(conn, "plain_q", 1)
    decided = conn.execute(
        DECIDE,
        ("w", [task[0]], [task[1]], [task[2]], [Jsonb([activity(1, "plain_q")])], [1]),
    ).fetchone()
    handed = decided[1][0]
    rows, asked = trigger_queries(
        conn,
        "SELECT handed FROM harvest.complete_activities(%s, %s, %s, %s::jsonb[], true, 30)",
        ("w", [handed["task_id"]], [handed["fencing_token"]], [Jsonb(1)]),
    )
    assert asked == 0
    assert rows[0][0] is not None and rows[0][0]["kind"] == "workflow", rows
    assert conn.execute(
        "SELECT fairness_key, status, lease_owner FROM harvest.tasks"
        " WHERE kind = 'workflow' AND queue = 'plain_q'"
    ).fetchall() == [(None, "running", "w")]
    assert no_marker_left(conn)
