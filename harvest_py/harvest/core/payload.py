"""JSON payload conversion for workflow and activity inputs and results.

Everything that crosses the database (inputs, results, marker values) is JSON.
``encode`` turns rich Python values into JSON-compatible ones and names the
exact path of anything it cannot convert; ``decode`` rebuilds rich values from
the type hints of the receiving function, so user code sees its own types on
both sides of the wire. pydantic is used when installed, never required.

Types a hint rebuilds (docs/workflows.md, "Payloads"): the JSON types, ``None``, ``bytes``
and ``bytearray`` (base64 text on the wire), enums (their value), ``datetime``/``date``/
``time`` (ISO 8601), ``timedelta`` (seconds), ``Decimal`` and ``UUID`` (text), dataclasses,
``NamedTuple`` (an array; an object is read too), ``TypedDict`` (an object, its keys typed),
pydantic models, ``list``/``tuple``/``set``/``dict`` of those, ``Optional``, unions (the first
member that accepts the value), ``Literal``, ``Annotated`` and ``NewType``. A value that does not
fit raises ``PayloadError`` naming the parameter (or result), its type and the path inside it.

One converter with or without pydantic: pydantic's ``TypeAdapter`` was considered as the
converter when installed and not taken, because its lax mode coerces (``"1"`` to ``1``) and its
``bytes`` are UTF-8, so a payload would decode differently on a worker that has pydantic and
one that does not. Pydantic models themselves are validated by pydantic.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as _dt
import enum
import functools
import inspect
import json
import math
import sys
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from decimal import Decimal
from typing import Any, cast

from harvest.core.errors import InvalidArgument, PayloadError, PayloadNotStorable, PayloadTooLarge
from harvest.core.json_values import json_default
from harvest.core.jsonb import MAX_JSON_DEPTH, dumps, stored_text

# pydantic is used when installed, and looked for only once something has imported it: a model
# (a class, an instance) exists only once pydantic.main has run, so a process whose payloads
# hold no model never loads pydantic (~80 ms of CPU at every worker's and CLI's start).
# Bound once found: pydantic serves its names through a module __getattr__ (an import lookup on
# every access), and the check runs for every payload that is not a plain JSON value.
_BaseModel: type | None = None
# A model is written by its field names (model_dump), so it is read by them too, its aliases
# still accepted: pydantic 2.11's by_name (before it, only a model with populate_by_name reads
# back what was written for it when its fields have aliases). Set with _BaseModel.
_VALIDATE_BY_NAME: dict[str, Any] = {}


def _base_model() -> type | None:
    """pydantic's BaseModel once pydantic is imported; None before (no model exists yet)."""
    global _BaseModel, _VALIDATE_BY_NAME
    if _BaseModel is None:
        base = getattr(sys.modules.get("pydantic.main"), "BaseModel", None)
        if not isinstance(base, type):  # (not imported, or pydantic.main still being run)
            return None
        if "by_name" in inspect.signature(cast(Any, base).model_validate).parameters:
            _VALIDATE_BY_NAME = {"by_name": True}
        _BaseModel = base
    return _BaseModel


__all__ = [
    "approx_size",
    "check_size",
    "check_storable",
    "check_text",
    "decode",
    "decode_args",
    "decode_result",
    "encode",
    "encode_args",
    "encode_details",
    "encode_result",
    "param_hints",
    "payload_size",
    "return_hint",
    "stored_size",
    "type_name",
]

_ABSENT = object()

# What a large payload should become instead (the same words as functions/core.sql's HR008).
PAYLOAD_HINT = (
    "keep large data outside the engine (a table, object storage; Payloads(offload_bytes=...) does it "
    "for what a worker or client writes, docs/payloads.md) and pass a reference; the limit is "
    "harvest.engine_settings.max_payload_bytes"
)


def payload_size(value: Any) -> int:
    """The size the engine counts for an encoded payload: the bytes of its JSON text as
    the database prints it (``octet_length(p::jsonb::text)`` in SQL, core.sql)."""
    # The hot path's usual payloads first, by exact type: an int (a result), a list of ints (an
    # activity's arguments). Their stored text is Python's own repr (stored_text writes an int
    # as int.__repr__ and a list as "[" + ", ".join(...) + "]"), so stored_text's walk is skipped.
    try:
        return stored_size(value)
    except ValueError:
        return 0  # the database refuses it for another reason (check_size says which)


def stored_size(value: Any) -> int:
    """:func:`payload_size`, raising ``ValueError`` for a value jsonb cannot store."""
    kind = type(value)
    if kind is int:
        return len(int.__repr__(value))
    if kind is list:
        for item in value:
            if type(item) is not int:
                break
        else:
            return len(list.__repr__(value))
    text = stored_text(value)
    return len(text) if text.isascii() else len(text.encode("utf-8"))  # ASCII: a byte a character


