"""The log context an activity runs in (telemetry/logs.py log_fields, worker/activities.py)."""

from __future__ import annotations

import asyncio

from harvest.telemetry.logs import LOG_FIELDS, log_fields
from harvest.worker import activities


def test_log_fields_leave_out_none_and_reset_to_what_was_there():
    outer = log_fields(execution_id="e1")
    token = log_fields(execution_id="e2", workflow_id=None, attempt=1)
    assert LOG_FIELDS.get() == {"execution_id": "e2", "attempt": 1}
    LOG_FIELDS.reset(token)
    assert LOG_FIELDS.get() == {"execution_id": "e1"}
    LOG_FIELDS.reset(outer)


def test_an_activity_runs_in_its_fields_even_with_one_missing(monkeypatch):
    """A task whose workflow_id is None: the context is a dict of the others while it runs,
    and what it was after."""
    seen = []

    async def body(_worker, _task, execution_id):
        seen.append(LOG_FIELDS.get())

    monkeypatch.setattr(activities, "_run_activity_task", body)
    monkeypatch.setattr(activities.tracing, "ACTIVE", False)
    task = {"execution_id": "e9", "workflow_id": None, "workflow_name": "w", "activity_name": "a"}
    task["attempt"] = 2
    before = LOG_FIELDS.get()
    asyncio.run(activities.run_activity_task(None, task))
    assert seen == [{"execution_id": "e9", "workflow": "w", "activity": "a", "attempt": 2}]
    assert LOG_FIELDS.get() == before
