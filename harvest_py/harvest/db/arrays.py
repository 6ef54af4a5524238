"""The group commits' array parameters in PostgreSQL's binary array format, each written in one loop.

A result batch sends its task ids, fencing tokens, results and decisions as arrays
(``complete_activities``' ``bigint[]`` and ``jsonb[]``), a decision batch its ids, tokens, throughs
and commands, and psycopg's list dumper writes them element by element in Python: per element a
dumper call (a ``Jsonb`` wrapper, two ``isinstance`` tests, an ``encode`` and a concatenation
for a JSON value), a length packed, two appends. :class:`JsonbArray` and :class:`BigintArray`
are lists whose binary dumpers write the same array (the same header, element type and
elements: the bytes psycopg sends for a list of ``Jsonb`` values, and for a list of ints as
``bigint[]``) with one ``json.dumps``-equivalent text per JSON element and one ``struct`` call for
all of the integers. :class:`JsonbArray` with ``none_is_null`` sends a ``None`` element as SQL
NULL (a result batch's item without a decision), else as JSON ``null`` (a result that is None).
tests/unit/test_arrays.py pins the bytes against psycopg's own dumpers.
"""

from __future__ import annotations

import struct
from typing import Any

import psycopg
from psycopg import postgres
from psycopg.adapt import Dumper
from psycopg.pq import Format

from harvest.core.jsonb import dumps

__all__ = ["BigintArray", "JsonbArray"]

_JSONB_OID = postgres.types["jsonb"].oid
_INT8_OID = postgres.types["int8"].oid
_HEAD = struct.Struct("!iiI")  # dimensions, has-null flag, element type
_DIM = struct.Struct("!ii")  # the one dimension's length and lower bound (1)
_LEN = struct.Struct("!i")
_NULL = _LEN.pack(-1)


class JsonbArray(list):  # type: ignore[type-arg]
    """A ``jsonb[]`` parameter: each element's JSON is ``json.dumps``' text (harvest.core.jsonb)."""

    __slots__ = ("none_is_null",)

    def __init__(self, values: Any = (), none_is_null: bool = False):
        super().__init__(values)
        self.none_is_null = none_is_null


class BigintArray(list):  # type: ignore[type-arg]
    """A ``bigint[]`` parameter of Python ints (None: SQL NULL)."""

    __slots__ = ()


class JsonbArrayBinaryDumper(Dumper):
    format = Format.BINARY
    oid = postgres.types["jsonb"].array_oid

    def dump(self, obj: JsonbArray) -> bytes:
        if not obj:
            return _HEAD.pack(0, 0, _JSONB_OID)
        parts = [b"", _DIM.pack(len(obj), 1)]
        append = parts.append
        hasnull = 0
        null = obj.none_is_null
        for value in obj:
            if value is None and null:
                hasnull = 1
                append(_NULL)
                continue
            data = dumps(value).encode()
            append(_LEN.pack(len(data) + 1))
            append(b"\x01")  # the jsonb binary format's version
            append(data)
        parts[0] = _HEAD.pack(1, hasnull, _JSONB_OID)
        return b"".join(parts)


class BigintArrayBinaryDumper(Dumper):
    format = Format.BINARY
    oid = postgres.types["int8"].array_oid

    def dump(self, obj: BigintArray) -> bytes:
        n = len(obj)
        if not n:
            return _HEAD.pack(0, 0, _INT8_OID)
        if None not in obj:
            # Each element is its length (8) and its value: one pack of all of them.
            flat = [8] * (2 * n)
            flat[1::2] = obj
            return _HEAD.pack(1, 0, _INT8_OID) + _DIM.pack(n, 1) + struct.pack("!" + "iq" * n, *flat)
        parts = [_HEAD.pack(1, 1, _INT8_OID), _DIM.pack(n, 1)]
        parts += [_NULL if v is None else struct.pack("!iq", 8, v) for v in obj]
        return b"".join(parts)


# Every connection of the process (an adapters map copies the global one when it is made).
psycopg.adapters.register_dumper(JsonbArray, JsonbArrayBinaryDumper)
psycopg.adapters.register_dumper(BigintArray, BigintArrayBinaryDumper)