def approx_size(value: Any) -> int:
    """About the bytes of ``value``'s JSON text, cheaply (the sticky cache's estimate of what a
    run holds, harvest/worker/workflows.py): a scalar counts 8, a string its length, anything
    else the length of ``json.dumps`` (C speed; ASCII escapes make it an overestimate)."""
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float:
        return 8
    if kind is str:
        return len(value) + 2
    if kind is list:  # a start's usual input: a list of ints is its repr (no encoder made)
        for item in value:
            if type(item) is not int:
                break
        else:
            return len(list.__repr__(value))  # (an int past the digit limit: ValueError, as before)
    try:
        return len(dumps(value))
    except (TypeError, ValueError):
        return len(repr(value))


def check_size(value: Any, what: str, limit: int | None) -> None:
    """Raise ``PayloadTooLarge`` when encoded ``value`` is over ``limit`` bytes (None: no check).

    The same measure and message as the database's own check (HR008), made before a
    payload is sent; the database checks again and is the authority.
    """
    if limit is None:
        return
    try:
        size = stored_size(value)
    except ValueError as exc:
        raise _unstorable(what, exc) from None
    if size > limit:
        raise _too_large(size, what, limit)


def checked_text(value: Any, what: str, limit: int | None) -> str | None:
    """:func:`check_size`, answering the stored text it measured (None: no limit, so nothing
    was measured), for a caller that needs
    the text too (an activity's result, sent with a decision ahead as its ``result_text``): the
    value is printed once, not once per use."""
    if limit is None:
        return None
    try:
        text = stored_text(value)
    except ValueError as exc:
        raise _unstorable(what, exc) from None
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > limit:
        raise _too_large(size, what, limit)
    return text


def check_storable(value: Any, what: str) -> None:
    """Raise ``PayloadError`` for an encoded value jsonb cannot store (a string holding U+0000
    or a lone surrogate), which the database would refuse with its own error; for a value
    :func:`check_size` does not measure (search attributes)."""
    try:
        stored_text(value)
    except ValueError as exc:
        raise _unstorable(what, exc) from None


def check_text(value: str, what: str) -> str:
    """``value``, a name or id sent as text (a workflow_id, a queue, a signal's name), or
    ``InvalidArgument`` when it holds what PostgreSQL cannot store (U+0000, a lone surrogate):
    the database (or the driver) refused it, and with it the whole call or decision."""
    if "\x00" in value:
        raise InvalidArgument(
            f"{what}: {value!r} holds a NUL character (U+0000), which PostgreSQL cannot store: remove it"
        )
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(
                f"{what}: {value!r} holds a lone surrogate, which PostgreSQL cannot store: remove it"
            ) from None
    return value


def _unstorable(what: str, exc: ValueError) -> PayloadNotStorable:
    return PayloadNotStorable(
        f"{what} cannot be stored: PostgreSQL's {exc}; remove it from the string, or pass "
        "binary data as bytes, which are sent base64-encoded"
    )


def _too_large(size: int, what: str, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"{what} is {size} bytes, over the payload limit of {limit} bytes: {PAYLOAD_HINT}", what, size, limit
    )


def _is_pydantic_model(obj: Any) -> bool:
    base = _BaseModel or _base_model()
    return base is not None and isinstance(obj, base)


def _is_pydantic_class(tp: Any) -> bool:
    base = _BaseModel or _base_model()
    return base is not None and isinstance(tp, type) and issubclass(tp, base)


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


# --------------------------------------------------------------------------- encode


# Stands for the arguments' array above an argument (encode's ``argument``): the array a call's
# arguments are stored in is a level of its input, which the database bounds whole.
_ARGUMENTS = object()


