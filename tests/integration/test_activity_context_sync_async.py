"""An activity's ``ctx`` in ``async def`` code, in a plain ``def`` run in the worker's threads,
and run local (docs/activities.md, "The context in sync and async code"): a call made without
``await`` in async code never blocks the worker's loop (``ctx.record_llm_call`` is queued and
recorded in the background, as ``ctx.heartbeat`` is: worker/heartbeats.py), a context's
awaitable calls made on a loop of the activity's own go through the worker's, and a local
activity's context accepts what a queued one's does or says what to do instead."""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
import pytest

from harvest import App, Client, RetryPolicy, activity, workflow
from harvest.core.errors import InvalidArgument
from harvest.db.sqlapi import AsyncSqlApi
from harvest.testing import WorkflowEnvironment

ONE_ATTEMPT = {"retry": RetryPolicy.none(), "dead_letter": False, "start_to_close": "30s"}


def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def ledger(db: str) -> list[tuple]:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT model, attempt, input_tokens FROM harvest.llm_calls ORDER BY id"
        ).fetchall()


# -- an unawaited record_llm_call does not block: the other activities of the worker run on
events = {"recorded": threading.Event(), "other_done": threading.Event()}


@activity(**ONE_ATTEMPT)
async def records_then_waits(ctx) -> str:
    assert ctx.record_llm_call("model-a", 10, 2, cost_usd_micros=300, latency_ms=40) is None
    events["recorded"].set()
    for _ in range(2000):  # until the other activity has run to its end on the same loop
        if events["other_done"].is_set():
            return "a"
        await asyncio.sleep(0.01)
    return "the other activity never ran"


@activity(**ONE_ATTEMPT)
async def runs_meanwhile(ctx) -> str:
    for _ in range(2000):
        if events["recorded"].is_set():
            events["other_done"].set()
            return "b"
        await asyncio.sleep(0.01)
    return "never recorded"


@workflow
async def two_at_once(ctx) -> list:
    return list(
        await asyncio.gather(ctx.execute_activity(records_then_waits), ctx.execute_activity(runs_meanwhile))
    )


def test_an_unawaited_record_llm_call_returns_at_once_and_is_recorded_before_the_completion(
    start_worker, client: Client, db: str
) -> None:
    """The ledger is locked against inserts, so the record cannot be written: the call still
    returns, the other activity runs to its end on the worker's loop meanwhile, and the
    attempt's completion waits for the record (written under its fencing token, so before)."""
    for event in events.values():
        event.clear()
    start_worker(App(workflows=[two_at_once], activities=[records_then_waits, runs_meanwhile]))
    with psycopg.connect(db) as locker:
        locker.execute("LOCK TABLE harvest.llm_calls IN EXCLUSIVE MODE")  # (reads go on; inserts wait)
        handle = client.start_workflow(two_at_once)
        wait_until(events["other_done"].is_set)
        with psycopg.connect(db, autocommit=True) as watcher:
            waiting = (
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                " AND query LIKE '%record_llm_call%'"
            )
            wait_until(lambda: watcher.execute(waiting).fetchone()[0] == 1)  # the send, held by the lock
        assert ledger(db) == []
        assert handle.describe()["status"] == "RUNNING"
        locker.commit()
    assert handle.result(timeout=30) == ["a", "b"]
    assert ledger(db) == [("model-a", 1, 10)]


# -- each queued record is written, in order, when the attempt fails too; awaited ones after them
@activity(retry=RetryPolicy.exponential(max_attempts=2, initial="10ms"), start_to_close="30s")
async def records_and_fails(ctx) -> list:
    if ctx.attempt() == 2:
        ctx.record_llm_call("retry", 2)
        return [await ctx.arecord_llm_call("awaited", 3) > 0]
    for n in range(3):
        ctx.record_llm_call(f"call-{n}", n)
    raise ConnectionError("the model's gateway went away")


@workflow
async def fails_once(ctx) -> list:
    return await ctx.execute_activity(records_and_fails)


def test_queued_records_are_written_in_order_when_the_attempt_fails_and_before_an_awaited_one(
    start_worker, client: Client, db: str
) -> None:
    start_worker(App(workflows=[fails_once], activities=[records_and_fails]))
    assert client.start_workflow(fails_once).result(timeout=30) == [True]
    assert ledger(db) == [
        ("call-0", 1, 0),
        ("call-1", 1, 1),
        ("call-2", 1, 2),
        ("retry", 2, 2),
        ("awaited", 2, 3),
    ]


# -- what the database would refuse is refused at the call, not at the next one
@activity(**ONE_ATTEMPT)
async def bad_record(ctx) -> str:
    try:
        ctx.record_llm_call("model-a", -1)
    except InvalidArgument as exc:
        return str(exc)
    return "accepted"


