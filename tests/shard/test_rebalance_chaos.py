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

import psycopg
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


@pytest.mark.parametrize("crash", ["before_its_commit", "after_its_commit"])
def test_a_worker_killed_during_activation_leaves_the_run_authoritative_on_exactly_one_shard(
    shards, crash
) -> None:
    """Activation is one statement on the target (harvest.activate_migration: the staged copy
    RUNNING, its task rows inserted, the arrival marked, in one transaction), and the source's
    completion another, idempotent one. A real worker process is SIGKILLed while its resume
    scanner's activation waits on the target (a lock this test holds): the server then either
    rolls the activation back (its session is cut first) or commits it with no one to tell.
    Either way the seal on the source points at the target, so the run is authoritative on
    the target only; the next scanner pass settles the move without doubling its timer, and a
    signal by the original id lands once."""
    from harvest import Client

    execution_id = park(
        shards.dsns[0], f"kill-act-{crash}", [{"type": "start_timer", "seq": 1, "duration": 3600}]
    )
    router = ShardRouter([0, 1, 2], [0, 1, 2], 0)

    class Stop(Exception):
        pass

    def stop_after_cutover(phase: str, record: dict) -> None:
        if phase == "cut_over":
            raise Stop  # the rebalancer dies right after its cutover commit

    with ShardPools(router, shards.dsns, max_size=2) as pools, pytest.raises(Stop):
        Rebalancer(pools, 0, 1, on_phase=stop_after_cutover).move(execution_id)
    assert (row(shards.dsns[0], execution_id)["status"], row(shards.dsns[1], execution_id)["status"]) == (
        "MIGRATED",
        "MIGRATING",
    )
    age = "UPDATE harvest.shard_migrations SET updated_at = updated_at - interval '1 minute'"
    with shards.connect(0) as conn:  # stalled: the worker's resume scanner takes it at once
        conn.execute(age)

    holder = psycopg.connect(shards.dsns[1])  # a transaction holding the run's row on the target
    holder.execute("SELECT 1 FROM harvest.executions WHERE id = %s FOR UPDATE", (execution_id,))
    env = {**os.environ, "SHARD_DSNS": json.dumps({str(k): v for k, v in shards.dsns.items()})}
    worker = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("activation_worker.py"))], env=env
    )
    try:

        def activating() -> int | None:
            return scalar(
                shards.dsns[1],
                "SELECT min(pid) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query LIKE '%%activate_migration%%' AND wait_event_type = 'Lock'",
            )

        wait_until(lambda: activating() is not None, timeout=60, what="the worker's activation waiting")
        backend = activating()
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(30)
    assert worker.returncode == -signal.SIGKILL
    if crash == "before_its_commit":  # its session is cut while it waits: rolled back
        with shards.connect(1) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (backend,))
    holder.rollback()  # after_its_commit: it gets the lock, commits, and finds no client
    holder.close()
    wait_until(
        lambda: not scalar(shards.dsns[1], "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", backend),
        what="the orphaned activation ended",
    )
    expected = "MIGRATING" if crash == "before_its_commit" else "RUNNING"
    assert row(shards.dsns[1], execution_id)["status"] == expected
    timers = "SELECT count(*) FROM harvest.tasks WHERE execution_id = %s AND kind = 'timer'"
    assert scalar(shards.dsns[1], timers, execution_id) == (0 if crash == "before_its_commit" else 1)
    assert _phase(shards, execution_id) == "cut_over", "the source's completion never ran"
    assert authoritative(shards.dsns, execution_id) == [1], "authority moved with the cutover, and only there"

    async def scan() -> int:
        async with AsyncShardPools(router, shards.dsns, max_size=2) as pools:
            return await resume_stalled_migrations(pools, 0, stall_after=30)

    with shards.connect(0) as conn:
        conn.execute(age)
    assert asyncio.run(scan()) == 1, "the next scanner pass settles it"
    assert _phase(shards, execution_id) == "completed"
    assert row(shards.dsns[1], execution_id)["status"] == "RUNNING"
    assert scalar(shards.dsns[1], timers, execution_id) == 1, "activated once: the timer is not doubled"
    assert authoritative(shards.dsns, execution_id) == [1]
    with ShardPools(router, shards.dsns, max_size=2) as pools, Client(shards=pools) as client:
        client.get_handle(execution_id).signal("go", f"after-{crash}")
    assert signals(shards.dsns[1], execution_id, f"after-{crash}") == 1
    assert signals(shards.dsns[0], execution_id, f"after-{crash}") == 0


