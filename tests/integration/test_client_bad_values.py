"""Bad values given to the Python client, as tests/web/test_cli_bad_values.py gives them to the
CLI: each is a Harvest error that says what was wrong, raised before anything is written, on
Client and AsyncClient alike; never psycopg's own error (UndefinedFunction for a name that is
not a string, DataError for a NUL, UntranslatableCharacter for a NUL in a payload)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from harvest import ActivityError, App, AsyncClient, Client, QueryFailed, activity, query, update, workflow
from harvest.core.errors import InvalidArgument, PayloadError


@workflow
async def waiter(ctx) -> str:
    return await ctx.wait_for_signal("go")


@update(workflow=waiter)
def bump(ctx, n: Any) -> Any:
    return n


@query(workflow=waiter)
def raw(ctx) -> str:
    return "a\x00b"


ATTEMPTS: list[int] = []


@activity(dead_letter=False)
def nul_result(ctx) -> str:
    ATTEMPTS.append(1)
    return "a\x00b"


@workflow
async def nul_flow(ctx) -> str:
    try:
        return await ctx.execute_activity(nul_result)
    except ActivityError as exc:
        return f"{exc.failure.error_type}: {exc.failure.message}"


def _written(db: str) -> tuple[int, int]:
    """Runs and history events in the database."""
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM harvest.executions), (SELECT count(*) FROM harvest.events)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


# (call, the error's class, what its message says); each given the sync client and a running run
SYNC_CASES: list[tuple[str, Callable[[Client, Any], Any], type[Exception], str]] = [
    ("workflow_id=5", lambda c, h: c.start_workflow(waiter, workflow_id=5), InvalidArgument, "workflow_id"),
    ("workflow_id NUL", lambda c, h: c.start_workflow(waiter, workflow_id="a\x00b"), InvalidArgument, "NUL"),
    ("queue=5", lambda c, h: c.start_workflow(waiter, queue=5), InvalidArgument, "queue"),
    (
        "reuse_policy=5",
        lambda c, h: c.start_workflow(waiter, reuse_policy=5),
        InvalidArgument,
        "reuse_policy",
    ),
    ("name NUL", lambda c, h: c.start_workflow("wait\x00er"), InvalidArgument, "NUL"),
    # "residency_key is blank" said of 5; connection="x" was an AttributeError from inside.
    (
        "residency_key=5",
        lambda c, h: c.start_workflow(waiter, residency_key=5),
        InvalidArgument,
        "residency_key must be a non-empty string, got int 5",
    ),
    (
        "connection='x'",
        lambda c, h: c.start_workflow(waiter, connection="x"),
        InvalidArgument,
        "connection: expected a psycopg Connection",
    ),
    ("input NUL", lambda c, h: c.start_workflow("waiter", "a\x00b"), PayloadError, "U\\+0000"),
    (
        "search attribute NUL",
        lambda c, h: c.start_workflow(waiter, search_attributes={"k": "a\x00"}),
        PayloadError,
        "U\\+0000",
    ),
    (
        "signal_with_start signal=5",
        lambda c, h: c.signal_with_start(waiter, workflow_id="sws", signal=5),
        InvalidArgument,
        "signal",
    ),
    ("signal name=5", lambda c, h: h.signal(5, 1), InvalidArgument, "signal name"),
    ("signal name NUL", lambda c, h: h.signal("g\x00o", 1), InvalidArgument, "NUL"),
    ("signal payload NUL", lambda c, h: h.signal("go", "a\x00b"), PayloadError, "U\\+0000"),
    ("query name=5", lambda c, h: h.query(5), InvalidArgument, "query name"),
    ("update name=5", lambda c, h: h.update(5, 1), InvalidArgument, "update name"),
    ("update arg NUL", lambda c, h: h.update("bump", "a\x00"), PayloadError, "U\\+0000"),
    ("cancel reason=5", lambda c, h: h.cancel(reason=5), InvalidArgument, "reason"),
    ("pause reason NUL", lambda c, h: h.pause(reason="a\x00"), InvalidArgument, "NUL"),
    ("terminate reason=object()", lambda c, h: h.terminate(reason=object()), InvalidArgument, "reason"),
    (
        "get_handle(workflow_id NUL)",
        lambda c, h: c.get_handle(workflow_id="a\x00").describe(),
        InvalidArgument,
        "NUL",
    ),
]


@pytest.mark.parametrize(("label", "call", "error", "says"), SYNC_CASES, ids=[c[0] for c in SYNC_CASES])
def test_a_bad_value_is_refused_before_anything_is_written(
    db: str, client: Client, label: str, call: Any, error: type[Exception], says: str
) -> None:
    handle = client.start_workflow(waiter, workflow_id="running")
    before = _written(db)
    with pytest.raises(error, match=says):
        call(client, handle)
    assert _written(db) == before, label


def test_the_async_client_refuses_the_same_values(db: str) -> None:
    """The AsyncClient started a run with workflow_id=5 as "5" where the Client failed."""

    async def go() -> list[str]:
        refused = []
        async with await AsyncClient.connect(db) as aclient:
            handle = await aclient.start_workflow(waiter, workflow_id="running")
            before = _written(db)
            calls: list[Callable[[], Any]] = [
                lambda: aclient.start_workflow(waiter, workflow_id=5),
                lambda: aclient.start_workflow(waiter, queue="q\x00"),
                lambda: aclient.start_workflow(waiter, connection="x"),  # an AttributeError inside
                lambda: aclient.start_workflow("waiter", "a\x00b"),
                lambda: handle.signal(5, 1),
                lambda: handle.signal("go", "a\x00b"),
                lambda: handle.query(5),
                lambda: handle.cancel(reason=5),
            ]
            for call in calls:
                try:
                    await call()
                except (InvalidArgument, PayloadError) as exc:
                    refused.append(type(exc).__name__)
            assert _written(db) == before
        return refused

    assert (
        asyncio.run(go())
        == ["InvalidArgument"] * 3
        + ["PayloadNotStorable"]  # (a PayloadError)
        + ["InvalidArgument"]
        + ["PayloadNotStorable"]
        + ["InvalidArgument"] * 2
    )


def test_an_activity_result_the_database_cannot_store_fails_its_attempt_for_good(
    start_worker: Any, client: Client
) -> None:
    """A result holding U+0000 crashed the worker's handler ("crashed the handler; its lease will
    expire") at each attempt, and the run waited a start_to_close per attempt; like a result that
    cannot be encoded, it is now a non-retryable PayloadError of its one attempt."""
    start_worker(App(workflows=[nul_flow], activities=[nul_result]))
    answer = client.execute_workflow(nul_flow, result_timeout=30)
    assert answer.startswith("PayloadError: the result of activity nul_result cannot be stored")
    assert "U+0000" in answer
    assert len(ATTEMPTS) == 1


def test_a_query_answer_the_database_cannot_store_is_the_caller_s_query_failed(
    start_worker: Any, client: Client
) -> None:
    start_worker(App(workflows=[waiter], queries=[raw]))
    handle = client.start_workflow(waiter)
    with pytest.raises(
        QueryFailed, match=r"PayloadError: the answer to query raw cannot be stored: .*U\+0000"
    ):
        handle.query("raw", timeout=30)
