"""A payload a worker cannot decode fails its task, never the worker (docs/failures.md, "A payload
a worker cannot read"). One signal nested 1000 deep, stored before the database refused it
(migration 0128) or by the superuser, stopped the worker that claimed its run: the claim's fetch
raised RecursionError out of the worker, with every other task of the claim leased to it, at
every restart. And what a worker writes is bounded as what a client sends is: 200 levels."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from harvest import App, activity, workflow

DEEP = "[" * 1000 + "]" * 1000
HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]
NO_CHECK = """CREATE OR REPLACE FUNCTION harvest._check_depth(
    p_what text, p_payload jsonb, p_bytes bigint DEFAULT NULL
) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN END $$"""


@workflow
async def waits_for_a_signal(ctx) -> int:
    return len(str(await ctx.wait_for_signal("s", timeout="1h")))


@activity(dead_letter=False)
async def deep_result(ctx) -> list:
    value: list = []
    for _ in range(299):
        value = [value]
    return value


@workflow
async def calls_deep(ctx) -> str:
    try:
        await ctx.execute_activity(deep_result)
    except Exception as exc:  # (the failure the activity's attempt recorded)
        return f"{type(exc).__name__}: {exc}"
    return "completed"


@activity(queue="later")
async def takes(ctx, first: int, second: list) -> int:
    return first


@workflow
async def passes(ctx) -> int:
    return await ctx.execute_activity(takes, 1, [])


@workflow
async def returns_deep(ctx) -> list:
    value: list = []
    for _ in range(299):
        value = [value]
    return value


app = App(workflows=[waits_for_a_signal, calls_deep], activities=[deep_result])


def _signal_past_the_check(conn: psycopg.Connection, execution_id: str, payload: str) -> None:
    """The signal as the superuser writes it around the check (or as it was stored before it)."""
    with conn.transaction():
        kept = conn.execute(
            "SELECT pg_get_functiondef('harvest._check_depth(text,jsonb,bigint)'::regprocedure)"
        ).fetchone()[0]
        conn.execute(NO_CHECK)
        conn.execute("SELECT harvest.signal_workflow(%s, 's', %s::jsonb)", (execution_id, payload))
        conn.execute(kept)


def _first_row(db: str, sql: str, execution_id: str) -> tuple | None:
    """The first row ``sql`` answers for the run, within 60 s (None: none came)."""
    deadline = time.monotonic() + 60
    with psycopg.connect(db, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(sql, (execution_id,)).fetchone()
            if row is not None:
                return row
            time.sleep(0.05)
    return None


def test_a_stored_signal_1000_deep_fails_its_workflow_task_not_the_worker(
    db: str, client, tmp_path: Path
) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        starting = "SELECT execution_id FROM harvest.start_workflow('waits_for_a_signal', '[]', %s)"
        runs = [str(conn.execute(starting, (f"run-{n}",)).fetchone()[0]) for n in range(4)]
        _signal_past_the_check(conn, runs[0], DEEP)
        for run in runs[1:]:
            conn.execute("SELECT harvest.signal_workflow(%s, 's', '1')", (run,))
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "PYTHONPATH": f"{Path(__file__).parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    with log.open("w") as out:
        worker = subprocess.Popen(
            [*HARVEST, "worker", "test_poison_payloads:app", "--database-url", db],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        for run in runs[1:]:  # the other runs of its claims complete
            assert client.get_handle(run).result(timeout=60) == 1, log.read_text()
        failed = "SELECT last_failure FROM harvest.tasks WHERE execution_id = %s AND kind = 'workflow' AND {}"
        failure = _first_row(db, failed.format("last_failure IS NOT NULL"), runs[0])
        failure = failure and failure[0]
        assert failure is not None, log.read_text()
        assert failure["error_type"] == "PayloadError"
        assert failure["non_retryable"] is False  # (retried: a release that reads it may come)
        assert failure["message"].startswith(
            "event 2 (SignalReceived) of the history, at event_data.payload[0][0][0]..., cannot be decoded: "
            "a stored value nests arrays and objects deeper than this process's JSON parser reads"
        ), failure["message"]
        assert "[[[[" not in failure["message"]  # (where, not the value)
        assert worker.poll() is None, log.read_text()  # the worker stays up
        logged = [line for line in log.read_text().splitlines() if runs[0] in line]
        assert logged and all("PayloadError: event 2 (SignalReceived)" in line for line in logged), logged
        assert "Traceback" not in log.read_text() and "RecursionError" not in log.read_text()
    finally:
        worker.terminate()
        worker.wait(timeout=60)


def test_an_activity_result_300_deep_fails_its_attempt(start_worker, client) -> None:
    start_worker(app)
    outcome = client.start_workflow(calls_deep).result(timeout=60)
    assert outcome.startswith("ActivityError"), outcome
    assert "PayloadError" in outcome and "the result cannot be stored" in outcome, outcome
    assert "arrays and objects nest deeper than 200 levels" in outcome, outcome


def test_an_activity_input_1000_deep_fails_its_attempt_for_good_and_is_dead_lettered(
    start_worker, client, db: str
) -> None:
    deciding = start_worker(App(workflows=[passes]))  # (no worker polls "later" yet)
    handle = client.start_workflow(passes)
    scheduled = "SELECT 1 FROM harvest.tasks WHERE execution_id = %s AND kind = 'activity'"
    assert _first_row(db, scheduled, handle.execution_id)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(  # (as stored before the database's check, or by the superuser)
            "UPDATE harvest.tasks SET input = %s::jsonb WHERE execution_id = %s AND kind = 'activity'",
            ("[1, " + DEEP + "]", handle.execution_id),
        )
    deciding.stop()
    start_worker(App(activities=[takes]))
    row = _first_row(
        db, "SELECT attempts, failure FROM harvest.dead_letters WHERE execution_id = %s", handle.execution_id
    )
    assert row is not None
    attempts, failure = row
    assert attempts == 1 and failure["error_type"] == "PayloadError" and failure["non_retryable"] is True
    assert failure["message"].startswith(
        "the input of activity takes (at input[1][0][0][0]...) cannot be decoded: a stored value nests"
    ), failure["message"]


def test_a_workflow_result_300_deep_fails_its_workflow_task(start_worker, client, db: str) -> None:
    start_worker(App(workflows=[returns_deep]))
    handle = client.start_workflow(returns_deep)
    failed = "SELECT last_failure FROM harvest.tasks WHERE execution_id = %s AND last_failure IS NOT NULL"
    row = _first_row(db, failed, handle.execution_id)
    assert row is not None
    assert row[0]["error_type"] == "PayloadError", row
    assert "arrays and objects nest deeper than 200 levels" in row[0]["message"], row
    assert client.get_handle(handle.execution_id).describe()["status"] == "RUNNING"
