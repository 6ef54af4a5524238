"""`harvest shard owner-mode` across three real servers: `on` switches every configured shard
(one audited call each), `--shard-id` one; with a shard stopped, `on` switches the others,
names the stopped one on stderr and exits 1, and `status` does the same."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from harvest.cli.main import main

pytestmark = pytest.mark.shard


def _env(shards) -> dict[str, str]:
    return {
        "HARVEST_DATABASE_URL": "",
        "HARVEST_SHARDS__READABLE": "0,1,2",
        "HARVEST_SHARDS__WRITABLE": "0,1,2",
        **{f"HARVEST_SHARDS__URLS__{s}": shards.dsns[s] for s in (0, 1, 2)},
    }


def _run(shards, *args: str):
    result = CliRunner().invoke(main, ["shard", "owner-mode", *args, "--output", "json"], env=_env(shards))
    return result, json.loads(result.stdout) if result.stdout else None


def _enabled(shards, shard: int) -> bool:
    with shards.connect(shard) as conn:
        return conn.execute("SELECT (harvest.get_owner_mode()->>'enabled')::boolean").fetchone()[0]


def _audited(shards, shard: int) -> list[tuple]:
    with shards.connect(shard) as conn:
        return conn.execute(
            "SELECT target, operator_id FROM harvest.audit_log WHERE operation = 'owner_mode.set'"
        ).fetchall()


def test_on_switches_every_shard_and_a_stopped_one_is_named_with_exit_1(shards) -> None:
    result, data = _run(shards, "on", "--lease-secs", "30", "--operator-id", "ops-alice")
    assert result.exit_code == 0, result.output
    assert [(r["shard_id"], r["enabled"], r["lease_secs"]) for r in data["shards"]] == [
        (0, True, 30),
        (1, True, 30),
        (2, True, 30),
    ]
    assert data["unavailable_shards"] == []
    assert all(_audited(shards, s) == [("on", "ops-alice")] for s in (0, 1, 2))

    result, data = _run(shards, "off", "--shard-id", "1", "--operator-id", "ops-bob")
    assert result.exit_code == 0, result.output
    assert [(r["shard_id"], r["enabled"]) for r in data["shards"]] == [(1, False)]
    assert [_enabled(shards, s) for s in (0, 1, 2)] == [True, False, True]

    shards.stop(2)
    try:
        result, data = _run(shards, "off", "--operator-id", "ops-bob")
        assert result.exit_code == 1
        assert [r["shard_id"] for r in data["shards"]] == [0, 1]
        assert data["unavailable_shards"] == [2]
        assert "shard(s) 2 could not be reached" in result.stderr
        status, data = _run(shards, "status")
        assert status.exit_code == 1 and "shard(s) 2" in status.stderr
        assert [(r["shard_id"], r["enabled"]) for r in data["shards"]] == [(0, False), (1, False)]
    finally:
        shards.start(2)
    assert [_enabled(shards, s) for s in (0, 1, 2)] == [False, False, True]
