"""One vocabulary: the event and command types the SQL knows are the runtime's.

The SQL's event types are the domain harvest.event_type that the CHECK on
harvest.events.event_type casts to (sql/events.sql, migrations 0020 and 0044); the
runtime's are harvest.runtime.commands.EVENT_TYPES. The SQL's command types are the
branches of the dispatcher over a command's "type" (functions/decide.sql); the runtime's
are the commands it matches and the terminal ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from harvest.runtime import commands

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = sorted((ROOT / "functions").glob("*.sql"))
RUNTIME_COMMAND_TYPES = set(commands.COMMAND_EVENTS.values()) | set(commands.TERMINAL_COMMANDS)


def check_values(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        table = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'harvest.events'::regclass"
            " AND conname = 'events_event_type_check'"
        ).fetchone()
        row = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE contypid = 'harvest.event_type'::regtype"
            " AND conname = 'events_event_type_check'"
        ).fetchone()
    assert table, "harvest.events has no events_event_type_check"
    assert "harvest.event_type" in table[0], table[0]  # the table's CHECK is the domain's list
    assert row, "harvest.event_type has no events_event_type_check"
    return set(re.findall(r"'(\w+)'::text", row[0]))


def test_the_event_type_check_lists_the_runtime_event_types(db: str) -> None:
    assert check_values(db) == set(commands.EVENT_TYPES)


def test_the_event_type_check_refuses_an_unknown_type(conn: psycopg.Connection) -> None:
    execution = conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at)"
        " VALUES (gen_random_uuid(), 'greet', 'w-vocab', now()) RETURNING id"
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO harvest.events (execution_id, event_id, event_type, created_at)"
        " VALUES (%s, 1, 'WorkflowStarted', now())",
        (execution,),
    )
    with pytest.raises(psycopg.errors.CheckViolation, match="events_event_type_check"):
        conn.execute(
            "INSERT INTO harvest.events (execution_id, event_id, event_type, created_at)"
            " VALUES (%s, 2, 'WorkflowExploded', now())",
            (execution,),
        )


def sql_written_event_types() -> set[str]:
    """Event types spelled where functions/ append events: _append_event(x, 'Type', ...)
    and the batched 'Type'::text of a decision."""
    found: set[str] = set()
    for path in FUNCTIONS:
        text = path.read_text()
        found |= set(re.findall(r"_append_event\(\s*[\w.]+\s*,\s*'(\w+)'", text))
        found |= set(re.findall(r"'([A-Z][a-z]\w+)'::text", text))
    return found


def test_every_event_type_functions_write_is_in_the_vocabulary() -> None:
    written = sql_written_event_types()
    assert len(written) >= 15, written  # the scan sees the engine's writes
    assert written <= set(commands.EVENT_TYPES), written - set(commands.EVENT_TYPES)


def sql_command_types() -> set[str]:
    """The WHEN branches of each CASE over a command's type (CASE v_type ... END CASE)."""
    found: set[str] = set()
    for path in FUNCTIONS:
        for block in re.findall(r"CASE\s+v_type\b(.*?)END\s+CASE", path.read_text(), re.DOTALL):
            found |= set(re.findall(r"WHEN\s+'([a-z_]+)'", block))
    return found


def test_the_sql_dispatcher_knows_exactly_the_runtime_command_types() -> None:
    assert sql_command_types() == RUNTIME_COMMAND_TYPES


def test_every_command_the_runtime_emits_is_in_its_vocabulary() -> None:
    # Commands are made by the runtime and the worker; the web face's "type" keys are JSON
    # Schema types of its OpenAPI document, not commands.
    emitted = set()
    for layer in ("runtime", "worker"):
        for path in (ROOT / "harvest_py" / "harvest" / layer).rglob("*.py"):
            emitted |= set(re.findall(r"\"type\": \"([a-z_]+)\"", path.read_text()))
    assert len(emitted) >= 8, emitted
    known = RUNTIME_COMMAND_TYPES | commands.DIRECTIVE_COMMANDS
    assert emitted <= known, emitted - known


def test_the_sql_decision_reads_every_directive() -> None:
    # A directive writes no event and is read before the dispatcher's CASE (decide.sql).
    decide = (ROOT / "functions" / "decide.sql").read_text()
    for directive in commands.DIRECTIVE_COMMANDS:
        assert f"v_type = '{directive}'" in decide, directive
