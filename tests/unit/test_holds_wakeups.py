"""``WorkflowRun.holds_wakeups``: when a blocked run waits for all of its open activities at once.

A decision of such a run is sent led by ``hold_wakeups`` (harvest/worker/workflows.py), and the
database then makes no workflow task for a result that leaves another of the run's activity tasks
open (functions/activities.sql, ``_wake_after_results``; docs/internals.md, "Held wake-ups"). A
wrong True would delay what the workflow does on a result until the last one, so every pattern
that acts on one result before the others (``as_completed``, ``wait(FIRST_COMPLETED)``, a task of
the code's own between the result and the gather, a second gather, a timer beside) must answer
False. (On the base there is no ``Activation.hold``: the True cases fail there.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from history_builder import HistoryBuilder, fixed_clock

from harvest.declare.definitions import App, activity, workflow
from harvest.runtime import WorkflowRun


@activity(name="noop")
async def noop(ctx: Any, i: int) -> int:
    return i


@workflow(name="gathers")
async def gathers(ctx: Any, n: int) -> list[int]:
    return list(await asyncio.gather(*(ctx.execute_activity(noop, i) for i in range(n))))


@workflow(name="gathers_exceptions")
async def gathers_exceptions(ctx: Any, n: int) -> int:
    got = await asyncio.gather(*(ctx.execute_activity(noop, i) for i in range(n)), return_exceptions=True)
    return len(got)


@workflow(name="one_then_gather")
async def one_then_gather(ctx: Any, n: int) -> int:
    first = await ctx.execute_activity(noop, -1)
    rest = await asyncio.gather(*(ctx.execute_activity(noop, i) for i in range(n)))
    return first + sum(rest)


@workflow(name="as_completed")
async def as_completed(ctx: Any, n: int) -> int:
    total = 0
    for next_done in asyncio.as_completed([ctx.execute_activity(noop, i) for i in range(n)]):
        total += await next_done
    return total


@workflow(name="first_completed")
async def first_completed(ctx: Any, n: int) -> int:
    tasks = [asyncio.ensure_future(ctx.execute_activity(noop, i)) for i in range(n)]
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    return len(done)


@workflow(name="gather_of_chains")
async def gather_of_chains(ctx: Any, n: int) -> int:
    async def chain(i: int) -> int:
        a = await ctx.execute_activity(noop, i)
        return await ctx.execute_activity(noop, a + 100)  # a command on one result

    return sum(await asyncio.gather(*(chain(i) for i in range(n))))


@workflow(name="two_gathers")
async def two_gathers(ctx: Any, n: int) -> int:
    left = asyncio.gather(*(ctx.execute_activity(noop, i) for i in range(n)))
    right = asyncio.gather(*(ctx.execute_activity(noop, i) for i in range(n, 2 * n)))
    return sum(await left) + sum(await right)


@workflow(name="gather_and_timer")
async def gather_and_timer(ctx: Any, n: int) -> int:
    got = await asyncio.gather(ctx.sleep(5), *(ctx.execute_activity(noop, i) for i in range(n)))
    return len(got)


@workflow(name="gather_and_a_loose_one")
async def gather_and_a_loose_one(ctx: Any, n: int) -> int:
    loose = asyncio.ensure_future(ctx.execute_activity(noop, -1))
    got = await asyncio.gather(*(ctx.execute_activity(noop, i) for i in range(n)))
    return sum(got) + await loose


@workflow(name="one_at_a_time")
async def one_at_a_time(ctx: Any, n: int) -> int:
    return sum([await ctx.execute_activity(noop, i) for i in range(n)])


APP = App(
    workflows=[
        gathers,
        gathers_exceptions,
        one_then_gather,
        as_completed,
        first_completed,
        gather_of_chains,
        two_gathers,
        gather_and_timer,
        gather_and_a_loose_one,
        one_at_a_time,
    ],
    activities=[noop],
)


class Driven:
    """A run stepped through a built history: each step's commands are written back as the
    database would write them, and results are added by hand."""

    def __init__(self, name: str, n: int):
        self.history = HistoryBuilder(name, [n])
        self.run = WorkflowRun(APP, name, "exec-1", "wf-1", "default", clock=fixed_clock)
        self.seen = 0
        self.open: list[int] = []

    def step(self) -> bool:
        activation = asyncio.run(self.run.advance(self.history.since(self.seen)))
        self.history.complete_task(activation.through, activation.commands)
        self.run.recorded(self.history.last_id)
        self.seen = self.history.last_id
        self.open += [c["seq"] for c in activation.commands if c["type"] == "schedule_activity"]
        assert activation.hold is self.run.holding
        return activation.hold

    def complete(self, count: int) -> None:
        for seq in self.open[:count]:
            self.history.activity_completed(seq, seq)
        self.open = self.open[count:]


@pytest.mark.parametrize("name", ["gathers", "gathers_exceptions"])
def test_a_gather_of_every_open_activity_holds_until_the_last_result(name: str) -> None:
    run = Driven(name, 5)
    assert run.step() is True
    run.complete(2)  # a wake-up the hold saves, had it been made: still all of the open ones
    assert run.step() is True
    run.complete(2)
    assert run.step() is False  # one left: its result wakes the run anyway, and may be decided ahead
    run.complete(1)
    assert run.step() is False  # the run ended
    assert run.run.finished


def test_a_gather_after_an_awaited_activity_holds_from_that_step() -> None:
    run = Driven("one_then_gather", 4)
    assert run.step() is False  # the one activity is awaited by the workflow's own task
    run.complete(1)
    assert run.step() is True


@pytest.mark.parametrize(
    "name",
    [
        "as_completed",
        "first_completed",
        "gather_of_chains",
        "two_gathers",
        "gather_and_timer",
        "gather_and_a_loose_one",
        "one_at_a_time",
    ],
)
def test_a_run_that_acts_on_one_result_before_the_others_does_not_hold(name: str) -> None:
    run = Driven(name, 3)
    assert run.step() is False
    if name == "as_completed":
        run.complete(1)
        assert run.step() is False  # the next as_completed future: still one result at a time
