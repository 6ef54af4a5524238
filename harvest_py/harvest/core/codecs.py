"""Payload codecs: a chain of byte transforms applied to every stored payload (docs/payloads.md).

A payload (a workflow's input argument, a result, a signal/query/update payload, a failure's
``details``) is JSON. With a codec chain configured, it is stored as a self-describing envelope::

    {"_harvest_codec": ["zlib", "aesgcm:k2"], "data": "<base64>"}

``_harvest_codec`` lists the codecs applied, first to last, so any process can say what a
payload is (``describe``: "encrypted (key k2)") and a process holding the key decodes it,
whichever key is current for new writes. Decoding goes the other way, last codec first.

Two other markers share the reserved ``_harvest_`` keys: an offloaded payload's reference
``{"_harvest_ref": "<id>", "bytes": n}`` (the payload itself lives in an offload store, see
``PayloadStore``) and an erased payload ``{"_harvest_erased": true}``.

This module is pure: the chain is bytes in, bytes out; the offload store is a protocol whose
default implementation (``SqlPayloadStore``) calls the SQL API object it is given.
"""

from __future__ import annotations

import base64
import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, cast, runtime_checkable

from harvest.core.errors import PayloadError, PayloadKeyMissing, PayloadTooLargeToDecode
from harvest.core.payload import OUTCOME_MARKERS, PAYLOAD_MARKERS

__all__ = [
    "CODEC_KEY",
    "ERASED_KEY",
    "REF_KEY",
    "AesGcmCodec",
    "Codec",
    "CodecChain",
    "KeylessChain",
    "PayloadStore",
    "SqlPayloadStore",
    "Undecodable",
    "ZlibCodec",
    "describe",
    "is_envelope",
    "is_erased",
    "is_marked",
    "is_ref",
    "refs_in",
    "undecodable_path",
]

CODEC_KEY = "_harvest_codec"
REF_KEY = "_harvest_ref"
# What one zlib layer of an envelope may decompress to by default (ZlibCodec(max_decoded_bytes=)):
# the management API's largest body. Every process decodes zlib, keyless or not (a worker, the
# API, the CLI), and an envelope is only JSON, which anyone who may start or signal can write: a
# 2.4 kB envelope of two zlib layers decompressed to 1 GiB, three to a terabyte.
MAX_DECODED_BYTES = 64 * 1024 * 1024
# The codecs one envelope may list: a chain is a few (compress, then encrypt); each layer is
# bounded, and so is their number.
MAX_CODEC_LAYERS = 8
ERASED_KEY = "_harvest_erased"
ERASED: dict[str, Any] = {ERASED_KEY: True}


@runtime_checkable
class Codec(Protocol):
    """One byte transform. ``encode`` returns the tag it writes into the envelope (``"zlib"``,
    ``"aesgcm:k2"``) with the bytes; ``decode`` is given that tag back. Either raises
    ``PayloadKeyMissing`` naming the key it lacks (``encode``: the one it would write with)."""

    def encode(self, data: bytes) -> tuple[str, bytes]: ...

    def handles(self, tag: str) -> bool: ...

    def decode(self, tag: str, data: bytes) -> bytes: ...


class ZlibCodec:
    """Compression (zlib, ``level`` 1-9). Keyless: every process decodes ``zlib``, at most
    ``max_decoded_bytes`` a layer (:data:`MAX_DECODED_BYTES`; None: unbounded), past which a
    payload is a ``PayloadError``, not decompressed further."""

    def __init__(self, level: int = 6, max_decoded_bytes: int | None = MAX_DECODED_BYTES):
        if not isinstance(level, int) or not 0 <= level <= 9:
            raise ValueError(f"ZlibCodec level must be 0-9, got {level!r}")
        if max_decoded_bytes is not None and (
            not isinstance(max_decoded_bytes, int)
            or isinstance(max_decoded_bytes, bool)
            or max_decoded_bytes < 1
        ):
            raise ValueError(
                f"ZlibCodec max_decoded_bytes must be a positive int or None, got {max_decoded_bytes!r}"
            )
        self.level = level
        self.max_decoded_bytes = max_decoded_bytes

    def encode(self, data: bytes) -> tuple[str, bytes]:
        return "zlib", zlib.compress(data, self.level)

    def handles(self, tag: str) -> bool:
        return tag == "zlib"

    def decode(self, tag: str, data: bytes) -> bytes:
        most = self.max_decoded_bytes
        inflate = zlib.decompressobj()
        try:
            # (one byte past the bound says it is over, without inflating the rest)
            out = inflate.decompress(data) if most is None else inflate.decompress(data, most + 1)
        except zlib.error as exc:
            raise PayloadError(f"a zlib payload is corrupt: {exc}") from None
        if most is not None and len(out) > most:
            raise PayloadTooLargeToDecode(
                f"a zlib payload decompresses to more than {most} bytes, the most this process "
                "decodes: not decoded; a payload stored before this bound can be read with a larger "
                "one (App(codecs=[ZlibCodec(max_decoded_bytes=None)]) in the worker, the CLI's --app)"
            )
        if not inflate.eof:
            raise PayloadError("a zlib payload is corrupt: incomplete or truncated stream")
        return out


