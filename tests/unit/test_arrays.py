"""harvest.db.arrays: the group commits' array parameters are the bytes psycopg's own list
dumpers send for the same values (a list of ``Jsonb`` values; a list of ints as ``bigint[]``)."""

from __future__ import annotations

import struct
from typing import Any

import psycopg
import pytest
from psycopg import postgres
from psycopg.adapt import PyFormat, Transformer
from psycopg.types.json import Jsonb
from psycopg.types.numeric import Int8

from harvest.core.jsonb import dumps
from harvest.db.arrays import BigintArray, JsonbArray

VALUES: list[Any] = [
    [5],
    {"type": "schedule_activity", "seq": 2, "options": {"start_to_close": 300.0}},
    'a "quoted" \\ string with ünïcode and \n',
    1e20,
    -0.0,
    None,
    True,
    [],
    {},
]


def psycopg_bytes(values: list[Any]) -> bytes:
    """What psycopg's own ListBinaryDumper sends for ``values``."""
    tx = Transformer(psycopg.adapters)
    return bytes(tx.get_dumper(values, PyFormat.BINARY).dump(values))


def ours(values: list[Any]) -> tuple[int, bytes]:
    tx = Transformer(psycopg.adapters)
    dumper = tx.get_dumper(values, PyFormat.BINARY)
    return dumper.oid, bytes(dumper.dump(values))


@pytest.mark.parametrize("n", [1, 2, len(VALUES)])
def test_jsonb_array_is_psycopgs_list_of_jsonb(n: int) -> None:
    values = VALUES[:n]
    oid, data = ours(JsonbArray(values))
    assert oid == postgres.types["jsonb"].array_oid
    assert data == psycopg_bytes([Jsonb(v, dumps) for v in values])


def test_jsonb_array_none_is_json_null_or_sql_null() -> None:
    values = [{"a": 1}, None, [2]]
    assert ours(JsonbArray(values))[1] == psycopg_bytes([Jsonb(v, dumps) for v in values])
    # none_is_null: None is SQL NULL (the has-null flag set), as a list with None sends it
    expected = psycopg_bytes([None if v is None else Jsonb(v, dumps) for v in values])
    assert ours(JsonbArray(values, none_is_null=True))[1] == expected
    assert struct.unpack("!iiI", expected[:12]) == (1, 1, postgres.types["jsonb"].oid)


def test_empty_arrays_have_no_dimension() -> None:
    assert ours(JsonbArray([]))[1] == struct.pack("!iiI", 0, 0, postgres.types["jsonb"].oid)
    assert ours(BigintArray([]))[1] == struct.pack("!iiI", 0, 0, postgres.types["int8"].oid)


@pytest.mark.parametrize("values", [[1], [1, 2, 3], [2**62, -5, 0], [7, None, 9]])
def test_bigint_array_is_psycopgs_list_of_int8(values: list[int | None]) -> None:
    oid, data = ours(BigintArray(values))
    assert oid == postgres.types["int8"].array_oid
    assert data == psycopg_bytes([None if v is None else Int8(v) for v in values])


def test_bigint_array_of_nulls() -> None:
    # (psycopg sends a list of None alone in its text form; the binary one is this)
    int8 = postgres.types["int8"].oid
    assert ours(BigintArray([None]))[1] == struct.pack("!iiIiii", 1, 1, int8, 1, 1, -1)


def test_bigint_array_refuses_what_bigint_cannot_hold() -> None:
    with pytest.raises(struct.error):
        ours(BigintArray([2**63]))
