"""An activity called with arguments that do not fit its annotations (docs/activities.md,
"Payloads"): when the workflow holds the activity's function, the call fails at once, before
anything is scheduled, with a PayloadError naming the activity, the parameter, what it expected
and what it got; nothing reaches a worker to fail there (and be dead-lettered). Pure runtime, no
database."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, NewType, Optional

import pytest
from history_builder import HistoryBuilder, close_made_runs, new_run

from harvest import App, activity, workflow
from harvest.core import payload
from harvest.core.errors import PayloadError


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


# -- the hints a call's check answers without a decode (payload._fit_tests) ---------------------
# Each kind of hint with a fit test: a value that fits is scheduled (and is not decoded at the
# call), a value that does not is refused at the call as before, by the decode's own message.


@activity
async def tag(ctx, names: list[str]) -> None: ...


@activity
async def label(ctx, fields: dict[str, Any]) -> None: ...


@activity
async def counts(ctx, by_name: dict[str, int]) -> None: ...


@activity
async def maybe(ctx, n: Optional[int]) -> None: ...  # noqa: UP045 (typing's spelling: a hint kind of its own)


@activity
async def maybe_piped(ctx, n: int | None) -> None: ...


@activity
async def weigh(ctx, kg: float) -> None: ...


@activity
async def ids(ctx, values: tuple[int, ...]) -> None: ...


@activity
async def gaps(ctx, values: list[int | None]) -> None: ...


@activity
async def nested(ctx, rows: list[list[str]]) -> None: ...


@workflow
async def calls_with(ctx, name: str, value: Any) -> None:
    await ctx.execute_activity(name, value)


@workflow
async def calls_locally_with(ctx, name: str, value: Any) -> None:
    await ctx.execute_local_activity(name, value)


FITTED = [tag, label, counts, maybe, maybe_piped, weigh, ids, gaps, nested]
CALLS = App(workflows=[calls_with, calls_locally_with], activities=FITTED)


def _call(wf, name: str, value: Any) -> dict:
    events = HistoryBuilder(wf.__harvest_workflow__.name, input=[name, value]).events
    return asyncio.run(new_run(CALLS, wf).advance(events)).commands[0]


FITS = [
    ("tag", ["a", "b"]),
    ("tag", []),
    ("label", {"a": 1, "b": [None, "x"], "c": {"d": 2.5}}),
    ("counts", {"a": 1, "b": 2}),
    ("maybe", 7),
    ("maybe", None),
    ("maybe_piped", 7),
    ("maybe_piped", None),
    ("weigh", 3),
    ("weigh", 2.5),
    ("ids", [1, 2, 3]),
    ("gaps", [1, None, 3]),
    ("nested", [["a"], [], ["b", "c"]]),
]

MISFITS = [
    ("tag", ["a", 1], "input[0][1]: expected string, got int 1"),
    ("tag", "ab", "input[0]: expected array, got str 'ab'"),
    ("label", ["a"], "input[0]: expected object, got list"),
    ("counts", {"a": 1, "b": "2"}, "input[0].b: expected int, got str '2'"),
    ("maybe", "7", "input[0]: expected int, got str '7'"),
    ("maybe", True, "input[0]: expected int, got bool True"),
    ("maybe_piped", 7.5, "input[0]: expected int, got float 7.5"),
    ("weigh", "3", "input[0]: expected number, got str '3'"),
    ("weigh", False, "input[0]: expected number, got bool False"),
    ("ids", [1, "2"], "input[0][1]: expected int, got str '2'"),
    ("gaps", [1, "x"], "input[0][1]: expected int, got str 'x'"),
    ("nested", [["a"], [1]], "input[0][1][0]: expected string, got int 1"),
]


@pytest.mark.parametrize("wf", [calls_with, calls_locally_with])
@pytest.mark.parametrize(("name", "value"), FITS)
def test_values_that_fit_a_hint_with_a_fit_test_are_scheduled(wf, name, value) -> None:
    command = _call(wf, name, value)
    assert command["type"] != "fail_workflow", command["failure"]


@pytest.mark.parametrize("wf", [calls_with, calls_locally_with])
@pytest.mark.parametrize(("name", "value", "says"), MISFITS)
def test_values_that_misfit_a_hint_with_a_fit_test_are_refused_at_the_call(wf, name, value, says) -> None:
    command = _call(wf, name, value)
    assert command["type"] == "fail_workflow", "the call scheduled an activity no worker can run"
    assert command["failure"]["error_type"] == "PayloadError", command["failure"]
    assert f"activity {name}: " in command["failure"]["message"]
    assert says in command["failure"]["message"], command["failure"]["message"]


@pytest.mark.parametrize(("name", "value"), FITS)
def test_a_value_its_fit_test_vouches_for_is_not_decoded_at_the_call(monkeypatch, name, value) -> None:
    decoded: list = []
    monkeypatch.setattr(payload, "decode_args", lambda fn, args: decoded.append(args))
    fn = {f.__harvest_activity__.name: f for f in FITTED}[name]
    assert payload.encode_checked_args(fn, (value,), f"activity {name}") == [value]
    assert decoded == [], f"{name}({value!r}) was decoded at the call"


class Fruit(enum.IntEnum):
    APPLE = 1


MAYBE_INT = Optional[int]  # noqa: UP045 (typing's spelling: a hint kind of its own)
MAYBE_STRS = Optional[list[str]]  # noqa: UP045
HINTS = [
    int, float, str, bool, Any, MAYBE_INT, int | None, int | str, float | None, list[str], list[int],
    list[float], list[Any], list[int | None], list[list[int]], list[Order], tuple[int, ...], tuple[int, str],
    set[str], frozenset[int], Sequence[str], dict[str, Any], dict[str, int], dict[int, str],
    dict[str, list[int]], Mapping[str, float], Annotated[int, "x"], MAYBE_STRS, Order | None,
    Literal["a", 1], NewType("UserId", int), bytes, list,
]  # fmt: skip
VALUES = [
    0, 1, -3, 2.0, 2.5, True, False, None, "", "1", [], [1, 2], ["a", "b"], [1, None], [1, "a"], [[1], [2]],
    [["a"]], [True], {}, {"a": 1}, {"1": "a"}, {"a": [1, 2]}, {"a": "b"}, {"a": None}, {"a": 1.5},
    {"order_id": "o", "amount_cents": 1}, ("a", "b"), {"a", "b"}, frozenset({1}), Fruit.APPLE,
]  # fmt: skip


def _worker_refusal(fn, value) -> str | None:
    """What the worker's decode of the call's input says against it (None: it takes it)."""
    try:
        payload.decode_args(fn, payload.encode_args(fn, (value,)))
    except PayloadError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("hint", HINTS)
@pytest.mark.parametrize("value", VALUES)
def test_the_check_refuses_exactly_what_the_worker_decode_refuses(hint, value) -> None:
    async def act(ctx, x) -> None: ...

    act.__annotations__["x"] = hint
    says = _worker_refusal(act, value)
    if says is None:
        payload.encode_checked_args(act, (value,), "activity act")
    else:
        with pytest.raises(PayloadError, match=re.escape(says)):
            payload.encode_checked_args(act, (value,), "activity act")


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
