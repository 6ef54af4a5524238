"""What a claim reads to answer its tasks (functions/claim.sql, _claim_candidates).

An activity task carries its run's workflow name and id (sql/tasks.sql, migration 0099), so a
claim answers it without reading the run: against a deep backlog the run's row and its key were
the coldest pages a claim read (docs/performance.md, "The claim at 10M, attributed"). A workflow
task still reads its run (its decision state and the events after it). Counted with the
transaction's index scans of executions_pkey, the claimed rows written by earlier transactions
(an update of a row the same transaction wrote makes its foreign key look the run up). No timing.
"""

from __future__ import annotations

import json

import psycopg

from harvest.declare.definitions import ActivityDefinition
from harvest.declare.flow_control import RateLimit

RUN_PROBES = "SELECT pg_stat_get_xact_numscans('harvest.executions_pkey'::regclass)"


def _noop() -> None:
    return None


def _queue_activities(conn: psycopg.Connection, workflow_id: str, queue: str, options: dict) -> str:
    """Start run workflow_id and decide its first task: four activities queued on queue."""
    run = conn.execute(
        "SELECT execution_id FROM harvest.start_workflow('answer_wf', '[]', %s, 'answer_wq')", [workflow_id]
    ).fetchone()[0]
    task = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('decider', ARRAY['answer_wq'], 1)"
    ).fetchone()
    command = {"type": "schedule_activity", "name": "act", "queue": queue, "options": options}
    commands = [{**command, "seq": i, "input": [i]} for i in range(1, 5)]
    conn.execute(
        "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s::jsonb, 'decider')",
        [task[0], task[1], json.dumps(commands)],
    )
    return str(run)


def _answers(workflow_id: str) -> list[tuple]:
    return [("activity", "answer_wf", workflow_id, [i]) for i in range(1, 5)]


def _claim_counting_run_probes(conn: psycopg.Connection, queue: str) -> tuple[list[tuple], int]:
    """One claim of queue in a transaction of its own: its rows and its probes of executions_pkey."""
    with conn.transaction():
        before = conn.execute(RUN_PROBES).fetchone()[0]
        rows = conn.execute(
            "SELECT kind, workflow_name, workflow_id, input FROM harvest.claim_tasks('w', ARRAY[%s], 10)",
            [queue],
        ).fetchall()
        return rows, conn.execute(RUN_PROBES).fetchone()[0] - before


def test_a_claim_answers_activities_from_their_rows_without_reading_their_runs(db):
    with psycopg.connect(db, autocommit=True) as conn:
        _queue_activities(conn, "plain-run", "answer_aq", {})
        rows, probes = _claim_counting_run_probes(conn, "answer_aq")
    assert sorted(rows, key=lambda r: r[3]) == _answers("plain-run")
    assert probes == 0


def test_a_gated_claim_answers_activities_from_their_rows_without_reading_their_runs(db):
    gates = {"max_concurrent": 10, "rate_limit": RateLimit(rps=100, burst=10)}
    capped = ActivityDefinition(name="act", fn=_noop, **gates)
    with psycopg.connect(db, autocommit=True) as conn:
        _queue_activities(conn, "gated-run", "answer_gq", capped.options_json())
        rows, probes = _claim_counting_run_probes(conn, "answer_gq")
    assert sorted(rows, key=lambda r: r[3]) == _answers("gated-run")
    assert probes == 0


def test_an_activity_written_before_its_row_carried_the_run_is_answered_from_its_run(db):
    with psycopg.connect(db, autocommit=True) as conn:
        run = _queue_activities(conn, "old-run", "answer_oq", {})
        conn.execute(
            "UPDATE harvest.tasks SET run_workflow_name = NULL, run_workflow_id = NULL"
            " WHERE execution_id = %s",
            [run],
        )
        rows, probes = _claim_counting_run_probes(conn, "answer_oq")
    assert sorted(rows, key=lambda r: r[3]) == _answers("old-run")
    assert probes == 4


def test_a_claimed_workflow_task_still_reads_its_run(db):
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.start_workflow('answer_wf', '[7]', 'wf-run', 'answer_wfq')")
        with conn.transaction():
            before = conn.execute(RUN_PROBES).fetchone()[0]
            row = conn.execute(
                "SELECT kind, workflow_name, workflow_id, new_events_after, jsonb_array_length(new_events)"
                " FROM harvest.claim_tasks('w', ARRAY['answer_wfq'], 10)"
            ).fetchone()
            probes = conn.execute(RUN_PROBES).fetchone()[0] - before
    assert row == ("workflow", "answer_wf", "wf-run", 0, 1)  # its history: WorkflowStarted
    assert probes == 1
