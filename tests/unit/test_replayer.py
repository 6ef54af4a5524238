"""WorkflowReplayer: break a workflow on purpose and watch the replayer catch it."""

from __future__ import annotations

import asyncio
import json

import pytest
from history_builder import Engine
from workflows_fixture import render, send_email

from harvest.core.errors import NonDeterminismError
from harvest.core.payload import redact
from harvest.declare.definitions import App, workflow
from harvest.testing import ReplayResult, WorkflowReplayer


def run(coro):
    return asyncio.run(coro)


@workflow(name="flow")
async def flow_v1(ctx) -> str:
    await ctx.execute_activity(send_email, "a")
    await asyncio.gather(ctx.execute_activity(render, 1), ctx.sleep(10))
    await ctx.execute_activity(send_email, "b")
    return "v1"


@workflow(name="flow")
async def reordered(ctx) -> str:
    await ctx.execute_activity(render, 1)  # swapped with send_email "a"
    await asyncio.gather(ctx.execute_activity(send_email, "a"), ctx.sleep(10))
    await ctx.execute_activity(send_email, "b")
    return "v1"


@workflow(name="flow")
async def timer_removed(ctx) -> str:
    await ctx.execute_activity(send_email, "a")
    await ctx.execute_activity(render, 1)  # the sleep(10) is gone
    await ctx.execute_activity(send_email, "b")
    return "v1"


@workflow(name="flow")
async def extra_at_the_end(ctx) -> str:
    await ctx.execute_activity(send_email, "a")
    await asyncio.gather(ctx.execute_activity(render, 1), ctx.sleep(10))
    await ctx.execute_activity(send_email, "b")
    ctx.now()  # a new command after the last one
    return "v1"


@workflow(name="flow")
async def fails_now(ctx) -> str:
    await ctx.execute_activity(send_email, "a")
    await asyncio.gather(ctx.execute_activity(render, 1), ctx.sleep(10))
    await ctx.execute_activity(send_email, "b")
    raise RuntimeError("new validation")


@workflow(name="flow")
async def cosmetic_change(ctx) -> str:
    first = await ctx.execute_activity(send_email, "a")  # same commands, other local code
    _ = first
    await asyncio.gather(ctx.execute_activity(render, 1), ctx.sleep(10))
    await ctx.execute_activity(send_email, "b")
    return "v1 (renamed variables)"


app = App(workflows=[flow_v1], activities=[send_email, render])


def recorded_history(tasks: int | None = None) -> list[dict]:
    def outcome(c):
        if c["type"] == "start_timer":
            return ("fire",)
        return ("result", 2 if c["name"] == "render" else {"sent": c["input"][0]})

    engine = Engine(app, flow_v1, resolver=lambda out: [(c, outcome(c)) for c in out])
    if tasks is None:
        run(engine.run_to_end())
    else:
        for _ in range(tasks):
            run(engine.task())
            engine.resolve()
    assert tasks is not None or engine.history.events[-1]["event_type"] == "WorkflowCompleted"
    return engine.history.events


def test_unchanged_code_replays_cleanly_from_a_json_file(tmp_path):
    path = tmp_path / "flow.json"
    # as exported from the database: event_data may arrive as JSON text
    exported = [dict(e, event_data=json.dumps(e["event_data"])) for e in recorded_history()]
    path.write_text(json.dumps(exported))
    result = WorkflowReplayer(app).replay(str(path))  # the workflow is named by the history
    assert result == ReplayResult(True) and result.ok and bool(result)
    assert WorkflowReplayer(app).replay(path, workflow=cosmetic_change).ok


def test_open_history_replays_cleanly():
    for tasks in (1, 2, 3):
        assert WorkflowReplayer(app).replay(recorded_history(tasks), workflow=flow_v1).ok


def test_reordered_activity_is_caught():
    result = WorkflowReplayer(app).replay(recorded_history(), workflow=reordered)
    assert not result.ok
    assert result.seq == 1
    assert result.expected == "schedule_activity 'send_email'"
    assert result.got == "schedule_activity 'render'"
    assert "NonDeterminismError" in result.error


def test_removed_timer_is_caught():
    result = WorkflowReplayer(app).replay(recorded_history(), workflow=timer_removed)
    assert not result.ok
    assert (result.seq, result.expected, result.got) == (3, "start_timer", "nothing")
    assert "no longer issues" in result.error


def test_removed_timer_is_caught_in_an_open_history_too():
    result = WorkflowReplayer(app).replay(recorded_history(2), workflow=timer_removed)
    assert (result.ok, result.seq, result.expected) == (False, 3, "start_timer")


def test_new_command_in_the_closing_step_is_caught():
    result = WorkflowReplayer(app).replay(recorded_history(), workflow=extra_at_the_end)
    assert not result.ok and result.seq == 5 and result.got == "record_marker 'now'"


def test_a_different_ending_is_caught():
    result = WorkflowReplayer(app).replay(recorded_history(), workflow=fails_now)
    assert not result.ok
    assert (result.expected, result.got) == ("WorkflowCompleted", "WorkflowFailed")


def test_replay_or_raise():
    replayer = WorkflowReplayer(app)
    assert replayer.replay_or_raise(recorded_history(), workflow=flow_v1).ok
    with pytest.raises(NonDeterminismError, match="seq 1"):
        replayer.replay_or_raise(recorded_history(), workflow=reordered)


