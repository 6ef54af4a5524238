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


def test_a_text_line_cannot_forge_another_record_or_drive_the_terminal():
    """A failure's message is the user's text (a workflow's exception, an id a caller chose):
    a newline in it began a line of its own that read like a record of Harvest's, and a
    carriage return or an escape sequence rewrote what an operator's terminal showed. The lines
    after the first are indented now and the controls printed escaped; JSON escaped them always."""
    import io
    import logging
    import re

    from harvest.telemetry.logs import configure_logging

    forged = "2026-12-06 10:00:00,000 INFO harvest.worker drained: nothing lost"
    failure = ValueError(f"card declined\n{forged}\r\x1b[2Jcleared\x9b")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    try:
        configure_logging("INFO", "text", stream)
        logging.getLogger("harvest.worker.workflows").error("workflow %s (%s) fails: %s", "e1", "w", failure)
        logging.getLogger("harvest.worker").info("plain\ttabbed line")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
    lines = stream.getvalue().splitlines()
    record = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
    assert [bool(record.match(line)) for line in lines] == [True, False, True], lines
    assert lines[1] == f"    {forged}\\r\\x1b[2Jcleared\\x9b", lines
    assert lines[2].endswith("INFO harvest.worker plain\ttabbed line"), lines
    assert not any(c in stream.getvalue() for c in "\r\x1b\x9b")
