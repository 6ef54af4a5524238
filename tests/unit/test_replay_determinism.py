"""Replay: cached and cold runs agree, batches follow WorkflowTaskCompleted{through}."""

from __future__ import annotations

import asyncio

import pytest
from history_builder import (
    FIXED_NOW,
    Engine,
    HistoryBuilder,
    new_run,
    resolve_all_in_order,
    resolve_all_reversed,
    resolve_one_at_a_time,
)
from workflows_fixture import (
    SIDE_EFFECT_CALLS,
    Order,
    app,
    fan_out,
    markers,
    racing,
    sequential,
    timers,
    tolerant,
)

from harvest.core.errors import ActivityFailure
from harvest.core.jsonb import stored_text
from harvest.declare.definitions import workflow


def run(coro):
    return asyncio.run(coro)


def charge_resolver(outstanding):
    out = []
    for c in outstanding:
        if c["name"] == "charge":
            order = c["input"][0]
            out.append((c, ("result", {"order_id": order["order_id"], "charged": order["amount"]})))
        else:
            out.append((c, ("result", {"sent": c["input"][0]})))
    return out


def test_sequential_activities_issue_one_command_per_task():
    engine = Engine(app, sequential, [{"order_id": "o-1", "amount": 42}], resolver=charge_resolver)
    final = run(engine.run_to_end())
    first = engine.activations[0].commands
    assert [c["type"] for c in first] == ["schedule_activity"]
    assert first[0]["seq"] == 1 and first[0]["name"] == "charge"
    assert first[0]["input"] == [{"order_id": "o-1", "amount": 42}]
    assert first[0]["queue"] == "default"
    assert first[0]["options"]["start_to_close"] == 30
    assert first[0]["options"]["retry"]["max_attempts"] == 5
    assert first[0]["options"]["retry"]["initial_interval"] == 2
    second = engine.activations[1].commands
    assert second[0]["seq"] == 2 and second[0]["input"] == ["o-1@example.com"]
    assert final == {
        "type": "complete_workflow",
        "result": {"receipt": {"order_id": "o-1", "charged": 42}, "mail": {"sent": "o-1@example.com"}},
    }


@pytest.mark.parametrize("resolver", [resolve_all_in_order, resolve_all_reversed, resolve_one_at_a_time])
def test_gather_fan_out_with_results_in_any_order(resolver):
    def results(outstanding):
        return [
            (c, ("result", c["input"][0] * 10 if c["name"] == "render" else {"ok": 1}))
            for c, _ in resolver(outstanding)
        ]

    engine = Engine(app, fan_out, [4], resolver=results)
    final = run(engine.run_to_end())
    first = engine.activations[0].commands
    assert [(c["seq"], c["name"], c["input"]) for c in first] == [
        (1, "render", [0]),
        (2, "render", [1]),
        (3, "render", [2]),
        (4, "render", [3]),
    ]
    assert final["result"] == [[0, 10, 20, 30], {"ok": 1}]
    # the follow-up activity always takes seq 5, whatever order the results came in
    last = [c for a in engine.activations for c in a.commands if c.get("name") == "send_email"]
    assert [c["seq"] for c in last] == [5]


def test_timers_are_durable_commands():
    engine = Engine(app, timers)
    final = run(engine.run_to_end())
    cmds = [c for a in engine.activations for c in a.commands]
    assert cmds[0] == {"type": "start_timer", "seq": 1, "duration": 3600}
    assert cmds[1] == {"type": "start_timer", "seq": 2, "duration": 5}
    assert cmds[2]["type"] == "schedule_activity" and cmds[2]["seq"] == 3
    assert final == {"type": "complete_workflow", "result": "done"}


def test_markers_are_recorded_once_and_replayed():
    engine = Engine(app, markers, check_cold=False)
    run(engine.task())
    recorded = {c["kind"]: c["value"] for c in engine.activations[0].commands if c["type"] == "record_marker"}
    assert recorded["now"] == FIXED_NOW.isoformat()
    assert recorded["random"] == 0.25 and recorded["side_effect"] == {"cfg": 7}
    engine.resolve()

    # a cold replay with a different clock and randomness still sees the recorded values
    import datetime as dt
    import random

    def other_clock():
        return dt.datetime(2030, 1, 1, tzinfo=dt.UTC)

    SIDE_EFFECT_CALLS.clear()
    cold = new_run(app, markers, clock=other_clock, rng=random.Random(99))
    act = run(cold.advance(engine.history.events))
    assert SIDE_EFFECT_CALLS == []  # read back, not run again
    assert act.finished
    result = act.commands[-1]["result"]
    assert result["now"] == FIXED_NOW.isoformat()
    assert result["r"] == 0.25 and result["u"] == recorded["uuid4"]
    assert result["s"] == {"cfg": 7}
    # history_event_count is the same number on replay as it would be live
    warm = run(engine.run.advance(engine.history.since(engine.seen)))
    assert warm.commands == act.commands


def test_warm_and_cold_runs_match_for_every_workflow():
    scenarios = [
        (sequential, [{"order_id": "x", "amount": 1}], charge_resolver),
        (fan_out, [3], resolve_all_reversed),
        (fan_out, [3], resolve_one_at_a_time),
        (timers, [], resolve_one_at_a_time),
        (markers, [], resolve_all_in_order),
        (racing, [], resolve_all_reversed),
        (racing, [], resolve_one_at_a_time),
    ]
    for wf, args, resolver in scenarios:
        if wf is fan_out:

            def resolver(out, _r=resolver):
                return [(c, ("result", 1 if c["name"] == "render" else {})) for c, _ in _r(out)]

        engine = Engine(app, wf, args, resolver=resolver)  # checks cold == warm at each task
        final = run(engine.run_to_end())
        assert final["type"] == "complete_workflow", (wf, final)