def encode(value: Any, path: str = "value", *, argument: bool = False) -> Any:
    """Return a JSON-compatible copy of ``value`` or raise ``PayloadError`` naming the path.
    ``argument``: one of a call's arguments, whose array counts as a level of the depth bound."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value  # JSON already (what _encode returns for them, without its checks)
    if not value and (kind is dict or kind is list):
        return {} if kind is dict else []  # (a start's empty search attributes: _encode's copy)
    try:
        return _encode(value, path, {id(_ARGUMENTS)} if argument else set())
    except RecursionError:  # (two frames a level: a list 500 deep, which JSON parsers still read)
        raise PayloadError(f"{path}: nested too deep to encode: flatten it") from None


def _encode(value: Any, path: str, active: set[int]) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return _encode(value.value, path, active)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"{path}: cannot encode non-finite float {value!r}")
        return float(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if _is_pydantic_model(value):
        try:
            return value.model_dump(mode="json")
        except Exception as exc:  # pydantic raises its own serialization errors
            raise PayloadError(f"{path}: cannot encode {type(value).__name__}: {exc}") from exc
    marker = id(value)
    if marker in active:
        raise PayloadError(f"{path}: cannot encode a circular reference")
    if len(active) >= MAX_JSON_DEPTH:  # (``active``: the containers above this one)
        shown = path if len(path) <= 80 else path[:80] + "..."
        raise PayloadError(
            f"{shown}: arrays and objects nest deeper than {MAX_JSON_DEPTH} levels: flatten the value, "
            "or send a deep structure as a string (every reader of a stored value walks it to its bottom)"
        )
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        active.add(marker)
        try:
            return {
                f.name: _encode(getattr(value, f.name), _key_path(path, f.name), active)
                for f in dataclasses.fields(value)
            }
        finally:
            active.discard(marker)
    if isinstance(value, Mapping):
        active.add(marker)
        try:
            out = {}
            for key, item in value.items():
                if isinstance(key, enum.Enum) and isinstance(key.value, str):
                    key = key.value
                if not isinstance(key, str):
                    raise PayloadError(
                        f"{path}: cannot encode dict key {key!r} of type "
                        f"{type(key).__name__} (keys must be str)"
                    )
                out[key] = _encode(item, _key_path(path, key), active)
            return out
        finally:
            active.discard(marker)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
        if isinstance(value, (set, frozenset)):
            try:  # a set's iteration order differs between processes: sort it
                items = sorted(items)
            except TypeError:
                pass
        active.add(marker)
        try:
            return [_encode(item, f"{path}[{i}]", active) for i, item in enumerate(items)]
        finally:
            active.discard(marker)
    if inspect.isawaitable(value):  # `ctx.execute_activity(...)` or a client call without await
        raise PayloadError(f"{path}: cannot encode a coroutine: did you forget `await`?")
    raise PayloadError(f"{path}: cannot encode object of type {type(value).__name__}: {_ENCODABLE}")


# What a PayloadError for an unknown type tells the caller to pass instead.
_ENCODABLE = (
    "pass JSON values (str, int, float, bool, None, lists, dicts with str keys), dataclasses, "
    "pydantic models, enums, datetimes, UUIDs, Decimals or bytes, or convert it yourself "
    "(docs/activities.md#payloads)"
)


# --------------------------------------------------------------------------- decode


def decode(value: Any, type_hint: Any = Any, path: str = "value") -> Any:
    """Rebuild a value of ``type_hint`` from its JSON form (``Any`` returns it as-is)."""
    return _decode(value, type_hint, path)


def _fail(path: str, expected: str, value: Any) -> PayloadError:
    return PayloadError(f"{path}: expected {expected}, got {type(value).__name__} {value!r:.80}")


# Hints whose JSON form is the value itself: a value of exactly that type decodes to itself.
_JSON_SCALARS = frozenset({int, str, bool, float})


def _decode(value: Any, tp: Any, path: str) -> Any:
    if type(value) is tp and tp in _JSON_SCALARS:
        return value  # what _decode_class returns for them, without the walk of the hint
    if (
        tp is Any
        or (tp is None and value is None)
        or tp is inspect.Parameter.empty
        or tp is object
        or isinstance(tp, typing.TypeVar)
    ):
        return value
    if tp is None or tp is type(None):
        if value is not None:
            raise _fail(path, "null", value)
        return None
    if isinstance(tp, str):  # an unresolved forward reference: nothing to go on
        return value
    supertype = getattr(tp, "__supertype__", None)  # typing.NewType
    if supertype is not None:
        return _decode(value, supertype, path)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _decode(value, args[0], path)
    if origin is typing.Union or origin is types.UnionType:
        return _decode_union(value, args, path)
    if origin is typing.Literal:
        if value in args:
            return value
        for allowed in args:  # an enum member (Literal[Color.RED]) is written as its value
            if isinstance(allowed, enum.Enum) and _written_as(allowed) == value:
                return allowed
        raise _fail(path, f"one of {list(args)!r}", value)
    if origin is not None:
        return _decode_generic(value, origin, args, path)
    if isinstance(tp, type):
        return _decode_class(value, tp, path)
    return value


def _written_as(member: enum.Enum) -> Any:
    """What ``encode`` writes for an enum member (``_ABSENT`` when it cannot be written)."""
    try:
        return encode(member, "value")
    except PayloadError:
        return _ABSENT


def _decode_union(value: Any, args: tuple[Any, ...], path: str) -> Any:
    if value is None and type(None) in args:
        return None
    candidates = [a for a in args if a is not type(None)]
    errors = []
    for candidate in candidates:
        try:
            return _decode(value, candidate, path)
        except PayloadError as exc:
            errors.append(str(exc))
    if len(errors) == 1:
        raise PayloadError(errors[0])
    raise PayloadError(f"{path}: no member of the union accepts it ({'; '.join(errors)})")


def _decode_generic(value: Any, origin: Any, args: tuple[Any, ...], path: str) -> Any:
    if isinstance(origin, type) and issubclass(origin, Mapping):
        if not isinstance(value, dict):
            raise _fail(path, "object", value)
        key_tp, val_tp = args if len(args) == 2 else (Any, Any)
        return {
            _decode_key(k, key_tp, path): _decode(v, val_tp, _key_path(path, k)) for k, v in value.items()
        }
    if origin is tuple:
        if not isinstance(value, list):
            raise _fail(path, "array", value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
        if args and len(args) != len(value):
            raise PayloadError(f"{path}: expected an array of {len(args)} items, got {len(value)}")
        hints = args or (Any,) * len(value)
        return tuple(
            _decode(v, h, f"{path}[{i}]") for i, (v, h) in enumerate(zip(value, hints, strict=False))
        )
    if isinstance(origin, type) and issubclass(origin, Iterable) and not issubclass(origin, (str, bytes)):
        if not isinstance(value, list):
            raise _fail(path, "array", value)
        inner = args[0] if args else Any
        items = [_decode(v, inner, f"{path}[{i}]") for i, v in enumerate(value)]
        if issubclass(origin, frozenset):
            return frozenset(items)
        if issubclass(origin, AbstractSet):
            return set(items)
        return items
    if origin is type:
        return value
    return _decode(value, origin, path)


def _decode_key(key: str, tp: Any, path: str) -> Any:
    if tp in (Any, str):
        return key
    try:
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return tp(key)
        if tp is int:
            return int(key)
    except ValueError as exc:
        raise PayloadError(f"{path}: bad key {key!r} for {tp.__name__}") from exc
    return _decode(key, tp, path)


def _decode_class(value: Any, tp: type, path: str) -> Any:
    if tp is bool:
        if not isinstance(value, bool):
            raise _fail(path, "bool", value)
        return value
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise _fail(path, "int", value)
        return value
    if tp is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _fail(path, "number", value)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _fail(path, "string", value)
        return value
    if typing.is_typeddict(tp):
        return _decode_typeddict(value, tp, path)
    if getattr(tp, "_is_protocol", False) and not getattr(tp, "_is_runtime_protocol", False):
        # A protocol says what a value can do, not how to rebuild it (and isinstance refuses
        # one not runtime_checkable with a TypeError): nothing to go on, as for a TypeVar.
        return value
    if isinstance(value, tp) and not isinstance(value, (list, dict)):
        return value  # already the right type (e.g. an in-process value)
    if issubclass(tp, tuple) and hasattr(tp, "_fields"):
        return _decode_namedtuple(value, tp, path)
    if issubclass(tp, (bytes, bytearray)):
        try:
            return tp(base64.b64decode(_need_str(value, path, "base64 string"), validate=True))
        except binascii.Error as exc:
            raise PayloadError(
                f"{path}: cannot decode {value!r:.80} as {tp.__name__} (base64): {exc}"
            ) from None
    try:
        if issubclass(tp, enum.Enum):
            return tp(value)
        if issubclass(tp, _dt.datetime):
            return tp.fromisoformat(_need_str(value, path, "ISO datetime"))
        if issubclass(tp, _dt.date):
            text = _need_str(value, path, "ISO date")
            if issubclass(_dt.datetime, tp) and len(text) > 10:
                # A datetime is a date (ctx.now() for a `-> date`): written with its time, which
                # date.fromisoformat refuses; read back as the datetime it was.
                return _dt.datetime.fromisoformat(text)
            return tp.fromisoformat(text)
        if issubclass(tp, _dt.time):
            return tp.fromisoformat(_need_str(value, path, "ISO time"))
        if issubclass(tp, uuid.UUID):
            return tp(_need_str(value, path, "UUID string"))
        if issubclass(tp, Decimal):
            return tp(str(value))
        if issubclass(tp, _dt.timedelta):
            return tp(seconds=cast(float, value))
    except PayloadError:
        raise
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise PayloadError(f"{path}: cannot decode {value!r:.80} as {tp.__name__}: {exc}") from exc
    if _is_pydantic_class(tp):
        try:
            return cast(Any, tp).model_validate(value, **_VALIDATE_BY_NAME)
        except Exception as exc:
            raise PayloadError(f"{path}: cannot decode as {tp.__name__}: {exc}") from exc
    if dataclasses.is_dataclass(tp):
        return _decode_dataclass(value, tp, path)
    if tp in (list, tuple, set, frozenset, dict):
        return _decode_generic(value, tp, (), path)
    return value


def _need_str(value: Any, path: str, what: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, what, value)
    return value


def _decode_namedtuple(value: Any, tp: type, path: str) -> Any:
    """A NamedTuple from its array (how it is encoded) or an object of its fields."""
    hints = _safe_hints(tp)
    fields: tuple[str, ...] = tp._fields  # type: ignore[attr-defined]
    defaults: dict[str, Any] = getattr(tp, "_field_defaults", {})
    if isinstance(value, list):
        if len(value) > len(fields):
            raise PayloadError(
                f"{path}: {tp.__name__} has {len(fields)} fields, got an array of {len(value)}"
            )
        value = dict(zip(fields, value, strict=False))
    if not isinstance(value, dict):
        raise _fail(path, f"array or object for {tp.__name__}", value)
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise PayloadError(f"{path}: {tp.__name__} has no field(s) {unknown}")
    items = {}
    for name in fields:
        if name in value:
            items[name] = _decode(value[name], hints.get(name, Any), _key_path(path, name))
        elif name not in defaults:
            raise PayloadError(f"{_key_path(path, name)}: missing field of {tp.__name__}")
    return tp(**items)


def _decode_typeddict(value: Any, tp: type, path: str) -> Any:
    """A TypedDict: an object whose keys are decoded by its hints; required keys must be there."""
    if not isinstance(value, dict):
        raise _fail(path, f"object for {tp.__name__}", value)
    hints = _safe_hints(tp)
    # From the resolved hints: under `from __future__ import annotations` the class cannot see
    # a NotRequired[...] written as a string, so its __required_keys__ lists every key.
    total = getattr(tp, "__total__", True)
    required = [
        key
        for key, hint in hints.items()
        if typing.get_origin(hint) is typing.Required
        or (total and typing.get_origin(hint) is not typing.NotRequired)
    ]
    missing = sorted(k for k in required if k not in value)
    if missing:
        raise PayloadError(f"{path}: missing key(s) {missing} of {tp.__name__}")
    return {
        key: _decode(item, _unwrap_required(hints.get(key, Any)), _key_path(path, key))
        for key, item in value.items()
    }


def _unwrap_required(tp: Any) -> Any:
    """``Required[X]`` / ``NotRequired[X]`` / ``ReadOnly[X]`` of a TypedDict key: ``X``."""
    while (
        typing.get_origin(tp) in (typing.Required, typing.NotRequired)
        or getattr(typing.get_origin(tp), "_name", None) == "ReadOnly"
    ):
        tp = typing.get_args(tp)[0]
    return tp


def type_name(tp: Any) -> str:
    """A type hint as a person writes it (``int``, ``list[Order]``, ``date | None``)."""
    if tp is Any or tp is inspect.Parameter.empty:
        return "Any"
    if tp is None or tp is type(None):
        return "None"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return f"Literal[{', '.join(map(repr, args))}]"
    if origin is not None:
        inner = ", ".join("..." if a is Ellipsis else type_name(a) for a in args)
        return f"{getattr(origin, '__name__', repr(origin))}[{inner}]"
    if isinstance(tp, type):
        return tp.__qualname__
    return repr(tp).replace("typing.", "")


def _decode_dataclass(value: Any, tp: type, path: str) -> Any:
    if not isinstance(value, dict):
        raise _fail(path, f"object for {tp.__name__}", value)
    hints = _safe_hints(tp)
    kwargs: dict[str, Any] = {}
    late: dict[str, Any] = {}
    for f in dataclasses.fields(tp):
        if f.name not in value:
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            if f.init and not has_default:
                raise PayloadError(f"{_key_path(path, f.name)}: missing field of {tp.__name__}")
            continue
        decoded = _decode(value[f.name], hints.get(f.name, Any), _key_path(path, f.name))
        (kwargs if f.init else late)[f.name] = decoded
    obj = tp(**kwargs)
    for name, decoded in late.items():
        object.__setattr__(obj, name, decoded)
    return obj


# --------------------------------------------------------------------------- functions


@functools.lru_cache(maxsize=4096)
def _safe_hints(obj: Any) -> dict[str, Any]:
    """Resolved type hints, or the raw ones where a forward reference cannot be resolved.

    Cached: resolving hints costs more than the JSON work of a small payload, and a
    function's annotations do not change. Callers must not mutate the result.
    """
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except (NameError, TypeError, AttributeError, SyntaxError):
        raw = getattr(obj, "__annotations__", {}) or {}
        return {k: (Any if isinstance(v, str) else v) for k, v in raw.items()}


@functools.lru_cache(maxsize=4096)
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    """Cached: building a signature costs more than encoding a small payload."""
    return inspect.signature(fn)


def _params(fn: Callable[..., Any]) -> tuple[inspect.Parameter, ...]:
    """The parameters after the first (the ``ctx``)."""
    return _call_plan(fn).params


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclasses.dataclass(frozen=True)
class _CallPlan:
    """What ``encode_args`` and ``decode_args`` need of a function, worked out once per
    function (``_call_plan``) instead of on every call: its parameters after the ``ctx``,
    their hints, and whether a plain positional call can skip ``Signature.bind``."""

    params: tuple[inspect.Parameter, ...]
    hints: tuple[Any, ...]  # each parameter's resolved hint, Any where it has none
    # When every parameter, the ctx included, is an ordinary positional one: how many follow
    # the ctx (a call with `required` to `positional` positional arguments binds them in
    # order and leaves the rest to their defaults). None: the call goes through bind.
    positional: int | None
    required: int  # the leading parameters after the ctx up to the last one without a default


@functools.lru_cache(maxsize=4096)
def _call_plan(fn: Callable[..., Any]) -> _CallPlan:
    every = tuple(_signature(fn).parameters.values())
    params = every[1:]
    hints = _safe_hints(fn)
    plain = bool(every) and all(p.kind in _POSITIONAL for p in every)
    required = max((i + 1 for i, p in enumerate(params) if p.default is p.empty), default=0)
    return _CallPlan(
        params=params,
        hints=tuple(hints.get(p.name, Any) for p in params),
        positional=len(params) if plain else None,
        required=required,
    )


def _encode_items(values: tuple[Any, ...] | list[Any], path: str) -> list[Any]:
    """``encode`` of each value at ``path[i]`` (the path is only built for a value that is
    not JSON already)."""
    out: list[Any] = []
    for i, value in enumerate(values):
        kind = type(value)
        if kind is str or kind is int or kind is bool or value is None:
            out.append(value)
        else:
            out.append(encode(value, f"{path}[{i}]", argument=True))
    return out


def param_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    plan = _call_plan(fn)
    return {p.name: hint for p, hint in zip(plan.params, plan.hints, strict=True)}


def return_hint(fn: Callable[..., Any] | None) -> Any:
    if fn is None:
        return Any
    return _safe_hints(fn).get("return", Any)


_NO_KWARGS: Mapping[str, Any] = types.MappingProxyType({})


def encode_args(
    fn: Callable[..., Any] | None,
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    path: str = "input",
) -> list[Any]:
    """Encode a call's arguments (``ctx`` excluded) as the positional JSON array of the wire.

    Keyword arguments are placed at their parameter's position; skipped parameters before a
    supplied one get their default, trailing defaults are left out so decode applies them.
    """
    kwargs = dict(kwargs) if kwargs else _NO_KWARGS  # (read only until bind below copies it)
    if fn is None:
        if kwargs:
            raise TypeError(
                f"keyword arguments need the function to place them: got {sorted(kwargs)} without a function"
            )
        return _encode_items(args, path)
    plan = _call_plan(fn)
    if not kwargs and plan.positional is not None and plan.required <= len(args) <= plan.positional:
        # What bind and the loop below give for this call: the arguments in order, the
        # parameters after them left to their defaults.
        return _encode_items(args, path)
    params = plan.params
    try:
        bound = _signature(fn).bind(None, *args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"bad arguments for {getattr(fn, '__name__', fn)}: {exc}") from None
    values: list[Any] = []
    pending: list[Any] = []  # defaults that are only needed if a later argument is given
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            if bound.arguments.get(p.name):
                raise TypeError(f"{fn.__name__}: **{p.name} cannot be sent over the wire")
            continue
        if p.kind is p.VAR_POSITIONAL:
            values.extend(pending)
            pending = []
            values.extend(bound.arguments.get(p.name, ()))
            continue
        if p.name in bound.arguments:
            values.extend(pending)
            pending = []
            values.append(bound.arguments[p.name])
        else:
            pending.append(p.default)
    return _encode_items(values, path)


def decode_args(fn: Callable[..., Any] | None, json_args: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Turn the wire's JSON array back into ``(args, kwargs)`` typed by ``fn``'s hints."""
    if json_args is None:
        json_args = []
    if not isinstance(json_args, list):
        raise PayloadError(f"input: expected a JSON array of arguments, got {type(json_args).__name__}")
    if fn is None:
        return tuple(json_args), {}
    plan = _call_plan(fn)
    if plan.positional is not None and plan.required <= len(json_args) <= plan.positional:
        # A plain positional call (encode_args' fast path): when each value is a JSON scalar of
        # its hint's own type (or the hint is Any), _decode would return it as it is, and the
        # loop below would take them in order and leave the rest to their defaults.
        hints = plan.hints
        for i, value in enumerate(json_args):
            hint = hints[i]
            if hint is not Any and (type(value) is not hint or hint not in _JSON_SCALARS):
                break
        else:
            return tuple(json_args), {}
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    i = 0
    for p, hint in zip(plan.params, plan.hints, strict=True):
        if p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is p.VAR_POSITIONAL:
            args.extend(_decode(v, hint, f"input[{j}]") for j, v in enumerate(json_args[i:], start=i))
            i = len(json_args)
            continue
        if i >= len(json_args):
            if p.default is p.empty:  # (a *args parameter took the rest above)
                raise PayloadError(f"input: missing argument {p.name!r} of {getattr(fn, '__name__', fn)}")
            continue
        try:
            value = _decode(json_args[i], hint, f"input[{i}]")
        except PayloadError as exc:
            raise PayloadError(
                f"parameter {p.name!r} of {getattr(fn, '__name__', fn)} ({type_name(hint)}): {exc}"
            ) from None
        if p.kind is p.KEYWORD_ONLY:
            kwargs[p.name] = value
        else:
            args.append(value)
        i += 1
    if i < len(json_args):
        raise PayloadError(
            f"input: {getattr(fn, '__name__', fn)} takes {i} argument(s), got {len(json_args)}"
        )
    return tuple(args), kwargs