@workflow
async def bad_record_flow(ctx) -> str:
    return await ctx.execute_activity(bad_record)


def test_an_unawaited_record_with_negative_tokens_raises_invalid_argument_at_the_call(
    start_worker, client: Client, db: str
) -> None:
    start_worker(App(workflows=[bad_record_flow], activities=[bad_record]))
    message = client.start_workflow(bad_record_flow).result(timeout=30)
    assert message == "record_llm_call: input_tokens must be an int >= 0, got -1"
    assert ledger(db) == []


# -- a plain def activity awaiting ctx calls on a loop of its own: sent on the worker's loop
loops: dict[str, list] = {"sql": [], "worker": []}


@pytest.fixture
def sql_loops(monkeypatch) -> dict[str, list]:
    """The loop each heartbeat_activity and record_llm_call call of the worker runs on."""
    loops["sql"].clear()
    loops["worker"].clear()
    for name in ("heartbeat_activity", "record_llm_call"):
        original = getattr(AsyncSqlApi, name)

        async def on_loop(self, *args, _original=original):
            loops["sql"].append(asyncio.get_running_loop())
            return await _original(self, *args)

        monkeypatch.setattr(AsyncSqlApi, name, on_loop)
    return loops


@activity(**ONE_ATTEMPT)
def own_loop(ctx) -> list:
    cancelled = asyncio.run(ctx.aheartbeat({"step": 1}))  # (an async library's loop, say)
    row = asyncio.run(ctx.arecord_llm_call("model-b", 5))
    return [cancelled, row > 0]


@activity(**ONE_ATTEMPT)
async def worker_loop(ctx) -> None:
    loops["worker"].append(asyncio.get_running_loop())


@workflow
async def own_loop_flow(ctx) -> list:
    await ctx.execute_activity(worker_loop)
    return await ctx.execute_activity(own_loop)


def test_a_def_activity_s_own_loop_awaits_ctx_calls_sent_on_the_worker_s_loop(
    start_worker, client: Client, db: str, sql_loops: dict
) -> None:
    """The worker's connections belong to its loop: a call awaited on another thread's loop
    used them from there, beside the worker's own use."""
    start_worker(App(workflows=[own_loop_flow], activities=[own_loop, worker_loop]))
    assert client.start_workflow(own_loop_flow).result(timeout=30) == [False, True]
    assert len(sql_loops["sql"]) == 2
    assert all(loop is sql_loops["worker"][0] for loop in sql_loops["sql"])
    assert ledger(db) == [("model-b", 1, 5)]


# -- a local activity's ctx: what a queued one's has, or an error naming what to do instead
@activity(local=True, retry=RetryPolicy.none())
async def local_step(ctx) -> dict:
    try:
        ctx.record_llm_call("model-c", 1)
        recorded = "recorded"
    except RuntimeError as exc:
        recorded = str(exc)
    ctx.logger.info("local step")
    return {
        "aheartbeat": await ctx.aheartbeat({"n": 1}),
        "heartbeat": ctx.heartbeat(),
        "cancel_requested": ctx.cancel_requested,
        "heartbeat_details": ctx.heartbeat_details,
        "identity": [ctx.workflow_id, ctx.workflow_name, ctx.queue],
        "record": recorded,
    }


@workflow
async def local_flow(ctx) -> dict:
    return await ctx.execute_activity(local_step)


def test_a_local_activity_s_ctx_accepts_heartbeats_and_names_the_way_to_record_model_calls(
    start_worker, client: Client
) -> None:
    start_worker(App(workflows=[local_flow], activities=[local_step]))
    out = client.start_workflow(local_flow, workflow_id="local-ctx").result(timeout=30)
    assert out["aheartbeat"] is False and out["heartbeat"] is False
    assert out["cancel_requested"] is False and out["heartbeat_details"] is None
    assert out["identity"] == ["local-ctx", "local_flow", "default"]
    assert "run it as a regular activity" in out["record"]


# -- the test kit: a mock gets the ctx of its own kind (async def here), on the kit's worker
@activity(**ONE_ATTEMPT)
def priced(ctx, prompt: str) -> str:
    return prompt


@workflow
async def priced_flow(ctx, prompt: str) -> str:
    return await ctx.execute_activity(priced, prompt)


def test_an_async_mock_records_model_calls_without_awaiting(db: str) -> None:
    async def mock(ctx, prompt: str) -> str:
        assert ctx.record_llm_call("model-mock", 4, 1) is None
        ctx.heartbeat({"prompt": prompt})
        return prompt.upper()

    with WorkflowEnvironment(App(workflows=[priced_flow], activities=[priced]), dsn=db) as env:
        env.mock_activity(priced, mock)
        assert env.client.start_workflow(priced_flow, "hi").result(timeout=30) == "HI"
    assert ledger(db) == [("model-mock", 1, 4)]
