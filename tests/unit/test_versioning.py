"""ctx.version: patch running workflows without breaking the replay of old histories."""

from __future__ import annotations

import asyncio

import pytest
from history_builder import Engine, new_run
from workflows_fixture import send_email

from harvest.core.errors import InvalidArgument, NonDeterminismError
from harvest.declare.definitions import App, workflow
from harvest.runtime import DEFAULT_VERSION, WorkflowCallError


def run(coro):
    return asyncio.run(coro)


@workflow(name="notify")
async def notify_v1(ctx) -> str:
    await ctx.execute_activity(send_email, "a")
    await ctx.execute_activity(send_email, "b")
    return "v1"


@workflow(name="notify")
async def notify_v2(ctx) -> str:
    await ctx.execute_activity(send_email, "a")
    v = ctx.version("use-sms", DEFAULT_VERSION, 1)
    if v == DEFAULT_VERSION:
        await ctx.execute_activity(send_email, "b")
    else:
        await ctx.execute_activity("send_sms", "b")
    again = ctx.version("use-sms", DEFAULT_VERSION, 1)
    return f"v2:{v}:{again}"


@workflow(name="notify")
async def notify_v3(ctx) -> str:
    """Old histories are gone: the pre-version branch is dropped (min_supported=1)."""
    await ctx.execute_activity(send_email, "a")
    ctx.version("use-sms", 1, 2)
    await ctx.execute_activity("send_sms", "b")
    return "v3"


@workflow(name="notify")
async def notify_v4(ctx) -> str:
    await ctx.execute_activity(send_email, "a")
    ctx.version("use-sms", 2, 3)  # version 1 no longer supported
    await ctx.execute_activity("send_sms", "b")
    return "v4"


def ok(out):
    return [(c, ("result", {})) for c in out]


def history_of(wf, tasks: int):
    e = Engine(App(workflows=[wf], activities=[send_email]), wf, resolver=ok)
    for _ in range(tasks):
        run(e.task())
        e.resolve()
    return e.history


def replay(wf, history):
    return run(new_run(App(workflows=[wf], activities=[send_email]), wf).advance(history.events))


def test_new_history_records_one_version_marker():
    e = Engine(App(workflows=[notify_v2], activities=[send_email]), notify_v2, resolver=ok)
    final = run(e.run_to_end())
    second = e.activations[1].commands
    assert second[0] == {
        "type": "record_marker",
        "seq": 2,
        "kind": "version",
        "value": {"change_id": "use-sms", "version": 1},
    }
    assert [(c["seq"], c.get("name")) for c in second[1:]] == [(3, "send_sms")]
    markers = [c for a in e.activations for c in a.commands if c["type"] == "record_marker"]
    assert len(markers) == 1  # asked twice, recorded once
    assert final["result"] == "v2:1:1"


def test_old_history_replays_on_the_default_version_without_a_marker():
    old = history_of(notify_v1, 2)  # v1 scheduled "a" (seq 1) and "b" (seq 2)
    act = replay(notify_v2, old)
    assert act.finished and act.commands == [{"type": "complete_workflow", "result": "v2:-1:-1"}]


def test_old_history_still_at_the_first_step_takes_the_new_branch():
    old = history_of(notify_v1, 1)  # "a" scheduled and done; the step after it never ran
    act = replay(notify_v2, old)
    assert [(c["type"], c["seq"]) for c in act.commands] == [("record_marker", 2), ("schedule_activity", 3)]
    assert act.commands[1]["name"] == "send_sms"


def test_replay_returns_the_recorded_version_within_a_wider_range():
    history = history_of(notify_v2, 2)
    act = replay(notify_v3, history)  # recorded 1, code supports [1, 2]
    assert act.commands == [{"type": "complete_workflow", "result": "v3"}]


def test_old_history_without_default_version_support_is_nondeterministic():
    with pytest.raises(NonDeterminismError, match="use-sms") as err:
        replay(notify_v3, history_of(notify_v1, 2))
    assert err.value.seq == 2 and "DEFAULT_VERSION" in str(err.value)


def test_recorded_version_outside_the_supported_range_is_nondeterministic():
    with pytest.raises(NonDeterminismError, match=r"'use-sms'.*\[2, 3\]") as err:
        replay(notify_v4, history_of(notify_v2, 2))
    # Where, as for any other divergence (`harvest replay` prints "replay failed at seq N", then the
    # recorded command and the code's): it named no seq, so the replayer's result had none.
    assert err.value.seq == 2, err.value.seq
    assert err.value.expected == "version marker 'use-sms' v1"
    assert err.value.got == "ctx.version('use-sms', 2, 3)"


def test_version_arguments_are_validated():
    @workflow
    async def bad(ctx) -> None:
        ctx.version("c", 3, 1)

    with pytest.raises(WorkflowCallError, match=r"ctx\.version: min_supported 3 > max_supported 1"):
        run(new_run(None, bad).advance(Engine(App(workflows=[bad]), bad).history.events))
    assert InvalidArgument and DEFAULT_VERSION == -1
