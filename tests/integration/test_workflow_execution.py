"""End to end on a real Postgres: workflows, activities, timers, retries, results."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import psycopg
import pytest

from harvest import ActivityFailure, App, Client, RetryPolicy, activity, workflow
from harvest.core.errors import ActivityError, PayloadError, TimeoutError_, WorkflowFailed


@dataclasses.dataclass
class Order:
    order_id: int
    items: list[str]


@dataclasses.dataclass
class Receipt:
    order_id: int
    total_items: int
    note: str


calls: dict[str, int] = {}
calls_lock = threading.Lock()


def count(name: str) -> int:
    with calls_lock:
        calls[name] = calls.get(name, 0) + 1
        return calls[name]


@activity
async def double(ctx, x: int) -> int:
    return x * 2


@activity
def add_sync(ctx, a: int, b: int) -> int:
    return a + b


@activity
async def make_receipt(ctx, order: Order) -> Receipt:
    return Receipt(order.order_id, len(order.items), f"attempt {ctx.attempt()}")


@workflow
async def pipeline(ctx, x: int) -> dict:
    doubled = await ctx.execute_activity(double, x)
    summed = await ctx.execute_activity(add_sync, doubled, 1)
    fanned = await asyncio.gather(*(ctx.execute_activity(double, i) for i in range(5)))
    return {"doubled": doubled, "summed": summed, "fanned": list(fanned)}


@workflow
async def order_flow(ctx, order: Order) -> Receipt:
    return await ctx.execute_activity(make_receipt, order)


@workflow
async def sleeper(ctx, seconds: float) -> str:
    before = ctx.now()
    await ctx.sleep(seconds)
    after = ctx.now()
    return f"{(after - before).total_seconds():.1f}"


@activity(retry=RetryPolicy.exponential(max_attempts=3, initial="10ms"))
async def flaky(ctx, key: str) -> dict:
    attempt = count(f"flaky:{key}")
    if attempt < 3:
        raise ConnectionError(f"attempt {attempt} failed")
    return {"attempt": ctx.attempt(), "key": str(ctx.idempotency_key())}


@workflow
async def flaky_flow(ctx, key: str) -> dict:
    return await ctx.execute_activity(flaky, key)


@activity(
    retry=RetryPolicy.exponential(max_attempts=5, initial="10ms", non_retryable_errors=["InvalidInput"]),
    dead_letter=False,
)
async def strict(ctx, mode: str) -> str:
    count(f"strict:{mode}")
    if mode == "typed":
        raise ActivityFailure("InvalidInput", "amount exceeds ceiling")
    if mode == "flag":
        raise ActivityFailure("Whatever", "give up", non_retryable=True)
    raise ValueError("plain failure")


@workflow
async def strict_flow(ctx, mode: str) -> str:
    try:
        return await ctx.execute_activity(strict, mode)
    except ActivityError as exc:
        return f"caught {exc.failure.error_type}"


@workflow
async def boom(ctx) -> None:
    raise RuntimeError("the workflow itself failed")


def test_sequential_activities_and_fan_out(start_worker, client: Client) -> None:
    start_worker(App(workflows=[pipeline], activities=[double, add_sync]))
    handle = client.start_workflow(pipeline, 21)
    assert handle.result(timeout=30) == {"doubled": 42, "summed": 43, "fanned": [0, 2, 4, 6, 8]}
    events = [e["event_type"] for e in handle.history()]
    assert events.count("ActivityScheduled") == 7
    assert events.count("ActivityCompleted") == 7
    assert events[-1] == "WorkflowCompleted"


def test_dataclasses_round_trip_by_type_hints(start_worker, client: Client) -> None:
    start_worker(App(workflows=[order_flow], activities=[make_receipt]))
    receipt = client.start_workflow(order_flow, Order(7, ["a", "b", "c"])).result(timeout=30)
    assert receipt == Receipt(7, 3, "attempt 1")


def test_unencodable_input_is_refused_at_the_call(client: Client) -> None:
    with pytest.raises(PayloadError, match=r"input\[0\]"):
        client.start_workflow(pipeline, object())


def test_an_argument_the_workflow_s_hints_refuse_is_refused_at_the_start(client: Client) -> None:
    """start_workflow(order_flow, "7") (an Order expected) started a run that failed at its first
    task with the PayloadError the client could have raised: the start now checks its arguments
    by the workflow's hints, as the worker will decode them, and starts nothing."""
    with pytest.raises(
        PayloadError, match=r"parameter 'order' of order_flow \(Order\): input\[0\]: expected object"
    ):
        client.start_workflow(order_flow, "7", workflow_id="refused-at-start")
    with pytest.raises(PayloadError, match=r"input\[0\]\.order_id: expected int, got str"):
        client.signal_with_start(
            order_flow, {"order_id": "x", "items": []}, workflow_id="refused-too", signal="s"
        )
    with client.sql() as sql:
        assert (
            sql.conn.execute(
                "SELECT count(*) FROM harvest.executions WHERE workflow_id LIKE 'refused%%'"
            ).fetchone()[0]
            == 0
        )
    # What the hints allow still starts: a dict for a dataclass, as the worker decodes it.
    assert client.start_workflow(order_flow, {"order_id": 8, "items": ["a"]}).execution_id


def test_durable_timer_fires(start_worker, client: Client) -> None:
    start_worker(App(workflows=[sleeper]))
    handle = client.start_workflow(sleeper, 0.3)
    elapsed = float(handle.result(timeout=30))
    assert elapsed >= 0.3
    types = [e["event_type"] for e in handle.history()]
    assert "TimerStarted" in types and "TimerFired" in types


