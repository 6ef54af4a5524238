"""Payload types round-trip by type hint, as workflow and activity parameters and results, or fail
with a PayloadError naming the parameter (or result) and its type (docs/workflows.md, "Payloads")."""

from __future__ import annotations

import datetime as dt
import enum
import json
import uuid
from decimal import Decimal
from typing import Literal, NamedTuple, NotRequired, Optional, TypedDict, Union

import pytest

from harvest.core import payload
from harvest.core.errors import PayloadError


class Point(NamedTuple):
    x: int
    when: dt.date
    label: str = "origin"


class Order(TypedDict):
    id: uuid.UUID
    total: Decimal
    placed: dt.datetime
    note: NotRequired[str]


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


def wire(value: object) -> object:
    """What the database stores and gives back: JSON text, parsed again."""
    return json.loads(json.dumps(payload.encode(value)))


ORDER: Order = {
    "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "total": Decimal("10.50"),
    "placed": dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
}

ROUND_TRIPS = [
    pytest.param(Point(1, dt.date(2030, 1, 2), "a"), Point, id="namedtuple"),
    pytest.param(ORDER, Order, id="typeddict"),
    pytest.param({**ORDER, "note": "gift"}, Order, id="typeddict-optional-key"),
    pytest.param(b"\x00\xffbinary", bytes, id="bytes"),
    pytest.param(bytearray(b"buffer"), bytearray, id="bytearray"),
    pytest.param(Color.BLUE, Color, id="enum"),
    pytest.param(Level.HIGH, Level, id="intenum"),
    pytest.param(dt.datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC), dt.datetime, id="datetime"),
    pytest.param(dt.date(2030, 12, 31), dt.date, id="date"),
    pytest.param(dt.time(23, 59, 1), dt.time, id="time"),
    pytest.param(Decimal("0.10"), Decimal, id="decimal"),
    pytest.param(uuid.UUID("12345678-1234-5678-1234-567812345678"), uuid.UUID, id="uuid"),
    pytest.param(None, Optional[Point], id="optional-none"),  # noqa: UP045 (the spelling under test)
    pytest.param(Point(2, dt.date(2030, 1, 1)), Optional[Point], id="optional-value"),  # noqa: UP045
    pytest.param(dt.date(2030, 1, 1), dt.date | None, id="pep604-optional"),
    pytest.param("text", Union[int, str], id="union"),  # noqa: UP007
    pytest.param(Color.RED, int | Color, id="union-enum"),
    pytest.param([Point(1, dt.date(2030, 1, 1))], list[Point], id="list-of-namedtuple"),
    pytest.param({"k": b"v"}, dict[str, bytes], id="dict-of-bytes"),
    pytest.param((Color.RED, Decimal("1")), tuple[Color, Decimal], id="tuple"),
    pytest.param("b", Literal["a", "b"], id="literal"),
]


@pytest.mark.parametrize(("value", "hint"), ROUND_TRIPS)
def test_round_trip_by_type_hint(value: object, hint: object) -> None:
    back = payload.decode(wire(value), hint)
    assert back == value
    assert type(back) is type(value)


def test_a_namedtuple_also_reads_from_an_object_and_fills_defaults() -> None:
    assert payload.decode({"x": 3, "when": "2030-01-01"}, Point) == Point(3, dt.date(2030, 1, 1), "origin")
    assert payload.decode([3, "2030-01-01"], Point) == Point(3, dt.date(2030, 1, 1))


def test_bytes_are_base64_text_on_the_wire() -> None:
    assert payload.encode(b"\x00\xff") == "AP8="
    with pytest.raises(PayloadError, match=r"cannot decode 'not base64!' as bytes \(base64\)"):
        payload.decode("not base64!", bytes)


async def place(ctx, order: Order, where: Point, amount: Decimal, color: Color | None = None) -> Point:
    raise NotImplementedError


def test_parameters_and_results_round_trip_through_a_functions_hints() -> None:
    where = Point(1, dt.date(2030, 1, 1))
    encoded = wire(payload.encode_args(place, (ORDER, where, Decimal("9.99")), {"color": Color.RED}))
    args, _ = payload.decode_args(place, encoded)
    assert args == (ORDER, where, Decimal("9.99"), Color.RED)
    assert isinstance(args[0]["id"], uuid.UUID) and isinstance(args[1], Point)
    assert payload.decode_result(place, wire(where)) == where


@pytest.mark.parametrize(
    ("json_args", "message"),
    [
        (
            [{"id": "x"}, [1, "2030-01-01"], "1"],
            (
                r"parameter 'order' of place \(Order\): input\[0\]: "
                r"missing key\(s\) \['placed', 'total'\] of Order"
            ),
        ),
        (
            [wire(ORDER), [1, "not a date"], "1"],
            r"parameter 'where' of place \(Point\): input\[1\]\.when: cannot decode 'not a date' as date",
        ),
        (
            [wire(ORDER), {"x": 1, "when": "2030-01-01", "z": 0}, "1"],
            r"parameter 'where' of place \(Point\): input\[1\]: Point has no field\(s\) \['z'\]",
        ),
        (
            [wire(ORDER), [1, "2030-01-01"], "1", "green"],
            r"parameter 'color' of place \(Color \| None\): input\[3\]: cannot decode 'green' as Color",
        ),
    ],
    ids=["typeddict", "namedtuple-field", "namedtuple-extra", "enum"],
)
def test_a_value_that_does_not_fit_names_the_parameter_and_its_type(json_args: list, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        payload.decode_args(place, json_args)


def test_a_result_that_does_not_fit_names_the_result_and_its_type() -> None:
    with pytest.raises(PayloadError, match=r"the result of place \(Point\): result: expected array or obj"):
        payload.decode_result(place, "oops")


def test_type_names_read_as_written() -> None:
    assert payload.type_name(dict[str, list[Point]]) == "dict[str, list[Point]]"
    assert payload.type_name(Optional[dt.date]) == "date | None"  # noqa: UP045
    assert payload.type_name(tuple[int, ...]) == "tuple[int, ...]"
    assert payload.type_name(Literal["a"]) == "Literal['a']"


def test_a_typeddict_hint_no_longer_raises_a_raw_type_error() -> None:
    with pytest.raises(PayloadError, match="expected object for Order"):
        payload.decode([1, 2], Order)
