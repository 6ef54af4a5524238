"""harvest.db.jsoncodec: dumps is json.dumps and loads is json.loads, value for value and error
for error (the worker's jsonb parameters and columns go through them: docs/performance.md,
"Cheaper Python, fifth cut")."""

from __future__ import annotations

import enum
import json
import math

import pytest

from harvest.core.codecs import CodecChain, Undecodable, undecodable_path
from harvest.core.errors import PayloadError
from harvest.core.jsonb import stored_text
from harvest.core.payload import approx_size, payload_size
from harvest.db.jsoncodec import dumps, loads


class Level(enum.IntEnum):
    HIGH = 3


class Text(str):
    pass


VALUES = [
    None,
    True,
    False,
    0,
    -7,
    2**70,
    1.5,
    -0.0,
    1e20,
    1.5e-7,
    math.inf,
    -math.inf,
    "",
    "plain",
    'quote " backslash \\ newline \n tab \t',
    "é ü 中文 \U0001f600",
    "\ud800 lone surrogate",
    "\x00\x1f controls",
    [],
    {},
    [1, "x", None, [2.5, {"k": []}]],
    (1, 2),
    {"b": 1, "a": {"z": [True, False]}, "é": "ü"},
    {1: "int key", 2.5: "float key", False: "bool key", None: "none key"},
    Level.HIGH,
    Text("a str subclass"),
    {"type": "schedule_activity", "seq": 3, "name": "noop", "input": [3], "options": {"retry": {}}},
    0,
    -17,
    10**30,
    [1, -2, 10**30],
    [True, 1],
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_dumps_is_json_dumps(value):
    assert dumps(value) == json.dumps(value)
    assert type(dumps(value)) is str


def test_dumps_nan_as_json_dumps():
    assert dumps(math.nan) == json.dumps(math.nan) == "NaN"


@pytest.mark.parametrize("value", [object(), {"a": {1, 2}}, [b"bytes"], {(1, 2): "tuple key"}])
def test_dumps_refuses_what_json_dumps_refuses(value):
    with pytest.raises(TypeError) as ours:
        dumps(value)
    with pytest.raises(TypeError) as theirs:
        json.dumps(value)
    assert str(ours.value) == str(theirs.value)


def test_dumps_refuses_a_cycle_and_stays_usable():
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps(cycle)
    shared = [1]
    assert dumps([shared, shared]) == "[[1], [1]]"  # a value seen twice is no cycle
    with pytest.raises(TypeError):
        dumps([shared, object()])
    assert dumps(shared) == "[1]"  # a failed call leaves nothing behind for the next


@pytest.mark.parametrize("value", [10**5000, [1, 10**5000]], ids=["int", "list"])
def test_an_int_past_the_digit_limit_is_refused_as_json_dumps_refuses_it(value):
    """dumps writes an exact int and approx_size a list of them without the encoder (their
    repr): past the interpreter's digit limit both still raise json.dumps' ValueError."""
    with pytest.raises(ValueError) as theirs:
        json.dumps(value)
    with pytest.raises(ValueError) as ours:
        dumps(value)
    assert str(ours.value) == str(theirs.value)
    if isinstance(value, list):  # (an int counts 8 without being printed)
        with pytest.raises(ValueError):
            approx_size(value)


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_loads_is_json_loads(value):
    text = json.dumps(value)
    for data in (text.encode("utf-8", "surrogatepass"), text):
        ours, theirs = loads(data), json.loads(data)
        assert repr(ours) == repr(theirs)  # NaN == NaN is False; -0.0 == 0.0 is True


@pytest.mark.parametrize(
    "data",
    [
        b" [1] ",
        b"[1]\n",
        b"\xef\xbb\xbf[1]",
        '"é"'.encode("utf-16-le"),
        '"é"'.encode("utf-16"),
        '{"a": 1}'.encode("utf-32"),
        bytearray(b"[1, 2]"),
        memoryview(b'{"a": [1]}'),
        '"\U0001f600"'.encode(),
        " [1] ",
        "[1]\n",
        '{"a": {"b": [1.5, null, true]}}',
        '"\\ud83d\\ude00"',
    ],
)
def test_loads_reads_what_json_loads_reads(data):
    expected = json.loads(bytes(data) if isinstance(data, memoryview) else data)
    assert loads(data) == expected


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b" ",
        b"[1",
        b"[1] x",
        b"nul",
        b'"\\x"',
        b"\xff\xfe\xfd",
        b"\xc3",
        b'{"a" 1}',
        "[1",
        "",
        "[1] x",
        "\ufeff[1]",
    ],
)
def test_loads_refuses_what_json_loads_refuses(data):
    with pytest.raises(ValueError) as ours:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        loads(data)
    with pytest.raises(ValueError) as theirs:
        json.loads(data)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_sizes_are_what_they_were(value):
    """payload_size takes a string's length for its byte count only when it is ASCII, stored_text
    tests exact int and str first, and approx_size measures with dumps: the same numbers."""
    try:
        expected = len(stored_text(value).encode("utf-8"))
    except ValueError:
        expected = 0
    except TypeError:
        expected = None
    if expected is None:
        with pytest.raises(TypeError):
            payload_size(value)
    else:
        assert payload_size(value) == expected
    if type(value) not in (type(None), bool, int, float, str):
        assert approx_size(value) == len(json.dumps(value))


@pytest.mark.parametrize("value", [Level.HIGH, Text("sub"), True, False, 7, "é\n"])
def test_stored_text_of_subclasses_and_exact_types(value):
    text = json.dumps(value, ensure_ascii=False)
    assert stored_text(value) == text


def test_a_value_too_deep_to_parse_reads_as_undecodable_where_it_was() -> None:
    """A stored value past the parser's ~1000 levels raised RecursionError out of a row's fetch
    (a claim's: the worker and every task of the claim); it reads back cut, each part too deep an
    Undecodable, which every payload decode refuses with a PayloadError."""
    deep = "[" * 1000 + "]" * 1000
    text = '[{"event_id": 2, "event_data": {"payload": ' + deep + ', "name": "s"}}, [[1]]]'
    for data in (text, text.encode()):
        value = loads(data)
        assert value[0]["event_data"]["name"] == "s" and value[1] == [[1]]
        assert undecodable_path(value) == "[0].event_data.payload[0]..."
    assert isinstance(loads(deep.encode()), list)
    assert loads('"[[[["') == "[[[["  # (brackets in a string are text)
    with pytest.raises(PayloadError, match="deeper than this process's JSON parser reads"):
        CodecChain.of(None).decode_tree(loads(deep))
    assert undecodable_path(Undecodable("x")) == "the value"
