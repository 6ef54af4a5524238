"""History guardrails: the soft continue-as-new threshold and the hard caps."""

from __future__ import annotations

import logging
import time

import pytest

from harvest import App, Client, activity, workflow
from harvest.core.errors import InvalidArgument, WorkflowFailed
from harvest.telemetry.metrics import process_metrics
from harvest.testing import WorkflowReplayer


def counted(name: str, workflow_type: str) -> float:
    """A counter of the worker's process registry (the worker runs in this process)."""
    found = process_metrics().registry.get_sample_value(name, {"workflow_type": workflow_type})
    return 0.0 if found is None else found


def counted_to(name: str, workflow_type: str, expected: float) -> float:
    """The counter once it reaches ``expected`` (the worker counts a close after its batch call
    returns, which the client's result may beat), or its value after 20 s."""
    deadline = time.monotonic() + 20
    while counted(name, workflow_type) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return counted(name, workflow_type)


@activity
async def tick(ctx, i: int) -> int:
    return i


@workflow
async def runaway(ctx) -> None:
    i = 0
    while True:  # a loop that never rotates
        i = await ctx.execute_activity(tick, i + 1)


@workflow
async def rotating(ctx, i: int, runs: int) -> int:
    while True:
        i = await ctx.execute_activity(tick, i + 1)
        if ctx.should_continue_as_new():
            if runs >= 2:
                return i
            await ctx.continue_as_new(i, runs + 1)


def test_event_cap_fails_a_runaway_run_with_a_typed_reason(start_worker, client: Client, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="harvest.worker")
    start_worker(
        App(workflows=[runaway], activities=[tick]),
        history_event_hard_cap=40,
        history_byte_hard_cap=None,
        continue_as_new_threshold=4,
    )
    bloated = counted("harvest_workflow_history_bloat_total", "runaway")
    handle = client.start_workflow(runaway)
    with pytest.raises(WorkflowFailed) as info:
        handle.result(timeout=60)
    # The bloat warning fired once, at 20.48% of the cap (8 events), long before the failure,
    # and counted harvest.workflow.history_bloat once, by workflow type.
    assert caplog.text.count(f"history_bloat: {handle.execution_id}") == 1
    assert counted("harvest_workflow_history_bloat_total", "runaway") == bloated + 1
    assert info.value.failure["error_type"] == "HistoryEventCapExceeded"
    assert "continue_as_new" in info.value.failure["message"]
    assert handle.describe()["last_event_id"] <= 40 + 5
    with client.sql() as sql:
        [dead] = [d for d in sql.list_dead_letters() if d["execution_id"] == handle.describe()["id"]]
        assert dead["kind"] == "workflow" and dead["failure"]["error_type"] == "HistoryEventCapExceeded"
        with pytest.raises(InvalidArgument, match="cannot be replayed"):
            sql.replay_dead_letter(dead["id"])
        sql.discard_dead_letter(dead["id"])
        assert sql.list_dead_letters() == []
    # The database closed it after a step, with no decision: its (unchanged) code replays it,
    # rather than "no longer ending where the history did" (docs/versioning.md).
    result = WorkflowReplayer(App(workflows=[runaway], activities=[tick])).replay(handle.history())
    assert result.ok, result.error


def test_byte_cap_counts_stored_event_bytes(start_worker, client: Client) -> None:
    start_worker(
        App(workflows=[runaway], activities=[tick]), history_event_hard_cap=None, history_byte_hard_cap=2000
    )
    with pytest.raises(WorkflowFailed) as info:
        client.start_workflow(runaway).result(timeout=60)
    assert info.value.failure["error_type"] == "HistoryByteCapExceeded"
    assert info.value.failure["details"]["bytes"] > 2000


def test_soft_threshold_advises_rotation_before_the_cap(start_worker, client: Client) -> None:
    start_worker(
        App(workflows=[rotating], activities=[tick]),
        continue_as_new_threshold=10,
        history_event_hard_cap=40,
        history_byte_hard_cap=None,
    )
    rotated = counted("harvest_workflow_continue_as_new_total", "rotating")
    handle = client.start_workflow(rotating, 0, 0)
    assert handle.result(timeout=60) > 0
    assert handle.describe()["status"] == "CONTINUED_AS_NEW"
    # harvest.workflow.continue_as_new counts each rotation (two), by workflow type only
    assert counted_to("harvest_workflow_continue_as_new_total", "rotating", rotated + 2) == rotated + 2
