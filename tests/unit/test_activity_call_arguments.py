"""An activity called with arguments that do not fit its annotations (docs/activities.md,
"Payloads"): when the workflow holds the activity's function, the call fails at once, before
anything is scheduled, with a PayloadError naming the activity, the parameter, what it expected
and what it got; nothing reaches a worker to fail there (and be dead-lettered). Pure runtime, no
database."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from history_builder import HistoryBuilder, close_made_runs, new_run

from harvest import App, activity, workflow


@pytest.fixture(autouse=True)
def _close_runs():
    yield
    close_made_runs()


@dataclasses.dataclass
class Order:
    order_id: str
    amount_cents: int


@activity
async def charge(ctx, amount: int) -> str:
    return f"charged {amount}"


@activity
async def ship(ctx, order: Order) -> str:
    return order.order_id


@workflow
async def charges_text(ctx) -> str:
    return await ctx.execute_activity(charge, "abc")


@workflow
async def ships_a_partial_dict(ctx) -> str:
    return await ctx.execute_activity(ship, {"order_id": "o-1"})


@workflow
async def ships_a_full_dict(ctx) -> str:
    return await ctx.execute_activity(ship, {"order_id": "o-1", "amount_cents": 5})


@workflow
async def ships_an_order(ctx) -> str:
    return await ctx.execute_activity(ship, Order("o-2", 7))


@workflow
async def charges_by_name(ctx) -> str:
    return await ctx.execute_activity("charge", "abc")


@workflow
async def charges_locally(ctx) -> str:
    return await ctx.execute_local_activity(charge, "abc")


@workflow
async def charges_locally_then_ships(ctx) -> str:
    charged = await ctx.execute_local_activity(charge, "abc")
    return charged + " " + await ctx.execute_activity(ship, Order("o-3", 1))


APP = App(
    workflows=[
        charges_locally_then_ships,
        charges_text,
        ships_a_partial_dict,
        ships_a_full_dict,
        ships_an_order,
        charges_by_name,
        charges_locally,
    ],
    activities=[charge, ship],
)


def _first(wf) -> dict:
    name = wf.__harvest_workflow__.name
    return asyncio.run(new_run(APP, wf).advance(HistoryBuilder(name).events)).commands[0]


@pytest.mark.parametrize(
    ("wf", "says"),
    [
        (charges_text, "parameter 'amount' of charge (int): input[0]: expected int, got str 'abc'"),
        (ships_a_partial_dict, "parameter 'order' of ship (Order): input[0].amount_cents: missing field"),
        (charges_by_name, "parameter 'amount' of charge (int): input[0]: expected int, got str 'abc'"),
        (charges_locally, "parameter 'amount' of charge (int): input[0]: expected int, got str 'abc'"),
    ],
)
def test_a_wrong_argument_fails_at_the_call_naming_the_activity_parameter_and_types(wf, says) -> None:
    command = _first(wf)
    assert command["type"] == "fail_workflow", "the call scheduled an activity no worker can run"
    failure = command["failure"]
    assert failure["error_type"] == "PayloadError" and failure["non_retryable"], failure
    assert says in failure["message"], failure["message"]
    assert "activity charge" in failure["message"] or "activity ship" in failure["message"]


@pytest.mark.parametrize("wf", [ships_a_full_dict, ships_an_order])
def test_arguments_that_fit_are_scheduled_as_before(wf) -> None:
    command = _first(wf)
    assert command["type"] == "schedule_activity", command


# A run an older release started: its history already holds the call, scheduled (or run locally)
# with an argument the activity's annotations refuse now (they changed in this deploy, or the
# older release did not check). The history is what happened: a replay takes the recorded step
# and its result, as it did before the check, instead of failing the in-flight run at the call.
def test_a_replayed_activity_call_recorded_before_the_check_takes_its_recorded_result() -> None:
    history = HistoryBuilder("charges_text")
    scheduled = {"type": "schedule_activity", "seq": 1, "name": "charge", "input": ["abc"]}
    history.complete_task(1, [{**scheduled, "queue": "default", "options": {}}])
    history.activity_completed(1, "charged abc")
    step = asyncio.run(new_run(APP, charges_text).advance(history.events))
    assert step.commands == [{"type": "complete_workflow", "result": "charged abc"}], step.commands


def test_a_replayed_local_activity_call_recorded_before_the_check_takes_its_marker() -> None:
    history = HistoryBuilder("charges_locally_then_ships")
    marker = {"name": "charge", "result": "charged abc"}
    shipped = {"type": "schedule_activity", "seq": 2, "name": "ship", "queue": "default", "options": {}}
    history.complete_task(
        1,
        [
            {"type": "record_marker", "seq": 1, "kind": "local_activity", "value": marker},
            {**shipped, "input": [{"order_id": "o-3", "amount_cents": 1}]},
        ],
    )
    history.activity_completed(2, "o-3")
    step = asyncio.run(new_run(APP, charges_locally_then_ships).advance(history.events))
    assert step.commands == [{"type": "complete_workflow", "result": "charged abc o-3"}], step.commands
