"""A run's history as two runs of the same workflow can be compared (the integration suites)."""

from __future__ import annotations

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