def test_a_timer_fires_once_after_the_worker_restarts(start_worker, client: Client) -> None:
    """docs/guarantees.md: a timer started under one worker fires, once, under the next one, though
    its due time passed while no worker ran."""
    import time

    first = start_worker(App(workflows=[sleeper]))
    handle = client.start_workflow(sleeper, 0.5)
    deadline = time.monotonic() + 30
    while "TimerStarted" not in [e["event_type"] for e in handle.history()]:
        assert time.monotonic() < deadline, "the timer never started"
        time.sleep(0.05)
    first.stop()
    time.sleep(1.0)  # the timer comes due with no worker up
    assert "TimerFired" not in [e["event_type"] for e in handle.history()]
    start_worker(App(workflows=[sleeper]))
    assert float(handle.result(timeout=30)) >= 0.5
    types = [e["event_type"] for e in handle.history()]
    assert types.count("TimerStarted") == 1 and types.count("TimerFired") == 1


def test_retries_keep_one_idempotency_key(start_worker, client: Client) -> None:
    start_worker(App(workflows=[flaky_flow], activities=[flaky]))
    handle = client.start_workflow(flaky_flow, "k1")
    result = handle.result(timeout=30)
    assert result["attempt"] == 3
    completed = [e for e in handle.history() if e["event_type"] == "ActivityCompleted"]
    assert len(completed) == 1 and completed[0]["event_data"]["attempt"] == 3


@pytest.mark.parametrize(
    ("mode", "expected", "runs"),
    [
        ("typed", "caught InvalidInput", 1),  # matched on error_type: no retries
        ("flag", "caught Whatever", 1),  # non_retryable flag: no retries
        ("plain", "caught ValueError", 5),  # class name as error_type, retried to the limit
    ],
)
def test_non_retryable_resolution(start_worker, client: Client, mode: str, expected: str, runs: int) -> None:
    start_worker(App(workflows=[strict_flow], activities=[strict]))
    assert client.start_workflow(strict_flow, mode).result(timeout=30) == expected
    assert calls[f"strict:{mode}"] == runs


def test_workflow_failure_raises_typed_error(start_worker, client: Client) -> None:
    start_worker(App(workflows=[boom]))
    handle = client.start_workflow(boom)
    with pytest.raises(WorkflowFailed) as info:
        handle.result(timeout=30)
    assert info.value.failure["error_type"] == "RuntimeError"
    assert "the workflow itself failed" in info.value.failure["message"]


def test_result_times_out_without_a_worker(client: Client) -> None:
    handle = client.start_workflow(pipeline, 1)
    with pytest.raises(TimeoutError_):
        handle.result(timeout=0.3)


def test_start_joins_the_callers_transaction(db: str, client: Client) -> None:
    with psycopg.connect(db) as conn:
        handle = client.start_workflow(pipeline, 1, workflow_id="tx-rolled-back", connection=conn)
        conn.rollback()
    with psycopg.connect(db) as conn:
        assert (
            conn.execute(
                "SELECT count(*) FROM harvest.executions WHERE id = %s", (handle.execution_id,)
            ).fetchone()[0]
            == 0
        )
        handle = client.start_workflow(pipeline, 1, workflow_id="tx-committed", connection=conn)
        conn.commit()
    assert handle.describe()["status"] == "RUNNING"


def test_sticky_cache_and_cache_miss_write_the_same_history(db: str, start_worker) -> None:
    app = App(workflows=[pipeline, sleeper], activities=[double, add_sync])
    histories = []
    for cache_size in (1000, 0):
        worker = start_worker(app, cache_size=cache_size)
        with Client(db) as client:
            handle = client.start_workflow(pipeline, 5, workflow_id=f"cache-{cache_size}")
            handle.result(timeout=30)
            histories.append(
                [
                    (
                        e["event_type"],
                        {k: v for k, v in e["event_data"].items() if k not in ("worker_id", "through")},
                    )
                    for e in handle.history()
                ]
            )
        if cache_size:
            assert worker.worker.cache.hits > 0
        worker.stop()

    # Same commands in the same order; only the interleaving of completions may differ.
    def commands(history):
        return [h for h in history if h[0] in ("ActivityScheduled", "WorkflowCompleted")]

    assert commands(histories[0]) == commands(histories[1])


@activity(retry=RetryPolicy.none(), dead_letter=False)
def fails_with_a_nul(ctx) -> None:
    raise ValueError("bad\x00header")


@workflow
async def nul_failures(ctx, where: str) -> str:
    if where == "workflow":
        raise ValueError("bad\x00trailer")
    try:
        await ctx.execute_activity(fails_with_a_nul)
    except ActivityError as exc:
        return exc.failure.message
    return "not failed"


def test_a_failure_message_holding_a_nul_is_recorded_escaped(start_worker, client: Client) -> None:
    """An exception whose message held U+0000, raised by an activity or by workflow code, made
    its failure report one the database refused (22P05): the handler crashed, the lease expired
    and the task ran again, for good. The message is recorded with the NUL written \\x00."""
    start_worker(App(workflows=[nul_failures], activities=[fails_with_a_nul]))
    assert client.execute_workflow(nul_failures, "activity", result_timeout=30) == "bad\\x00header"
    with pytest.raises(WorkflowFailed, match=r"ValueError: bad\\x00trailer"):
        client.execute_workflow(nul_failures, "workflow", result_timeout=30)