class _CountsConnections:
    """Pools that count the connections asked of each shard (a shard that is down costs its
    acquire timeout for each): mixed into ShardPools and AsyncShardPools."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked: dict[int, int] = {}

    def connection(self, shard: int, *args, **kwargs):  # (the async pools' take a timeout too)
        self.asked[shard] = self.asked.get(shard, 0) + 1
        return super().connection(shard, *args, **kwargs)  # type: ignore[misc]


class _CountingPools(_CountsConnections, ShardPools):
    pass


def test_a_target_that_goes_down_mid_run_is_waited_for_once_not_once_per_run(shards) -> None:
    """A rebalance of many runs whose target goes down part way, and its resume while the target
    is still down: each used to wait the target's acquire timeout (10 s) for every remaining run
    (a copy, then a discard), and again for every failed move's leftover copy, so a --limit 100
    run hung for half an hour. Now the first failure to reach a shard ends the walk: the runs
    after it are reported not attempted (no record written, nothing sealed), and the command
    exits 1 at once."""
    ids = [park(shards.dsns[0], f"down-{i}") for i in range(4)]

    def stop_target(phase: str, record: dict) -> None:
        if phase == "copied" and shards.is_up(1):
            shards.stop(1)

    router = ShardRouter([0, 1, 2], [0, 1, 2], 0)
    with _CountingPools(router, shards.dsns, max_size=2, acquire_timeout=1) as pools:
        report = Rebalancer(pools, 0, 1, on_phase=stop_target).run(limit=10)
        outcomes = sorted((m.outcome, (m.error or "").split(":")[0]) for m in report.moves)
        assert outcomes == [("failed", "not attempted")] * 3 + [("failed", "shard 1 is unavailable")], (
            outcomes
        )
        asked_down = pools.asked[1] - 2  # (the schema check and the copy, before it stopped)
        assert asked_down == 1, f"the stopped target was asked {asked_down} times"
        # Only the move that met the outage has a record; the others were never begun.
        assert scalar(shards.dsns[0], "SELECT count(*) FROM harvest.shard_migrations") == 1
        assert [row(shards.dsns[0], i)["status"] for i in ids] == ["RUNNING"] * 4, "nothing sealed"

        # A resume while it is still down: one try, then the rest not attempted.
        with shards.connect(0) as conn:  # two more failed moves whose copies a resume discards
            conn.execute(
                "INSERT INTO harvest.shard_migrations (execution_id, workflow_name, workflow_id, "
                "source_shard, target_shard, phase, created_at, updated_at) "
                "SELECT id, workflow_name, workflow_id, 0, 1, 'failed', now(), now() "
                "FROM harvest.executions WHERE id = ANY(%s)",
                (ids[1:3],),
            )
        before = pools.asked[1]
        assert Rebalancer(pools, 0, 1).resume() == [], "no move is open"
        assert pools.asked[1] - before == 1, "the failed moves' copies are not discarded one timeout each"
    shards.start(1)
    assert _resume(shards)["counts"] == {"moved": 0, "declined": 0, "failed": 0}
    for execution_id in ids:
        assert row(shards.dsns[1], execution_id) is None, "every staged copy was discarded"
        assert authoritative(shards.dsns, execution_id) == [0]


class _CountingAsyncPools(_CountsConnections, AsyncShardPools):
    pass


def test_the_resume_scanner_asks_a_target_that_is_down_once_a_pass(shards) -> None:
    """The worker's pass over stalled cutovers whose target is down: every claimed record fails
    with its error noted and stays cut over (the guide's contract), and the target is asked once,
    not once per record, so the shard's scanner (timeouts, relays, deadlines) is held up for one
    acquire timeout rather than up to ten."""
    ids = [park(shards.dsns[0], f"stall-{i}") for i in range(3)]

    class Killed(Exception):
        pass

    def die(phase: str, record: dict) -> None:
        if phase == "cut_over":
            raise Killed

    router = ShardRouter([0, 1, 2], [0, 1, 2], 0)
    with ShardPools(router, shards.dsns, max_size=2) as pools:
        for execution_id in ids:
            with pytest.raises(Killed):
                Rebalancer(pools, 0, 1, on_phase=die).move(execution_id)
    with shards.connect(0) as conn:
        conn.execute("UPDATE harvest.shard_migrations SET updated_at = updated_at - interval '1 minute'")
    shards.stop(1)

    async def scan() -> tuple[int, int]:
        async with _CountingAsyncPools(router, shards.dsns, max_size=2, acquire_timeout=1) as counting:
            settled = await resume_stalled_migrations(counting, 0, stall_after=30)
            return settled, counting.asked.get(1, 0)

    try:
        assert asyncio.run(scan()) == (0, 1)
        with shards.connect(0) as conn:
            records = conn.execute(
                "SELECT phase, attempts, last_error FROM harvest.shard_migrations"
            ).fetchall()
        assert [(phase, attempts) for phase, attempts, _ in records] == [("cut_over", 1)] * 3
        assert all("shard 1 is unavailable" in error for _, _, error in records), records
    finally:
        shards.start(1)
    with shards.connect(0) as conn:
        conn.execute("UPDATE harvest.shard_migrations SET updated_at = updated_at - interval '1 minute'")
    assert asyncio.run(scan())[0] == 3
    for execution_id in ids:
        assert authoritative(shards.dsns, execution_id) == [1]


def test_a_source_that_goes_down_mid_run_ends_the_walk_and_keeps_the_report(shards) -> None:
    """The source stops answering part way: the move it met stays open for rebalance-resume, the
    runs after it are reported not attempted (the next one's begin used to raise out of the run,
    losing the report of what had moved), and a resume once it is back settles the open one."""
    ids = [park(shards.dsns[0], f"src-{i}") for i in range(3)]

    def stop_source(phase: str, record: dict) -> None:
        if phase == "copied" and shards.is_up(0):
            shards.stop(0)

    router = ShardRouter([0, 1, 2], [0, 1, 2], 0)
    try:
        with ShardPools(router, shards.dsns, max_size=2, acquire_timeout=1) as pools:
            report = Rebalancer(pools, 0, 1, on_phase=stop_source).run(limit=10)
    finally:
        shards.start(0)
    errors = sorted((m.outcome, (m.error or "").split(":")[0]) for m in report.moves)
    assert errors == [("failed", "not attempted")] * 2 + [("failed", "shard 0 is unavailable")], errors
    assert _resume(shards)["counts"] == {"moved": 1, "declined": 0, "failed": 0}
    assert sorted(authoritative(shards.dsns, i)[0] for i in ids) == [0, 0, 1]
