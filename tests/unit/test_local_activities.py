"""Local activities run inline, retry in place, and replay from their marker."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import uuid

import pytest
from history_builder import Engine, HistoryBuilder, new_run

from harvest.core.errors import ActivityFailure
from harvest.core.idempotency import IdempotencyKey
from harvest.core.jsonb import stored_text
from harvest.declare.definitions import App, RetryPolicy, activity, workflow
from harvest.runtime import LocalActivityContext
from harvest.runtime.run import LocalActivitiesDeferred

CALLS: list[tuple] = []


def run(coro):
    return asyncio.run(coro)


async def no_sleep(seconds: float) -> None:
    CALLS.append(("sleep", seconds))


@activity(local=True, retry=RetryPolicy.exponential(max_attempts=3, initial="1s"))
async def lookup(ctx, key: str) -> dict:
    CALLS.append(("lookup", key, ctx.attempt(), str(ctx.idempotency_key())))
    if key == "flaky" and ctx.attempt() < 3:
        raise ConnectionError("try again")
    if key == "broken":
        raise ActivityFailure.non_retryable_("BadKey", f"no such key {key}")
    return {"key": key, "thread": threading.current_thread().name}


@activity(local=True)
def blocking(ctx, n: int) -> int:
    CALLS.append(("blocking", n, threading.current_thread() is threading.main_thread()))
    return n + 1


@activity
async def remote(ctx, n: int) -> int:
    return n


@workflow
async def uses_locals(ctx, key: str) -> list:
    a = await ctx.execute_activity(lookup, key)
    b, c = await asyncio.gather(ctx.execute_activity(blocking, 1), ctx.execute_activity(remote, 5))
    d = await ctx.execute_local_activity(remote, 7)  # any activity can run locally
    return [a["key"], b, c, d]


app = App(workflows=[uses_locals], activities=[lookup, blocking, remote])


def engine_for(key: str, **kw) -> Engine:
    return Engine(
        app,
        uses_locals,
        [key],
        local_sleep=no_sleep,
        resolver=lambda out: [(c, ("result", c["input"][0])) for c in out],
        **kw,
    )


def test_local_activity_runs_inline_and_is_recorded_as_a_marker():
    CALLS.clear()
    engine = engine_for("k")
    first = run(engine.task())
    # lookup ran inline; then the workflow continued in the same task
    assert first.commands[0] == {
        "type": "record_marker",
        "seq": 1,
        "kind": "local_activity",
        "value": {"name": "lookup", "result": {"key": "k", "thread": "MainThread"}},
    }
    assert [(c["type"], c["seq"]) for c in first.commands] == [
        ("record_marker", 1),
        ("record_marker", 2),
        ("schedule_activity", 3),
    ]
    assert first.commands[1]["value"] == {"name": "blocking", "result": 2}
    assert ("blocking", 1, False) in CALLS  # a plain def runs in a thread
    engine.resolve()
    final = run(engine.run_to_end())
    assert final == {"type": "complete_workflow", "result": ["k", 2, 5, 7]}


def test_replay_reads_the_marker_and_does_not_run_the_activity_again():
    engine = engine_for("k", check_cold=False)
    run(engine.run_to_end())
    CALLS.clear()
    # drop the final task (marker, marker 4, completion): replay must recompute it
    history = engine.history.events[:-3]
    act = run(new_run(app, uses_locals, local_sleep=no_sleep).advance(history))
    assert [c["type"] for c in act.commands] == ["record_marker", "complete_workflow"]
    assert act.commands[-1] == {"type": "complete_workflow", "result": ["k", 2, 5, 7]}
    assert CALLS == []  # markers 1 and 2 were read back; remote(7) is not a CALLS entry


def test_retries_in_place_with_the_same_idempotency_key():
    CALLS.clear()
    engine = engine_for("flaky", check_cold=False)
    act = run(engine.task())
    attempts = [c for c in CALLS if c[0] == "lookup"]
    assert [a[2] for a in attempts] == [1, 2, 3]
    assert len({a[3] for a in attempts}) == 1
    assert attempts[0][3] == str(IdempotencyKey.for_activity("exec-1", 1))
    assert [c for c in CALLS if c[0] == "sleep"] == [("sleep", 1.0), ("sleep", 2.0)]
    assert act.commands[0]["value"]["result"]["key"] == "flaky"


def test_final_failure_is_recorded_and_raised_as_activity_error():
    CALLS.clear()
    engine = engine_for("broken", check_cold=False)
    act = run(engine.task())
    assert len([c for c in CALLS if c[0] == "lookup"]) == 1  # non-retryable: one attempt
    stack = act.commands[0]["value"]["failure"].pop("traceback")  # where the activity raised it
    assert stack.startswith("Traceback (most recent call last):") and "BadKey" in stack
    assert act.commands[0]["value"] == {
        "name": "lookup",
        "failure": {
            "error_type": "BadKey",
            "message": "no such key broken",
            "non_retryable": True,
            "details": None,
        },
    }
    assert act.finished
    assert act.commands[-1]["failure"]["error_type"] == "BadKey"


def test_a_failure_whose_details_are_not_json_is_recorded_with_their_repr():
    """A local activity's ActivityFailure with details JSON cannot hold went into the marker as
    they were: the decision could not be sent, its handler crashed and the run hung RUNNING.
    They are recorded as a regular activity's are: their repr."""

    @activity(local=True)
    async def picky(ctx) -> None:
        raise ActivityFailure.non_retryable_("Picky", "no", details=object)

    @workflow
    async def calls_picky(ctx) -> None:
        await ctx.execute_activity(picky)

    act = run(
        new_run(App(workflows=[calls_picky], activities=[picky]), calls_picky).advance(
            HistoryBuilder("calls_picky").events
        )
    )
    assert act.commands[0]["value"]["failure"]["details"] == {"repr": "<class 'object'>"}
    assert stored_text(act.commands)  # JSON the database takes