def encode_checked_args(fn: Callable[..., Any], args: tuple[Any, ...], what: str) -> list[Any]:
    """``encode_args(fn, args)`` of a positional call, checked against ``fn``'s hints: raises
    at the call the ``PayloadError`` the worker's ``decode_args`` would raise for it (``"abc"``
    for an ``int``, a dict missing a dataclass's field), after ``what`` (``activity charge``)
    and what to do. A value of its hint's own type (or under ``Any``) round-trips and is not
    decoded again: on the plain path the check is one type test an argument, in the loop that
    encodes them (a dataclass's own field values are then the worker's to check). Any other
    value is asked its hint's fit test (``_fit_tests``: a JSON value the decode accepts as it
    is, such as an ``int`` for ``float`` or ``int | None``, a list of ``str`` for ``list[str]``,
    an object for ``dict[str, Any]``); only a value no test vouches for is decoded."""
    plan = _call_plan(fn)
    if plan.positional is None or not plan.required <= len(args) <= plan.positional:
        encoded = encode_args(fn, args)
        _decodes(fn, encoded, what)
        return encoded
    hints = plan.hints
    out: list[Any] = []
    fits = True
    tests: tuple[Callable[[Any], bool] | None, ...] | None = None
    for i, value in enumerate(args):
        kind = type(value)
        if kind is str or kind is int or kind is bool or value is None:  # (_encode_items)
            encoded = value
        else:
            encoded = encode(value, f"input[{i}]", argument=True)
        out.append(encoded)
        if fits and kind is not hints[i] and hints[i] is not Any:
            if tests is None:
                tests = _fit_tests(fn)
            test = tests[i]
            fits = test is not None and test(encoded)
    if not fits:
        _decodes(fn, out, what)
    return out


