"""The JSON of the engine's ``jsonb`` parameters and columns, without the stdlib's per-call wrappers.

Every payload, command and decision crosses psycopg as JSON: ``json.dumps`` of each ``jsonb``
parameter and ``json.loads`` of each ``jsonb`` value read back. For the small values of the hot
path (an activity's ``int`` result, a one-command decision) the stdlib's Python wrappers around
its C encoder and scanner cost more than the C code: ``json.loads`` of ``bytes`` guesses the
encoding in Python and matches whitespace twice, and ``json.dumps`` builds an encoder through
three Python calls. :func:`dumps` (``harvest.core.jsonb.dumps``) and :func:`loads` call the C
parts directly and return exactly what ``json.dumps`` / ``json.loads`` return (same text, same
values, the same errors: anything unusual goes to the stdlib function itself).
tests/unit/test_jsoncodec.py pins the equivalence.
"""

from __future__ import annotations

import json
from json import decoder, scanner
from typing import Any

from psycopg.abc import AdaptContext
from psycopg.types.json import set_json_loads

from harvest.core.codecs import Undecodable
from harvest.core.jsonb import MAX_JSON_DEPTH, deep_spans, dumps

__all__ = ["dumps", "loads", "use_on"]

_c_make_scanner: Any = vars(scanner).get("c_make_scanner")  # None without the C accelerator
_scan: Any = _c_make_scanner(decoder.JSONDecoder()) if _c_make_scanner is not None else None


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """``json.loads(data)`` of the UTF-8 text PostgreSQL sends for a ``json``/``jsonb`` value
    (or of that text already decoded: a value read as ``text``, harvest.db.sqlapi.claimed_rows);
    a value nested past what the parser reads comes back cut (:func:`_cut_deep`)."""
    try:
        if _scan is not None and isinstance(data, str):
            try:
                value, end = _scan(data, 0)
            except (StopIteration, ValueError):
                return json.loads(data)  # leading whitespace, a BOM, or not JSON: its answer or error
            return value if end == len(data) else json.loads(data)
        if _scan is None or not isinstance(data, bytes) or data[:3] == b"\xef\xbb\xbf" or b"\x00" in data[:4]:
            # (a BOM or a NUL in the first bytes: json.loads would guess another encoding)
            return json.loads(data if not isinstance(data, memoryview) else bytes(data))
        try:
            text = data.decode("utf-8", "surrogatepass")  # what json.loads decodes UTF-8 bytes with
            value, end = _scan(text, 0)
        except (UnicodeDecodeError, StopIteration, ValueError):
            return json.loads(data)  # leading whitespace, or not JSON: json.loads' answer or error
        if end != len(text):  # trailing whitespace or text: json.loads' answer or error
            return json.loads(data)
        return value
    except RecursionError:
        return _cut_deep(data)


# How deep a value is read when the parser gave up on it (RecursionError, near 1000 levels):
# a payload within the engine's bound (MAX_JSON_DEPTH) inside a row's few levels (a claim's
# events, an event's data) is read whole; what opens deeper is cut.
READ_DEPTH = MAX_JSON_DEPTH + 56
# What stands for a cut part until it is replaced: a string no jsonb value holds (U+0000).
_CUT = '"\\u0000harvest:cut"'
_TOO_DEEP = (
    f"a stored value nests arrays and objects deeper than this process's JSON parser reads (about "
    f"1000 levels; the database refuses more than {MAX_JSON_DEPTH} from a client): not decoded "
    "(docs/failures.md)"
)


def _cut_deep(data: bytes | bytearray | memoryview | str) -> Any:
    """The value of ``data``, its arrays and objects deeper than READ_DEPTH each replaced by an
    ``Undecodable`` (the whole value one, when even that cannot be read). One value Python cannot
    parse raised out of the fetch of every row with it: a claim's, which lost the worker and every
    other task of the claim, at every restart. Now the reader that decodes it fails, naming it."""
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
    try:
        spans = deep_spans(text, READ_DEPTH)
        if not spans:  # (read this deep already: the parser had no stack left for it)
            return Undecodable(_TOO_DEEP)
        parts: list[str] = []
        end = 0
        for start, stop in spans:
            parts += (text[end:start], _CUT)
            end = stop
        value = json.loads("".join(parts) + text[end:])
    except (RecursionError, ValueError):
        return Undecodable(_TOO_DEEP)
    cut = "\x00harvest:cut"
    if not isinstance(value, (dict, list)):
        return value if value != cut else Undecodable(_TOO_DEEP)
    level = [value]
    while level:  # (without recursion: the value is READ_DEPTH deep)
        item = level.pop()
        keys = item.keys() if isinstance(item, dict) else range(len(item))
        for key in keys:
            child = item[key]
            if child == cut:
                item[key] = Undecodable(_TOO_DEEP)
            elif isinstance(child, (dict, list)):
                level.append(child)
    return value


def use_on(context: AdaptContext) -> None:
    """Read ``json``/``jsonb`` values on ``context`` (a connection) with :func:`loads`."""
    set_json_loads(loads, context)
