"""Payloads: rich values to JSON and back, with the offending path named on failure."""

from __future__ import annotations

import datetime as dt
import enum
import json
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Optional

import pytest

from harvest.core.errors import PayloadError
from harvest.core.payload import decode, decode_args, decode_result, encode, encode_args, encode_checked_args


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Foo:
    pass


@dataclass
class Item:
    sku: str
    when: dt.datetime
    color: Color = Color.RED


@dataclass
class Cart:
    cart_id: uuid.UUID
    items: list[Item]
    notes: str | None = None
    tags: dict[str, int] = field(default_factory=dict)
    coupon: Item | None = None


WHEN = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
CART = Cart(
    uuid.UUID(int=7), [Item("a", WHEN), Item("b", WHEN, Color.BLUE)], tags={"x": 1}, coupon=Item("c", WHEN)
)


def test_dataclass_round_trip_through_json_text():
    wire = json.loads(json.dumps(encode(CART)))
    assert wire["cart_id"] == str(uuid.UUID(int=7))
    assert wire["items"][1] == {"sku": "b", "when": WHEN.isoformat(), "color": "blue"}
    assert decode(wire, Cart) == CART


def test_scalars_and_containers():
    assert encode((1, 2.5, None, True)) == [1, 2.5, None, True]
    assert encode({"b", "a", "c"}) == ["a", "b", "c"]  # sets are sorted for determinism
    assert encode(dt.date(2026, 1, 2)) == "2026-01-02"
    assert encode(Decimal("1.10")) == "1.10"
    assert decode("1.10", Decimal) == Decimal("1.10")
    assert decode([1, 2], tuple[int, ...]) == (1, 2)
    assert decode([1, "a"], tuple[int, str]) == (1, "a")
    assert decode(["a"], set[str]) == {"a"}
    assert decode({"1": "red"}, dict[int, Color]) == {1: Color.RED}
    assert decode(3.0, int) == 3 and decode(3, float) == 3.0
    assert decode({"any": [1]}, Any) == {"any": [1]}
    assert decode(None, Optional[Item]) is None  # noqa: UP045 - typing.Optional on purpose
    assert decode("2026-01-02", dt.date) == dt.date(2026, 1, 2)


def test_encode_error_names_the_path():
    @dataclass
    class Line:
        when: Any

    @dataclass
    class Box:
        items: list

    value = Box(items=[Line(1), Line(2), Line(Foo())])
    with pytest.raises(PayloadError) as err:
        encode_args(None, [value])
    assert str(err.value).startswith("input[0].items[2].when: cannot encode object of type Foo: ")
    assert isinstance(err.value, TypeError)


def test_an_object_it_cannot_encode_is_told_what_it_can():
    """The error said what was wrong (the path, the type) but not what to pass instead."""
    with pytest.raises(PayloadError) as err:
        encode_args(None, [object()])
    message = str(err.value)
    assert message.startswith("input[0]: cannot encode object of type object: ")
    assert "dataclass" in message and "pydantic" in message and "activities.md#payloads" in message


def test_a_coroutine_passed_as_a_payload_asks_for_the_missing_await():
    async def lookup() -> int:
        return 1

    coro = lookup()
    with pytest.raises(PayloadError, match=r"input\[0\]: cannot encode a coroutine: .*forget `await`"):
        encode_args(None, [coro])
    coro.close()