def test_a_history_without_a_start_is_reported():
    result = WorkflowReplayer(app).replay([])
    assert not result.ok and "WorkflowStarted" in result.error


@pytest.mark.parametrize(
    ("history", "found"),
    [([{"event_type": "WorkflowStarted"}], "event_id"), ([{"event_id": 1}], "event_type"), (["x"], "str")],
)
def test_a_malformed_event_is_a_type_error_naming_it(history, found):
    # It was a bare KeyError: 'event_id' from sorting the events.
    with pytest.raises(TypeError, match=rf"event 0 of the history .*{found}"):
        WorkflowReplayer(app).replay(history)


def closed_by_the_engine(events: list[dict], event_type: str, data: dict) -> list[dict]:
    """``events`` ended by a closing event the database writes with no decision."""
    return [*events, {"event_id": len(events) + 1, "event_type": event_type, "event_data": data}]


@pytest.mark.parametrize(
    ("event_type", "data"),
    [
        # a newer run of its key superseded it (on_conflict="cancel_running": flow_concurrency.sql)
        ("WorkflowCancelled", {"details": {"superseded_by": "00000000-0000-0000-0000-000000000001"}}),
        # its history outgrew a hard cap after a decision (decide.sql, _decide_history_caps)
        (
            "WorkflowFailed",
            {"failure": {"error_type": "HistoryEventCapExceeded", "message": "m", "non_retryable": True}},
        ),
        (
            "WorkflowFailed",
            {"failure": {"error_type": "HistoryByteCapExceeded", "message": "m", "non_retryable": True}},
        ),
        # no worker that claimed its task had the workflow any more (decide.sql, fail_workflow_task)
        (
            "WorkflowFailed",
            {"failure": {"error_type": "UnknownWorkflow", "reason": "unknown_workflow", "message": "m"}},
        ),
    ],
)
def test_a_run_the_engine_closed_replays_cleanly(event_type, data):
    """The database closes some runs with no decision, right after a step, where a closing
    command's event would be: the replayer took the last step for the one that ended the run
    and failed unchanged code ("the code no longer ends where the history did"), so a release
    gate over terminal histories (export-batch --state-group terminal) failed on good code."""
    for tasks in (1, 2):
        history = closed_by_the_engine(recorded_history(tasks), event_type, data)
        result = WorkflowReplayer(app).replay(history)
        assert result.ok, result.error
        # and a changed step is still caught in such a history
        assert not WorkflowReplayer(app).replay(history, workflow=reordered).ok


def test_a_cancelled_ending_the_code_no_longer_makes_is_caught():
    """A WorkflowCancelled that a decision wrote (after a cancel request) is still checked."""
    events = recorded_history(2)
    cancelled = closed_by_the_engine(events, "WorkflowCancelRequested", {"reason": "r"})
    cancelled = closed_by_the_engine(cancelled, "WorkflowTaskCompleted", {"through": len(cancelled)})
    cancelled = closed_by_the_engine(cancelled, "WorkflowCancelled", {"details": "r"})
    assert WorkflowReplayer(app).replay(cancelled).ok  # flow_v1 lets the cancellation end it

    @workflow(name="flow")
    async def ignores_cancel(ctx) -> str:
        try:
            await flow_v1.__harvest_workflow__.fn(ctx)
        except asyncio.CancelledError:
            return "ignored"  # completes where the history was cancelled
        return "v1"

    result = WorkflowReplayer(app).replay(cancelled, workflow=ignores_cancel)
    assert (result.ok, result.expected, result.got) == (False, "WorkflowCancelled", "WorkflowCompleted")


def test_a_redacted_export_is_refused_not_replayed(tmp_path):
    """`harvest history export` without --full writes {"redacted": true} and every payload as
    {"redacted": true, "bytes": n}. Replayed, the code got those instead of its inputs and
    results: it passed when it did not look at them, or failed with a NonDeterminismError that
    blamed the code. A batch's redacted export was refused already; a single one is too."""
    redacted = {"execution": {}, "events": redact(recorded_history()), "redacted": True}
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(redacted))
    for history in (redacted, str(path)):
        result = WorkflowReplayer(app).replay(history)
        assert not result.ok and "redacted" in result.error and "--full" in result.error
        assert not WorkflowReplayer(app).replay_with_reset(history, 4).ok
    assert WorkflowReplayer(app).replay({**redacted, "events": recorded_history(), "redacted": False}).ok


@pytest.mark.parametrize(
    "bad",
    [
        {"event_type": "WorkflowTaskCompleted", "event_data": {}},  # no through
        {"event_type": "ActivityScheduled", "event_data": {"name": "send_email"}},  # no seq
        {"event_type": "WorkflowTaskCompleted", "event_data": {"through": "one"}},
    ],
)
def test_a_malformed_event_is_reported_not_raised(bad):
    """An event without the fields its type has escaped the replayer as a KeyError (ValueError),
    and `harvest replay` printed a traceback; it is a HistoryMismatch, reported like any other."""
    events = recorded_history(1)[:2]
    result = WorkflowReplayer(app).replay([*events, {"event_id": 3, **bad}], workflow=flow_v1)
    assert not result.ok and "HistoryMismatch" in result.error and "event 3" in result.error