def test_context_factory_is_injectable():
    seen = []

    def factory(execution_id, seq, attempt, name):
        seen.append((execution_id, seq, attempt, name))
        return LocalActivityContext(execution_id, seq, attempt, name)

    engine = engine_for("k", activity_context_factory=factory)
    run(engine.task())
    assert seen[:2] == [("exec-1", 1, 1, "lookup"), ("exec-1", 2, 1, "blocking")]


def test_unregistered_local_activity_fails_deterministically():
    @workflow
    async def unknown_local(ctx) -> str:
        return await ctx.execute_local_activity("nope")

    act = run(new_run(None, unknown_local).advance(HistoryBuilder("unknown_local").events))
    assert act.commands[0]["value"]["failure"]["error_type"] == "NotFound"
    assert act.commands[-1]["failure"]["error_type"] == "NotFound"


def test_idempotency_key_derivation():
    key = LocalActivityContext("e-1", 4, 2, "x").idempotency_key()
    assert key.as_str() == str(uuid.uuid5(uuid.NAMESPACE_URL, "harvest:e-1:4"))
    assert key == IdempotencyKey.for_activity("e-1", 4)
    assert key != IdempotencyKey.for_activity("e-1", 5)
    assert key.subkey("email") == key.subkey("email")
    assert key.subkey("email") != key.subkey("db") != key
    assert str(key.subkey("db")) == str(uuid.uuid5(uuid.UUID(str(key)), "db"))


@pytest.mark.parametrize("value", ["not-a-uuid"])
def test_idempotency_key_rejects_garbage(value):
    with pytest.raises(ValueError):
        IdempotencyKey(value)


