"""examples/approval: decisions by signal, state by query, updates with a validator, the
deadline, the escalation and the expiry, with days of waiting skipped."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest

from examples.approval import Decision, Outcome, Request, app, approval
from examples.approval.__main__ import scenario
from harvest import App, StartOptions, UpdateRejected
from harvest.testing import WorkflowEnvironment

REQUEST = Request(
    "REQ-7", requester="ann", approver="bob", manager="carol", description="a desk", amount_cents=40_000
)


@pytest.fixture
def harvest_app() -> App:
    return app


def notices(env: WorkflowEnvironment) -> list[tuple[str, str]]:
    return [(call.args[0], call.args[1]) for call in env.activity_calls("notify")]


def test_the_approver_decides_by_signal_and_others_are_ignored(harvest_env: WorkflowEnvironment):
    env = harvest_env
    env.mock_activity("notify", lambda ctx, to, message: f"{to}: {message}")
    handle = env.client.start_workflow(approval, REQUEST, options=StartOptions(workflow_id="approval-REQ-7"))
    env.wait_until_idle()
    assert handle.query("status")["status"] == "pending"
    assert handle.update("comment", "for the new office") == 1
    with pytest.raises(UpdateRejected, match="cannot approve their own request"):
        handle.update("reassign", "ann")
    assert [e["event_type"] for e in handle.history()].count("UpdateAccepted") == 1  # the refusal left none
    assert handle.update("reassign", "dave") == "dave"
    handle.signal("decision", Decision("bob", approve=True))  # no longer the approver
    handle.signal("decision", Decision("dave", approve=False, reason="over budget"))

    outcome: Outcome = handle.result(timeout=10)

    assert outcome == Outcome("REQ-7", "rejected", "dave", escalated=False, comments=["for the new office"])
    assert handle.query("status")["ignored_decisions_from"] == ["bob"]
    assert [to for to, _ in notices(env)] == ["bob", "dave", "ann"]
    assert env.skips == 0  # decided long before the deadline: no time had to pass


def test_a_missed_deadline_escalates_to_the_manager(harvest_env: WorkflowEnvironment):
    env = harvest_env
    env.mock_activity("notify", lambda ctx, to, message: f"{to}: {message}")
    start = env.now()
    handle = env.client.start_workflow(approval, REQUEST, dt.timedelta(days=2), dt.timedelta(days=1))
    env.wait_until_idle()

    env.sleep("2d")  # the approver's deadline passes

    status = handle.query("status")
    assert (status["status"], status["approver"], status["escalated"]) == ("escalated", "carol", True)
    assert notices(env)[-1][0] == "carol"
    handle.signal("decision", Decision("bob", approve=True))  # too late: ignored
    handle.signal("decision", Decision("carol", approve=True))
    outcome: Outcome = handle.result(timeout=10)
    assert (outcome.status, outcome.decided_by, outcome.escalated) == ("approved", "carol", True)
    assert dt.timedelta(days=2) <= env.now() - start < dt.timedelta(days=3)


def test_nobody_decides_and_it_expires_after_both_deadlines(harvest_env: WorkflowEnvironment):
    env = harvest_env
    env.mock_activity("notify", lambda ctx, to, message: f"{to}: {message}")
    start, began = env.now(), time.monotonic()
    handle = env.client.start_workflow(approval, REQUEST)  # the defaults: 2 days, then 1

    outcome: Outcome = handle.result(timeout=10)

    assert (outcome.status, outcome.decided_by, outcome.escalated) == ("expired", None, True)
    assert env.now() - start >= dt.timedelta(days=3)
    # Skipped, not waited out: a real wait would be three days; a loaded machine can take seconds.
    assert time.monotonic() - began < 60
    assert [to for to, _ in notices(env)] == ["bob", "carol", "ann"]


def test_the_runner_scenario(harvest_env: WorkflowEnvironment):
    """What ``python -m examples.approval`` runs, with its real notify activity."""

    async def run() -> list[Outcome]:
        async with await harvest_env.async_client() as client:
            return await scenario(client)

    first, second = asyncio.run(run())
    assert (first.status, first.decided_by, first.comments) == (
        "approved",
        "bob",
        ["the old one no longer boots"],
    )
    assert (second.status, second.escalated) == ("expired", True)
