"""The LISTEN/NOTIFY channels, named once. The SQL side notifies them (``pg_notify`` in
functions/); tests/unit/test_layers.py checks each name here is one the SQL notifies."""

from __future__ import annotations

from typing import LiteralString

# A task became claimable on a queue (payload: the queue): wakes idle workers' claim loops.
TASKS = "harvest_tasks"
# An execution closed (payload: its id): wakes handle.result() waits.
DONE = "harvest_done"
# A query or update request was queued (payload: the queue): wakes the workers serving them.
QUERIES = "harvest_queries"
# A query or update request was answered (payload: the request id): wakes the client waiting.
QUERY_ANSWERS = "harvest_query_answers"

# Events were appended to an execution (payload: its id), sent only while a process follows
# the event stream (harvest.heartbeat_event_stream): wakes that process's one stream reader.
EVENTS = "harvest_events"

ALL = (TASKS, DONE, QUERIES, QUERY_ANSWERS, EVENTS)


def listen(channel: str) -> LiteralString:
    """The LISTEN statement for one of the channels above (a name, never user input)."""
    if channel not in ALL:
        raise ValueError(f"unknown channel {channel!r}")
    return f"LISTEN {channel}"  # pyright: ignore[reportReturnType]  # a name of ALL
