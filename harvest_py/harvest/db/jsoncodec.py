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

from harvest.core.jsonb import dumps

__all__ = ["dumps", "loads", "use_on"]

_c_make_scanner: Any = vars(scanner).get("c_make_scanner")  # None without the C accelerator
_scan: Any = _c_make_scanner(decoder.JSONDecoder()) if _c_make_scanner is not None else None


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """``json.loads(data)`` of the UTF-8 text PostgreSQL sends for a ``json``/``jsonb`` value
    (or of that text already decoded: a value read as ``text``, harvest.db.sqlapi.claimed_rows)."""
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


def use_on(context: AdaptContext) -> None:
    """Read ``json``/``jsonb`` values on ``context`` (a connection) with :func:`loads`."""
    set_json_loads(loads, context)
