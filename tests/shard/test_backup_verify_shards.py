"""`harvest backup verify` over three real PostgreSQL servers: every shard is dumped from its own
exported snapshot and restored into a scratch database on its own server; a parent on shard 0
waiting on its child on shard 1 verifies (and replays), the guide's warning about restoring every
shard to one instant is printed; a child lost on its shard (what a skewed restore produces) is
caught from the parent's side with exit 1; no scratch database is left on any server."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner
from cross_shard_helpers import SHARDS, clients, enable_cross_shard_relays, shard_workers, wait_for

from harvest import App, ChildPlacement, workflow
from harvest.cli.main import main as cli
from harvest.core.ids import shard_of
from harvest.db.backup import SCRATCH_PREFIX

pytestmark = pytest.mark.shard


@workflow
async def bvs_sleeper(ctx) -> None:
    await ctx.wait_for_signal("never")


@workflow
async def bvs_parent(ctx) -> None:
    await ctx.execute_child_workflow(bvs_sleeper, placement=ChildPlacement.shard(1))


APP = App(workflows=[bvs_sleeper, bvs_parent])


def _verify(shards, *args: str) -> tuple[int, dict | None, str]:
    env = {"HARVEST_DATABASE_URL": shards.dsns[0]}
    env.update({f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()})
    result = CliRunner().invoke(cli, ["backup", "verify", "--output", "json", *args], env=env)
    try:
        data = json.loads(result.stdout)
    except ValueError:
        data = None
    return result.exit_code, data, result.output


def _status(shards, shard: int, execution_id: str) -> str | None:
    with shards.connect(shard) as conn:
        row = conn.execute("SELECT status FROM harvest.executions WHERE id = %s", (execution_id,)).fetchone()
        return row[0] if row else None


def _lifecycle(shards, child: str) -> str | None:
    """The parent shard's (shard 0) lifecycle row for a cross-shard child."""
    with shards.connect(0) as conn:
        row = conn.execute(
            "SELECT status FROM harvest.cross_shard_children WHERE child_execution_id = %s", (child,)
        ).fetchone()
        return row[0] if row else None


def test_shards_verify_together_and_a_lost_remote_child_is_caught(shards) -> None:
    enable_cross_shard_relays(shards)
    with shard_workers(APP, shards), clients(shards) as c:
        parent = c[0].start_workflow(bvs_parent)
        child = wait_for(
            lambda: next(
                (
                    e["event_data"]["child_execution_id"]
                    for e in c[0].get_handle(parent.execution_id).history()
                    if e["event_type"] == "ChildWorkflowStarted"
                ),
                None,
            ),
            what="the child started",
        )
        assert shard_of(child) == 1
        wait_for(lambda: _status(shards, 1, child) == "RUNNING", what="child running")
        # The relay marks the parent's lifecycle row started after the child exists; a row still
        # 'starting' when the workers stop is (rightly) never checked, so wait for the mark.
        wait_for(lambda: _lifecycle(shards, child) == "running", what="the lifecycle row marked running")
    code, data, output = _verify(shards, "--app", "test_backup_verify_shards:APP")
    assert code == 0, output
    assert (
        data["shards"] == list(SHARDS) and data["replay"]["failed"] == 0 and data["replay"]["replayed"] >= 2
    )
    assert "restore every shard to the same instant" in output and data["warning"]

    with psycopg.connect(shards.dsns[1], autocommit=True) as conn:
        conn.execute("DELETE FROM harvest.executions WHERE id = %s", (child,))
    code, data, output = _verify(shards)
    assert code == 1, output
    assert [(p["check"], p["execution_id"], p["shard"]) for p in data["problems"]] == [
        ("cross_shard_child", parent.execution_id, 0)
    ]
    for shard in SHARDS:
        with shards.connect(shard) as conn:
            left = conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE %s", (SCRATCH_PREFIX + "%",)
            )
            assert left.fetchall() == []
