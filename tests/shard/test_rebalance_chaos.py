"""Chaos: SIGKILL the rebalancer process right after each durable phase of a move (copied,
verified, cut_over), then let `harvest shard rebalance-resume` or a worker's resume scanner
settle it. At every instant, and at the end, the run is authoritative on exactly one shard,
and a wake is never lost nor doubled."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from rebalance_helpers import authoritative, park, row, scalar, signals, wait_until

from harvest.cli.main import main as cli
from harvest.shard import AsyncShardPools, ShardPools, ShardRouter
from harvest.shard.rebalance import Rebalancer, resume_stalled_migrations

pytestmark = [pytest.mark.shard, pytest.mark.chaos]

DRIVER = Path(__file__).with_name("rebalance_driver.py")


def _kill_after(shards, execution_id: str, phase: str, tmp_path: Path) -> None:
    """Run the driver until it has durably finished ``phase``, then SIGKILL it."""
    marker = tmp_path / f"{execution_id}.{phase}"
    env = {**os.environ, "REBALANCE_DSNS": json.dumps({str(k): v for k, v in shards.dsns.items()})}
    proc = subprocess.Popen([sys.executable, str(DRIVER), execution_id, phase, str(marker)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, f"the driver exited ({proc.returncode}) before {phase}"
            assert time.monotonic() < deadline, f"the driver never reached {phase}"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)


def _phase(shards, execution_id: str) -> str:
    return scalar(
        shards.dsns[0],
        "SELECT phase FROM harvest.shard_migrations WHERE execution_id = %s ORDER BY id DESC LIMIT 1",
        execution_id,
    )


def _resume(shards) -> dict:
    result = CliRunner().invoke(
        cli,
        ["shard", "rebalance-resume", "--from", "0", "-o", "json", "--operator-id", "ops"]
        + [f"--shard={s}={dsn}" for s, dsn in shards.dsns.items()],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("phase", ["copied", "verified"])
def test_killed_before_the_cutover_the_source_stays_authoritative_and_resume_finishes_the_move(
    shards, tmp_path, phase
) -> None:
    execution_id = park(shards.dsns[0], f"kill-{phase}")
    _kill_after(shards, execution_id, phase, tmp_path)
    assert _phase(shards, execution_id) == phase
    assert row(shards.dsns[1], execution_id)["status"] == "MIGRATING", "a staged, inert copy"
    assert authoritative(shards.dsns, execution_id) == [0]
    assert scalar(shards.dsns[1], "SELECT count(*) FROM harvest.tasks") == 0, (
        "the copy is claimable by no one"
    )

    report = _resume(shards)
    assert [m["outcome"] for m in report["moves"]] == ["moved"], report
    assert _phase(shards, execution_id) == "completed"
    assert authoritative(shards.dsns, execution_id) == [1]
    assert _resume(shards)["moves"] == [], "nothing left open"


def test_killed_after_verification_a_run_that_woke_meanwhile_is_declined_not_sealed_stale(
    shards, tmp_path
) -> None:
    execution_id = park(shards.dsns[0], "kill-woke")
    _kill_after(shards, execution_id, "verified", tmp_path)
    with shards.connect(0) as conn:  # hours later, the run legitimately wakes
        conn.execute("SELECT harvest.signal_workflow(%s, 'go', '\"late\"')", (execution_id,))
    report = _resume(shards)
    assert [m["outcome"] for m in report["moves"]] == ["declined"], report
    assert _phase(shards, execution_id) == "failed"
    assert authoritative(shards.dsns, execution_id) == [0]
    assert row(shards.dsns[1], execution_id) is None, "the stale staged copy is gone"
    assert signals(shards.dsns[0], execution_id, "late") == 1


def test_killed_after_the_cutover_the_target_is_authoritative_and_the_worker_scanner_activates_it(
    shards, tmp_path
) -> None:
    execution_id = park(shards.dsns[0], "kill-cut", [{"type": "start_timer", "seq": 1, "duration": 3600}])
    _kill_after(shards, execution_id, "cut_over", tmp_path)
    assert _phase(shards, execution_id) == "cut_over"
    assert (row(shards.dsns[0], execution_id)["status"], row(shards.dsns[1], execution_id)["status"]) == (
        "MIGRATED",
        "MIGRATING",
    )
    assert authoritative(shards.dsns, execution_id) == [1], "authority moved with the one cutover commit"

    async def scan(stall_after: float) -> int:
        async with AsyncShardPools(ShardRouter([0, 1, 2], [0, 1, 2], 0), shards.dsns, max_size=2) as pools:
            return await resume_stalled_migrations(pools, 0, stall_after=stall_after)

    assert asyncio.run(scan(30)) == 0, "a fresh cutover is left to its driver for the stall period"
    with shards.connect(0) as conn:  # the stall period passes
        conn.execute("UPDATE harvest.shard_migrations SET updated_at = updated_at - interval '1 minute'")
    assert asyncio.run(scan(30)) == 1
    assert asyncio.run(scan(30)) == 0, "settled once"
    assert _phase(shards, execution_id) == "completed"
    assert row(shards.dsns[1], execution_id)["status"] == "RUNNING"
    assert authoritative(shards.dsns, execution_id) == [1]
    assert scalar(shards.dsns[1], "SELECT count(*) FROM harvest.tasks WHERE kind = 'timer'") == 1, (
        "the timer is live"
    )
    audit = scalar(
        shards.dsns[0],
        "SELECT operator_id || ' ' || (details ->> 'route') FROM harvest.audit_log "
        "WHERE operation = 'shard.rebalance.auto_resume'",
    )
    assert audit == "system background.rebalance_resume_scanner 0 -> 1"


def test_killed_after_the_cutover_rebalance_resume_activates_it(shards, tmp_path) -> None:
    execution_id = park(shards.dsns[0], "kill-cut-cli")
    _kill_after(shards, execution_id, "cut_over", tmp_path)
    report = _resume(shards)
    assert [m["outcome"] for m in report["moves"]] == ["moved"], report
    assert authoritative(shards.dsns, execution_id) == [1]
    wait_until(lambda: row(shards.dsns[1], execution_id)["status"] == "RUNNING")


def test_resume_drops_a_staged_copy_a_failed_move_left_behind(shards) -> None:
    execution_id = park(shards.dsns[0], "orphan")

    class Killed(Exception):
        pass

    def die(phase: str, record: dict) -> None:
        if phase == "copied":
            raise Killed  # the driver dies between the copy and anything else

    with (
        ShardPools(ShardRouter([0, 1, 2], [0, 1, 2], 0), shards.dsns, max_size=2) as pools,
        pytest.raises(Killed),
    ):
        Rebalancer(pools, 0, 1, on_phase=die).move(execution_id)
    with shards.connect(0) as conn:  # an operator (or a crash after it) failed the move
        conn.execute(
            "SELECT harvest.fail_migration(id, 'abandoned') FROM harvest.shard_migrations "
            "WHERE execution_id = %s",
            (execution_id,),
        )
    assert row(shards.dsns[1], execution_id)["status"] == "MIGRATING", "an inert copy is left on the target"
    assert _resume(shards)["moves"] == []
    assert row(shards.dsns[1], execution_id) is None, "rebalance-resume dropped it"
    assert authoritative(shards.dsns, execution_id) == [0]