@functools.lru_cache(maxsize=4096)
def _fit_tests(fn: Callable[..., Any]) -> tuple[Callable[[Any], bool] | None, ...]:
    """Each parameter's fit test (``_fit_test`` of its hint, after the ``ctx``), worked out once
    per function: a predicate of an encoded argument that answers True only when ``_decode``
    accepts it, or None when only the decode can tell."""
    tests: list[Callable[[Any], bool] | None] = []
    for hint in _call_plan(fn).hints:
        try:
            test = _fit_test(hint)
        except Exception:  # an odd hint: the decode, as before, judges it
            test = None
        if test is _FITS_ALL:
            tests.append(_always)
        elif isinstance(test, frozenset):
            tests.append(_type_in(test))
        else:
            tests.append(test)
    return tuple(tests)


_FITS_ALL: Any = object()  # _fit_test: every value fits (Any, object, a TypeVar, ...)
# _fit_test's JSON scalars: the exact types of a JSON value _decode_class accepts as it is.
_FIT_TYPES: dict[Any, frozenset[type]] = {
    int: frozenset({int}),
    str: frozenset({str}),
    bool: frozenset({bool}),
    float: frozenset({int, float}),  # an int is a number (decoded as float(value))
    None: frozenset({type(None)}),
    type(None): frozenset({type(None)}),
}


