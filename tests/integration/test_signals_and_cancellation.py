"""Signals, signal-with-start, cancellation and workflow timeouts on a real Postgres."""

from __future__ import annotations

import asyncio
import time

import pytest

from harvest import App, Client, activity, workflow
from harvest.core.errors import (
    SignalTimeout,
    WorkflowCancelled,
    WorkflowNotRunning,
    WorkflowTimedOut,
)

cleanups: list[str] = []


@workflow
async def collector(ctx, expected: int) -> list:
    received = []
    for _ in range(expected):
        received.append(await ctx.wait_for_signal("item"))
    return received


@workflow
async def approval(ctx) -> str:
    try:
        decision = await ctx.wait_for_signal("decision", timeout=0.3)
    except SignalTimeout:
        return "timed out"
    return f"decided {decision}"


@activity
async def cleanup(ctx, what: str) -> str:
    cleanups.append(what)
    return what


@activity(start_to_close="30s", heartbeat_timeout="2s")
async def long_job(ctx) -> str:
    for _ in range(300):
        await asyncio.sleep(0.05)
        if await ctx.aheartbeat():
            return "noticed cancellation"
    return "finished"


@workflow
async def cancellable(ctx) -> str:
    try:
        await ctx.wait_for_signal("never")
    except asyncio.CancelledError:
        await ctx.execute_activity(cleanup, "released resources")
        raise
    return "not reached"


@workflow
async def waits_forever(ctx) -> None:
    await ctx.wait_for_signal("never")


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_signals_buffer_before_the_wait_and_keep_their_order(start_worker, client: Client) -> None:
    handle = client.start_workflow(collector, 3)
    for i in range(3):  # sent before any worker runs: buffered in the history
        handle.signal("item", {"n": i})
    start_worker(App(workflows=[collector]))
    assert handle.result(timeout=30) == [{"n": 0}, {"n": 1}, {"n": 2}]


def test_signal_wins_over_its_timeout(start_worker, client: Client) -> None:
    start_worker(App(workflows=[approval]))
    handle = client.start_workflow(approval)
    handle.signal("decision", "yes")
    assert handle.result(timeout=30) == "decided yes"


def test_timeout_wins_when_no_signal_comes(start_worker, client: Client) -> None:
    start_worker(App(workflows=[approval]))
    assert client.start_workflow(approval).result(timeout=30) == "timed out"


def test_signal_to_a_finished_run_is_an_error(start_worker, client: Client) -> None:
    start_worker(App(workflows=[approval]))
    handle = client.start_workflow(approval)
    handle.result(timeout=30)
    with pytest.raises(WorkflowNotRunning, match="COMPLETED"):
        handle.signal("decision", "late")


def test_signal_with_start_starts_then_signals_the_same_run(start_worker, client: Client) -> None:
    first = client.signal_with_start(collector, 2, workflow_id="batch-1", signal="item", signal_payload="a")
    second = client.signal_with_start(collector, 2, workflow_id="batch-1", signal="item", signal_payload="b")
    assert first.started_fresh and not second.started_fresh
    assert first.execution_id == second.execution_id
    start_worker(App(workflows=[collector]))
    assert first.result(timeout=30) == ["a", "b"]


def test_cancel_lets_the_workflow_clean_up(start_worker, client: Client) -> None:
    cleanups.clear()
    start_worker(App(workflows=[cancellable], activities=[cleanup]))
    handle = client.start_workflow(cancellable)
    wait_until(lambda: len(handle.history()) >= 2)
    assert handle.cancel("operator request") is True
    assert handle.cancel("again") is False
    with pytest.raises(WorkflowCancelled):
        handle.result(timeout=30)
    assert cleanups == ["released resources"]
    types = [e["event_type"] for e in handle.history()]
    assert types.count("WorkflowCancelRequested") == 1 and types[-1] == "WorkflowCancelled"


def test_execution_timeout_ends_the_run_timed_out(start_worker, client: Client) -> None:
    start_worker(App(workflows=[waits_forever]))
    handle = client.start_workflow(waits_forever, execution_timeout="0.5s")
    with pytest.raises(WorkflowTimedOut):
        handle.result(timeout=30)
    assert handle.describe()["status"] == "TIMED_OUT"
