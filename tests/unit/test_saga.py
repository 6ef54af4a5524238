"""Saga: compensations run in reverse order, as durable activities."""

from __future__ import annotations

import asyncio

import pytest
from history_builder import Engine

from harvest.declare.definitions import App, activity, workflow
from harvest.runtime.saga import Saga

LOCAL_UNDO: list[str] = []


@activity
async def reserve(ctx, what: str) -> str:
    return what


@activity
async def release(ctx, what: str) -> None:
    return None


async def forget_locally(what: str) -> None:
    LOCAL_UNDO.append(what)


@workflow
async def trip(ctx, continue_on_error: bool) -> dict:
    saga = Saga(ctx, continue_on_error=continue_on_error)
    try:
        for item in ("hotel", "car", "flight"):
            await ctx.execute_activity(reserve, item)
            saga.add_compensation(release, item)
            saga.add_compensation(forget_locally, item)
    except Exception as err:
        try:
            await saga.compensate()
        except Exception as comp_err:
            return {"stopped": str(comp_err), "left": saga.pending}
        return {"failed": type(err).__name__, "errors": [str(e) for e in saga.errors]}
    return {"ok": True}


@workflow
async def trip_ctx(ctx) -> str:
    async with Saga(ctx) as saga:
        await ctx.execute_activity(reserve, "hotel")
        saga.add_compensation(release, "hotel")
        await ctx.execute_activity(reserve, "flight")  # fails
        saga.add_compensation(release, "flight")
    return "booked"


app = App(workflows=[trip, trip_ctx], activities=[reserve, release])


def outcomes(fail_reserve: str | None, fail_release: str | None = None):
    def resolver(out):
        result = []
        for c in out:
            what = c["input"][0]
            if (c["name"] == "reserve" and what == fail_reserve) or (
                c["name"] == "release" and what == fail_release
            ):
                result.append((c, ("fail", f"{c['name']}Failed")))
            else:
                result.append((c, ("result", what if c["name"] == "reserve" else None)))
        return result

    return resolver


def activities_issued(engine):
    return [
        (c["name"], c["input"][0])
        for a in engine.activations
        for c in a.commands
        if c["type"] == "schedule_activity"
    ]


def run(coro):
    return asyncio.run(coro)


def test_compensations_run_in_reverse_order():
    LOCAL_UNDO.clear()  # plain callables are workflow code: a cold replay would run them again
    e = Engine(app, trip, [True], resolver=outcomes("flight"), check_cold=False)
    final = run(e.run_to_end())
    assert activities_issued(e) == [
        ("reserve", "hotel"),
        ("reserve", "car"),
        ("reserve", "flight"),
        ("release", "car"),
        ("release", "hotel"),
    ]
    assert LOCAL_UNDO == ["car", "hotel"]
    assert final["result"] == {"failed": "ActivityError", "errors": []}


def test_a_failing_compensation_does_not_stop_the_others():
    e = Engine(app, trip, [True], resolver=outcomes("flight", fail_release="car"))
    final = run(e.run_to_end())  # warm == cold at every task
    assert activities_issued(e)[-2:] == [("release", "car"), ("release", "hotel")]
    errors = final["result"]["errors"]
    assert len(errors) == 1 and "releaseFailed" in errors[0]


def test_continue_on_error_false_stops_at_the_first_failing_compensation():
    e = Engine(app, trip, [False], resolver=outcomes("flight", fail_release="car"))
    final = run(e.run_to_end())
    assert activities_issued(e)[-1] == ("release", "car")
    assert "releaseFailed" in final["result"]["stopped"]
    assert final["result"]["left"] == 2  # release hotel + forget hotel never ran


def test_async_with_compensates_and_reraises():
    e = Engine(app, trip_ctx, resolver=outcomes("flight"))
    final = run(e.run_to_end())
    assert activities_issued(e) == [("reserve", "hotel"), ("reserve", "flight"), ("release", "hotel")]
    assert final["type"] == "fail_workflow"
    assert final["failure"]["error_type"] == "reserveFailed"


def test_no_failure_no_compensation():
    e = Engine(app, trip, [True], resolver=outcomes(None))
    final = run(e.run_to_end())
    assert final["result"] == {"ok": True}
    assert [n for n, _ in activities_issued(e)] == ["reserve"] * 3


def test_add_compensation_rejects_non_callables():
    with pytest.raises(TypeError):
        Saga(None).add_compensation(42)