def _always(value: Any) -> bool:
    return True


def _type_in(types_: frozenset[type]) -> Callable[[Any], bool]:
    def test(value: Any) -> bool:
        return type(value) in types_

    return test


def _fit_test(tp: Any) -> Any:
    """What a JSON value must be for ``_decode(value, tp)`` to accept it, where that is cheap to
    ask: ``_FITS_ALL``, the frozenset of the exact types it may have, or a predicate; None when
    only the decode can tell (a dataclass, a Literal, a datetime, a fixed tuple, a key not a
    str). A test may say no to a value the decode takes (``1.0`` for ``int``): the decode then
    judges it; it never says yes to one the decode refuses."""
    if tp is Any or tp is object or tp is inspect.Parameter.empty or isinstance(tp, (typing.TypeVar, str)):
        return _FITS_ALL  # (a str: an unresolved forward reference, taken as it is)
    try:
        scalar = _FIT_TYPES.get(tp)
    except TypeError:  # (an unhashable hint)
        scalar = None
    if scalar is not None:
        return scalar
    supertype = getattr(tp, "__supertype__", None)  # typing.NewType
    if supertype is not None:
        return _fit_test(supertype)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _fit_test(args[0])
    if origin is typing.Union or origin is types.UnionType:
        return _fit_union([_fit_test(a) for a in args])
    if not isinstance(origin, type):
        return None
    if issubclass(origin, Mapping):
        key_tp, val_tp = args if len(args) == 2 else (Any, Any)
        if key_tp is not Any and key_tp is not str:  # (_decode_key takes any key for these)
            return None
        return _fit_container(dict, dict.values, _fit_test(val_tp))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _fit_container(list, None, _fit_test(args[0]))
        return None
    if issubclass(origin, Iterable) and not issubclass(origin, (str, bytes)):
        return _fit_container(list, None, _fit_test(args[0] if args else Any))
    return None


