"""The pure codec chain (harvest/core/codecs.py, docs/payloads.md): envelopes, rotation, keys."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from harvest.core.codecs import (
    AesGcmCodec,
    CodecChain,
    Payloads,
    ZlibCodec,
    describe,
    describe_tree,
    map_command,
    refs_in,
    replace_refs,
)
from harvest.core.errors import PayloadError, PayloadKeyMissing

K1, K2 = os.urandom(32), os.urandom(32)
SECRET = {"card": "4111-1111-1111-1111", "name": "Ada"}


def test_envelope_is_self_describing_and_round_trips():
    chain = CodecChain([ZlibCodec(), AesGcmCodec({"k1": K1})])
    stored = chain.encode(SECRET)
    assert set(stored) == {"_harvest_codec", "data"}
    assert stored["_harvest_codec"] == ["zlib", "aesgcm:k1"]
    assert "4111" not in json.dumps(stored) and "Ada" not in json.dumps(stored)
    assert chain.decode(stored) == SECRET
    assert describe(stored) == "encrypted (key k1)"


def test_rotation_old_payloads_stay_readable_and_a_removed_key_is_named():
    old = CodecChain([AesGcmCodec({"k1": K1})]).encode(SECRET)
    rotated = CodecChain([AesGcmCodec({"k1": K1, "k2": K2})])  # the last key is the active one
    new = rotated.encode(SECRET)
    assert new["_harvest_codec"] == ["aesgcm:k2"]
    assert rotated.decode(old) == SECRET and rotated.decode(new) == SECRET
    only_k2 = CodecChain([AesGcmCodec({"k2": K2})])
    assert only_k2.decode(new) == SECRET
    with pytest.raises(PayloadKeyMissing) as caught:
        only_k2.decode(old)
    assert caught.value.key_id == "k1"
    assert "'k1'" in str(caught.value) and "\n" not in str(caught.value)


def test_a_codec_whose_current_key_it_does_not_hold_names_it_when_it_encodes():
    codec = AesGcmCodec({"k1": K1})
    codec.active = "k2"  # (set after it was made: the constructor refuses it)
    with pytest.raises(PayloadKeyMissing) as caught:
        CodecChain([codec]).encode(SECRET)
    assert (caught.value.key_id, caught.value.known) == ("k2", ["k1"])


def test_a_process_without_codecs_names_the_key_and_still_reads_zlib():
    plain = CodecChain()
    assert plain.encode("x") == "x"  # (a chain without codecs writes no envelope)
    assert plain.decode(CodecChain([ZlibCodec()]).encode([1, 2])) == [1, 2]
    with pytest.raises(PayloadKeyMissing, match="'k9'"):
        plain.decode(CodecChain([AesGcmCodec({"k9": K1})]).encode(1))


def test_wrong_key_bytes_or_tampering_is_a_payload_error():
    stored = CodecChain([AesGcmCodec({"k1": K1})]).encode(SECRET)
    with pytest.raises(PayloadError, match="does not decrypt"):
        CodecChain([AesGcmCodec({"k1": K2})]).decode(stored)


def test_args_stay_an_array_and_commands_encode_only_their_payloads():
    chain = CodecChain([AesGcmCodec({"k1": K1})])
    args = chain.encode_args([1, {"a": 2}, None])
    assert isinstance(args, list) and len(args) == 3 and args[2] is None
    cmd = {"type": "schedule_activity", "seq": 1, "name": "charge", "input": [SECRET]}
    out = chain.encode_command(cmd)
    assert out["name"] == "charge" and out["seq"] == 1 and chain.decode(out["input"][0]) == SECRET
    fail = chain.encode_command(
        {"type": "fail_workflow", "failure": {"error_type": "Boom", "message": "m", "details": SECRET}}
    )
    assert fail["failure"]["error_type"] == "Boom"
    assert describe(fail["failure"]["details"]) == "encrypted (key k1)"
    version = {"type": "record_marker", "kind": "version", "value": {"change_id": "c", "version": 2}}
    assert chain.encode_command(version) == version  # read by the SQL: stays plain
    side = chain.encode_command({"type": "record_marker", "kind": "side_effect", "value": 7})
    assert chain.decode(side["value"]) == 7


def test_decode_tree_decodes_envelopes_anywhere_and_describe_tree_hides_them():
    chain = CodecChain([AesGcmCodec({"k1": K1})])
    event = {"event_type": "ActivityCompleted", "event_data": {"seq": 1, "result": chain.encode(SECRET)}}
    assert chain.decode_tree(event)["event_data"]["result"] == SECRET
    assert describe_tree(event)["event_data"]["result"] == "<encrypted (key k1)>"


def test_refs_are_collected_and_replaced():
    value = {"a": [{"_harvest_ref": "x", "bytes": 9}], "b": {"_harvest_ref": "y"}}
    assert refs_in(value) == ["x", "y"]
    assert replace_refs(value, {"x": 1}) == {"a": [1], "b": {"_harvest_ref": "y"}}


def test_redaction_sizes_an_inputs_offloaded_argument_by_what_its_reference_records():
    # An input is an array of arguments, each encoded and each offloaded on its own: its size is
    # the array's with every reference counted as the payload it stands for (docs/payloads.md,
    # "Exports and the replayer"), as a whole offloaded payload's is, not the references' text.
    from harvest.core.payload import redact

    ref = {"_harvest_ref": "adf0f96c-7e10-46ce-ae25-46d09f5113b8", "bytes": 6201}
    plain = {"a": 1}
    data = {"input": [ref, plain], "result": ref}
    out = redact(data)
    assert out["result"] == {"redacted": True, "bytes": 6201}
    assert out["input"] == {"redacted": True, "bytes": len(json.dumps(["", plain])) - 2 + 6201}
    assert redact({"input": [plain]})["input"]["bytes"] == len(json.dumps([plain]))


def test_marked_finds_an_envelope_or_a_reference_at_any_depth_and_nothing_else():
    from harvest.core.codecs import is_marked

    envelope = CodecChain([ZlibCodec()]).encode("x" * 100)
    assert "_harvest_codec" in envelope
    for found in (
        envelope,
        {"_harvest_ref": "r"},
        [1, "a", {"b": [None, {"c": envelope}]}],
        {"events": [{"event_data": {"seq": 1}}, {"event_data": {"result": [[{"_harvest_ref": "r"}]]}}]},
        [[], {}, [[[envelope]]]],
    ):
        assert is_marked(found) is True, found
    for plain in (
        None,
        3,
        "_harvest_codec",
        [],
        {},
        [3],
        [1, "_harvest_ref", 2.5, True, None],
        {"a": "_harvest_codec", "b": {"c": ["_harvest_ref"]}},
        ("_harvest_ref", {"_harvest_ref": "r"}),  # a tuple is not JSON: not walked, as before
        {"a": ({"_harvest_codec": 1},)},
        [{"seq": i, "options": {"retry": {"non_retryable_errors": []}}} for i in range(50)],
    ):
        assert is_marked(plain) is False, plain


def test_decode_hands_back_an_unmarked_value_itself():
    value = [{"event_id": 1, "event_data": {"seq": 1, "input": [3]}}]
    assert asyncio.run(Payloads(CodecChain([ZlibCodec()])).decode(None, value)) is value


class _MemoryStore:
    def __init__(self):
        self.rows = {}

    async def put(self, sql, execution_id, values):
        ids = []
        for v in values:
            ids.append(f"id{len(self.rows)}")
            self.rows[ids[-1]] = v
        return ids

    async def get(self, sql, ids):
        return {i: self.rows[i] for i in ids if i in self.rows}


def test_offload_keeps_small_payloads_inline_and_resolves_large_ones():
    store = _MemoryStore()
    policy = Payloads([ZlibCodec()], offload_bytes=100, store=store)
    big = os.urandom(200).hex()  # random: zlib cannot shrink it under the threshold
    commands = [
        {"type": "schedule_activity", "seq": 1, "name": "a", "input": ["small", big]},
        {"type": "complete_workflow", "result": "tiny"},
    ]
    out = asyncio.run(policy.encode_commands(None, "e1", commands))
    assert out[0]["input"][1] == {"_harvest_ref": "id0", "bytes": out[0]["input"][1]["bytes"]}
    assert out[0]["input"][0]["_harvest_codec"] == ["zlib"]
    assert len(store.rows) == 1
    assert asyncio.run(policy.decode(None, out)) == commands
    # What another execution reads (maybe on another shard) is encoded, never offloaded.
    crossing = [
        {"type": "start_child_workflow", "seq": 2, "workflow_name": "c", "input": [big]},
        {"type": "signal_external_workflow", "seq": 3, "signal_name": "s", "payload": big},
        {"type": "continue_as_new", "input": [big]},
    ]
    out = asyncio.run(policy.encode_commands(None, "e1", crossing))
    assert len(store.rows) == 1 and out[0]["input"][0]["_harvest_codec"] == ["zlib"]
    assert out[1]["payload"]["_harvest_codec"] == ["zlib"] and out[2]["input"][0]["_harvest_codec"] == [
        "zlib"
    ]


def test_a_failures_large_details_and_traceback_are_offloaded_in_one_store_round_trip():
    calls = []

    class CountingStore(_MemoryStore):
        async def put(self, sql, execution_id, values):
            calls.append(len(values))
            return await super().put(sql, execution_id, values)

    policy = Payloads([ZlibCodec()], offload_bytes=100, store=CountingStore())
    big = os.urandom(200).hex()
    failure = {"error_type": "E", "message": "m", "details": big, "traceback": big + "!"}
    out = asyncio.run(policy.encode_failure(None, "e1", failure))
    assert calls == [2] and out["error_type"] == "E" and out["message"] == "m"
    assert out["details"]["_harvest_ref"] != out["traceback"]["_harvest_ref"]
    assert asyncio.run(policy.decode(None, out)) == failure
    small = {"error_type": "E", "message": "m", "details": "tiny", "traceback": None}
    out = asyncio.run(policy.encode_failure(None, "e1", small))
    assert calls == [2] and out["details"]["_harvest_codec"] == ["zlib"] and out["traceback"] is None


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError):
        AesGcmCodec({})
    with pytest.raises(ValueError):
        AesGcmCodec({"k1": b"short"})
    with pytest.raises(ValueError):
        AesGcmCodec({"k1": K1}, active="k2")
    with pytest.raises(ValueError):
        Payloads(offload_bytes=1)
    timer = {"type": "start_timer", "seq": 1}
    assert map_command(timer, lambda v: 1 / 0) == timer  # no payload in it


def test_a_dag_tasks_marker_has_its_failures_payloads_encoded_and_its_task_plain():
    """A DAG task that did not run records its failure in a dag_node marker: its details and
    traceback are payloads as a local activity's failure's are (they were left in plain text)."""
    marker = {
        "type": "record_marker",
        "seq": 4,
        "kind": "dag_node",
        "value": {
            "task": "t",
            "state": "failed",
            "failure": {"error_type": "E", "message": "m", "details": {"k": 1}, "traceback": "T"},
            "reused_from": "r",
        },
    }
    out = map_command(marker, lambda v: ["enc", v])
    assert out["value"] == {
        "task": "t",
        "state": "failed",
        "failure": {
            "error_type": "E",
            "message": "m",
            "details": ["enc", {"k": 1}],
            "traceback": ["enc", "T"],
        },
        "reused_from": "r",
    }
    skipped = {"type": "record_marker", "seq": 5, "kind": "dag_node"}
    skipped["value"] = {"task": "u", "state": "skipped"}
    assert map_command(skipped, lambda v: 1 / 0) == skipped


def test_a_key_given_as_text_is_refused_saying_to_decode_it_without_echoing_it():
    """A hex key read from the environment and passed as it is (docs/payloads.md decodes it with
    bytes.fromhex) was refused as not "16, 24 or 32 bytes", though its 32 characters are."""
    hex_key = "0f" * 16
    with pytest.raises(ValueError) as refused:
        AesGcmCodec({"k1": hex_key})
    assert "is a str, not bytes" in str(refused.value) and "bytes.fromhex" in str(refused.value)
    assert hex_key not in str(refused.value)


def test_codecs_that_are_not_a_list_are_refused_saying_what_they_take() -> None:
    """App(codecs=ZlibCodec()) (one codec, not a list) raised "'ZlibCodec' object is not
    iterable" from inside the chain."""
    from harvest import App
    from harvest.core.codecs import ZlibCodec

    for given in (ZlibCodec(), 5):
        with pytest.raises(TypeError, match=r"codecs=\.\.\.: takes a list of codecs or a Payloads"):
            App(codecs=given)


