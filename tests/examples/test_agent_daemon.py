"""examples/agent_daemon: the scripted model's tool calls run as activities, the workspace
mutex keeps two sessions from losing each other's write, and the books add up."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from examples.agent_daemon import DaemonState, SessionReport, Task, agent_daemon, app, model
from examples.agent_daemon.__main__ import DAEMON_ID, scenario
from examples.agent_daemon.workflows import PRICE_INPUT_MICROS, PRICE_OUTPUT_MICROS, Inbox, agent_session
from harvest import App, UpdateRejected, WorkflowHandle
from harvest.testing import WorkflowEnvironment, WorkflowReplayer


@pytest.fixture
def harvest_app() -> App:
    return app


def run_scenario(env: WorkflowEnvironment, workspace: Path) -> DaemonState:
    async def run() -> DaemonState:
        async with await env.async_client() as client:
            return await scenario(client, str(workspace))

    return asyncio.run(run())


def held(handle: WorkflowHandle) -> tuple[dt.datetime, dt.datetime]:
    """When a session's run worked inside the workspace mutex: from the first activity it
    scheduled once it had the mutex to the last one completed before it gave it back. (Not the
    grant's and the release's own events: a release grants the next waiter in one transaction,
    whose events carry its statements' clocks in no set order.)"""
    events = handle.history()  # in event id order
    acquired = next(i for i, e in enumerate(events) if e["event_type"] == "MutexAcquired")
    released = next(
        i
        for i, e in enumerate(events)
        if e["event_type"] == "MarkerRecorded" and e["event_data"]["kind"] == "mutex_release"
    )
    inside = events[acquired + 1 : released]
    first = min(e["created_at"] for e in inside if e["event_type"] == "ActivityScheduled")
    last = max(e["created_at"] for e in inside if e["event_type"] == "ActivityCompleted")
    return first, last


def test_two_sessions_edit_one_file_under_the_mutex_and_the_books_add_up(
    harvest_env: WorkflowEnvironment, tmp_path: Path
):
    final = run_scenario(harvest_env, tmp_path)

    assert (tmp_path / "NOTES.md").read_text().splitlines() in (
        ["- buy milk", "- call the bank"],
        ["- call the bank", "- buy milk"],
    )  # both notes: the second session read the file after the first one wrote it
    reports = {r.session_id: r for r in final.recent}
    assert {k: r.status for k, r in reports.items()} == {
        "note-1": "done",
        "note-2": "done",
        "big": "refused",
        "count": "done",
    }
    assert reports["count"].answer == "NOTES.md has 2 lines."
    assert [t.tool for t in reports["note-1"].turns] == ["read_file", "write_file", None]
    for report in reports.values():
        assert report.cost_micros == sum(
            t.input_tokens * PRICE_INPUT_MICROS + t.output_tokens * PRICE_OUTPUT_MICROS for t in report.turns
        )
    assert final.spent_micros == sum(r.cost_micros for r in reports.values())
    assert (final.input_tokens, final.output_tokens) == tuple(
        map(sum, zip(*(r.tokens for r in reports.values()), strict=True))
    )
    assert final.reserved_micros == 0
    assert final.sessions == {"done": 3, "refused": 1}

    # Each model call is in Harvest's cost ledger too, once: the usage report's llm_* sums are
    # the daemon's own books (one priced row per turn, all of them the sessions').
    now = dt.datetime.now(dt.UTC)
    with harvest_env.client.sql() as sql:
        groups = {
            row["group_name"]: row
            for row in sql.count_usage(now - dt.timedelta(hours=1), now + dt.timedelta(minutes=1))
        }
    ledger = {
        field: sum(int(row[field] or 0) for row in groups.values())
        for field in (
            "llm_calls",
            "llm_input_tokens",
            "llm_output_tokens",
            "llm_cost_usd_micros",
            "llm_unpriced_calls",
        )
    }
    assert ledger == {
        "llm_calls": sum(len(r.turns) for r in reports.values()),
        "llm_input_tokens": final.input_tokens,
        "llm_output_tokens": final.output_tokens,
        "llm_cost_usd_micros": final.spent_micros,
        "llm_unpriced_calls": 0,
    }
    assert groups["agent_session"]["llm_calls"] == ledger["llm_calls"] > 0

    sessions = [
        harvest_env.client.get_handle(workflow=agent_session, workflow_id=f"{DAEMON_ID}/{name}")
        for name in ("note-1", "note-2")
    ]
    first, second = (held(handle) for handle in sessions)
    assert first[1] <= second[0] or second[1] <= first[0]  # never both inside at once

    # Every model call is in the history once, and the session replays from it alone (no
    # database, no model): a restarted daemon pays for no finished turn again.
    history = sessions[0].history()
    calls = [
        e
        for e in history
        if e["event_type"] == "ActivityScheduled" and e["event_data"]["name"] == "call_model"
    ]
    assert len(calls) == len(reports["note-1"].turns)
    replay = WorkflowReplayer(app).replay(history)
    assert replay.ok, replay.error


def test_a_session_stops_at_its_budget_and_the_daemon_budget_can_be_raised(
    harvest_env: WorkflowEnvironment, tmp_path: Path
):
    env = harvest_env

    def expensive(ctx: Any, prompt: str, transcript: list[model.Message]) -> model.ModelReply:
        return dataclasses.replace(model.reply(prompt, transcript), input_tokens=4_000)

    env.mock_activity("call_model", expensive)  # 12,000+ micro-dollars a call
    daemon = env.client.start_workflow(agent_daemon, DaemonState(str(tmp_path), budget_micros=10_000))
    daemon.signal("inbox", Inbox("task", Task("s-1", "note: costly", budget_micros=20_000)))
    env.wait_until_idle()
    assert daemon.query("costs")["sessions"] == {"refused": 1}  # 20,000 does not fit in 10,000
    with pytest.raises(UpdateRejected, match="positive"):
        daemon.update("raise_budget", -5)
    assert daemon.update("raise_budget", 30_000) == 40_000

    daemon.signal("inbox", Inbox("task", Task("s-2", "note: costly", budget_micros=20_000)))
    daemon.signal("inbox", Inbox("stop"))
    final: DaemonState = daemon.result(timeout=10)

    report: SessionReport = final.recent[-1]
    assert (report.session_id, report.status) == ("s-2", "over_budget")
    assert len(report.turns) == 2  # planned, read the file, then the next call passed the budget
    assert not (tmp_path / "NOTES.md").exists()  # it never got to write
    assert final.spent_micros == report.cost_micros > 20_000
    assert len(env.activity_calls("call_model")) == 2