def _fit_union(tests: list[Any]) -> Any:
    """A union fits a value one of its members fits (``_decode_union`` tries each member);
    members only the decode can judge are left to it."""
    if any(t is _FITS_ALL for t in tests):
        return _FITS_ALL
    scalars = frozenset().union(*(t for t in tests if isinstance(t, frozenset)))
    others = [t for t in tests if t is not None and not isinstance(t, frozenset)]
    if not others:
        return scalars or None
    if not scalars:
        return lambda value: any(t(value) for t in others)
    return lambda value: type(value) in scalars or any(t(value) for t in others)


def _fit_container(kind: type, items: Any, item_test: Any) -> Any:
    """A JSON array (``kind`` list) or object (dict, its values by ``items``) each of whose
    items fits ``item_test``: one set of the items' types for scalars, not a call an item."""
    if item_test is None:
        return None
    each: Callable[[Any], Iterable[Any]] = items if items is not None else iter

    def holds(value: Any) -> bool:
        return isinstance(value, kind)

    def holds_scalars(value: Any) -> bool:
        return isinstance(value, kind) and set(map(type, each(value))) <= item_test

    def holds_fits(value: Any) -> bool:
        return isinstance(value, kind) and all(map(item_test, each(value)))

    if item_test is _FITS_ALL:
        return holds
    return holds_scalars if isinstance(item_test, frozenset) else holds_fits