def _bomb(json_bytes: int, layers: int) -> dict:
    """An envelope of ``layers`` zlib layers over a JSON string of about ``json_bytes`` bytes
    (a string of one repeated letter, which zlib shrinks a thousandfold a layer)."""
    import base64
    import zlib

    deflate = zlib.compressobj(9)
    chunk = b"a" * (1 << 20)
    data = deflate.compress(b'"') + b"".join(deflate.compress(chunk) for _ in range(json_bytes >> 20))
    data += deflate.compress(b'"') + deflate.flush()
    for _ in range(layers - 1):
        data = zlib.compress(data, 9)
    return {"_harvest_codec": ["zlib"] * layers, "data": base64.b64encode(data).decode()}


def test_a_zlib_bomb_is_refused_at_the_bound_not_inflated() -> None:
    """Every process decodes zlib, and an envelope is only JSON that anyone who may start or
    signal can write: a few kB of two zlib layers inflated to a gigabyte in a worker or the API.
    Each layer stops at max_decoded_bytes (by default MAX_DECODED_BYTES), and an envelope lists
    at most MAX_CODEC_LAYERS codecs."""
    import tracemalloc

    from harvest.core import codecs

    bomb = _bomb(96 << 20, 2)  # 96 MiB, over the default 64 MiB
    assert len(json.dumps(bomb)) < 200_000
    for chain in (CodecChain([]), CodecChain([ZlibCodec()])):
        with pytest.raises(PayloadError, match=r"decompresses to more than 67108864 bytes"):
            chain.decode(bomb)
    small = CodecChain([ZlibCodec(max_decoded_bytes=1 << 20)])
    big = _bomb(64 << 20, 2)
    tracemalloc.start()
    try:
        with pytest.raises(PayloadError, match="more than 1048576 bytes"):
            small.decode(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak  # (about the bound, twice at most: never the 64 MiB)
    assert small.decode(_bomb(0, 2)) == ""  # a small one still decodes through two layers
    assert CodecChain([ZlibCodec(max_decoded_bytes=None)]).decode(_bomb(2 << 20, 1)) == "a" * (2 << 20)
    nested = {**_bomb(0, 1), "_harvest_codec": ["zlib"] * (codecs.MAX_CODEC_LAYERS + 1)}
    with pytest.raises(PayloadError, match="lists 9 codecs, more than 8"):
        CodecChain([]).decode(nested)
    # A truncated zlib stream is refused, not decoded to the part that came.
    cut = CodecChain([ZlibCodec()]).encode("x" * 100)
    import base64
    import zlib

    cut["data"] = base64.b64encode(base64.b64decode(cut["data"])[:-4]).decode()
    with pytest.raises(PayloadError, match="incomplete or truncated"):
        CodecChain([]).decode(cut)
    deep = CodecChain([ZlibCodec()]).encode("x")
    deep["data"] = base64.b64encode(zlib.compress(b"[" * 200_000 + b"]" * 200_000)).decode()
    with pytest.raises(PayloadError, match="nested too deep"):  # (a RecursionError before)
        CodecChain([]).decode(deep)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="max_decoded_bytes"):
            ZlibCodec(max_decoded_bytes=bad)


