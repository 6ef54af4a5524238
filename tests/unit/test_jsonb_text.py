"""jsonb.stored_text: the text PostgreSQL prints for a value after a jsonb round trip.

Every expectation here was read off a real server (SELECT %s::jsonb::text); the
integration test test_jsonb_text_matches_server.py keeps checking that.
"""

from __future__ import annotations

import enum

import pytest

from harvest.core import payload
from harvest.core.jsonb import stored_text, stored_value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "null"),
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (-42, "-42"),
        (12345678901234567890123456789, "12345678901234567890123456789"),
        ("", '""'),
        ("plain", '"plain"'),
        ([], "[]"),
        ({}, "{}"),
        ([[], {}], "[[], {}]"),
        ([True, False, None], "[true, false, null]"),
        ({"a": {"b": [1, {"c": 2}]}}, '{"a": {"b": [1, {"c": 2}]}}'),
        ((1, "x"), '[1, "x"]'),
    ],
)
def test_scalars_and_nesting(value, text):
    assert stored_text(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.1, "0.1"),
        (1.0, "1.0"),
        (2.5, "2.5"),
        (-0.0, "0.0"),  # numeric has no negative zero
        (0.0, "0.0"),
        (1e20, "100000000000000000000"),  # repr 1e+20: display scale 0
        (1e16, "10000000000000000"),
        (1e22, "10000000000000000000000"),
        (1.5e-07, "0.00000015"),
        (-1.5e-07, "-0.00000015"),
        (1e-05, "0.00001"),
        (123456789.123456789, "123456789.12345679"),  # the float's repr, not the literal
        (1.7976931348623157e308, "17976931348623157" + "0" * 292),
        (5e-324, "0." + "0" * 323 + "5"),
    ],
)
def test_numbers_print_as_numeric(value, text):
    assert stored_text(value) == text


def test_integral_floats_with_an_exponent_read_back_as_ints():
    assert stored_value(1e20) == 10**20 and isinstance(stored_value(1e20), int)
    assert stored_value(1.0) == 1.0 and isinstance(stored_value(1.0), float)
    assert stored_value(1.5e-07) == 1.5e-07


def test_object_keys_sort_by_utf8_length_then_bytes():
    assert stored_text({"b": 1, "aa": 3, "a": 4}) == '{"a": 4, "b": 1, "aa": 3}'
    assert stored_text({"é": 0, "z": 2, "Z": 3, "ab": 1}) == '{"Z": 3, "z": 2, "ab": 1, "é": 0}'
    assert (
        stored_text({"😀": 1, "abcd": 2, "abc": 3, "ÿ": 4, "Ā": 5, "": 6})
        == '{"": 6, "ÿ": 4, "Ā": 5, "abc": 3, "abcd": 2, "😀": 1}'
    )


def test_no_unicode_normalisation_of_keys():
    assert stored_text({"\u00e9": 1, "e\u0301": 2}) == '{"\u00e9": 1, "e\u0301": 2}'


def test_string_escapes():
    assert stored_text('\x01\x1f"\\/\b\f\n\r\t') == r'"\u0001\u001f\"\\/\b\f\n\r\t"'
    assert stored_text("\x7f\u2028\u2029\ufeff\uffff é 😀") == '"\x7f\u2028\u2029\ufeff\uffff é 😀"'


def test_a_surrogate_pair_becomes_the_character_it_encodes():
    assert stored_text("\ud83d\ude00") == '"😀"'
    assert stored_text({"\ud83d\ude00": 1, "😀": 2}) == '{"😀": 2}'  # the later key wins
    assert stored_text({"😀": 2, "\ud83d\ude00": 1}) == '{"😀": 1}'


@pytest.mark.parametrize(
    "value",
    [
        "\x00",
        "a\x00b",
        {"\x00": 1},
        ["ok", {"k": "\x00"}],  # jsonb refuses \u0000
        "\ud800",
        "\udc00x",
        "\ud83d\ud83d\ude00",  # lone surrogates
        float("nan"),
        float("inf"),
        [float("-inf")],
    ],
)
def test_values_the_database_refuses(value):
    with pytest.raises(ValueError):
        stored_text(value)


@pytest.mark.parametrize("value", [object(), {1: "x"}, {"a": {None: 1}}, b"bytes"])
def test_non_json_values_are_a_type_error(value):
    with pytest.raises(TypeError):
        stored_text(value)


def test_exact_types_first_and_their_subclasses_as_before() -> None:
    # An int or a list by its exact type (the payloads' usual values), and a bool, an int
    # subclass and a tuple by the general tests, as json.dumps writes them.
    class Level(enum.IntEnum):
        HIGH = 3

    assert stored_text(7) == "7" and stored_text(-(2**70)) == str(-(2**70))
    assert stored_text(True) == "true" and stored_text([True, 0, False]) == "[true, 0, false]"
    assert stored_text(Level.HIGH) == "3" and stored_text([Level.HIGH]) == "[3]"
    assert stored_text((1, [2, (3,)])) == "[1, [2, [3]]]"
    assert stored_text([]) == "[]" and stored_text([[], {}]) == "[[], {}]"


def test_encode_of_an_empty_container_is_a_fresh_copy() -> None:
    empty_dict: dict = {}
    empty_list: list = []
    assert payload.encode(empty_dict) == {} and payload.encode(empty_dict) is not empty_dict
    assert payload.encode(empty_list) == [] and payload.encode(empty_list) is not empty_list