def _decodes(fn: Callable[..., Any], encoded: list[Any], what: str) -> None:
    try:
        decode_args(fn, encoded)
    except PayloadError as exc:
        raise PayloadError(
            f"{what}: {exc}; no worker can run this call: fix the arguments passed (or the annotations)"
        ) from None


def decode_result(fn: Callable[..., Any] | None, value: Any) -> Any:
    """Decode a result by ``fn``'s return annotation (raw JSON when there is none)."""
    hint = _safe_hints(fn).get("return", Any) if fn is not None else Any  # return_hint(fn)
    if type(value) is hint and hint in _JSON_SCALARS:
        return value  # (_decode's first test, without the call: a replay decodes every result)
    try:
        return _decode(value, hint, "result")
    except PayloadError as exc:
        raise PayloadError(
            f"the result of {getattr(fn, '__name__', fn)} ({type_name(hint)}): {exc}"
        ) from None


def encode_result(value: Any) -> Any:
    return encode(value, "result")


def encode_details(details: Any) -> Any:
    """A failure's ``details`` as JSON: encoded as any payload is, or ``{"repr": repr(details)}``
    when they cannot be (an ``ActivityFailure`` raised with a set or an object): a failure is
    reported whatever its details hold, by an activity, a local activity or workflow code."""
    try:
        return encode(details, "details")
    except PayloadError:
        return {"repr": repr(details)}


# -- what a payload is: the fields erasure replaces and redaction hides ------------------------
# The same fields as functions/payloads.sql's _erase_payload_fields (and erase_payloads for a
# run's output); test_payloads.py::test_redaction_hides_exactly_the_fields_erasure_erases holds
# the two equal.
PAYLOAD_FIELDS = frozenset(
    {"input", "result", "payload", "arg", "answer", "details", "traceback", "heartbeat_details", "output"}
)
# A marker's ``value`` is a payload only for these kinds: a version or mutex marker's is the
# engine's own (the SQL reads it).
PAYLOAD_MARKERS = frozenset({"side_effect"})
# A marker whose ``value`` is an outcome: a local activity's, ``{name, result}`` or ``{name,
# failure}`` (harvest/runtime/local.py), or a DAG task's that did not run, ``{task, state[,
# failure, reused_from]}`` (harvest/runtime/dags.py): its result and its failure's payloads are
# payloads as a queued activity's are (encoded, offloaded, erased, redacted); its name, task and
# state are not (the replay and get_dag_run read them), nor its failure's error_type and message.
# functions/payloads.sql, _erase_payload_fields, names the same kinds.
OUTCOME_MARKERS = frozenset({"local_activity", "dag_node"})
# A payload an answer shows under a name of its own, read from a field above (erasing the field
# erases it): a DAG run's conf, its run's input (functions/dags.sql, get_dag_run); a schedule's
# args, its stored input (harvest.declare.schedules.schedule_view). Each key, and the key that
# says its holder is one.
PAYLOAD_COPIES = {"conf": "dag_name", "args": "max_active_runs"}


def _is_payload(holder: Mapping[str, Any], key: str) -> bool:
    return (
        key in PAYLOAD_FIELDS
        or (key == "value" and holder.get("kind") in PAYLOAD_MARKERS)
        or (key in PAYLOAD_COPIES and PAYLOAD_COPIES[key] in holder)
    )


# -- redaction: what an operator sees of payloads by default (CLI history, dashboard) --------
_REF_KEY = "_harvest_ref"  # codecs.REF_KEY and ERASED (codecs imports this module)
_ERASED = {"_harvest_erased": True}


def _erased(value: Any) -> bool:
    """An erased payload: the marker, or an input's arguments each erased."""
    return value == _ERASED or (isinstance(value, list) and bool(value) and all(v == _ERASED for v in value))


def _ref_bytes(value: Any) -> int | None:
    if isinstance(value, dict) and _REF_KEY in value and isinstance(value.get("bytes"), int):
        return int(value["bytes"])
    return None


def _stored_bytes(value: Any) -> int:
    """The length of a payload's JSON text, an offloaded one's as its reference records it; an
    input's arguments are offloaded each on its own, so each of its references counts so too."""
    own = _ref_bytes(value)
    if own is not None:
        return own
    size = len(json.dumps(value, default=json_default).encode())
    for arg in value if isinstance(value, list) else ():
        ref = _ref_bytes(arg)
        if ref is not None:
            size += ref - len(json.dumps(arg).encode())
    return size


def redact(value: Any) -> Any:
    """Replace every payload value (``PAYLOAD_FIELDS`` and a side effect's value, at any depth)
    by its size: ``{"redacted": true, "bytes": n}``, n the length of its JSON text (of an
    offloaded payload, the size its reference records, not the reference's). An erased payload
    stays the erasure's marker: it holds nothing, and it has no size to give."""
    if isinstance(value, dict):
        out = {}
        for key, inner in value.items():
            if _erased(inner):
                out[key] = inner
            elif inner is not None and _is_payload(value, key):
                out[key] = {"redacted": True, "bytes": _stored_bytes(inner)}
            else:
                out[key] = redact(inner)
        return out
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value