def test_a_step_that_would_run_a_local_activity_can_be_deferred():
    """Deciding ahead (worker/decide_ahead.py) asks the run not to run local activities:
    the step stops before any runs, and the run is dropped (it is mid-step)."""
    CALLS.clear()
    history = HistoryBuilder("uses_locals", ["k"])
    with pytest.raises(LocalActivitiesDeferred, match="1 local activity"):
        run(new_run(app, uses_locals, local_sleep=no_sleep).advance(history.events, local_activities=False))
    assert CALLS == []


@activity(local=True, start_to_close=0.05, retry=RetryPolicy.none())
async def own_timeout(ctx) -> None:
    raise TimeoutError("upstream did not answer in 2s")


@activity(local=True, start_to_close=0.05, retry=RetryPolicy.none())
async def overruns(ctx) -> None:
    await asyncio.sleep(5)


def test_only_an_expired_start_to_close_is_recorded_as_the_local_activity_overrunning_it():
    """The activity's own TimeoutError keeps its message (it was recorded as an overrun)."""
    from harvest.runtime.local import run_local_activity

    def factory(execution_id, seq, attempt, name):
        return LocalActivityContext(execution_id, seq, attempt, name)

    own = run(run_local_activity(own_timeout.__harvest_activity__, (), "e", 1, factory, no_sleep))
    assert own["failure"]["message"] == "upstream did not answer in 2s"
    late = run(run_local_activity(overruns.__harvest_activity__, (), "e", 2, factory, no_sleep))
    assert late["failure"]["error_type"] == "TimeoutError"
    assert "exceeded start_to_close" in late["failure"]["message"]


@activity(local=True, schedule_to_close=0.5, retry=RetryPolicy.exponential(max_attempts=10, initial=0.2))
async def keeps_failing(ctx) -> None:
    CALLS.append(("keeps_failing", ctx.attempt()))
    raise ConnectionError("gateway down")


@activity(local=True, start_to_close=30, schedule_to_close=0.1, retry=RetryPolicy.exponential(max_attempts=5))
async def outlives_its_invocation(ctx) -> None:
    await asyncio.sleep(5)


def _factory(execution_id, seq, attempt, name):
    return LocalActivityContext(execution_id, seq, attempt, name)


def test_a_local_activity_makes_no_retry_that_would_come_due_past_its_schedule_to_close():
    """As a queued activity's (docs/activities.md, Retries): attempt 1 fails at about 0 s and
    its retry is due at 0.2 s, inside the 0.5 s; attempt 2 fails at about 0.2 s and its retry
    would be due at 0.6 s, past it: the failure is final, ScheduleToCloseTimeout. The deadline
    was ignored, and the activity was retried ten times over 100 s of backoff."""
    from harvest.runtime.local import run_local_activity

    CALLS.clear()
    outcome = run(run_local_activity(keeps_failing.__harvest_activity__, (), "e", 1, _factory))
    assert [c for c in CALLS if c[0] == "keeps_failing"] == [("keeps_failing", 1), ("keeps_failing", 2)]
    failure = outcome["failure"]
    assert failure["error_type"] == "ScheduleToCloseTimeout"
    assert failure["non_retryable"] is True
    assert (
        failure["message"]
        == "activity keeps_failing ran out of its schedule_to_close of 0.5s after attempt 2"
    )
    assert failure["details"]["last_failure"]["error_type"] == "ConnectionError"


def test_a_local_activity_attempt_is_cut_at_its_schedule_to_close():
    """An attempt whose start_to_close outlasts what is left of its schedule_to_close ends at the
    deadline, for good: ScheduleToCloseTimeout, and no retry."""
    from harvest.runtime.local import run_local_activity

    began = asyncio.run(
        _timed(run_local_activity(outlives_its_invocation.__harvest_activity__, (), "e", 1, _factory))
    )
    outcome, took = began
    assert took < 2.0
    assert outcome["failure"]["error_type"] == "ScheduleToCloseTimeout"
    assert outcome["failure"]["non_retryable"] is True
    assert outcome["failure"]["message"] == (
        "activity outlives_its_invocation did not finish within its schedule_to_close of 0.1s"
    )