def test_racing_with_wait_and_shield():
    engine = Engine(app, racing, resolver=resolve_one_at_a_time)
    final = run(engine.run_to_end())
    assert final["result"] == "2-1"


def test_events_in_flight_land_in_the_next_batch():
    engine = Engine(app, fan_out, [2], resolver=lambda out: [])
    run(engine.task())  # schedules render 1 and 2 (event ids 3, 4 after marker 2)
    engine.history.activity_completed(1, 100)  # event 5, seen by the next task

    def arrives_late(history):  # event 6, during the task
        history.activity_completed(2, 200)

    act = run(engine.task(in_flight=arrives_late))
    assert act.through == 5 and act.commands == []  # only seq 1 resolved: still blocked
    # replay sees exactly what the original saw: the marker says through=5
    act = run(engine.task())
    assert [c["name"] for c in act.commands] == ["send_email"]
    assert act.commands[0]["seq"] == 3
    engine.history.activity_completed(3, {"ok": 1})
    final = run(engine.task())
    assert final.commands[-1] == {"type": "complete_workflow", "result": [[100, 200], {"ok": 1}]}


def test_finished_history_returns_no_commands():
    h = HistoryBuilder("timers")
    h.complete_task(1, [{"type": "start_timer", "seq": 1, "duration": 3600}])
    h.timer_fired(1)
    h.complete_task(4, [{"type": "complete_workflow", "result": "whatever"}])
    act = run(new_run(app, timers).advance(h.events))
    assert act.finished and act.commands == [] and act.through == h.last_id


def test_hand_built_history_replays_without_new_commands():
    h = HistoryBuilder("sequential", [{"order_id": "o", "amount": 3}])
    h.complete_task(
        1,
        [
            {
                "type": "schedule_activity",
                "seq": 1,
                "name": "charge",
                "input": [{"order_id": "o", "amount": 3}],
                "queue": "default",
                "options": {},
            }
        ],
    )
    h.activity_completed(1, {"order_id": "o", "charged": 3})
    act = run(new_run(app, sequential).advance(h.events))
    assert act.through == 4
    assert [(c["seq"], c["name"]) for c in act.commands] == [(2, "send_email")]


def test_uncaught_activity_failure_fails_the_workflow_with_its_error_type():
    engine = Engine(
        app,
        sequential,
        [{"order_id": "o", "amount": 1}],
        resolver=lambda out: [(c, ("fail", "CardDeclined")) for c in out],
    )
    final = run(engine.run_to_end())
    assert "in sequential" in final["failure"].pop("traceback")  # where the workflow raised it
    assert final == {
        "type": "fail_workflow",
        "failure": {
            "error_type": "CardDeclined",
            "message": "it broke",
            "non_retryable": True,
            "details": None,
        },
    }


def test_caught_activity_failure_lets_the_workflow_continue():
    outcomes = iter([("fail", "SmtpDown"), ("result", {})])
    engine = Engine(app, tolerant, resolver=lambda out: [(c, next(outcomes)) for c in out])
    final = run(engine.run_to_end())
    assert final == {"type": "complete_workflow", "result": "recovered from SmtpDown"}


@workflow
async def raises(ctx, n: int) -> int:
    if n > 0:
        await ctx.sleep(1)
    raise ValueError(f"bad n {n}")


def test_uncaught_exception_becomes_fail_workflow():
    app2 = type(app)(workflows=[raises])
    final = run(Engine(app2, raises, [1]).run_to_end())
    assert "in raises" in final["failure"].pop("traceback")
    assert final == {
        "type": "fail_workflow",
        "failure": {"error_type": "ValueError", "message": "bad n 1", "non_retryable": True, "details": None},
    }


def test_bad_input_fails_the_workflow_with_a_payload_error():
    act = run(new_run(app, sequential).advance(HistoryBuilder("sequential", ["nope"]).events))
    assert act.finished
    failure = act.commands[0]["failure"]
    assert failure["error_type"] == "PayloadError" and "input[0]" in failure["message"]
    assert Order  # the declared type that the input did not match


def test_a_failure_whose_details_are_not_json_still_fails_the_workflow():
    """An ActivityFailure raised by workflow code with details JSON cannot hold (a set, an
    object) made a fail_workflow command the worker could not send: its handler crashed, the
    lease expired and the task came back to crash again, the run RUNNING with no failure shown.
    The details are encoded as a failed activity's are (a set as a list), or else their repr."""

    @workflow(name="declines")
    async def declines(ctx) -> None:
        raise ActivityFailure("CardDeclined", "no", details={"codes": {7}, "card": object})

    final = run(Engine(type(app)(workflows=[declines]), declines).run_to_end())
    assert "in declines" in final["failure"].pop("traceback")
    assert final["failure"] == {
        "error_type": "CardDeclined",
        "message": "no",
        "non_retryable": True,
        "details": {"repr": "{'codes': {7}, 'card': <class 'object'>}"},
    }
    assert stored_text(final)  # JSON the database takes
