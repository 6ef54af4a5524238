"""A run's history as two runs of the same workflow can be compared (the integration suites)."""

from __future__ import annotations

import time
from typing import Any

import psycopg

# What differs between two runs that did the same thing: who ran them, when, and their ids.
RUN_SPECIFIC = ("worker_id", "workflow_id", "started_at")


def comparable_history(
    db: str, execution_id: str, dropped: tuple[str, ...] = RUN_SPECIFIC
) -> list[tuple[str, dict[str, Any]]]:
    """(event type, event data without the ``dropped`` keys) of every event, in order."""
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT event_type, event_data FROM harvest.events WHERE execution_id = %s ORDER BY event_id",
            (execution_id,),
        ).fetchall()
    return [(kind, {k: v for k, v in data.items() if k not in dropped}) for kind, data in rows]


def workflow_task_failure(db: str, execution_id: str, within: float = 20.0) -> dict[str, Any]:
    """The ``last_failure`` of the run's workflow task, once it has one (polled; a bound, not
    a timing: the test fails if the task has not failed within ``within`` seconds)."""
    deadline = time.monotonic() + within
    with psycopg.connect(db, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT last_failure FROM harvest.tasks WHERE execution_id = %s AND kind = 'workflow'",
                (execution_id,),
            ).fetchone()
            if row and row[0] is not None:
                return dict(row[0])
            assert time.monotonic() < deadline, "the workflow task never failed"
            time.sleep(0.05)
