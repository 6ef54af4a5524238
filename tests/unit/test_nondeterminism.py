"""Code that no longer matches its history fails the task, never the workflow."""

from __future__ import annotations

import asyncio

import pytest
from history_builder import Engine, HistoryBuilder, new_run, resolve_all_in_order
from workflows_fixture import app, send_email

from harvest.core.errors import NonDeterminismError
from harvest.declare.definitions import App, workflow
from harvest.runtime import HistoryMismatch, IllegalWorkflowOperation


def run(coro):
    return asyncio.run(coro)


@workflow(name="flow")
async def flow_v1(ctx) -> str:
    await ctx.execute_activity(send_email, "a")
    await asyncio.gather(ctx.execute_activity("render", 1), ctx.sleep(10))
    await ctx.execute_activity(send_email, "b")
    return "v1"


def history_of_v1(tasks: int) -> HistoryBuilder:
    engine = Engine(
        App(workflows=[flow_v1], activities=[send_email]),
        flow_v1,
        resolver=lambda out: [(c, ("fire",) if c["type"] == "start_timer" else ("result", {})) for c in out],
    )
    for _ in range(tasks):
        run(engine.task())
        engine.resolve()
    return engine.history


def replay(wf, history: HistoryBuilder):
    return run(new_run(app, wf).advance(history.events))


def test_changed_activity_name_names_seq_expected_and_got():
    @workflow(name="flow")
    async def renamed(ctx) -> str:
        await ctx.execute_activity("send_sms", "a")
        return "v2"

    with pytest.raises(NonDeterminismError) as err:
        replay(renamed, history_of_v1(1))
    message = str(err.value)
    assert "seq 1" in message and "'send_email'" in message and "'send_sms'" in message
    assert err.value.seq == 1
    assert err.value.expected == "schedule_activity 'send_email'"
    assert err.value.got == "schedule_activity 'send_sms'"


def test_changed_command_kind_is_detected():
    @workflow(name="flow")
    async def sleeps_first(ctx) -> str:
        await ctx.sleep(1)
        return "v2"

    with pytest.raises(
        NonDeterminismError,
        match=r"seq 1 \(event \d+ ActivityScheduled\): expected schedule_activity 'send_email', got start_t",
    ):
        replay(sleeps_first, history_of_v1(1))


def test_removed_command_is_detected():
    @workflow(name="flow")
    async def no_timer(ctx) -> str:
        await ctx.execute_activity(send_email, "a")
        await ctx.execute_activity("render", 1)
        await ctx.execute_activity(send_email, "b")
        return "v2"

    with pytest.raises(NonDeterminismError) as err:
        replay(no_timer, history_of_v1(2))
    assert err.value.seq == 3 and err.value.expected == "start_timer"
    assert err.value.got == "nothing"


def test_a_mismatch_names_the_recorded_event_by_its_id():
    """The operator reads the history by event id and picks a reset boundary by it: the seq
    alone left them to count commands (a code change seen at 50 runs in flight)."""
    history = history_of_v1(2)
    by_seq = {
        e["event_data"]["seq"]: e
        for e in history.events
        if e["event_type"] in ("ActivityScheduled", "TimerStarted")
    }

    @workflow(name="flow")
    async def renamed(ctx) -> str:
        await ctx.execute_activity("send_sms", "a")
        return "v2"

    @workflow(name="flow")
    async def no_timer(ctx) -> str:
        await ctx.execute_activity(send_email, "a")
        await ctx.execute_activity("render", 1)
        return "v2"

    @workflow(name="flow")
    async def gated_past_min(ctx) -> str:
        ctx.version("c", 1, 1)
        return "v2"

    with pytest.raises(NonDeterminismError) as err:
        replay(renamed, history)
    assert f"at seq 1 (event {by_seq[1]['event_id']} ActivityScheduled): expected" in str(err.value)
    with pytest.raises(NonDeterminismError) as err:
        replay(no_timer, history)
    assert f"at seq 3 (event {by_seq[3]['event_id']} TimerStarted): expected start_timer, got nothing" in str(
        err.value
    )
    with pytest.raises(NonDeterminismError) as err:
        replay(gated_past_min, history)
    assert f"at seq 1 (event {by_seq[1]['event_id']} ActivityScheduled): expected" in str(err.value)

    @workflow(name="flow")
    async def two_at_once(ctx) -> str:  # a command where the step recorded none: its task's event
        await asyncio.gather(ctx.execute_activity(send_email, "a"), ctx.execute_activity("render", 1))
        return "v2"

    first_task = next(e["event_id"] for e in history.events if e["event_type"] == "WorkflowTaskCompleted")
    with pytest.raises(NonDeterminismError) as err:
        replay(two_at_once, history)
    said = f"expected no command (the workflow task of event {first_task} recorded none here), got"
    assert said in str(err.value)


