"""A database error's text (DETAIL, CONTEXT, a DSN's password) stays out of the worker's log
lines and out of the failure a workflow task stores (docs/security.md, "What a log line carries").

The worker's scanner, scheduler and janitor logged ``"...: %s", exc``: psycopg's whole text, a
unique violation's ``Key (email)=(ann@example.com)`` and all. A workflow task that failed on a
database error (its history not read, a payload not fetched) stored that text as its failure's
message, and again as the traceback's last line, in the task row every reader may SELECT.
Each now says the error's first line and SQLSTATE, redacted (harvest.db.connection.failure_reason)."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from harvest import App, Client, Worker, activity, query, workflow
from harvest.core.codecs import Payloads
from harvest.db.sqlapi import AsyncSqlApi
from harvest.worker import workflows as worker_workflows

sys.path.insert(0, str(Path(__file__).parent.parent / "unit"))
from test_log_lines_no_database_text import PASSWORD, assert_clean, database_error


@workflow(name="plain")
async def plain(ctx) -> str:
    return "done"


@workflow(name="waiting")
async def waiting(ctx) -> str:
    return await ctx.wait_for_signal("go")


@query(workflow="waiting")
def peek(ctx) -> str:
    return "waiting"


@activity
async def answer(ctx) -> str:
    return "x" * 4000  # (over the offload threshold: its result is written by Harvest)


@workflow(name="asking")
async def asking(ctx) -> str:
    return await ctx.execute_activity(answer)


class _FailingSql:
    """A shard's SQL API whose every call fails with ``error`` and ends the worker's passes."""

    def __init__(self, worker: Worker, error: BaseException):
        self.worker, self.error = worker, error

    def __getattr__(self, name: str) -> Any:
        async def call(*_args: object, **_kwargs: object) -> Any:
            self.worker._passes_ending.set()  # (one pass only)
            raise self.error

        return call


def test_the_scanner_scheduler_and_janitor_log_a_database_error_without_its_text(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    error = database_error(db)
    worker = Worker(App(workflows=[plain]), f"{db} password={PASSWORD}", scan_interval=0.01)
    (lane,) = worker.lanes
    lane.sql, lane.ready = _FailingSql(worker, error), True  # type: ignore[assignment]

    async def one_pass_each() -> None:
        await worker._scan(lane)
        worker._passes_ending.clear()
        await worker._retention(lane)

    with caplog.at_level(logging.WARNING, logger="harvest.worker"):
        asyncio.run(one_pass_each())
    lines = [r.getMessage() for r in caplog.records if r.name == "harvest.worker"]
    said = "\n".join(lines)
    for failed in ("timeout scan failed", "scheduler tick failed", "retention run failed"):
        assert [line for line in lines if failed in line], said
    assert_clean(lines)


def test_a_workflow_task_failing_on_a_database_error_stores_its_first_line_only(
    db: str, start_worker, client: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    error = database_error(db)

    async def unreadable(*_args: object) -> Any:
        raise error

    monkeypatch.setattr(worker_workflows, "_decoded", unreadable)
    with caplog.at_level(logging.ERROR, logger="harvest.worker"):
        start_worker(App(workflows=[plain]))
        handle = client.start_workflow("plain", workflow_id="unreadable")
        failure = None
        deadline = time.monotonic() + 10
        with psycopg.connect(db) as conn:
            while failure is None:
                assert time.monotonic() < deadline, "the workflow task never failed"
                row = conn.execute(
                    "SELECT last_failure FROM harvest.tasks WHERE execution_id = %s AND kind = 'workflow'",
                    (handle.execution_id,),
                ).fetchone()
                failure = row[0] if row else None
                time.sleep(0.05)
    assert failure["error_type"] == "UniqueViolation"
    assert failure["message"].startswith("cannot write postgresql://"), failure
    assert_clean([str(failure)])
    assert "unreadable" in failure["traceback"]  # (the stack is kept: where it failed)
    assert_clean([r.getMessage() for r in caplog.records if "workflow task for" in r.getMessage()])


def test_a_query_whose_history_cannot_be_read_answers_without_the_errors_text(
    db: str, start_worker, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer to a query is stored (harvest.query_requests.error) and read by its caller."""
    error = database_error(db)
    start_worker(App(workflows=[waiting], queries=[peek]))
    handle = client.start_workflow("waiting", workflow_id="peeked")
    assert handle.query("peek") == "waiting"  # (its first workflow task done: the run is there)

    async def unreadable(*_args: object, **_kwargs: object) -> Any:
        raise error

    monkeypatch.setattr(AsyncSqlApi, "get_history", unreadable)
    with pytest.raises(Exception) as refused:
        handle.query("peek")
    with psycopg.connect(db) as conn:
        (stored,) = conn.execute(
            "SELECT error::text FROM harvest.query_requests WHERE error IS NOT NULL"
        ).fetchone()
    assert_clean([str(refused.value), stored])


def test_an_activity_whose_result_cannot_be_offloaded_fails_without_the_errors_text(
    db: str, start_worker, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Harvest's own write of the result (offload) failing is a database error of Harvest's:
    the attempt's failure, in the task row and the history, says its first line only. (An
    activity's own exception is its author's, stored whole on purpose.)"""
    error = database_error(db)

    async def unwritable(*_args: object, **_kwargs: object) -> Any:
        raise error

    monkeypatch.setattr(Payloads, "encode", unwritable)
    start_worker(App(workflows=[asking], activities=[answer]), codecs=Payloads(offload_bytes=256))
    handle = client.start_workflow("asking", workflow_id="asked")
    failure = None
    deadline = time.monotonic() + 10
    with psycopg.connect(db) as conn:
        while failure is None:
            assert time.monotonic() < deadline, "the activity never failed"
            row = conn.execute(
                "SELECT last_failure FROM harvest.tasks WHERE execution_id = %s AND kind = 'activity'",
                (handle.execution_id,),
            ).fetchone()
            failure = row[0] if row else None
            time.sleep(0.05)
    assert failure["error_type"] == "UniqueViolation", failure
    assert_clean([str(failure)])
