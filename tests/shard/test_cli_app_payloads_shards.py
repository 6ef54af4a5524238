"""`--app` on a sharded deployment: the command reads the run where it lives and reads its
offloaded payloads back from that shard's store through the App's Payloads (docs/payloads.md,
"A key-holding CLI")."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from click.testing import CliRunner

from harvest import App, Client, workflow
from harvest.cli.main import main
from harvest.core.codecs import AesGcmCodec, Payloads, ZlibCodec
from harvest.shard import ShardPools, ShardRouter

pytestmark = pytest.mark.shard

KEY = hashlib.sha256(b"cli-app-shards").digest()
SECRET = "PLAINTEXT-IBAN-DE89-3704"


@workflow
async def parked(ctx, record: dict) -> None:  # never run: its input is what the test reads
    await ctx.wait_for_signal("never")


# `--app test_cli_app_payloads_shards:KEYED` (tests/shard is on sys.path).
CODECS = Payloads([ZlibCodec(), AesGcmCodec({"s1": KEY})], offload_bytes=256)
KEYED = App([parked], [], codecs=CODECS)


def test_get_and_export_decode_a_run_on_another_shard_and_read_its_offloaded_input(shards, tmp_path) -> None:
    router = ShardRouter([0, 1, 2], [0, 1, 2], 0)
    big = {"ssn": SECRET, "pad": os.urandom(600).hex()}  # over offload_bytes once encrypted
    with ShardPools(router, shards.dsns, max_size=2) as pools, Client(shards=pools, codecs=CODECS) as client:
        handle = client.start_workflow(parked, big, workflow_id="iban-1", shard_id=2)
    eid = handle.execution_id
    with shards.connect(2) as conn:
        row = conn.execute("SELECT input::text FROM harvest.executions WHERE id = %s", (eid,)).fetchone()
    stored = row[0]
    assert "_harvest_ref" in stored and SECRET not in stored

    env = {
        "HARVEST_DATABASE_URL": "",
        "HARVEST_URL": "",
        "HARVEST_SHARDS__READABLE": "0,1,2",
        "HARVEST_SHARDS__WRITABLE": "0,1,2",
        **{f"HARVEST_SHARDS__URLS__{s}": shards.dsns[s] for s in (0, 1, 2)},
    }
    app = ("--app", f"{__name__}:KEYED")
    r = CliRunner().invoke(main, ["workflow", "get", eid, *app, "-o", "json"], env=env)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["input"] == [big]
    r = CliRunner().invoke(main, ["workflow", "get", eid, "-o", "json"], env=env)  # no keys: a reference
    assert r.exit_code == 0 and SECRET not in r.stdout and "<offloaded" in r.stdout, r.output

    out = tmp_path / "export.json"
    args = ["history", "export", eid, "--payload-policy", "full", "--output-file", str(out), *app]
    r = CliRunner().invoke(main, args, env=env)
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["execution"]["input"] == [big]