class AesGcmCodec:
    """Encryption with AES-GCM (the ``cryptography`` package, extra ``crypto``).

    ``keys`` maps a key id to a 16-, 24- or 32-byte key. New payloads are encrypted with
    ``active`` (default: the last key given), so rotating is adding the new key last; a payload
    written under an older key stays readable while that key is in ``keys``. The key id is
    stored in the envelope (``aesgcm:<id>``) and authenticated with the ciphertext.
    """

    def __init__(self, keys: Mapping[str, bytes], active: str | None = None):
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:  # pragma: no cover - exercised only without the extra
            raise ImportError(
                "AesGcmCodec needs the cryptography package: pip install 'harvest-workflows[crypto]'"
            ) from None
        if not keys:
            raise ValueError("AesGcmCodec needs at least one key: keys={'k1': <32 random bytes>}")
        self._aead: dict[str, Any] = {}
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not key_id or ":" in key_id:
                raise ValueError(
                    f"an AesGcmCodec key id must be a non-empty string without ':', got {key_id!r}"
                )
            if isinstance(key, str):  # (never echoed: it is the key)
                raise ValueError(
                    f"AesGcmCodec key {key_id!r} is a str, not bytes: decode it, e.g. "
                    "bytes.fromhex(os.environ[...]) for a hex key"
                )
            if not isinstance(key, (bytes, bytearray)) or len(key) not in (16, 24, 32):
                raise ValueError(f"AesGcmCodec key {key_id!r} must be 16, 24 or 32 bytes")
            self._aead[key_id] = AESGCM(bytes(key))
        self.active = active if active is not None else list(keys)[-1]
        if self.active not in self._aead:
            raise ValueError(
                f"AesGcmCodec active key {self.active!r} is not among the keys {sorted(self._aead)}"
            )

    @property
    def key_ids(self) -> list[str]:
        return list(self._aead)

    def encode(self, data: bytes) -> tuple[str, bytes]:
        aead = self._aead.get(self.active)
        if aead is None:  # (``active`` set after it was made, to a key it does not hold)
            raise PayloadKeyMissing(self.active, sorted(self._aead))
        tag = f"aesgcm:{self.active}"
        nonce = os.urandom(12)
        return tag, nonce + aead.encrypt(nonce, data, tag.encode())

    def handles(self, tag: str) -> bool:
        return tag.startswith("aesgcm:")

    def decode(self, tag: str, data: bytes) -> bytes:
        key_id = tag.partition(":")[2]
        aead = self._aead.get(key_id)
        if aead is None:
            raise PayloadKeyMissing(key_id, sorted(self._aead))
        try:
            return cast("bytes", aead.decrypt(data[:12], data[12:], tag.encode()))
        except Exception:  # cryptography's InvalidTag: wrong key bytes or a tampered payload
            raise PayloadError(
                f"payload encrypted with key {key_id!r} does not decrypt with this process's key {key_id!r}: "
                "the key bytes differ from the ones it was written with, or the payload was altered"
            ) from None


