"""Erasure walks every residence of a moved run (docs/payloads.md "On shards"): on three real
PostgreSQL servers, a run moved 0 -> 1 -> 2 leaves sealed copies holding its payloads on shards 0
and 1; `harvest workflow erase-payloads` judges the gates on the live copy (shard 2) and scrubs
all three. And `history export-batch` reads every shard, partial when one is down."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from rebalance_helpers import RunningWorker, authoritative, row, scalar, wait_until
from starlette.testclient import TestClient

from harvest import App, Client, workflow
from harvest.cli.main import main as cli
from harvest.config import load_config
from harvest.shard import ShardPools, ShardRouter
from harvest.shard.rebalance import Rebalancer
from harvest.web.app import management_app

pytestmark = pytest.mark.shard

ALL = [0, 1, 2]
SECRET = "PLAINTEXT-ERASE-ME-4242"


@workflow
async def pe_parked(ctx, record: dict) -> dict:
    value = await ctx.wait_for_signal("go")
    return {"record": record, "value": value}


APP = App(workflows=[pe_parked])


def _cli(shards, *args: str) -> tuple[int, str]:
    env = {"HARVEST_DATABASE_URL": shards.dsns[0]}
    env.update({f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()})
    result = CliRunner().invoke(cli, [*args, "--output", "json"], env=env)
    return result.exit_code, result.output


def _holds_secret(dsn: str, execution_id: str) -> bool:
    text = scalar(
        dsn,
        "SELECT coalesce((SELECT input::text || coalesce(output::text, '') FROM harvest.executions"
        " WHERE id = %s), '') || coalesce((SELECT string_agg(event_data::text, ' ') FROM harvest.events"
        " WHERE execution_id = %s), '')",
        execution_id,
        execution_id,
    )
    return SECRET in text


def _parked_run(shards, workflow_id: str) -> str:
    """A run of pe_parked holding SECRET, started on shard 0 and parked there (its first
    workflow task completed), its worker gone."""
    with RunningWorker(APP, shards.dsns[0]), Client(shards.dsns[0]) as client:
        execution_id = client.start_workflow(pe_parked, {"ssn": SECRET}, workflow_id=workflow_id).execution_id
        wait_until(
            lambda: (
                scalar(
                    shards.dsns[0],
                    "SELECT count(*) FROM harvest.events"
                    " WHERE execution_id = %s AND event_type = 'WorkflowTaskCompleted'",
                    execution_id,
                )
                >= 1
            ),
            what="the run parked on shard 0",
        )
    return execution_id


def test_erasure_scrubs_the_live_run_and_every_sealed_copy_it_left(shards) -> None:
    execution_id = _parked_run(shards, "pe-moved")
    with ShardPools(ShardRouter(ALL, ALL, 0), shards.dsns, max_size=4) as pools:
        for source, target in ((0, 1), (1, 2)):
            move = Rebalancer(pools, source, target, operator_id="ops@test").move(execution_id)
            assert move.outcome == "moved", move
        assert authoritative(shards.dsns, execution_id) == [2]
        assert all(_holds_secret(shards.dsns[s], execution_id) for s in ALL), "every residence holds it"

        # Open on its live shard: refused, although each seal reads as terminal.
        code, out = _cli(shards, "workflow", "erase-payloads", execution_id)
        assert code == 2 and "only a terminal execution" in out, out
        with RunningWorker(APP, shards.dsns[2]), Client(shards=pools) as client:
            client.get_handle(execution_id).signal("go", SECRET)
            assert client.get_handle(execution_id).result(timeout=60)["value"] == SECRET

    code, out = _cli(shards, "workflow", "legal-hold", "set", execution_id, "--reason", "case 9")
    assert code == 0, out
    code, out = _cli(shards, "workflow", "erase-payloads", execution_id)
    assert code == 2 and "legal hold" in out, out
    assert all(_holds_secret(shards.dsns[s], execution_id) for s in ALL), "a refusal changes nothing anywhere"
    assert _cli(shards, "workflow", "legal-hold", "release", execution_id)[0] == 0

    code, out = _cli(shards, "workflow", "erase-payloads", execution_id, "--operator-id", "dpo")
    assert code == 0, out
    summary = json.loads(out)
    assert summary["shard_id"] == 2 and summary["status"] == "COMPLETED"
    assert sorted(p["shard_id"] for p in summary["prior_residences"]) == [0, 1]
    assert not any(_holds_secret(shards.dsns[s], execution_id) for s in ALL), "no residence holds it"
    assert row(shards.dsns[0], execution_id)["status"] == "MIGRATED", "the seals stay seals"


def test_a_legal_hold_moves_with_its_run(shards) -> None:
    """A hold set before a move goes with the run: once the moved run has ended, erasure is
    refused on its live shard (and so nowhere scrubbed), the seal keeps no hold of its own, and
    the hold is released where the run lives."""
    execution_id = _parked_run(shards, "pe-held")
    code, out = _cli(shards, "workflow", "legal-hold", "set", execution_id, "--reason", "case 11")
    assert code == 0, out
    with ShardPools(ShardRouter(ALL, ALL, 0), shards.dsns, max_size=4) as pools:
        move = Rebalancer(pools, 0, 1, operator_id="ops@test").move(execution_id)
        assert move.outcome == "moved", move
        with RunningWorker(APP, shards.dsns[1]), Client(shards=pools) as client:
            client.get_handle(execution_id).signal("go", SECRET)
            assert client.get_handle(execution_id).result(timeout=60)["value"] == SECRET
    held = "SELECT count(*) FROM harvest.legal_holds WHERE execution_id = %s"
    assert scalar(shards.dsns[1], held, execution_id) == 1 and scalar(shards.dsns[0], held, execution_id) == 0
    code, out = _cli(shards, "workflow", "erase-payloads", execution_id)
    assert code == 2 and "legal hold" in out, out
    assert _holds_secret(shards.dsns[0], execution_id) and _holds_secret(shards.dsns[1], execution_id)
    code, out = _cli(shards, "workflow", "legal-hold", "release", execution_id)
    assert code == 0 and json.loads(out)["released"] is True, out
    code, out = _cli(shards, "workflow", "erase-payloads", execution_id)
    assert code == 0, out
    assert not _holds_secret(shards.dsns[0], execution_id) and not _holds_secret(shards.dsns[1], execution_id)


def test_export_batch_reads_every_shard_and_a_missing_shard_makes_it_partial(shards, tmp_path) -> None:
    """`history export-batch` over three servers: one export per shard; with shard 2 stopped the
    batch is written with status partial, shard_coverage naming shard 2, and exit 1."""
    ids = {}
    for shard in ALL:
        with Client(shards.dsns[shard]) as client:
            handle = client.start_workflow(
                "pe_batch", shard, workflow_id=f"pe-batch-{shard}", queue="pe_none"
            )
            handle.terminate("done")
            ids[shard] = handle.execution_id
    env = {"HARVEST_DATABASE_URL": shards.dsns[0]}
    env.update({f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()})
    out = tmp_path / "batch.json"
    args = [
        "history",
        "export-batch",
        "--workflow-name",
        "pe_batch",
        "--payload-policy",
        "full",
        "--output-file",
        str(out),
    ]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 0, result.output
    batch = json.loads(out.read_text())
    assert batch["status"] == "complete" and batch["shard_coverage"] == {"read": ALL, "unavailable": []}
    assert sorted((e["shard_id"], e["execution_id"]) for e in batch["exports"]) == sorted(ids.items())
    # The route streams the same document, each export read on its own shard.
    served = {
        "HARVEST_SHARDS__READABLE": "0,1,2",
        "HARVEST_SHARDS__WRITABLE": "0,1,2",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()},
    }
    with TestClient(management_app(config=load_config(env=served), profile="dev")) as api:
        answer = api.get(
            "/history/export-batch", params={"workflow_name": "pe_batch", "payload_policy": "full"}
        )
    assert answer.status_code == 200 and answer.json() == batch, answer.text

    shards.stop(2)
    try:
        result = CliRunner().invoke(cli, args, env={**env, "HARVEST_SHARDS__CLI_TIMEOUT": "2"})
    finally:
        shards.start(2)
    assert result.exit_code == 1, result.output
    batch = json.loads(out.read_text())
    assert batch["status"] == "partial" and batch["shard_coverage"] == {"read": [0, 1], "unavailable": [2]}
    assert sorted(e["shard_id"] for e in batch["exports"]) == [0, 1]
