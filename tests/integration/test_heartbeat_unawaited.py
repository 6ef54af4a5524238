"""``ctx.heartbeat(details)`` without ``await`` in an ``async def`` activity, as code ported from
Temporal calls it (docs/activities.md, "Heartbeats"; harvest/worker/heartbeats.py): recorded at
once, sent in the background, coalesced and throttled, its errors raised in the activity."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings

import pytest

from harvest import ActivityError, App, Client, RetryPolicy, activity, workflow
from harvest.core.errors import StaleTask, WorkflowCancelled
from harvest.db.sqlapi import AsyncSqlApi


@pytest.fixture
def sent(monkeypatch) -> list:
    """The details of every heartbeat_activity call the worker makes (one SQL call each)."""
    calls: list = []
    original = AsyncSqlApi.heartbeat_activity

    async def counted(self, task_id, fencing_token, details):
        calls.append(details)
        return await original(self, task_id, fencing_token, details)

    monkeypatch.setattr(AsyncSqlApi, "heartbeat_activity", counted)
    return calls


def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


ONE_RETRY = RetryPolicy.exponential(max_attempts=2, initial="10ms")


# -- a hot loop: coalesced, and its last details are what the next attempt resumes from
hot_calls: list[int] = []


@activity(
    start_to_close="30s",
    heartbeat_timeout="60s",
    retry=RetryPolicy.exponential(max_attempts=2, initial="10ms"),
)
async def hot_loop(ctx, n: int) -> dict:
    if ctx.attempt() == 2:
        return {"resumed_from": ctx.heartbeat_details}
    for i in range(n):
        assert ctx.heartbeat({"done": i + 1}) is False  # no await: recorded, sent in the background
        hot_calls.append(i)
        await asyncio.sleep(0)
    raise ConnectionError("the upstream went away")  # the next attempt resumes from the last details


@workflow
async def hot_flow(ctx, n: int) -> dict:
    return await ctx.execute_activity(hot_loop, n)


def test_a_hot_loop_of_unawaited_heartbeats_sends_two_and_the_retry_sees_the_last_details(
    start_worker, client: Client, sent: list
) -> None:
    """2,000 calls within one send interval (30 s: half of heartbeat_timeout, at most 30 s) make
    one heartbeat at the first call and one with the last details when the attempt fails."""
    hot_calls.clear()
    start_worker(App(workflows=[hot_flow], activities=[hot_loop]))
    assert client.start_workflow(hot_flow, 2000).result(timeout=30) == {"resumed_from": {"done": 2000}}
    assert len(hot_calls) == 2000
    assert sent == [{"done": 1}, {"done": 2000}]


# -- the lease: kept alive by the sends a busy loop's calls come down to
busy = {"calls": 0}


@activity(start_to_close="30s", heartbeat_timeout="0.6s", retry=RetryPolicy.none(), dead_letter=False)
async def busy_loop(ctx, seconds: float) -> int:
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    while loop.time() < until:  # 2.5 heartbeat timeouts, never awaiting a heartbeat
        ctx.heartbeat({"calls": busy["calls"]})
        busy["calls"] += 1
        await asyncio.sleep(0.001)
    return ctx.attempt()


@workflow
async def busy_flow(ctx, seconds: float) -> int:
    return await ctx.execute_activity(busy_loop, seconds)


def test_unawaited_heartbeats_keep_the_lease_with_far_fewer_sends_than_calls(
    start_worker, client: Client, sent: list
) -> None:
    busy["calls"] = 0
    start_worker(App(workflows=[busy_flow], activities=[busy_loop]))
    assert client.start_workflow(busy_flow, 1.5).result(timeout=30) == 1  # no HeartbeatTimeout
    # A send every 0.3 s at most (half the heartbeat_timeout), whatever the call rate.
    assert len(sent) >= 2 and len(sent) * 10 < busy["calls"]
    assert sent == sorted(sent, key=lambda details: details["calls"])  # each the latest when sent


# -- cancellation: a call returns what the last send learned
cancel_seen = threading.Event()
job_started = threading.Event()


@activity(start_to_close="30s", heartbeat_timeout="1s")
async def watches_cancel(ctx) -> str:
    job_started.set()
    for _ in range(3000):
        if ctx.heartbeat():
            cancel_seen.set()
            return "stopped early"
        await asyncio.sleep(0.01)
    return "finished"


@activity(start_to_close="30s")
async def waits_for_the_notice(ctx) -> bool:
    for _ in range(2000):  # (the run stays open meanwhile, so the watching attempt is still held)
        if cancel_seen.is_set():
            return True
        await asyncio.sleep(0.01)
    return False


@workflow
async def watched(ctx) -> str:
    try:
        return await ctx.execute_activity(watches_cancel)
    except asyncio.CancelledError:
        await ctx.execute_activity(waits_for_the_notice)
        raise


def test_an_unawaited_heartbeat_returns_the_cancel_request(start_worker, client: Client) -> None:
    cancel_seen.clear()
    job_started.clear()
    start_worker(App(workflows=[watched], activities=[watches_cancel, waits_for_the_notice]))
    handle = client.start_workflow(watched)
    wait_until(job_started.is_set)
    assert handle.cancel("not needed any more")
    with pytest.raises(WorkflowCancelled):
        handle.result(timeout=30)
    assert cancel_seen.is_set()


# -- errors: a stale attempt's heartbeat error reaches the activity at its next call
stale = {"seen": [], "second_started": threading.Event(), "first_done": threading.Event()}


@activity(
    start_to_close="30s",
    heartbeat_timeout="0.4s",
    retry=RetryPolicy.exponential(max_attempts=2, initial="10ms"),
)
async def outlived(ctx) -> str:
    if ctx.attempt() == 2:
        stale["second_started"].set()
        while not stale["first_done"].is_set():
            await ctx.aheartbeat()  # (awaited: this attempt keeps its lease)
            await asyncio.sleep(0.02)
        return "attempt 2"
    try:
        ctx.heartbeat({"step": "first"})
        while not stale["second_started"].is_set():  # no heartbeat: timed out, retried meanwhile
            await asyncio.sleep(0.02)
        for _ in range(1000):
            ctx.heartbeat({"step": "late"})  # the first sends; its StaleTask is raised by a later call
            await asyncio.sleep(0.01)
    except StaleTask as exc:
        stale["seen"].append(str(exc))
        raise
    finally:
        stale["first_done"].set()
    return "attempt 1 never learned"


@workflow
async def outlived_flow(ctx) -> str:
    return await ctx.execute_activity(outlived)


def test_a_stale_attempt_s_unawaited_heartbeat_raises_stale_task_in_the_activity(
    start_worker, client: Client
) -> None:
    stale["seen"].clear()
    stale["second_started"].clear()
    stale["first_done"].clear()
    start_worker(App(workflows=[outlived_flow], activities=[outlived]))
    assert client.start_workflow(outlived_flow).result(timeout=30) == "attempt 2"
    assert len(stale["seen"]) == 1 and "no longer held" in stale["seen"][0]


# -- an error the activity returned without seeing fails the attempt: it does not complete
@activity(start_to_close="30s", retry=RetryPolicy.none(), dead_letter=False)
async def returns_past_an_error(ctx) -> str:
    ctx.heartbeat({"log": "x" * 5000})  # over the worker's 1,000-byte limit: its send fails
    for _ in range(50):  # (the sender runs at the next steps of the loop; nothing is awaited from it)
        await asyncio.sleep(0)
    return "done"


@workflow
async def returns_flow(ctx) -> dict:
    try:
        return {"result": await ctx.execute_activity(returns_past_an_error)}
    except ActivityError as err:
        return {"error_type": err.failure.error_type, "non_retryable": err.failure.non_retryable}


def test_a_heartbeat_error_the_activity_never_saw_fails_its_attempt(start_worker, client: Client) -> None:
    start_worker(App(workflows=[returns_flow], activities=[returns_past_an_error]), max_payload_bytes=1000)
    got = client.start_workflow(returns_flow).result(timeout=30)
    assert got == {"error_type": "PayloadTooLarge", "non_retryable": True}


# -- the def path is unchanged: each call sends and answers
@activity(start_to_close="30s")
def plain_def(ctx, n: int) -> int:
    for i in range(n):
        ctx.heartbeat({"i": i})
    return n


@workflow
async def plain_flow(ctx, n: int) -> int:
    return await ctx.execute_activity(plain_def, n)


def test_a_def_activity_s_heartbeat_still_sends_every_call(start_worker, client: Client, sent: list) -> None:
    start_worker(App(workflows=[plain_flow], activities=[plain_def]))
    assert client.start_workflow(plain_flow, 5).result(timeout=30) == 5
    assert sent == [{"i": i} for i in range(5)]


# -- ctx.aheartbeat() not awaited: a warning that names it and what to do, nothing sent
@activity(start_to_close="30s")
async def forgets_the_await(ctx) -> str:
    ctx.aheartbeat({"step": 1})  # type: ignore[unused-coroutine]  # pyright: ignore[reportUnusedCoroutine]
    return "done"


@workflow
async def forgets_flow(ctx) -> str:
    return await ctx.execute_activity(forgets_the_await)


def unawaited_warnings(start_worker, client: Client, flow, act) -> list[str]:
    """The RuntimeWarnings of one run of ``flow`` (its activity ``act`` forgets an await)."""
    start_worker(App(workflows=[flow], activities=[act]))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert client.start_workflow(flow).result(timeout=30) == "done"
    return [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]


def test_an_unawaited_aheartbeat_warns_naming_it_and_the_fix(
    start_worker, client: Client, sent: list
) -> None:
    """Python's own warning said only "coroutine 'ActivityContext.aheartbeat' was never
    awaited", at whatever time the coroutine was collected, and not what to do."""
    said = unawaited_warnings(start_worker, client, forgets_flow, forgets_the_await)
    assert len(said) == 1, said
    assert said[0].startswith("activity forgets_the_await called ctx.aheartbeat() without await: ")
    assert "await ctx.aheartbeat(details)), or call ctx.heartbeat(details)" in said[0]
    assert sent == []


