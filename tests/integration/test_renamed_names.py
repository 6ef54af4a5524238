"""CONTRIBUTING.md "Names" carried out (migrations 0021 and 0022): the catalog holds no `task_queue` column
(of a table or of a function's result) and
no parameter of the retired spellings, the old function names are gone, the Python keyword and
attribute keep their old spelling as deprecated aliases, and the CLI keeps the old spellings as
hidden aliases."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner
from operator_helpers import start

from harvest.cli.main import main
from harvest.client import Client

RETIRED_FUNCTIONS = [
    "worker_heartbeat",
    "worker_sleep",
    "worker_drain_deadline",
    "worker_health",
    "drain_preview",
    "mutex_tick",
    "mutex_status",
    "concurrency_status",
    "pending_starts_status",
    "retention_status",
    "workflow_stack",
    "aggregate_dead_letters",
    "usage_report",
    "version_usage",
    "bulk_replay_dead_letters",
    "bulk_discard_dead_letters",
    "claim_queries",
    "stop_waiting",
]


@pytest.fixture
def conn(db: str):
    with psycopg.connect(db, autocommit=True) as c:
        yield c


def cli(db: str, *args: str, input: str | None = None):
    return CliRunner().invoke(
        main, list(args), env={"HARVEST_DATABASE_URL": db}, input=input, catch_exceptions=False
    )


def test_no_task_queue_column_remains(conn) -> None:
    columns = conn.execute(
        "SELECT c.relname || '.' || a.attname FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid"
        " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'harvest' AND c.relkind IN ('r', 'p', 'v') AND a.attnum > 0"
        " AND NOT a.attisdropped AND a.attname IN ('task_queue', 'queue')"
    ).fetchall()
    assert {"executions.queue", "pending_starts.queue"} <= {c for (c,) in columns}
    assert not [c for (c,) in columns if c.endswith(".task_queue")]
    named = conn.execute(
        "SELECT conname FROM pg_constraint WHERE connamespace = 'harvest'::regnamespace"
        " AND conname LIKE '%task_queue%'"
    ).fetchall()
    assert named == []


def test_no_function_returns_a_task_queue_column(conn) -> None:
    """Migration 0022: claim_tasks returns one `queue` (the task's, a workflow task's is its
    execution's) and claim_query_requests returns `queue`; no function returns `task_queue`."""
    outs = conn.execute(
        "SELECT p.proname, a.name FROM pg_proc AS p, unnest(p.proargnames, p.proargmodes) AS a (name, mode)"
        " WHERE p.pronamespace = 'harvest'::regnamespace AND p.proargmodes IS NOT NULL"
        " AND a.mode IN ('o', 't', 'b') AND a.name IN ('task_queue', 'queue')"
    ).fetchall()
    assert {("claim_tasks", "queue"), ("claim_query_requests", "queue")} <= set(outs)
    assert [name for name, column in outs if column == "task_queue"] == []


def test_start_workflows_reads_task_queue_as_a_deprecated_spelling_of_queue(conn) -> None:
    starts = [
        {"workflow_name": "wf", "workflow_id": "sw-new", "queue": "q-new"},
        {"workflow_name": "wf", "workflow_id": "sw-old", "task_queue": "q-old"},
    ]
    ids = [
        row[0]
        for row in conn.execute(
            "SELECT execution_id FROM harvest.start_workflows(%s::jsonb) ORDER BY n", (json.dumps(starts),)
        ).fetchall()
    ]
    queues = conn.execute(
        "SELECT workflow_id, queue FROM harvest.executions WHERE id = ANY(%s) ORDER BY workflow_id", (ids,)
    ).fetchall()
    assert queues == [("sw-new", "q-new"), ("sw-old", "q-old")]


def test_no_parameter_keeps_a_retired_spelling(conn) -> None:
    rows = conn.execute(
        "SELECT p.proname, a.name FROM pg_proc AS p, unnest(p.proargnames, coalesce(p.proargmodes,"
        " array_fill('i'::\"char\", ARRAY[cardinality(p.proargnames)]))) AS a (name, mode)"
        " WHERE p.pronamespace = 'harvest'::regnamespace AND p.proargnames IS NOT NULL"
        " AND a.mode IN ('i', 'b', 'v')"
        " AND a.name IN ('p_task_queue', 'p_state', 'p_operator')"
    ).fetchall()
    assert rows == [], 'p_queue, p_status and p_operator_id (CONTRIBUTING.md "Words")'
    retired = conn.execute(
        "SELECT proname FROM pg_proc WHERE pronamespace = 'harvest'::regnamespace AND proname = ANY(%s)",
        (RETIRED_FUNCTIONS,),
    ).fetchall()
    assert retired == []


def test_list_executions_names_its_columns_as_the_scheme(conn) -> None:
    execution_id = start(conn, "wf", "names-1", queue="names-q")
    row = conn.execute(
        "SELECT execution_id::text, queue FROM harvest.list_executions(p_status => 'running')"
        " WHERE execution_id = %s",
        (execution_id,),
    ).fetchone()
    assert row == (execution_id, "names-q")


def test_task_queue_keyword_is_a_deprecated_alias_of_queue(db: str, conn) -> None:
    with Client(db) as client:
        fresh = client.start_workflow("wf", workflow_id="names-new", queue="q-new")
        with pytest.warns(DeprecationWarning, match="task_queue= is deprecated: pass queue="):
            old = client.start_workflow("wf", workflow_id="names-old", task_queue="q-old")
    queues = dict(
        conn.execute(
            "SELECT workflow_id, queue FROM harvest.executions WHERE workflow_id LIKE 'names-%'"
        ).fetchall()
    )
    assert queues == {"names-new": "q-new", "names-old": "q-old"}
    assert fresh.execution_id != old.execution_id


def test_old_cli_spellings_still_work_and_stay_out_of_help(db: str, conn) -> None:
    r = cli(db, "workflow", "start", "wf", "--workflow-id", "cli-old", "--task-queue", "q-old", "-o", "json")
    assert r.exit_code == 0, r.output
    r = cli(db, "workflow", "start", "wf", "--workflow-id", "cli-new", "--queue", "q-new", "-o", "json")
    assert r.exit_code == 0, r.output
    queues = dict(
        conn.execute(
            "SELECT workflow_id, queue FROM harvest.executions WHERE workflow_id LIKE 'cli-%'"
        ).fetchall()
    )
    assert queues == {"cli-old": "q-old", "cli-new": "q-new"}
    help_text = cli(db, "workflow", "start", "--help").output
    assert "--queue" in help_text and "--task-queue" not in help_text

    # `workflow list --status` beside the spec's --state.
    r = cli(db, "workflow", "list", "--status", "RUNNING", "--workflow-name", "wf", "-o", "json")
    assert r.exit_code == 0 and r.output.count('"execution_id"') == 2, r.output

    # `dlq aggregate` is the hidden old name of `dlq count`.
    assert cli(db, "dlq", "aggregate", "-o", "json").output == cli(db, "dlq", "count", "-o", "json").output
    dlq_help = cli(db, "dlq", "--help").output
    assert "count" in dlq_help and "aggregate" not in dlq_help

    # --operator is the hidden old spelling of --operator-id.
    assert cli(db, "retention", "set", "--max-age", "30 days", "--operator", "bob").exit_code == 0
    assert cli(db, "retention", "set", "--max-age", "31 days", "--operator-id", "carol").exit_code == 0
    audit = conn.execute(
        "SELECT operator_id FROM harvest.audit_log WHERE operation = 'retention.set' ORDER BY id"
    ).fetchall()
    assert audit == [("bob",), ("carol",)]
    for command in (
        ["retention", "set"],
        ["retention", "run-now"],
        ["worker", "drain"],
        ["dlq", "bulk-replay"],
        ["dlq", "bulk-discard"],
    ):
        text = cli(db, *command, "--help").output
        assert "--operator-id" in text and "--operator " not in text and "--operator," not in text, command

    # workflow query: --arg-json/--arg-file are the hidden old spellings of --input-json/--input-file.
    r = cli(db, "workflow", "query", "00000000-0000-0000-0000-000000000001", "q", "--arg-json", "{nope")
    assert r.exit_code == 2 and "--input-json: not valid JSON" in r.output
    query_help = cli(db, "workflow", "query", "--help").output
    assert "--input-json" in query_help and "--arg-json" not in query_help and "--timeout-secs" in query_help

    # workflow signal and bulk-signal: --payload-json/--payload-file are the hidden old spellings of
    # --input-json/--input-file, the name start, query and update take (signal took only --payload-*).
    running = start(conn, "wf", "cli-signal")
    given = (("--input-json", '{"n": 1}'), ("--payload-json", '{"n": 2}'), ("--input-file", "-"))
    for option, value in given:
        r = cli(db, "workflow", "signal", running, "poke", option, value, input='{"n": 3}')
        assert r.exit_code == 0, (option, r.output)
    payloads = conn.execute(
        "SELECT event_data -> 'payload' FROM harvest.events WHERE execution_id = %s "
        "AND event_type = 'SignalReceived' ORDER BY event_id",
        (running,),
    ).fetchall()
    assert [p[0] for p in payloads] == [{"n": 1}, {"n": 2}, {"n": 3}]
    r = cli(db, "workflow", "signal", running, "poke", "--input-json", "{}", "--payload-file", "-", input="")
    assert r.exit_code == 2 and "give --input-json or --input-file, not both" in r.output
    for command in (["workflow", "signal"], ["workflow", "bulk-signal"]):
        text = cli(db, *command, "--help").output
        assert "--input-json" in text and "--input-file" in text and "--payload-" not in text, command

    # workflow result: --timeout-secs beside --timeout (exit 3: the wait ran out, the run goes on).
    running = start(conn, "wf", "cli-wait")
    assert cli(db, "workflow", "result", running, "--timeout-secs", "0.2").exit_code == 3