def test_other_encode_errors():
    with pytest.raises(PayloadError, match=r"value\[1\]: cannot encode non-finite"):
        encode([1, float("nan")])
    with pytest.raises(PayloadError, match="keys must be str"):
        encode({1: "a"})
    loop: list = []
    loop.append(loop)
    with pytest.raises(PayloadError, match="circular"):
        encode(loop)
    # A value the JSON parser still reads (600 deep) but the encoder's two frames a level do
    # not: the caller's bad value, not a RecursionError (a 500 of the management API before).
    # Past the engine's 200 levels, refused before the encoder's stack runs out.
    with pytest.raises(PayloadError, match=r"input\[0\]\[0\].*: arrays and objects nest deeper than 200"):
        encode(json.loads("[" * 600 + "]" * 600), "input")
    assert encode(json.loads("[" * 200 + "]" * 200)) == json.loads("[" * 200 + "]" * 200)  # (at the bound)
    with pytest.raises(PayloadError, match="nest deeper than 200"):
        encode(json.loads("[" * 201 + "]" * 201))
    # An argument is a level inside its call's input array, which the database bounds whole: a
    # 200-deep argument passed here and the start was refused by the database (HR001).
    at_bound = json.loads("[" * 199 + "]" * 199)
    assert encode_args(None, (at_bound,)) == [at_bound]
    with pytest.raises(PayloadError, match=r"input\[0\]\[0\].*nest deeper than 200"):
        encode_args(None, (json.loads("[" * 200 + "]" * 200),))

    def takes(ctx: object, value: list) -> None: ...

    with pytest.raises(PayloadError, match="nest deeper than 200"):
        encode_checked_args(takes, ([json.loads("[" * 199 + "]" * 199)],), "activity takes")


def test_decode_errors_name_the_path():
    with pytest.raises(PayloadError, match=r"value\.items\[0\]\.when: expected ISO datetime"):
        decode({"cart_id": str(uuid.UUID(int=1)), "items": [{"sku": "a", "when": 5}]}, Cart)
    with pytest.raises(PayloadError, match=r"value\.items\[0\]\.sku: missing field of Item"):
        decode({"cart_id": str(uuid.UUID(int=1)), "items": [{"when": "x"}]}, Cart)
    with pytest.raises(PayloadError, match="expected int"):
        decode("x", int)
    with pytest.raises(PayloadError, match="cannot decode 'green' as Color"):
        decode("green", Color)


async def handler(ctx, cart: Cart, n: int = 1, *, flag: bool = False) -> list[Item]:
    return cart.items


def test_args_are_positional_on_the_wire():
    wire = encode_args(handler, (CART,), {"flag": True})
    assert len(wire) == 3 and wire[1] == 1 and wire[2] is True
    args, kwargs = decode_args(handler, json.loads(json.dumps(wire)))
    assert args == (CART, 1) and kwargs == {"flag": True}
    assert encode_args(handler, (CART,), {}) == [encode(CART)]  # trailing defaults omitted
    args, kwargs = decode_args(handler, [encode(CART)])
    assert args == (CART,) and kwargs == {}


def test_bad_arguments():
    with pytest.raises(TypeError, match="bad arguments for handler"):
        encode_args(handler, (), {"nope": 1})
    with pytest.raises(PayloadError, match="missing argument 'cart'"):
        decode_args(handler, [])
    with pytest.raises(PayloadError, match="takes 3 argument"):
        decode_args(handler, [encode(CART), 1, True, 4])
    with pytest.raises(PayloadError, match="expected a JSON array"):
        decode_args(handler, {"cart": 1})


def test_result_uses_the_return_annotation():
    wire = encode([Item("a", WHEN)])
    assert decode_result(handler, wire) == [Item("a", WHEN)]
    assert decode_result(None, wire) == wire
    assert decode_result(lambda: None, wire) == wire


def test_pydantic_models_when_installed():
    pydantic = pytest.importorskip("pydantic")

    class Account(pydantic.BaseModel):
        account_id: uuid.UUID
        opened: dt.datetime
        items: list[Item] = pydantic.Field(default_factory=list)

    acct = Account(account_id=uuid.UUID(int=3), opened=WHEN)
    wire = encode({"acct": acct})
    assert wire == {
        "acct": {"account_id": str(uuid.UUID(int=3)), "opened": "2026-01-02T03:04:05Z", "items": []}
    }
    assert decode(wire["acct"], Account) == acct
    with pytest.raises(PayloadError, match="value: cannot decode as Account"):
        decode({"account_id": "nope"}, Account)


class Level(enum.IntEnum):
    LOW = 1


async def plain(ctx, a: int, b: str = "x", c: float = 1.5) -> int:
    return a


async def plain_posonly(ctx, a: int, /, b: int = 2) -> int:
    return a


