"""The text PostgreSQL prints for a JSON value after a round trip through ``jsonb``.

A worker that decides a workflow's next step speculatively must feed the
workflow code the value a later replay will read back from the database, not
the value it holds in memory: ``jsonb`` sorts object keys, drops duplicate
keys, and stores numbers as ``numeric`` (``1e+20`` comes back as
``100000000000000000000``). The database accepts the speculative decision only
when ``p_result::text`` equals the worker's ``stored_text``.

For any value ``harvest.core.payload.encode`` produces, ``stored_text(v)`` equals
``SELECT %s::jsonb::text`` with ``json.dumps(v)`` as the parameter, byte for
byte; a value the database would refuse (U+0000, a lone surrogate, a
non-finite float) raises ``ValueError`` instead.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from json import encoder
from json.encoder import encode_basestring
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "deep_spans", "dumps", "loads", "stored_text", "stored_value"]

# The deepest a payload's arrays and objects nest (one in another): what the database takes
# from a client (harvest._check_depth, functions/core.sql), a web face from a body
# (harvest.web.guards) and a worker writes (harvest.core.payload.encode). Python's parser gives
# up near 1000 levels, and what the engine does with a value after (encoding, redaction, a
# history export's walk) takes two frames a level: a value 480 deep was started, and its run's
# export then failed.
MAX_JSON_DEPTH = 200

# The tokens of JSON text that move its depth: a string, skipped whole (a bracket in it is
# text), or a bracket.
_DEPTH_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')

# json.dumps' defaults: ensure_ascii, check_circular, allow_nan, ", " and ": ", no sort, no skip.
_default = json.JSONEncoder().default  # the TypeError json.dumps raises for a value it cannot write
_c_make_encoder: Any = vars(encoder).get("c_make_encoder")  # None without the C accelerator
_escape_ascii = encoder.encode_basestring_ascii


def dumps(value: Any) -> str:
    """``json.dumps(value)``, without the stdlib's per-call Python wrappers around its C encoder
    (about 1 us of a small value's 1.5-3 us; harvest.db.jsoncodec writes jsonb parameters with it)."""
    if type(value) is int:  # a result's usual value: the encoder writes int.__repr__, without one made
        return int.__repr__(value)
    if isinstance(value, str):
        return _escape_ascii(value)  # json.dumps' own shortcut for a string
    if _c_make_encoder is None:  # no C accelerator: the stdlib's own path
        return json.dumps(value)
    # A fresh markers dict per call, as json.dumps makes one (a failed call leaves it dirty).
    return "".join(
        _c_make_encoder({}, _default, _escape_ascii, None, ": ", ", ", False, False, True)(value, 0)
    )


def loads(text: str | bytes, **kwargs: Any) -> Any:
    """``json.loads(text, **kwargs)`` of text a caller handed in (a page's cursor, a form's
    field, a body): text nested past the parser's reach (about 1000 levels) is a ValueError,
    as any text that is not JSON, not the parser's RecursionError, which is none (a crafted
    cursor of 3,000 brackets was a 500 where a bad one is a 400 naming it)."""
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None


def stored_text(value: Any) -> str:
    """Return ``value::jsonb::text`` as the database prints it."""
    kind = type(value)  # the payloads' usual values first, by their exact type (not bool: an int)
    if kind is int:
        return int.__repr__(value)
    if kind is list:
        return "[" + ", ".join(map(stored_text, value)) + "]"
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        # jsonb escapes exactly what json.dumps(ensure_ascii=False) escapes: '"', '\\',
        # \b \f \n \r \t, and the other C0 controls as lowercase \u00xx; the rest is raw.
        return encode_basestring(_stored_string(value))
    if isinstance(value, int):
        return int.__repr__(value)  # what json.dumps writes; numeric prints an integer unchanged
    if isinstance(value, float):
        return _stored_float(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(stored_text, value)) + "]"
    if isinstance(value, dict):
        return _stored_object(value)
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def stored_value(value: Any) -> Any:
    """Return what a reader of the stored ``jsonb`` gets back (``1e+20`` reads as an int)."""
    return json.loads(stored_text(value))


def _stored_float(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"jsonb cannot store the float {value!r}")
    if value == 0:
        return "0.0"  # numeric has no negative zero: -0.0 is stored as 0.0
    # numeric keeps the literal's display scale: the digits after the point minus the
    # exponent, never below zero, printed without an exponent (1.5e-07 -> 0.00000015,
    # 1e+20 -> 100000000000000000000, 2.50 -> 2.50). Decimal's fixed-point format of the
    # repr json.dumps writes follows the same rule.
    return format(Decimal(float.__repr__(value)), "f")


def _stored_object(value: dict[str, Any]) -> str:
    members = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"not a JSON object key: {type(key).__name__}")
        # Two keys may become one on the server (a surrogate pair and the character it
        # encodes); jsonb keeps the last, as does this assignment.
        members[_stored_string(key)] = item
    return (
        "{"
        + ", ".join(
            encode_basestring(key) + ": " + stored_text(members[key])
            for key in sorted(members, key=_key_order)
        )
        + "}"
    )


def _key_order(key: str) -> tuple[int, bytes]:
    # jsonb orders keys by UTF-8 byte length first, then bytewise (not by collation),
    # so that it can find a key by binary search.
    encoded = key.encode("utf-8")
    return len(encoded), encoded


def _stored_string(text: str) -> str:
    """The string the server stores for ``text``, which json.dumps sends \\u-escaped."""
    if "\x00" in text:
        raise ValueError("jsonb cannot store the character U+0000 (NUL)")
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    # The text holds surrogates: the server joins an escaped high-low pair into the
    # character it encodes and refuses a lone surrogate, as UTF-16 decoding does.
    try:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        raise ValueError("jsonb cannot store a lone surrogate") from None


def deep_spans(text: str, limit: int = MAX_JSON_DEPTH) -> list[tuple[int, int]]:
    """The ``(start, end)`` slices of JSON ``text`` that are arrays or objects opening deeper
    than ``limit`` levels, the outermost of each (none: the value nests within ``limit``). A
    scan without recursion, so a value no parser reads can be measured (and cut: jsoncodec)."""
    if text.count("[") + text.count("{") <= limit:  # (nearly always: too few brackets to be deep)
        return []
    spans: list[tuple[int, int]] = []
    depth = start = 0
    for token in _DEPTH_TOKENS.finditer(text):
        char = text[token.start()]
        if char == '"':
            continue
        if char in "[{":
            depth += 1
            if depth == limit + 1:
                start = token.start()
        else:
            if depth == limit + 1:
                spans.append((start, token.end()))
            depth -= 1
    return spans
