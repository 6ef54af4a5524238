"""Shard identity on three real PostgreSQL servers: a database knows its shard, a start
addressed to another shard is refused (HR011, WrongShard), a pool pointed at the wrong
database fails at boot naming both numbers, a stopped server is ShardUnavailable (retryable,
no DSN in the message) and comes back, and `harvest migrate run --shard-id N` sets the
identity, idempotently, refusing a database that holds another shard's executions."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import psycopg
import pytest
from click.testing import CliRunner

from harvest.cli.migrate import migrate
from harvest.core.errors import ConfigError, ShardUnavailable, WrongShard
from harvest.core.ids import shard_of
from harvest.shard import AsyncShardPools, ShardPools, ShardRouter

pytestmark = pytest.mark.shard

ALL = [0, 1, 2]


def _router() -> ShardRouter:
    return ShardRouter(ALL, ALL, 0)


def _start(sql, workflow_id: str, shard: int | None = None) -> dict:
    return sql.start_workflow(
        "shard_wf", [], workflow_id, "default", "allow_duplicate", "unspecified", {}, 0, shard=shard
    )


def test_each_database_knows_its_shard_and_mints_its_ids(shards) -> None:
    with ShardPools(_router(), shards.dsns, max_size=2) as pools:
        assert pools.check_identities() == ()
        for shard in ALL:
            with pools.api(shard) as sql:
                assert sql.get_shard_id() == shard
                row = _start(sql, f"own-{shard}")
                assert shard_of(row["execution_id"]) == shard, "an unpinned start mints this shard's id"
                assert shard_of(_start(sql, f"pinned-{shard}", shard)["execution_id"]) == shard


def test_a_start_addressed_to_another_shard_is_refused_on_a_real_second_server(shards) -> None:
    with ShardPools(_router(), shards.dsns, max_size=2) as pools, pools.api(1) as sql:
        with pytest.raises(WrongShard) as caught:
            _start(sql, "misrouted", shard=0)
        assert "shard 0" in str(caught.value) and "shard 1" in str(caught.value)
        assert (caught.value.requested_shard, caught.value.shard) == (0, 1)
    with shards.connect(1) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.executions").fetchone()[0] == 0, "nothing written"
        # The batch refuses it too, as a whole.
        with pytest.raises(psycopg.Error) as raw:
            conn.execute("""SELECT * FROM harvest.start_workflows('[{"workflow_name": "w", "shard": 2}]')""")
        assert raw.value.sqlstate == "HR011"


def test_a_pool_pointed_at_the_wrong_database_fails_at_boot_naming_both_numbers(shards) -> None:
    swapped = {0: shards.dsns[0], 1: shards.dsns[2], 2: shards.dsns[1]}
    with ShardPools(_router(), swapped, max_size=1) as pools:
        with pytest.raises(ConfigError) as caught:
            pools.check_identities()
        message = str(caught.value)
        assert "shard 2" in message and "shard 1" in message and "\n" not in message
        assert "postgresql://" not in message
        # The first use of an unchecked pool is checked the same way: no start reaches it.
        with pytest.raises(ConfigError), pools.api(2):
            pass


def test_async_pools_check_identities_and_refuse_the_wrong_database(shards) -> None:
    async def go() -> None:
        async with AsyncShardPools(_router(), shards.dsns, max_size=1) as pools:
            assert await pools.check_identities() == ()
            async with pools.api(2) as sql:
                assert await sql.get_shard_id() == 2
        swapped = {0: shards.dsns[1], 1: shards.dsns[0]}
        async with AsyncShardPools(_router(), swapped, max_size=1) as pools:
            with pytest.raises(ConfigError, match=r"shard 0.*shard 1|shard 1.*shard 0"):
                await pools.check_identities()

    asyncio.run(go())


def test_a_stopped_server_is_shard_unavailable_and_comes_back(shards) -> None:
    with ShardPools(_router(), shards.dsns, max_size=1, acquire_timeout=1.0) as pools:
        with pools.api(2) as sql:
            assert sql.get_shard_id() == 2
        with pytest.raises(ShardUnavailable) as no_pool, pools.api(7):
            pass
        assert no_pool.value.shard == 7 and no_pool.value.retryable
        shards.stop(2)
        try:
            with pytest.raises(ShardUnavailable) as caught, pools.api(2) as sql:
                sql.get_shard_id()
            assert caught.value.shard == 2 and caught.value.retryable
            message = str(caught.value)
            assert "shard 2" in message and "127.0.0.1" not in message and "postgres" not in message
            # The other shards keep serving.
            with pools.api(0) as sql:
                assert sql.get_shard_id() == 0
            with pytest.raises(ShardUnavailable), pools.api(2) as sql:
                sql.get_shard_id()
        finally:
            shards.start(2)
        for _ in range(50):  # the pool replaces its dead connection in the background
            try:
                with pools.api(2) as sql:
                    assert sql.get_shard_id() == 2
                break
            except ShardUnavailable:
                continue
        else:
            pytest.fail("shard 2 did not come back after its server restarted")


def test_async_pools_report_a_stopped_server_as_shard_unavailable(shards) -> None:
    async def go() -> None:
        async with AsyncShardPools(_router(), shards.dsns, max_size=1, acquire_timeout=1.0) as pools:
            shards.stop(1)
            try:
                with pytest.raises(ShardUnavailable) as caught:
                    async with pools.api(1) as sql:
                        await sql.get_shard_id()
                assert caught.value.shard == 1
            finally:
                shards.start(1)

    asyncio.run(go())


def _migrate(*args: str, dsn: str):
    return CliRunner().invoke(
        migrate, list(args), env={"HARVEST_DATABASE_URL": dsn}, prog_name="harvest migrate"
    )


def test_migrate_run_shard_id_sets_the_identity_idempotently(empty_db) -> None:
    _server, dsn = empty_db
    planned = _migrate("run", "--shard-id", "1", "--dry-run", dsn=dsn)
    assert planned.exit_code == 0, planned.output
    assert "would set shard id 1" in planned.output
    first = _migrate("run", "--shard-id", "1", "--operator-id", "ops", dsn=dsn)
    assert first.exit_code == 0, first.output
    assert "shard id set to 1 (was 0)" in first.output
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT harvest.get_shard_id()").fetchone()[0] == 1
        audited = conn.execute(
            "SELECT operator_id, target FROM harvest.audit_log WHERE operation = 'shard.set_id'"
        ).fetchall()
        assert audited == [("ops", "1")]
    again = _migrate("run", "--shard-id", "1", dsn=dsn)
    assert again.exit_code == 0, again.output
    assert "shard id 1 (unchanged)" in again.output
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.audit_log").fetchone()[0] == 1, (
            "no second audit row"
        )
        conn.execute("SELECT * FROM harvest.start_workflow('w', p_workflow_id => 'x')")


def test_migrate_run_shard_id_refuses_a_database_holding_another_shards_executions(empty_db) -> None:
    # A real process: the exit code and the one line on stderr.
    _server, dsn = empty_db
    env = {"HARVEST_DATABASE_URL": dsn, "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-c", "from harvest.cli import main; main()", "migrate", "run"]
    assert subprocess.run(cmd, env=env, capture_output=True, text=True).returncode == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT * FROM harvest.start_workflow('w', p_workflow_id => 'held')")
    done = subprocess.run([*cmd, "--shard-id", "2"], env=env, capture_output=True, text=True)
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "shard 0" in lines[0] and "shard 2" in lines[0]
    assert "127.0.0.1" not in lines[0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT harvest.get_shard_id()").fetchone()[0] == 0, "the refusal changed nothing"