def test_a_payload_past_the_zlib_bound_says_how_to_read_it_and_the_api_hands_it_on() -> None:
    """A payload stored before the bound can decompress past it (a 65 MiB repetitive result is
    about 64 kB stored): the refusal says how to read it (a larger bound in the App's ZlibCodec,
    the CLI's --app), and the keyless face (the management API), which cannot be given another
    bound, answers it as stored, as an encrypted one, for its caller to decode."""
    from harvest.core.codecs import KeylessChain
    from harvest.core.errors import PayloadTooLargeToDecode

    stored = _bomb(65 << 20, 1)
    with pytest.raises(PayloadTooLargeToDecode, match=r"max_decoded_bytes=None.*--app"):
        CodecChain([]).decode(stored)
    assert KeylessChain().decode(stored) is stored
    assert KeylessChain().decode_tree({"output": stored}) == {"output": stored}
    assert len(CodecChain([ZlibCodec(max_decoded_bytes=None)]).decode(stored)) == 65 << 20


def test_a_key_path_under_codecs_is_refused_where_it_would_never_resolve():
    """A flow-control key path reads the input the database holds; codecs store each argument as
    an envelope, so `input.tenant` never resolved and the gate silently never applied (a keyed
    rate limit made no bucket). App(codecs=...) and Worker(codecs=...) refuse the pair, naming it."""
    from harvest import App, Concurrency, RateLimit, Worker, activity, workflow
    from harvest.core.errors import ConfigError

    @activity(rate_limit=RateLimit(rps=5, key="input.tenant"))
    async def keyed_sync(ctx, job: dict) -> None: ...

    @workflow(concurrency=Concurrency(key="input.tenant", limit=2))
    async def keyed_flow(ctx, order: dict) -> None: ...

    @activity(rate_limit=RateLimit(rps=5))  # one bucket: no key to read
    async def plain_sync(ctx, job: dict) -> None: ...

    named = r"activity 'keyed_sync' rate_limit key 'input.tenant' reads the input"
    with pytest.raises(ConfigError, match=named):
        App(activities=[keyed_sync], codecs=[ZlibCodec()])
    first = r"workflow 'keyed_flow' concurrency key 'input.tenant'.*\(and 1 more\)"
    with pytest.raises(ConfigError, match=first):
        App(workflows=[keyed_flow], activities=[keyed_sync], codecs=Payloads([ZlibCodec()]))
    App(activities=[plain_sync], codecs=[ZlibCodec()])  # no key path: fine
    App(activities=[keyed_sync], codecs=Payloads(offload_bytes=1024))  # no codec: keys resolve
    plain = App(workflows=[keyed_flow])
    with pytest.raises(ConfigError, match=r"^Worker\(codecs=\.\.\.\): workflow 'keyed_flow'"):
        Worker(plain, "postgresql://unused/x", codecs=[ZlibCodec()])