async def _timed(coro):
    loop = asyncio.get_running_loop()
    began = loop.time()
    outcome = await coro
    return outcome, loop.time() - began


@activity(local=True, retry=RetryPolicy.exponential(max_attempts=2, initial="1s"))
async def exits(ctx) -> None:
    CALLS.append(("exits", ctx.attempt()))
    raise SystemExit(4)


def test_sys_exit_in_a_local_activity_fails_its_attempt():
    """sys.exit() in a local activity went through its retry loop (it catches Exception) and out
    of the workflow task; now it is the attempt's failure, retried by its policy, then recorded."""
    from harvest.runtime.local import run_local_activity

    CALLS.clear()
    outcome = run(run_local_activity(exits.__harvest_activity__, (), "e", 1, _factory, sleep=no_sleep))
    assert [c for c in CALLS if c[0] == "exits"] == [("exits", 1), ("exits", 2)]
    assert outcome["failure"]["error_type"] == "SystemExit"
    assert outcome["failure"]["message"] == "SystemExit(4) raised in the activity (sys.exit()?)"


@activity(local=True, retry=RetryPolicy.exponential(max_attempts=3, initial="1s", maximum="2s"))
async def rate_limited(ctx) -> int:
    CALLS.append(("rate_limited", ctx.attempt()))
    if ctx.attempt() == 1:
        raise ActivityFailure("RateLimited", "429", next_retry_delay=5)  # a Retry-After
    if ctx.attempt() == 2:
        raise ActivityFailure("RateLimited", "429", next_retry_delay=60)  # past the inline cap
    return ctx.attempt()


def test_a_local_activity_waits_its_failure_s_next_retry_delay():
    """The failure's next_retry_delay replaces the backoff (5 s, past the policy's 2 s maximum),
    still capped by the inline retries' LOCAL_MAX_BACKOFF (they hold the workflow task's lease)."""
    from harvest.runtime.local import LOCAL_MAX_BACKOFF, run_local_activity

    CALLS.clear()
    outcome = run(run_local_activity(rate_limited.__harvest_activity__, (), "e", 1, _factory, sleep=no_sleep))
    assert outcome["result"] is not None
    assert [c for c in CALLS if c[0] == "sleep"] == [("sleep", 5.0), ("sleep", LOCAL_MAX_BACKOFF)]


def test_next_retry_delay_is_seconds_or_a_timedelta_else_an_invalid_argument():
    from harvest.core.errors import InvalidArgument

    assert (
        ActivityFailure("E", "m", next_retry_delay=dt.timedelta(minutes=1.5)).to_json()["next_retry_delay"]
        == 90.0
    )
    assert ActivityFailure("E", "m", next_retry_delay=3).to_json()["next_retry_delay"] == 3.0
    assert "next_retry_delay" not in ActivityFailure("E", "m").to_json()
    for bad in (-1, float("nan"), float("inf"), "30s", True):
        with pytest.raises(InvalidArgument, match=r"next_retry_delay: expected seconds .* timedelta, got"):
            ActivityFailure("E", "m", next_retry_delay=bad)  # type: ignore[arg-type]
    # Past what harvest.fail_activity takes (0, or 1e-300 to 100 years: core.sql's _json_number),
    # refused where it is made: the database refused the worker's report (HR001), and the attempt
    # hung until its lease expired, its failure lost.
    for bad in (3155760000.5, dt.timedelta(days=365 * 200), 1e-310):
        with pytest.raises(InvalidArgument, match=r"expected seconds \(a number from 0 to 100 years\)"):
            ActivityFailure("E", "m", next_retry_delay=bad)
    assert ActivityFailure("E", "m", next_retry_delay=3155760000).next_retry_delay == 3155760000.0
    assert ActivityFailure.from_json({"error_type": "E", "next_retry_delay": 3}).next_retry_delay == 3.0
    assert ActivityFailure.from_json({"error_type": "E", "next_retry_delay": "x"}).next_retry_delay is None
