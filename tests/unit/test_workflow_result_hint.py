"""A workflow's result is checked against its return hint when the run completes, by the
converter the client decodes it with: a value the hint does not allow fails the workflow task
(retried until fixed code runs, the run untouched), where it used to complete the run with a
result whose every typed read (handle.result(), a parent's child result) raised. A value the
hint allows is never refused (docs/workflows.md, "The result and its type hint")."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal, NamedTuple, Optional, Protocol, TypedDict, TypeVar

import pydantic
import pytest
from history_builder import HistoryBuilder, new_run

from harvest.core.errors import PayloadError
from harvest.declare.definitions import workflow

T = TypeVar("T")


@dataclasses.dataclass
class Order:
    id: int
    lines: list[str] = dataclasses.field(default_factory=list)


class Color(enum.Enum):
    RED = "red"


class Point(NamedTuple):
    x: int
    y: int


class Totals(TypedDict):
    count: int


class Model(pydantic.BaseModel):
    n: int


class Aliased(pydantic.BaseModel):
    """A model whose fields have aliases (a camelCase API's): the encoder writes its field names."""

    order_id: int = pydantic.Field(alias="orderId")


class Priced(Protocol):
    """A protocol as a result's hint (not runtime_checkable, as most are): nothing to rebuild."""

    def price(self) -> int: ...


@dataclasses.dataclass(init=False)
class Money:
    """A dataclass whose own __init__ takes other arguments than its fields: the converter
    cannot rebuild it from its JSON (Money(cents=150) is a TypeError)."""

    cents: int

    def __init__(self, amount: str) -> None:
        self.cents = int(Decimal(amount) * 100)


def _commands(fn: Any) -> list[dict]:
    return asyncio.run(
        new_run(None, fn).advance(HistoryBuilder(fn.__harvest_workflow__.name).events)
    ).commands


def _returning(hint: Any, value: Any) -> Any:
    async def returns(ctx):
        return value

    returns.__annotations__ = {"ctx": "Any"} | ({} if hint is _NO_HINT else {"return": hint})
    return workflow(name="returns")(returns)


_NO_HINT = object()

ALLOWED = [
    (int, 3),
    (float, 3),  # an int is a float to the hint (and to the converter)
    (str, "s"),
    (Optional[int], None),  # noqa: UP045 (the spelling users write)
    (int | None, 4),
    (int | str, "x"),
    (None, None),
    (Any, {"anything": [1, "two"]}),
    (_NO_HINT, {"no": "hint"}),
    (dict, {"a": 1}),
    (dict[str, Any], {"a": [1]}),
    (list[Order], [Order(1, ["a"])]),
    (dict[str, Order], {"o": Order(2)}),
    (Order, Order(3)),
    (Optional[Order], None),  # noqa: UP045
    (Model, Model(n=1)),
    (Aliased, Aliased(orderId=1)),  # written by field name, read by field name too
    (Point, Point(1, 2)),
    (Totals, {"count": 1}),
    (Color, Color.RED),
    (Literal["a", "b"], "b"),
    (Literal[Color.RED], Color.RED),  # an enum member, written as its value
    (dt.datetime, dt.datetime(2026, 1, 1, tzinfo=dt.UTC)),
    (dt.date, dt.datetime(2026, 1, 1, 9, 30, tzinfo=dt.UTC)),  # a datetime is a date (ctx.now())
    (Decimal, Decimal("1.50")),
    (uuid.UUID, uuid.UUID(int=1)),
    (bytes, b"\x00"),
    (tuple[int, ...], (1, 2)),
    (set[int], {2, 1}),
    (Sequence[int], [1]),
    (Mapping[str, int], {"a": 1}),
    (list[T], [1]),  # a generic's free parameter allows anything
    (T, "anything"),
    (object, 5),
    ("NotDefinedAnywhere", 5),  # an unresolvable hint is no hint
    (Priced, 5),  # a protocol the converter cannot check: nothing to go on, as for a TypeVar
]


@pytest.mark.parametrize(("hint", "value"), ALLOWED, ids=[str(h) for h, _ in ALLOWED])
def test_a_result_the_hint_allows_completes_the_run(hint: Any, value: Any) -> None:
    [command] = _commands(_returning(hint, value))
    assert command["type"] == "complete_workflow"


REFUSED = [
    (int, "seven", r"returned str 'seven', which its return hint int does not allow"),
    (None, {"a": 1}, r"returned dict \{'a': 1\}, which its return hint None does not allow"),
    (list[int], [1, "2"], r"return hint list\[int\] does not allow.*result\[1\]: expected int, got str"),
    (Order, {"id": "x"}, r"return hint Order does not allow.*result\.id: expected int"),
    (Optional[int], "none"),  # noqa: UP045
]


@pytest.mark.parametrize("case", REFUSED, ids=[str(c[0]) for c in REFUSED])
def test_a_result_the_hint_does_not_allow_fails_the_task_not_the_run(case: tuple) -> None:
    hint, value, *pattern = case
    with pytest.raises(PayloadError, match=pattern[0] if pattern else "does not allow") as err:
        _commands(_returning(hint, value))
    assert "workflow 'returns'" in str(err.value)
    assert "the run is not completed: its workflow task is retried" in str(err.value)


def test_an_unencodable_result_fails_the_task_as_well() -> None:
    """An object the converter cannot write is the same bug (and `return ctx.sleep(...)`, a
    coroutine, already failed the task): no run ends FAILED for it."""
    with pytest.raises(PayloadError, match=r"workflow 'returns' returned object .*cannot encode"):
        _commands(_returning(Any, object()))


def test_a_recorded_completion_replays_whatever_its_result() -> None:
    """A run that completed before the check (or whose hint changed since) replays: the
    history is the truth, so its queries and the replayer still work."""
    fn = _returning(int, "seven")
    history = HistoryBuilder("returns")
    history.complete_task(history.last_id, [{"type": "complete_workflow", "result": "seven"}])
    activation = asyncio.run(new_run(None, fn).advance(history.events))
    assert activation.commands == []


def test_a_result_the_converter_cannot_rebuild_fails_the_task_not_the_run() -> None:
    """Whatever the converter raises while it checks the result (here the dataclass's own
    __init__ refuses its fields: a TypeError, not a PayloadError), the run is not failed for
    good: the check's refusal fails the workflow task, as any result the typed reads refuse."""
    refused = r"workflow 'returns' returned Money .*which its return hint Money does not allow \(TypeError"
    with pytest.raises(PayloadError, match=refused):
        _commands(_returning(Money, Money("1.50")))