def test_a_plain_positional_call_skips_bind_and_encodes_the_same() -> None:
    # encode_args takes a shortcut for positional calls of functions whose parameters are all
    # positional (no Signature.bind, scalars as they are): the same wire as the keyword form,
    # which goes through bind.
    for args, by_name in (((1,), {}), ((1, "y"), {"b": "y"}), ((1, "y", 2.5), {"b": "y", "c": 2.5})):
        assert encode_args(plain, args) == encode_args(plain, (1,), by_name) == list(args)
    assert encode_args(plain_posonly, (1, 3)) == encode_args(plain_posonly, (1,), {"b": 3}) == [1, 3]
    # Values that only look like JSON scalars are still converted.
    encoded = encode_args(plain, (Level.LOW, Color.RED, WHEN))
    assert encoded == [1, "red", WHEN.isoformat()] and type(encoded[0]) is int
    with pytest.raises(PayloadError, match=r"input\[2\]: cannot encode non-finite"):
        encode_args(plain, (1, "y", float("inf")))
    with pytest.raises(TypeError, match="bad arguments for plain: missing a required argument: 'a'"):
        encode_args(plain, ())
    with pytest.raises(TypeError, match="bad arguments for plain: too many positional arguments"):
        encode_args(plain, (1, "y", 2.5, 4))


def test_scalars_of_the_hinted_type_decode_to_themselves_and_others_still_fail() -> None:
    assert decode_args(plain, [1, "y", 2.5]) == ((1, "y", 2.5), {})
    assert decode_args(plain, [1, "y", 2]) == ((1, "y", 2.0), {})  # an int read as a float
    assert type(decode_args(plain, [1, "y", 2])[0][2]) is float
    with pytest.raises(PayloadError, match="expected int, got bool"):
        decode(True, int)
    with pytest.raises(PayloadError, match="expected bool, got int"):
        decode(1, bool)
    with pytest.raises(PayloadError, match=r"parameter 'b' of plain \(str\)"):
        decode_args(plain, [1, 2])


def _plain(ctx: Any, a: float, b: int = 3, c: Any = None) -> None: ...


@pytest.mark.parametrize(
    ("json_args", "expected"),
    [
        ([1.5], (1.5,)),  # scalars of the hint's own type (and Any) pass as they are
        ([1.5, 2, {"x": [1]}], (1.5, 2, {"x": [1]})),
        ([1], (1.0,)),  # an int for a float: still converted by the hint
    ],
)
def test_decode_args_of_a_plain_call_is_what_the_hints_give(json_args: list[Any], expected: tuple) -> None:
    args, kwargs = decode_args(_plain, json_args)
    assert (args, kwargs) == (expected, {})
    assert [type(a) for a in args] == [type(e) for e in expected]


@pytest.mark.parametrize("bad", [[1.5, True], [1.5, "2"]])
def test_decode_args_of_a_plain_call_still_refuses_a_value_of_another_type(bad: list[Any]) -> None:
    with pytest.raises(PayloadError, match=r"parameter 'b' of _plain \(int\): input\[1\]: expected int"):
        decode_args(_plain, bad)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("a\x00b", r"U\+0000 \(NUL\)"),
        (["ok", {"k": "\x00"}], r"U\+0000 \(NUL\)"),
        ({"a\x00": 1}, r"U\+0000 \(NUL\)"),
        ("\ud800", "lone surrogate"),
    ],
)
def test_a_payload_the_database_cannot_store_is_a_payload_error_naming_it(value: Any, says: str) -> None:
    """check_size counted such a value 0 bytes and let it through to the database, whose refusal
    reached the caller as psycopg's UntranslatableCharacter (and crashed a worker's handler
    for an activity's result); it is refused here, naming the payload and the remedy."""
    from harvest.core.payload import check_size, check_storable, payload_size

    with pytest.raises(PayloadError, match=f"the input of workflow w cannot be stored: .*{says}.*bytes"):
        check_size(encode(value), "the input of workflow w", 1000)
    with pytest.raises(PayloadError, match=says):
        check_storable(encode(value), "search_attributes")
    assert payload_size(encode(value)) == 0  # (the measure alone still counts it 0)
    check_storable({"k": "ok", "n": [1, 2.5, None]}, "search_attributes")