def test_extra_command_is_detected():
    @workflow(name="flow")
    async def extra(ctx) -> str:
        await ctx.execute_activity(send_email, "a")
        ctx.now()
        return "v2"

    with pytest.raises(NonDeterminismError, match="seq 2"):
        replay(extra, history_of_v1(2))


def test_changed_marker_kind_is_detected():
    @workflow(name="m")
    async def uses_now(ctx) -> str:
        ctx.now()
        await ctx.sleep(1)
        return "x"

    @workflow(name="m")
    async def uses_random(ctx) -> str:
        ctx.random()
        await ctx.sleep(1)
        return "x"

    engine = Engine(App(workflows=[uses_now]), uses_now, resolver=resolve_all_in_order)
    run(engine.task())
    with pytest.raises(NonDeterminismError, match=r"record_marker 'now'.*record_marker 'random'"):
        replay(uses_random, engine.history)


def test_workflow_that_finishes_early_on_replay_is_nondeterministic():
    @workflow(name="flow")
    async def short(ctx) -> str:
        return "done"

    with pytest.raises(NonDeterminismError):
        replay(short, history_of_v1(1))


def test_nondeterminism_is_raised_even_if_the_workflow_catches_it():
    @workflow(name="flow")
    async def swallowing(ctx) -> str:
        try:
            await ctx.execute_activity("other", "a")
        except NonDeterminismError:
            return "swallowed"
        return "not raised"

    r = new_run(app, swallowing)
    with pytest.raises(NonDeterminismError):
        run(r.advance(history_of_v1(1).events))
    with pytest.raises(NonDeterminismError):  # the run stays broken
        run(r.advance([]))


def test_asyncio_sleep_in_a_workflow_tells_the_user_to_use_ctx_sleep():
    @workflow
    async def naps(ctx) -> None:
        await asyncio.sleep(1)

    with pytest.raises(IllegalWorkflowOperation, match=r"ctx\.sleep"):
        run(new_run(None, naps).advance(HistoryBuilder("naps").events))
    assert issubclass(IllegalWorkflowOperation, NonDeterminismError)


def test_sys_exit_in_a_workflow_fails_the_task_not_the_worker():
    """SystemExit from workflow code (sys.exit(), a library's argument parser) left the
    workflow loop, the worker's handler and then the worker's own loop: each worker that
    claimed the task exited. It is an illegal operation of the code, like a thread."""
    import sys

    @workflow
    async def exits(ctx) -> None:
        await ctx.execute_activity(send_email, "a")
        sys.exit(3)

    r = new_run(app, exits)
    history = HistoryBuilder("exits")
    act = run(r.advance(history.events))
    history.complete_task(history.last_id, act.commands)
    history.activity_completed(1, {})
    with pytest.raises(IllegalWorkflowOperation, match=r"sys\.exit"):
        run(r.advance(history.since(r.last_event_id)))
    with pytest.raises(IllegalWorkflowOperation, match=r"sys\.exit"):  # a replay of it too
        run(new_run(app, exits).advance(history.events))


def test_failing_side_effect_fails_the_task_not_the_workflow():
    @workflow
    async def flaky(ctx) -> None:
        ctx.side_effect(lambda: 1 / 0)

    with pytest.raises(IllegalWorkflowOperation, match="ZeroDivisionError"):
        run(new_run(None, flaky).advance(HistoryBuilder("flaky").events))


def test_cached_run_rejects_a_history_it_did_not_produce():
    history = history_of_v1(0)
    r = new_run(app, flow_v1)
    act = run(r.advance(history.events))
    # another worker answered the same task differently (e.g. after our lease expired)
    history.complete_task(act.through, [{"type": "start_timer", "seq": 1, "duration": 1}])
    with pytest.raises(HistoryMismatch):
        run(r.advance(history.since(act.through)))


