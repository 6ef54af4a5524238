"""A workflow signals and cancels another (ctx.signal_external_workflow, ctx.cancel_external_workflow)
with real workers on a real Postgres: by execution id and by business key, a target that is
missing, ended or minted for another shard, and the sender's history replayed."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import psycopg
import pytest

from harvest import App, Client, ExternalWorkflow, ExternalWorkflowError, workflow
from harvest.core.errors import WorkflowCancelled
from harvest.testing import WorkflowReplayer


@workflow
async def collector(ctx, expected: int) -> list:
    return [await ctx.wait_for_signal("item") for _ in range(expected)]


@workflow
async def waits_forever(ctx) -> None:
    await ctx.wait_for_signal("never")


@workflow
async def stubborn(ctx) -> None:
    """Stays running after a cancel request until signal ``release``, then ends CANCELLED."""
    try:
        await ctx.wait_for_signal("never")
    except asyncio.CancelledError:
        await ctx.wait_for_signal("release")
        raise


@workflow
async def sender(ctx, target: dict, items: list) -> str:
    where = ExternalWorkflow(**target)
    for item in items:
        await ctx.signal_external_workflow(where, "item", item)
    return "sent"


@workflow
async def canceller(ctx, target: str) -> list:
    first = await ctx.cancel_external_workflow(target, "not needed")
    second = await ctx.cancel_external_workflow(ExternalWorkflow(execution_id=target))
    return [first, second]


@workflow
async def prober(ctx, target: dict) -> dict:
    out = {}
    try:
        await ctx.signal_external_workflow(ExternalWorkflow(**target), "item", 1)
        out["signal"] = "delivered"
    except ExternalWorkflowError as err:
        out["signal"] = [type(err).__name__, err.reason, err.execution_id]
    try:
        out["cancel"] = await ctx.cancel_external_workflow(ExternalWorkflow(**target))
    except ExternalWorkflowError as err:
        out["cancel"] = [type(err).__name__, err.reason, err.execution_id]
    return out


app = App(workflows=[collector, waits_forever, stubborn, sender, canceller, prober])


def history(client: Client, execution_id: str) -> list[dict]:
    return client.get_handle(execution_id).history()


def test_a_workflow_signals_another_by_execution_id(start_worker, client: Client) -> None:
    start_worker(app)
    target = client.start_workflow(collector, 3)
    source = client.start_workflow(sender, {"execution_id": target.execution_id}, [1, {"two": 2}, "three"])
    assert source.result(timeout=30) == "sent"
    assert target.result(timeout=30) == [1, {"two": 2}, "three"], "delivered in the order sent"
    received = [e for e in history(client, target.execution_id) if e["event_type"] == "SignalReceived"]
    assert [e["event_data"]["sender_execution_id"] for e in received] == [source.execution_id] * 3
    assert len({e["event_data"]["signal_id"] for e in received}) == 3
    events = history(client, source.execution_id)
    types = [e["event_type"] for e in events]
    assert types.count("ExternalSignalRequested") == types.count("ExternalSignalDelivered") == 3
    WorkflowReplayer(app).replay_or_raise(events)


@pytest.mark.parametrize("named", [False, True], ids=["workflow_id", "workflow_id+name"])
def test_a_workflow_signals_another_by_business_key(start_worker, client: Client, named: bool) -> None:
    start_worker(app)
    workflow_id = f"collect-{uuid.uuid4().hex[:8]}"
    target = client.start_workflow(collector, 1, workflow_id=workflow_id)
    key = {"workflow_id": workflow_id, **({"workflow_name": "collector"} if named else {})}
    source = client.start_workflow(sender, key, ["by key"])
    assert source.result(timeout=30) == "sent"
    assert target.result(timeout=30) == ["by key"]
    delivered = [
        e for e in history(client, source.execution_id) if e["event_type"] == "ExternalSignalDelivered"
    ]
    assert delivered[0]["event_data"]["execution_id"] == target.execution_id
    WorkflowReplayer(app).replay_or_raise(history(client, source.execution_id))


def test_a_workflow_cancels_another(start_worker, client: Client) -> None:
    start_worker(app)
    target = client.start_workflow(stubborn)
    source = client.start_workflow(canceller, target.execution_id)
    assert source.result(timeout=30) == [True, False], "the second request finds one already made"
    target.signal("release")
    with pytest.raises(WorkflowCancelled):
        target.result(timeout=30)
    requested = [
        e for e in history(client, target.execution_id) if e["event_type"] == "WorkflowCancelRequested"
    ]
    assert [e["event_data"] for e in requested] == [{"reason": "not needed"}]
    WorkflowReplayer(app).replay_or_raise(history(client, source.execution_id))


def test_a_missing_target_is_a_typed_error_the_workflow_catches(start_worker, client: Client) -> None:
    start_worker(app)
    missing = "0000" + str(uuid.uuid4())[4:]  # an id of this database's shard that no run has
    by_id = client.start_workflow(prober, {"execution_id": missing})
    by_key = client.start_workflow(prober, {"workflow_id": "nobody-has-this"})
    assert by_id.result(timeout=30) == {
        "signal": ["ExternalWorkflowNotFound", "not_found", missing],
        "cancel": ["ExternalWorkflowNotFound", "not_found", missing],
    }
    assert by_key.result(timeout=30) == {
        "signal": ["ExternalWorkflowNotFound", "not_found", None],
        "cancel": ["ExternalWorkflowNotFound", "not_found", None],
    }
    WorkflowReplayer(app).replay_or_raise(history(client, by_id.execution_id))


def test_a_completed_target_is_not_running(start_worker, client: Client) -> None:
    start_worker(app)
    done = client.start_workflow(collector, 0, workflow_id=f"done-{uuid.uuid4().hex[:8]}")
    assert done.result(timeout=30) == []
    for target in ({"execution_id": done.execution_id}, {"workflow_id": done.workflow_id}):
        outcome = client.start_workflow(prober, target).result(timeout=30)
        assert outcome == {
            "signal": ["ExternalWorkflowNotRunning", "not_running", done.execution_id],
            "cancel": ["ExternalWorkflowNotRunning", "not_running", done.execution_id],
        }, target


def test_a_target_minted_for_another_shard_is_unreachable_not_missing(start_worker, client: Client) -> None:
    start_worker(app)
    far = "0001" + str(uuid.uuid4())[4:]
    outcome = client.start_workflow(prober, {"execution_id": far}).result(timeout=30)
    assert outcome == {
        "signal": ["ExternalWorkflowUnreachable", "wrong_shard", far],
        "cancel": ["ExternalWorkflowUnreachable", "wrong_shard", far],
    }


def wait_for(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_busy_target_gets_the_signal_from_the_scanner(start_worker, client: Client, db: str) -> None:
    """The target's row is locked when the sender decides: the relay waits, the sender waits for
    its outcome, and the scanner delivers both once the lock is gone, once."""
    start_worker(app)
    target = client.start_workflow(collector, 1)
    wait_for(lambda: len(history(client, target.execution_id)) >= 2, "the target to wait for its signal")
    with psycopg.connect(db) as blocker:
        blocker.execute("SELECT 1 FROM harvest.executions WHERE id = %s FOR UPDATE", (target.execution_id,))
        source = client.start_workflow(sender, {"execution_id": target.execution_id}, ["late"])
        wait_for(
            lambda: (
                "ExternalSignalRequested" in [e["event_type"] for e in history(client, source.execution_id)]
            ),
            "the sender's decision",
        )
        time.sleep(0.5)  # scanner passes (every 0.2 s) meet the lock and leave the relay
        assert "ExternalSignalDelivered" not in [
            e["event_type"] for e in history(client, source.execution_id)
        ]
        with psycopg.connect(db, autocommit=True) as reader:
            assert reader.execute("SELECT count(*) FROM harvest.relays").fetchone()[0] == 1
        blocker.rollback()
    assert source.result(timeout=30) == "sent"
    assert target.result(timeout=30) == ["late"]
    received = [e for e in history(client, target.execution_id) if e["event_type"] == "SignalReceived"]
    assert len(received) == 1
