"""A moved run's MIGRATED seal on its old shard and the retention window (docs/sharding.md,
"Seals and retention"): the seal forwards every by-id lookup, signal and cancel to the shard the
run lives on, so it stays while the run is live there, however old the move; once the run has
ended and its own retention window has passed (or its home collected it), the janitor of the
seal's shard lets the seal go too. Three real shards, parked runs (no workflow code), the
janitor's steps run under the test clock: no sleep."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from rebalance_helpers import park, row

from harvest.shard import AsyncShardPools, ShardPools, ShardRouter
from harvest.shard.rebalance import Rebalancer
from harvest.worker.seals import collect_seals

pytestmark = pytest.mark.shard

ALL = [0, 1, 2]
LATER = "2999-01-01 00:00:00+00"  # the janitor's clock: far past every window below


def _move(shards, execution_id: str, source: int, target: int) -> None:
    with ShardPools(ShardRouter(ALL, ALL, 0), shards.dsns, max_size=2) as pools:
        move = Rebalancer(pools, source, target, operator_id="ops@test").move(execution_id)
    assert move.outcome == "moved", move


def _pools(shards) -> AsyncShardPools:
    return AsyncShardPools(ShardRouter(ALL, ALL, 0), shards.dsns, max_size=2, acquire_timeout=2.0)


def _run_retention(shards, shard: int) -> dict:
    """One retention batch of ``shard``'s own, its clock far past the window."""
    with psycopg.connect(shards.dsns[shard], autocommit=True) as conn:
        conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (LATER,))
        return conn.execute("SELECT harvest.run_retention('1 hour')").fetchone()[0]


def _end(shards, shard: int, execution_id: str, at: str | None = None) -> None:
    """Terminate the run where it lives, at ``at`` (default: now)."""
    with psycopg.connect(shards.dsns[shard], autocommit=True) as conn:
        if at is not None:
            conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (at,))
        conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (execution_id,))


def _collect(shards, shard: int) -> dict:
    """The janitor's seal pass on ``shard`` with a window of a microsecond: every move and
    every end before this call is past it (the real clock, on every shard)."""

    async def go() -> dict:
        async with _pools(shards) as pools:
            return await collect_seals(pools, shard, "1 microsecond")

    return asyncio.run(go())


def test_a_seal_stays_while_its_run_is_live_on_its_new_shard(shards) -> None:
    execution_id = park(shards.dsns[0], "sealed-live")
    _move(shards, execution_id, 0, 1)
    assert row(shards.dsns[0], execution_id)["status"] == "MIGRATED"

    assert _run_retention(shards, 0)["deleted"] == 0
    assert row(shards.dsns[0], execution_id) is not None, (
        "the seal of a run still running on shard 1 was deleted: by-id calls would not find it"
    )
    report = _collect(shards, 0)
    assert (report["checked"], report["deleted"]) == (1, 0), report
    assert row(shards.dsns[0], execution_id)["status"] == "MIGRATED"


def test_a_seal_stays_while_its_ended_run_is_in_its_window_and_goes_after(shards) -> None:
    recent = park(shards.dsns[0], "sealed-recent")
    done = park(shards.dsns[0], "sealed-done")
    for run in (recent, done):
        _move(shards, run, 0, 1)
    _end(shards, 1, recent, at=LATER)  # ended "in 2999": inside any window today
    _end(shards, 1, done)

    assert _run_retention(shards, 0)["deleted"] == 0, "the shard's own batch never takes a seal"
    report = _collect(shards, 0)
    assert (report["checked"], report["deleted"], report["next"]) == (2, 1, None), report
    assert row(shards.dsns[0], recent)["status"] == "MIGRATED", "its run is not collectable yet"
    assert row(shards.dsns[0], done) is None, "its run would have been collected: the seal went"
    assert row(shards.dsns[1], done)["status"] == "TERMINATED", "the run itself is its shard's to collect"
    with psycopg.connect(shards.dsns[0], autocommit=True) as conn:
        audited = conn.execute(
            "SELECT details FROM harvest.audit_log WHERE operation = 'retention.seals'"
        ).fetchall()
    assert [details["deleted"] for (details,) in audited] == [1]


def test_a_seal_goes_once_its_run_was_collected_and_a_chain_is_followed(shards) -> None:
    collected = park(shards.dsns[0], "sealed-collected")
    chained = park(shards.dsns[0], "sealed-chained")
    _move(shards, collected, 0, 1)
    _move(shards, chained, 0, 1)
    _move(shards, chained, 1, 2)
    # The move repointed the origin's seal at shard 2; a chain (shard 0's seal pointing to shard
    # 1's, which points to shard 2) is what an origin left unreached then keeps: made here.
    with psycopg.connect(shards.dsns[0], autocommit=True) as conn:
        conn.execute("SELECT harvest.set_migration_forward(%s, 1)", (chained,))
    assert row(shards.dsns[0], chained)["migrated_to_shard"] == 1
    _end(shards, 1, collected)
    assert _run_retention(shards, 1)["deleted"] == 1, "shard 1 collects the run that ended there"
    assert row(shards.dsns[1], collected) is None

    report = _collect(shards, 0)
    assert (report["checked"], report["deleted"]) == (2, 1), report
    assert row(shards.dsns[0], collected) is None
    assert row(shards.dsns[0], chained)["status"] == "MIGRATED", "its run is live on shard 2"
    _end(shards, 2, chained)
    assert _collect(shards, 0)["deleted"] == 1
    assert row(shards.dsns[0], chained) is None
    assert _collect(shards, 1)["deleted"] == 1, "shard 1's seal of it goes the same way"


def test_the_janitor_pages_through_seals_of_live_runs_to_the_ones_behind(shards) -> None:
    live = [park(shards.dsns[0], f"sealed-page-{i}") for i in range(2)]
    done = park(shards.dsns[0], "sealed-page-done")
    for run in (*live, done):  # moved in this order: the live runs' seals come first
        _move(shards, run, 0, 1)
    _end(shards, 1, done)

    async def go() -> list[dict]:
        async with _pools(shards) as pools:
            first = await collect_seals(pools, 0, "1 microsecond", limit=2)
            second = await collect_seals(pools, 0, "1 microsecond", after=first["next"], limit=2)
            return [first, second]

    first, second = asyncio.run(go())
    assert (first["checked"], first["deleted"]) == (2, 0) and first["next"] is not None, first
    assert (second["checked"], second["deleted"], second["next"]) == (1, 1, None), second
    assert row(shards.dsns[0], done) is None