# -- ctx.arecord_llm_call() not awaited: the same kind of warning, nothing recorded
@activity(start_to_close="30s")
async def forgets_the_ledger_await(ctx) -> str:
    ctx.arecord_llm_call("m", input_tokens=1)  # type: ignore[unused-coroutine]  # pyright: ignore[reportUnusedCoroutine]
    return "done"


@workflow
async def forgets_ledger_flow(ctx) -> str:
    return await ctx.execute_activity(forgets_the_ledger_await)


def test_an_unawaited_arecord_llm_call_warns_naming_it_and_the_fix(
    start_worker, client: Client, conn
) -> None:
    """Python's own warning said only "coroutine 'ActivityContext.arecord_llm_call' was never
    awaited": the model call it meant to record was missing from the usage report."""
    said = unawaited_warnings(start_worker, client, forgets_ledger_flow, forgets_the_ledger_await)
    assert len(said) == 1, said
    assert said[0].startswith(
        "activity forgets_the_ledger_await called ctx.arecord_llm_call() without await: the call was not"
        " recorded in the agent cost ledger; "
    )
    assert "or call ctx.record_llm_call(model, ...), which queues it without await" in said[0]
    assert conn.execute("SELECT count(*) FROM harvest.llm_calls").fetchone()[0] == 0
