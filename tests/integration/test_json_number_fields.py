"""Every number and boolean field the SQL API reads out of a caller's JSON, by one rule
(functions/core.sql, _json_integer and its kin): an integral 2.0 is taken as 2 (JSON has no
integer type, and a float serialiser writes it so); a fraction where a count goes, a number in a
string, a boolean for a number, a number for a boolean, an array, a number out of range and 1e400
are HR001 naming the field in DETAIL ({"field", "given"}), before anything is written. They were
cast raw: 22P02 or 22003 (here or later, at a claim, a failure, a start) naming no field, or a
string "60" and "yes" taken, or a seq of 2.5 rounded to 3.

A field that the SQL reads from JSON is added to FIELDS; tests/unit/test_json_casts.py fails
on a raw cast of such a field in functions/, so a new one goes through the rule and comes here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import psycopg
import pytest

# The values a client sends by mistake, per kind of field (the JSON text of each).
BAD = {
    "integer": ["2.5", '"3"', "true", "2147483648", "1e400", "[1]", '{"n": 1}'],
    "bigint": ["2.5", '"3"', "true", "9223372036854775808", "1e400", "[1]"],
    "number": ['"3"', "true", "1e400", "[1]", '{"n": 1}'],
    "boolean": ['"yes"', '"true"', "1", "[true]"],
}


@dataclass(frozen=True)
class Field:
    field: str  # as DETAIL names it
    kind: str  # integer, bigint, number, boolean
    call: str  # SQL with @V@ where the value's JSON text goes (@TASK@, @FENCE@: the setup's task)
    ok: str  # a value it takes (a count written with a fraction, 2.0)
    setup: str = ""  # "decide": a claimed workflow task; "activity": a claimed activity


def _decide(commands: str) -> str:
    return f"SELECT * FROM harvest.complete_workflow_task(@TASK@, @FENCE@, 1, '{commands}')"


def _options(options: str) -> str:
    """A decision scheduling an activity with these options."""
    return _decide(
        f'[{{"type": "schedule_activity", "seq": 1, "name": "act", "queue": "aq", "options": {options}}}]'
    )


def _policy(kind: str, policy: str) -> str:
    return f'SELECT harvest.declare_flow_policies(\'{{"{kind}": {{"jn": {policy}}}}}\')'


def _schedule(fields: str) -> str:
    return f'SELECT harvest.declare_schedules(\'[{{"name": "jn", "workflow_name": "wf", {fields}}}]\')'


def _dag(fields: str) -> str:
    return f'SELECT harvest.register_dags(\'[{{"dag_name": "jn", "queue": "q", {fields}}}]\')'


FIELDS = [
    Field(
        "priority",
        "integer",
        """SELECT * FROM harvest.start_workflows('[{"workflow_name": "jn", "priority": @V@}]')""",
        "2.0",
    ),
    Field(
        "shard",
        "integer",
        """SELECT * FROM harvest.start_workflows('[{"workflow_name": "jn", "shard": @V@}]')""",
        "0.0",
    ),
    Field(
        "execution_timeout",
        "number",
        """SELECT * FROM harvest.start_workflows('[{"workflow_name": "jn", "execution_timeout": @V@}]')""",
        "30",
    ),
    Field(
        "run_timeout",
        "number",
        """SELECT * FROM harvest.start_workflows('[{"workflow_name": "jn", "run_timeout": @V@}]')""",
        "30.5",
    ),
    Field("options.priority", "integer", _options('{"priority": @V@}'), "2.0", "decide"),
    Field(
        "options.retry.max_attempts", "integer", _options('{"retry": {"max_attempts": @V@}}'), "2.0", "decide"
    ),
    Field("options.start_to_close", "number", _options('{"start_to_close": @V@}'), "30", "decide"),
    Field("options.dead_letter", "boolean", _options('{"dead_letter": @V@}'), "false", "decide"),
    Field("options.retry.backoff", "number", _options('{"retry": {"backoff": @V@}}'), "2", "decide"),
    Field("options.priority_aging_secs", "number", _options('{"priority_aging_secs": @V@}'), "1.5", "decide"),
    Field(
        "options.max_concurrent",
        "integer",
        _options('{"max_concurrent": @V@, "concurrency_key": "k"}'),
        "2.0",
        "decide",
    ),
    Field("options.rate_limit.rps", "number", _options('{"rate_limit": {"rps": @V@}}'), "5.0", "decide"),
    Field(
        "options.rate_limit.burst",
        "number",
        _options('{"rate_limit": {"rps": 5, "burst": @V@}}'),
        "2",
        "decide",
    ),
    Field(
        "duration",
        "number",
        _decide('[{"type": "start_timer", "seq": 1, "duration": @V@}]'),
        "60.0",
        "decide",
    ),
    Field(
        "seq", "integer", _decide('[{"type": "start_timer", "seq": @V@, "duration": 60}]'), "1.0", "decide"
    ),
    Field(
        "timer_seq",
        "integer",
        _decide('[{"type": "cancel_timer", "seq": 1, "timer_seq": @V@}]'),
        "7.0",
        "decide",
    ),
    Field(
        "timer_seq",
        "integer",
        _decide('[{"type": "await_signals", "signals": [{"name": "go", "timer_seq": @V@}]}]'),
        "3.0",
        "decide",
    ),
    Field(
        "since",
        "bigint",
        _decide('[{"type": "await_signals", "signals": [{"name": "go", "since": @V@}]}]'),
        "1.0",
        "decide",
    ),
    Field(
        "shard",
        "integer",
        _decide('[{"type": "start_child_workflow", "seq": 1, "workflow_name": "c", "shard": @V@}]'),
        "0.0",
        "decide",
    ),
    Field(
        "non_retryable",
        "boolean",
        """SELECT harvest.fail_activity(@TASK@, @FENCE@, '{"message": "x", "non_retryable": @V@}')""",
        "true",
        "activity",
    ),
    Field(
        "concurrency.limit",
        "integer",
        _policy("workflows", '{"concurrency": {"key": "input", "limit": @V@}}'),
        "2.0",
    ),
    *(
        Field(
            f"quota.{q}",
            "bigint",
            _policy("workflows", f'{{"quota": {{"key": "input", "{q}": @V@}}}}'),
            "3.0",
        )
        for q in ("max_active_executions", "max_history_bytes", "max_dead_letters")
    ),
    Field(
        "max_concurrent",
        "integer",
        _policy("activities", '{"max_concurrent": @V@, "concurrency_key": "k"}'),
        "2.0",
    ),
    Field("rate_limit.rps", "number", _policy("activities", '{"rate_limit": {"rps": @V@}}'), "5"),
    Field(
        "rate_limit.burst", "number", _policy("activities", '{"rate_limit": {"rps": 5, "burst": @V@}}'), "2"
    ),
    Field("throttle.rps", "number", _policy("workflows", '{"throttle": {"rps": @V@}}'), "5"),
    Field("throttle.burst", "number", _policy("workflows", '{"throttle": {"rps": 5, "burst": @V@}}'), "2"),
    Field("debounce.quiet_secs", "number", _policy("workflows", '{"debounce": {"quiet_secs": @V@}}'), "1.5"),
    Field(
        "debounce.max_wait_secs",
        "number",
        _policy("workflows", '{"debounce": {"quiet_secs": 1, "max_wait_secs": @V@}}'),
        "10",
    ),
    Field(
        "batch.max_size",
        "integer",
        _policy("workflows", '{"batch": {"max_size": @V@, "window_secs": 1}}'),
        "2.0",
    ),
    Field(
        "batch.window_secs",
        "number",
        _policy("workflows", '{"batch": {"max_size": 2, "window_secs": @V@}}'),
        "1.5",
    ),
    Field("interval_secs", "bigint", _schedule('"interval_secs": @V@'), "60.0"),
    Field("max_active_runs", "integer", _schedule('"interval_secs": 60, "max_active_runs": @V@'), "2.0"),
    Field(
        "catchup_window_secs", "bigint", _schedule('"interval_secs": 60, "catchup_window_secs": @V@'), "600.0"
    ),
    Field("jitter_secs", "number", _schedule('"interval_secs": 60, "jitter_secs": @V@'), "1.5"),
    Field("catchup", "boolean", _schedule('"interval_secs": 60, "catchup": @V@'), "true"),
    Field("max_active_runs", "integer", _dag('"tasks": [], "max_active_runs": @V@'), "2.0"),
    Field(
        "retry.max_attempts",
        "integer",
        _dag('"tasks": [{"task": "t", "kind": "activity", "target": "a", "retry": {"max_attempts": @V@}}]'),
        "2.0",
    ),
]


def _setup(conn: psycopg.Connection, setup: str) -> dict[str, str]:
    """The claimed task a call runs against (rolled back with the call)."""
    if not setup:
        return {}
    conn.execute("SELECT harvest.start_workflow('jn_wf', '[]', 'jn-run', 'jq')")
    task, fence = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('w', ARRAY['jq'], 1)"
    ).fetchone()
    if setup == "activity":
        conn.execute(_options("{}").replace("@TASK@", str(task)).replace("@FENCE@", str(fence)))
        task, fence = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w', ARRAY['aq'], 1)"
        ).fetchone()
    return {"@TASK@": str(task), "@FENCE@": str(fence)}


def _call(dsn: str, field: Field, value: str) -> psycopg.Error | None:
    """Run ``field``'s call with ``value`` in a transaction that is rolled back; its error."""
    with psycopg.connect(dsn) as conn:
        try:
            sql = field.call.replace("@V@", value)
            for token, id_ in _setup(conn, field.setup).items():
                sql = sql.replace(token, id_)
            conn.execute(sql)
        except psycopg.Error as exc:
            return exc
        finally:
            conn.rollback()
    return None


def _name(field: Field) -> str:
    return f"{field.call.split('harvest.')[1].split('(')[0]}:{field.field}"


@pytest.mark.parametrize("field", FIELDS, ids=_name)
def test_a_json_field_takes_an_integral_number_and_refuses_the_rest_naming_itself(
    module_db: str, field: Field
) -> None:
    refused = _call(module_db, field, field.ok)
    assert refused is None, f"{field.field} = {field.ok} was refused: {refused}"
    for bad in BAD[field.kind]:
        refused = _call(module_db, field, bad)
        assert refused is not None, f"{field.field} = {bad} was taken"
        assert refused.sqlstate == "HR001", f"{field.field} = {bad}: {refused.sqlstate} {refused}"
        detail = json.loads(refused.diag.message_detail or "{}")
        assert detail.get("field") == field.field, f"{field.field} = {bad}: {refused} {detail}"
