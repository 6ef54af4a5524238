"""jsonb.stored_text against the real server: hand-picked edge cases and a few thousand
seeded random nested values must print exactly as ``json.dumps(v)::jsonb::text`` does,
and what the server refuses stored_text refuses too."""

from __future__ import annotations

import json
import math
import random
import struct

import psycopg
import pytest

from harvest.core.jsonb import stored_text

EDGE_CASES = [
    None,
    True,
    False,
    0,
    -1,
    2**63,
    -(2**200),
    12345678901234567890123456789,
    0.0,
    -0.0,
    0.1,
    1.0,
    2.5,
    -2.5,
    1e15,
    1e16,
    1e17,
    1e20,
    1e22,
    1e-05,
    1e-4,
    1.5e-07,
    -1.5e-07,
    123456789.123456789,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    2.2250738585072014e-308,
    5e-324,
    -5e-324,
    9007199254740993.0,
    0.30000000000000004,
    1 / 3,
    "",
    "plain",
    '\x01\x1f"\\/\b\f\n\r\t',
    "\x7f\u2028\u2029\ufeff\ufffe\uffff",
    "é 😀 \U0010ffff",
    "\ud83d\ude00",
    "e\u0301",
    [],
    {},
    [[], {}],
    [True, False, None],
    (1, "x"),
    {"a": {"b": [1, {"c": 2}]}},
    {"b": 1, "aa": 3, "a": 4},
    {"é": 0, "z": 2, "Z": 3, "ab": 1},
    {"😀": 1, "abcd": 2, "abc": 3, "ÿ": 4, "Ā": 5, "": 6},
    {"\u00e9": 1, "e\u0301": 2},
    {"\ud83d\ude00": 1, "😀": 2},
    {"😀": 2, "\ud83d\ude00": 1},
]

REFUSED = ["\x00", {"k\x00": 1}, ["ok", "\x00"], "\ud800", "\udc00x", "\ud83d\ud83d\ude00", float("nan")]

CHARS = (
    [chr(c) for c in range(0x01, 0x20)]
    + list('"\\/\x7f')
    + [chr(c) for c in range(0x20, 0x7F)] * 3
    + [
        "é",
        "ÿ",
        "Ā",
        "ß",
        "\u0301",
        "\u2028",
        "\u2029",
        "\ufeff",
        "\ufffe",
        "\uffff",
        "中",
        "😀",
        "\U0001f600",
        "\U0010ffff",
    ]
)
KEY_CHARS = ["a", "b", "A", "Z", "_", "0", "é", "ÿ", "Ā", "中", "😀", "\u0301", "\n", '"']


def random_float(rng: random.Random) -> float:
    kind = rng.randrange(4)
    if kind == 0:  # any finite bit pattern, subnormals included
        while True:
            value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
            if math.isfinite(value):
                return value
    if kind == 1:  # every decimal magnitude
        return rng.uniform(-10, 10) * 10.0 ** rng.randint(-320, 300)
    if kind == 2:  # short decimals, integral floats and their exponent forms
        return round(rng.uniform(-1e6, 1e6), rng.randint(0, 6)) * 10.0 ** rng.choice([0, 0, 10, 16, -7, -12])
    return float(rng.randint(-(2**70), 2**70))


def random_string(rng: random.Random, chars: list[str], max_len: int) -> str:
    return "".join(rng.choice(chars) for _ in range(rng.randint(0, max_len)))


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-(2 ** rng.randint(1, 200)), 2 ** rng.randint(1, 200))
    if kind in (2, 3):
        return random_float(rng)
    if kind in (4, 5):
        return random_string(rng, CHARS, 12)
    if kind == 6:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    # short keys from a small alphabet: many share a byte length and need the bytewise order
    return {random_string(rng, KEY_CHARS, 4): random_value(rng, depth + 1) for _ in range(rng.randint(0, 6))}


def server_texts(conn: psycopg.Connection, values: list) -> list[str]:
    rows = conn.execute(
        "SELECT t::jsonb::text FROM unnest(%s::text[]) WITH ORDINALITY AS u(t, i) ORDER BY i",
        ([json.dumps(v) for v in values],),
    ).fetchall()
    return [row[0] for row in rows]


def test_edge_cases_match_the_server(conn):
    for value, text in zip(EDGE_CASES, server_texts(conn, EDGE_CASES), strict=True):
        assert stored_text(value) == text, value


def test_random_values_match_the_server(conn):
    rng = random.Random(20240611)
    values = [random_value(rng) for _ in range(4000)]
    mismatches = [
        (value, text)
        for value, text in zip(values, server_texts(conn, values), strict=True)
        if stored_text(value) != text
    ]
    assert not mismatches, mismatches[:5]


def test_what_the_server_refuses_stored_text_refuses(conn):
    for value in REFUSED:
        with pytest.raises(psycopg.DataError):
            conn.execute("SELECT %s::jsonb::text", (json.dumps(value),))
        with pytest.raises(ValueError):
            stored_text(value)