class Undecodable(dict[str, Any]):
    """What a process reads in place of a stored value its JSON parser cannot (one nested past
    about 1000 levels: harvest.db.jsoncodec). An envelope to every walk (``is_marked``), which
    no codec decodes: ``CodecChain.decode`` raises ``PayloadError`` with its ``reason``, so a
    reader that decodes payloads (a worker's task, a client's read) fails on it, never on the
    row that carried it (a claim of other tasks too)."""

    def __init__(self, reason: str):
        super().__init__({CODEC_KEY: ["undecodable"], "data": "", "reason": reason})


def undecodable_path(value: Any, path: str = "") -> str | None:
    """Where the first ``Undecodable`` is in ``value`` (``.event_data.payload``, ``[1]``), its
    first four steps (its depth is the value's, which its error need not spell); None: nowhere.
    A walk without recursion, for a failure's message."""
    level: list[tuple[Any, str, int]] = [(value, path, 0)]
    while level:
        item, where, steps = level.pop()
        if isinstance(item, Undecodable):
            return where or "the value"
        if isinstance(item, dict):
            level.extend((v, _step(where, k, steps), steps + 1) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            level.extend((v, _step(where, i, steps), steps + 1) for i, v in reversed(list(enumerate(item))))
    return None


def _step(where: str, key: str | int, steps: int) -> str:
    if steps >= 4:
        return where if steps > 4 else where + "..."
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if key.isidentifier() else f"{where}[{key!r}]"


def is_envelope(value: Any) -> bool:
    return isinstance(value, dict) and CODEC_KEY in value and "data" in value


def is_ref(value: Any) -> bool:
    return isinstance(value, dict) and REF_KEY in value


def is_erased(value: Any) -> bool:
    return isinstance(value, dict) and value.get(ERASED_KEY) is True


def describe(value: Any) -> str | None:
    """What a stored payload is when it is not plain JSON, for a face to show instead of
    its bytes: ``"encrypted (key k2)"``, ``"compressed"``, ``"offloaded (1234 bytes)"``,
    ``"erased"``; None for a plain value."""
    if is_erased(value):
        return "erased"
    if is_ref(value):
        return f"offloaded ({value.get('bytes', '?')} bytes, ref {value[REF_KEY]})"
    if is_envelope(value):
        tags = [str(t) for t in value.get(CODEC_KEY) or []]
        keys = [t.partition(":")[2] for t in tags if t.startswith("aesgcm:")]
        if keys:
            return f"encrypted (key {keys[-1]})"
        return "encoded (" + ", ".join(tags) + ")" if tags != ["zlib"] else "compressed"
    return None


def describe_tree(value: Any) -> Any:
    """``value`` with every envelope, reference or erased marker replaced by its description
    (a string in angle brackets), for a face without the keys."""
    text = describe(value)
    if text is not None:
        return f"<{text}>"
    if isinstance(value, dict):
        return {k: describe_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [describe_tree(v) for v in value]
    return value


def refs_in(value: Any) -> list[str]:
    """The offload references anywhere in ``value``, in order, each once."""
    return list(dict.fromkeys(str(ref[REF_KEY]) for ref in _each_ref(value)))


def referenced_bytes(value: Any) -> int:
    """The sizes the offload references in ``value`` record (each its payload's, as written),
    summed: about what reading them back holds (a full export's bound on a batch)."""
    total = 0
    for ref in _each_ref(value):
        size = ref.get("bytes")
        total += size if isinstance(size, int) and size > 0 else 0
    return total


def _each_ref(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        if is_ref(value):
            yield value
            return
        for item in value.values():
            yield from _each_ref(item)
    elif isinstance(value, list):
        for item in value:
            yield from _each_ref(item)


def is_marked(value: Any) -> bool:
    """Whether an envelope or a reference is anywhere in ``value`` (a walk that copies nothing).

    A plain loop, not ``any()`` of a generator: a history's walk visits every container of
    every event (about 6 per event), and a generator and its ``any`` cost more than the test."""
    if isinstance(value, dict):
        if CODEC_KEY in value or REF_KEY in value:
            return True
        items: Iterable[Any] = value.values()
    elif isinstance(value, list):
        items = value
    else:
        return False
    for item in items:  # noqa: SIM110 (any() of a generator is what this avoids)
        if isinstance(item, (dict, list)) and is_marked(item):
            return True
    return False


# How many times one offloaded payload is put back into one value read (a run, a page of its
# history). Each offload stores a row of its own, so a history names a row in a place or two
# (the run's input and its WorkflowStarted); a reference is JSON anyone who starts a run or
# sends a signal can write, and 300 copies of one reference to a 1 MB row in a 21 KB input
# were a 600 MB answer on each read (a few thousand, the web process's memory). Past this,
# the same reference stays as it is, unresolved.
REF_REPEATS_RESOLVED = 16


def replace_refs(value: Any, resolved: Mapping[str, Any]) -> Any:
    """``value`` with each reference replaced by its resolved payload (an unresolved one stays),
    one payload put back at most REF_REPEATS_RESOLVED times (in document order)."""
    seen: dict[str, int] = {}

    def replace(item: Any) -> Any:
        if isinstance(item, dict):
            if is_ref(item):
                key = str(item[REF_KEY])
                seen[key] = times = seen.get(key, 0) + 1
                return resolved.get(key, item) if times <= REF_REPEATS_RESOLVED else item
            return {k: replace(v) for k, v in item.items()}
        if isinstance(item, list):
            return [replace(v) for v in item]
        return item

    return replace(value)


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# What each decision command carries that is a payload (the fields the chain encodes). A marker's
# value is a payload only for side effects: version and mutex markers are read by the SQL.
_COMMAND_FIELDS: dict[str, tuple[str, ...]] = {
    "schedule_activity": ("input",),
    "start_child_workflow": ("input",),
    "continue_as_new": ("input",),
    "signal_external_workflow": ("payload",),
    "cancel_workflow": ("details",),
    "complete_workflow": ("result",),
    "complete_update": ("result",),
}
_ARG_LISTS = {"input"}  # an input stays a JSON array (the SQL checks it): each argument is encoded
_FAILURE_COMMANDS = {"fail_workflow": "failure", "complete_update": "failure"}
# Payloads another execution reads (a child's input, an external signal, a continue-as-new
# successor's input), maybe on another shard whose offload store does not hold them, or after
# retention deleted the writer with its offloaded rows: encoded, never offloaded.
_STAYS_INLINE = {"start_child_workflow", "signal_external_workflow", "continue_as_new"}
# A child's end (its result, its failure's or cancellation's details) is copied into its
# parent's history (ChildWorkflowCompleted/Failed), maybe on another shard, and the parent may
# outlive the child's retention or erasure: it stays inline too, as the child's input does.
_CHILD_END_STAYS_INLINE = _STAYS_INLINE | {"complete_workflow", "fail_workflow", "cancel_workflow"}


class CodecChain:
    """An ordered list of codecs applied to payloads; an empty chain leaves payloads as they are
    (and still decodes any ``zlib`` envelope, and names the key of any encrypted one).

    Configured on ``App(codecs=[...])`` (its workers'), ``Worker(codecs=)`` (one worker's) and
    ``Client``/``AsyncClient(codecs=)``.
    """

    def __init__(self, codecs: Iterable[Codec] = ()):
        if isinstance(codecs, Codec) or not isinstance(codecs, Iterable):
            # (codecs=ZlibCodec(): "'ZlibCodec' object is not iterable", from here)
            raise TypeError(f"codecs=...: takes a list of codecs or a Payloads, got {codecs!r}")
        self.codecs: list[Codec] = list(codecs)
        for codec in self.codecs:
            if not isinstance(codec, Codec):
                raise TypeError(f"a codec needs encode, handles and decode methods, got {codec!r}")

    @classmethod
    def of(cls, codecs: CodecChain | Iterable[Codec] | None) -> CodecChain:
        if isinstance(codecs, CodecChain):
            return codecs
        return cls(codecs or ())

    def __bool__(self) -> bool:
        return bool(self.codecs)

    # ------------------------------------------------------------------ one value

    def encode(self, value: Any) -> Any:
        """The envelope of JSON ``value`` (``value`` itself with no codecs, or for None)."""
        if not self.codecs or value is None or is_envelope(value) or is_ref(value) or is_erased(value):
            return value
        data = _json_bytes(value)
        tags = []
        for codec in self.codecs:
            tag, data = codec.encode(data)
            tags.append(tag)
        return {CODEC_KEY: tags, "data": base64.b64encode(data).decode("ascii")}

    def decode(self, value: Any) -> Any:
        """The JSON value inside an envelope (anything else is returned as it is)."""
        if not is_envelope(value):
            return value
        if type(value) is Undecodable:
            raise PayloadError(value["reason"])
        tags = value.get(CODEC_KEY)
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise PayloadError(
                f"a payload envelope's {CODEC_KEY} must be a list of codec names, got {tags!r:.200}"
            )
        if len(tags) > MAX_CODEC_LAYERS:
            raise PayloadError(
                f"a payload envelope lists {len(tags)} codecs, more than {MAX_CODEC_LAYERS}: not decoded"
            )
        try:
            data = base64.b64decode(value["data"], validate=True)
        except (ValueError, TypeError):
            raise PayloadError("a payload envelope's data is not base64") from None
        for tag in reversed(tags):
            data = self._codec_for(tag).decode(tag, data)
        try:
            return json.loads(data.decode("utf-8"))
        except ValueError as exc:
            raise PayloadError(f"a decoded payload is not JSON: {exc}") from None
        except RecursionError:  # (no jsonb holds it, but an envelope's bytes may)
            raise PayloadError("a decoded payload is not JSON: nested too deep") from None

    def _codec_for(self, tag: str) -> Codec:
        for codec in self.codecs:
            if codec.handles(tag):
                return codec
        if tag == "zlib":
            return _ZLIB
        if tag.startswith("aesgcm:"):
            raise PayloadKeyMissing(tag.partition(":")[2], [])
        raise PayloadError(
            f"payload was encoded with codec {tag!r}, which this process has no codec for: "
            "configure the same codecs (App(codecs=...), Client(codecs=...)) as the writer"
        )

    def decode_tree(self, value: Any) -> Any:
        """``value`` with every envelope anywhere inside it decoded (events, rows, failures)."""
        if isinstance(value, dict):
            if is_envelope(value):
                return self.decode(value)
            return {k: self.decode_tree(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.decode_tree(v) for v in value]
        return value

    # ------------------------------------------------------------------ shapes

    def encode_args(self, args: Any) -> Any:
        """A JSON array of arguments with each argument encoded (the array stays an array)."""
        if not isinstance(args, list):
            return self.encode(args)
        return [self.encode(a) for a in args]

    def encode_failure(self, failure: Any) -> Any:
        """A failure with its ``details`` and ``traceback`` encoded (``error_type``, ``message``,
        ``non_retryable`` and ``next_retry_delay`` stay plain: retry policies and dead-letter
        filters read them)."""
        return _map_failure(failure, self.encode) if self.codecs else failure

    def encode_command(self, command: dict[str, Any]) -> dict[str, Any]:
        """A decision command with its payload fields encoded (see ``_COMMAND_FIELDS``)."""
        return map_command(command, self.encode) if self.codecs else command

    def encode_commands(self, commands: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [self.encode_command(c) for c in commands]


class KeylessChain(CodecChain):
    """The chain of a face that holds no keys and hands payloads on (the management API): an
    envelope it cannot decode (an encrypted one) is answered as stored, saying what it is, for
    a caller holding the key to decode (a Client with codecs, the CLI's ``--app``); a ``zlib``
    one is decoded, as every process decodes it, unless it decompresses past the default bound
    (MAX_DECODED_BYTES, which this face cannot be given another of): that one is answered as
    stored too, for a caller whose ZlibCodec allows it (a run's read is not a 400 for it)."""

    def decode(self, value: Any) -> Any:
        try:
            return super().decode(value)
        except (PayloadKeyMissing, PayloadTooLargeToDecode):
            return value


# A failure's payloads: its details, and its traceback (errors.failure_traceback), which quotes
# the messages of the exception's causes: a codec encodes both, never error_type nor message.
FAILURE_PAYLOADS = ("details", "traceback")


def _map_failure(failure: Any, fn: Callable[[Any], Any]) -> Any:
    if not isinstance(failure, dict):
        return failure
    out = failure
    for key in FAILURE_PAYLOADS:
        if out.get(key) is not None:
            out = {**out, key: fn(out[key])}
    return out


def map_command(command: dict[str, Any], fn: Callable[[Any], Any]) -> dict[str, Any]:
    """``command`` with ``fn`` applied to each payload it carries: each argument of an input,
    a result, a signal payload, cancellation details, a failure's details, a side effect's value,
    a local activity's result or failure details, a DAG task's failure details."""
    kind = command.get("type")
    out = command
    for field in _COMMAND_FIELDS.get(kind, ()):  # type: ignore[arg-type]
        value = out.get(field)
        if value is None:
            continue
        if field in _ARG_LISTS and isinstance(value, list):
            out = {**out, field: [a if a is None else fn(a) for a in value]}
        else:
            out = {**out, field: fn(value)}
    failure_field = _FAILURE_COMMANDS.get(kind)  # type: ignore[arg-type]
    if failure_field and failure_field in out:
        out = {**out, failure_field: _map_failure(out[failure_field], fn)}
    if kind == "record_marker" and command.get("kind") in PAYLOAD_MARKERS and out.get("value") is not None:
        out = {**out, "value": fn(out["value"])}
    outcome = out.get("value") if kind == "record_marker" and command.get("kind") in OUTCOME_MARKERS else None
    if isinstance(outcome, dict):  # a local activity's or a DAG task's: its result, its failure's payloads
        out = {**out, "value": _map_outcome(outcome, fn)}
    if kind == "continue_as_new" and out.get("signals"):  # the unread signals the successor takes over
        out = {**out, "signals": [_map_signal(s, fn) for s in out["signals"]]}
    return out


def _map_outcome(outcome: dict[str, Any], fn: Callable[[Any], Any]) -> dict[str, Any]:
    """A local activity's or a DAG task's recorded outcome with ``fn`` applied to its result, or to
    its failure's payloads, as a queued activity's completion or failure has them (its name, task
    and state stay plain: the replay and get_dag_run read them)."""
    if outcome.get("result") is not None:
        outcome = {**outcome, "result": fn(outcome["result"])}
    if "failure" in outcome:
        outcome = {**outcome, "failure": _map_failure(outcome["failure"], fn)}
    return outcome


def _map_signal(signal: Any, fn: Callable[[Any], Any]) -> Any:
    if not isinstance(signal, dict) or signal.get("payload") is None:
        return signal
    return {**signal, "payload": fn(signal["payload"])}


_ZLIB = ZlibCodec()


# ---------------------------------------------------------------------- offload


@runtime_checkable
class PayloadStore(Protocol):
    """Where offloaded payloads live. ``sql`` is the SQL API of the execution's database (the
    default store keeps payloads there, in ``harvest.payloads``); another store may ignore it.

    ``put`` stores each value (JSON, already encoded by the chain) and returns one id per value;
    ``get`` returns id -> value for the ids it holds."""

    async def put(self, sql: Any, execution_id: str | None, values: list[Any]) -> list[str]: ...

    async def get(self, sql: Any, ids: list[str]) -> dict[str, Any]: ...


class SqlPayloadStore:
    """The default offload store: the ``harvest.payloads`` table of the execution's database,
    through ``put_payloads`` / ``get_payloads`` (functions/payloads.sql)."""

    async def put(self, sql: Any, execution_id: str | None, values: list[Any]) -> list[str]:
        return [str(i) for i in await sql.put_payloads(execution_id, values)]

    async def get(self, sql: Any, ids: list[str]) -> dict[str, Any]:
        return cast("dict[str, Any]", await sql.get_payloads(ids))


class _Pending:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


class Payloads:
    """A process's payload policy: its codec chain, and the offload of payloads over
    ``offload_bytes`` (their encoded JSON text) to ``store`` (default ``SqlPayloadStore``).

    The one place a worker or a client encodes what it writes and decodes what it reads:
    ``encode*`` before a payload goes to the database, ``decode*`` (references resolved, then
    envelopes decoded) after it comes back. ``sql`` is the SQL API of the execution's database.
    """

    def __init__(
        self,
        codecs: CodecChain | Iterable[Codec] | None = None,
        *,
        offload_bytes: int | None = None,
        store: PayloadStore | None = None,
    ):
        if offload_bytes is not None and (
            isinstance(offload_bytes, bool) or not isinstance(offload_bytes, int) or offload_bytes < 64
        ):
            raise ValueError(
                f"offload_bytes must be a number of bytes >= 64 (or None), got {offload_bytes!r}"
            )
        self.chain = CodecChain.of(codecs)
        self.offload_bytes = offload_bytes
        self.store: PayloadStore = store if store is not None else SqlPayloadStore()

    @classmethod
    def of(cls, value: Payloads | CodecChain | Iterable[Codec] | None) -> Payloads:
        return value if isinstance(value, Payloads) else cls(value)

    @property
    def active(self) -> bool:
        """Whether writes change anything (codecs or offload configured)."""
        return bool(self.chain.codecs) or self.offload_bytes is not None  # (not CodecChain.__bool__: a call)

    # ------------------------------------------------------------------ writes

    def oversized(self, encoded: Any) -> bool:
        """Whether an already encoded payload goes to the offload store (larger than
        ``offload_bytes`` as JSON text, and not a reference already)."""
        return (
            self.offload_bytes is not None
            and encoded is not None
            and not is_ref(encoded)
            and len(_json_bytes(encoded)) > self.offload_bytes
        )

    @staticmethod
    def reference(stored_id: str, encoded: Any) -> dict[str, Any]:
        """What a history holds in place of an offloaded payload."""
        return {REF_KEY: stored_id, "bytes": len(_json_bytes(encoded))}

    def _marker(self, big: list[Any]) -> Callable[[Any], Any]:
        def mark(value: Any) -> Any:
            value = self.chain.encode(value)
            if (
                self.offload_bytes is not None
                and value is not None
                and not is_ref(value)
                and len(_json_bytes(value)) > self.offload_bytes
            ):
                big.append(value)
                return _Pending(len(big) - 1)
            return value

        return mark

    async def _stored(self, sql: Any, execution_id: str | None, big: list[Any]) -> Callable[[Any], Any]:
        ids = await self.store.put(sql, execution_id, big) if big else []
        refs = [{REF_KEY: i, "bytes": len(_json_bytes(v))} for i, v in zip(ids, big, strict=True)]
        return lambda v: refs[v.index] if isinstance(v, _Pending) else v

    async def encode_commands(
        self, sql: Any, execution_id: str | None, commands: list[dict[str, Any]], *, child: bool = False
    ) -> list[dict[str, Any]]:
        """A decision's commands with their payloads encoded and the large ones offloaded (never
        what another run reads: ``child``, the deciding run is a child, whose end its parent reads)."""
        if not self.active:
            return commands
        inline = _CHILD_END_STAYS_INLINE if child else _STAYS_INLINE
        big: list[Any] = []
        mark = self._marker(big)
        marked = [map_command(c, self.chain.encode if c.get("type") in inline else mark) for c in commands]
        if not big:
            return marked
        fill = await self._stored(sql, execution_id, big)
        return [map_command(c, fill) for c in marked]

    async def encode(self, sql: Any, execution_id: str | None, value: Any) -> Any:
        """One payload, encoded (and offloaded when large)."""
        if not self.active or value is None:
            return value
        big: list[Any] = []
        marked = self._marker(big)(value)
        return (await self._stored(sql, execution_id, big))(marked) if big else marked

    async def encode_failure(self, sql: Any, execution_id: str | None, failure: Any) -> Any:
        """A failure with its payloads encoded, the large ones offloaded in one store round trip."""
        if not self.active or not isinstance(failure, dict):
            return failure
        big: list[Any] = []
        marked = _map_failure(failure, self._marker(big))
        return _map_failure(marked, await self._stored(sql, execution_id, big)) if big else marked

    # ------------------------------------------------------------------ reads

    async def decode(self, sql: Any, value: Any) -> Any:
        """``value`` (a row, an event, a list of them) with every reference resolved and every
        envelope decoded. A reference whose payload is gone stays a reference."""
        if not is_marked(value):  # the common case: nothing to resolve or decode, nothing copied
            return value
        ids = refs_in(value)
        if ids:
            value = replace_refs(value, await self.store.get(sql, ids))
        return self.chain.decode_tree(value)