def test_cached_run_rejects_a_gap_in_event_ids():
    history = history_of_v1(1)
    r = new_run(app, flow_v1)
    run(r.advance(history.events[:1]))
    with pytest.raises(HistoryMismatch, match="expected event 2"):
        run(r.advance(history.events[2:]))


def test_a_ctx_call_never_awaited_fails_the_task_at_its_line():
    """`ctx.execute_activity(...)` without `await` did nothing: the activity never ran, the
    workflow completed, and the only trace was Python's RuntimeWarning in the worker's
    stderr, pointing at whatever code happened to free the coroutine."""

    @workflow
    async def drops(ctx) -> str:
        ctx.execute_activity(send_email, "x")  # the mistake
        return "done"

    with pytest.raises(IllegalWorkflowOperation) as err:
        run(new_run(app, drops).advance(HistoryBuilder("drops").events))
    message = str(err.value)
    assert "ctx.execute_activity" in message and "never awaited" in message
    assert f"{__file__.rsplit('/', 1)[-1]}:" in message  # the line that made the mistake
    assert "await ctx.execute_activity" in message  # what to do


def test_a_ctx_sleep_never_awaited_fails_the_task_even_when_the_run_goes_on():
    @workflow
    async def naps(ctx) -> str:
        ctx.sleep("1h")  # the mistake: no timer at all
        await ctx.execute_activity(send_email, "x")
        return "done"

    with pytest.raises(IllegalWorkflowOperation, match=r"ctx\.sleep\(\.\.\.\) .*never awaited"):
        run(new_run(app, naps).advance(HistoryBuilder("naps").events))


def test_a_workflow_returning_an_unawaited_ctx_call_is_told_to_await_it():
    @workflow
    async def returns_it(ctx) -> str:
        return ctx.execute_activity(send_email, "x")  # type: ignore[return-value]

    with pytest.raises(IllegalWorkflowOperation, match=r"await ctx\.execute_activity"):
        run(new_run(app, returns_it).advance(HistoryBuilder("returns_it").events))


def test_ctx_calls_awaited_later_gathered_or_made_tasks_are_not_flagged():
    """Holding a ctx call to await it later, handing it to gather or create_task: all fine."""

    @workflow
    async def fans_out(ctx) -> list:
        later = ctx.execute_activity(send_email, "a")
        task = asyncio.create_task(ctx.execute_activity(send_email, "b"))
        both = await asyncio.gather(ctx.execute_activity(send_email, "c"), ctx.sleep(1))
        return [await later, await task, both[0]]

    engine = Engine(
        App(workflows=[fans_out], activities=[send_email]),
        fans_out,
        resolver=lambda out: [(c, ("fire",) if c["type"] == "start_timer" else ("result", {})) for c in out],
    )
    while not engine.run.finished:
        run(engine.task())
        engine.resolve()
    events = engine.history.events
    assert [e["event_type"] for e in events].count("ActivityScheduled") == 3
    replayed = new_run(App(workflows=[fans_out], activities=[send_email]), fans_out)
    run(replayed.advance(events))  # a replay of it raises nothing either


def test_a_recorded_history_of_a_dropped_ctx_call_fails_its_replay():
    """A run recorded before the check (the call dropped, the run completed) fails the replayer
    on the current code, which names the call: the bug is in the code, not the history."""

    @workflow
    async def drops(ctx) -> str:
        ctx.execute_activity(send_email, "x")
        return "done"

    history = HistoryBuilder("drops")
    history.complete_task(history.last_id, [{"type": "complete_workflow", "result": "done"}])
    with pytest.raises(IllegalWorkflowOperation, match=r"ctx\.execute_activity\(\.\.\.\) at .*never awaited"):
        new_run(app, drops).replay_history(history.events)


def test_a_mismatch_names_the_likely_causes_and_their_remedies():
    """The message said what differed (seq, expected, got) but not why code differs from its own
    history: a change since, or code that is not deterministic (time, random, I/O)."""
    import random as stdlib_random

    @workflow(name="flow")
    async def coin_flip(ctx) -> str:
        if stdlib_random.random() < 2:  # the mistake: a replay may take the other branch
            await ctx.execute_activity("send_sms", "a")
        return "v2"

    with pytest.raises(NonDeterminismError) as err:
        replay(coin_flip, history_of_v1(1))
    message = str(err.value)
    assert "ctx.version" in message and "ctx.now()" in message and "ctx.random()" in message
