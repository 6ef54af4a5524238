"""A sharded deployment behind a transaction-mode pooler (docs/sharding.md, docs/operations.md,
"Behind a connection pooler"): two shards (tests/conftest.py's ``two_shards``, two clones on one
server) and one PgBouncer in transaction mode in front of both, each shard's session URL in
``shards.session_urls``.

Before, ``session_url`` paired with shard 0's URL only: LISTEN, the sampler's lock and a migration
of shard 1 went through the pooler, and ``harvest migrate run`` given shard 1's URL migrated shard
0 (through shard 0's session URL) and could make it shard 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import conninfo
from tests.integration.pgbouncer_helpers import PgBouncer, adds, app, needs_pgbouncer
from tests.integration.worker_helpers import RunningWorker

from harvest import Client
from harvest.cli.main import main as cli
from harvest.config import config_from_mapping, shard_urls
from harvest.core.errors import ConfigError
from harvest.core.ids import shard_of
from harvest.db import pooler
from harvest.db.connection import connect, describe_dsn
from harvest.worker import Worker

pytestmark = needs_pgbouncer


@pytest.fixture
def bouncer(two_shards: dict[int, str]) -> Iterator[PgBouncer]:
    """A transaction-mode pgbouncer in front of the shards' server (it passes every database
    through); what a test declared or found about the shards' pooled URLs forgotten at the end."""
    server = PgBouncer(two_shards[0], "transaction").start()
    try:
        yield server
    finally:
        for dsn in two_shards.values():
            pooler.forget(server.url(dsn))
        server.stop()


def shards_env(two_shards: dict[int, str], bouncer: PgBouncer, *, sessions: bool = True) -> dict[str, str]:
    """The deployment's [shards] as variables: each shard's url through the pooler, and (with
    ``sessions``) its session URL, the clone itself."""
    env = {"HARVEST_SHARDS__READABLE": "0,1", "HARVEST_SHARDS__WRITABLE": "0,1", "HARVEST_SESSION_URL": ""}
    for shard, dsn in two_shards.items():
        env[f"HARVEST_SHARDS__URLS__{shard}"] = bouncer.url(dsn)
        if sessions:
            env[f"HARVEST_SHARDS__SESSION_URLS__{shard}"] = dsn
    return env


def shard_id(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT shard_id FROM harvest.shard_identity").fetchone()[0]  # type: ignore[index]


def test_migrate_run_on_each_shard_goes_to_that_shards_session_url_and_says_so(two_shards, bouncer) -> None:
    """Each shard migrated with HARVEST_DATABASE_URL set to its pooled url (the docs' way) runs
    on its session URL, and the report names that database, not the pooler's."""
    env = shards_env(two_shards, bouncer)
    for shard, dsn in two_shards.items():
        env["HARVEST_DATABASE_URL"] = bouncer.url(dsn)
        args = ["migrate", "run", "--shard-id", str(shard)]
        result = CliRunner().invoke(cli, [*args, "--output", "json"], env=env)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["database"] == describe_dsn(dsn) != describe_dsn(bouncer.url(dsn))
        text = CliRunner().invoke(cli, args, env=env)
        assert text.exit_code == 0, text.output
        assert text.stdout.startswith(f"{describe_dsn(dsn)}: applied 0 migration(s)")
        assert shard_id(dsn) == shard


def test_migrate_run_on_a_shard_without_its_session_url_is_refused_and_shard_0_untouched(
    two_shards, bouncer
) -> None:
    """Before: session_url (shard 0's) paired with shard 1's pooled url, so this ran on shard 0
    and made it shard 1 (it held no execution yet)."""
    env = {**shards_env(two_shards, bouncer, sessions=False), "HARVEST_SESSION_URL": two_shards[0]}
    env["HARVEST_DATABASE_URL"] = bouncer.url(two_shards[1])
    result = CliRunner().invoke(cli, ["migrate", "run", "--shard-id", "1"], env=env)
    assert result.exit_code != 0
    assert "transaction mode" in result.output and "shards.session_urls.N" in result.output
    assert "nothing was changed" in result.output
    assert (shard_id(two_shards[0]), shard_id(two_shards[1])) == (0, 1)


def test_a_worker_over_two_pooled_shards_listens_on_each_shards_session_url(two_shards, bouncer) -> None:
    """Every shard's own sessions (the worker's LISTEN, a result's wait) go to its session URL;
    its pools stay on the pooler and prepare nothing; workflows run on both shards."""
    env = shards_env(two_shards, bouncer)
    config = config_from_mapping({}, "tests", env=env)
    urls = shard_urls(config)
    assert urls == {s: bouncer.url(dsn) for s, dsn in two_shards.items()}
    for shard, pooled in urls.items():
        assert pooler.session_dsn(pooled) == two_shards[shard]
        with connect(pooled, autocommit=True) as conn:  # a session of Harvest's own
            assert conn.info.dbname == conninfo.conninfo_to_dict(two_shards[shard])["dbname"]
            assert conn.info.port != bouncer.port
            conn.execute("LISTEN pooled_wake")
            with connect(pooled, autocommit=True) as other:
                other.execute("NOTIFY pooled_wake, 'x'")
            assert [n.payload for n in conn.notifies(timeout=10, stop_after=1)] == ["x"]
    worker = Worker(
        app,
        shards=urls,
        queues=["pooled"],
        poll_interval=0.5,
        scan_interval=0.2,
        run_retention=False,
    )
    running = RunningWorker(worker).start()
    try:
        for shard, pooled in urls.items():
            with Client(pooled) as client:
                with client._target.pool.connection() as conn:
                    assert conn.info.port == bouncer.port and conn.prepare_threshold is None
                handles = [client.start_workflow(adds, i) for i in range(8)]
                assert {shard_of(h.execution_id) for h in handles} == {shard}
                assert [h.result(timeout=60) for h in handles] == [i + 1 for i in range(8)]
    finally:
        running.stop()


def test_migrate_run_refuses_a_session_url_that_reaches_another_shard(two_shards, bouncer) -> None:
    """A swapped entry (shard 1's session URL on shard 0's database) would have migrated shard 0
    and, with --shard-id 1, made it shard 1."""
    env = {**shards_env(two_shards, bouncer), "HARVEST_SHARDS__SESSION_URLS__1": two_shards[0]}
    env["HARVEST_DATABASE_URL"] = bouncer.url(two_shards[1])
    for dry_run in ([], ["--dry-run"]):
        result = CliRunner().invoke(cli, ["migrate", "run", "--shard-id", "1", *dry_run], env=env)
        assert result.exit_code != 0
        assert f"reaches {describe_dsn(two_shards[0])}, the database of shard 0" in result.output
        assert "shards.session_urls.1" in result.output and "nothing was changed" in result.output
    assert (shard_id(two_shards[0]), shard_id(two_shards[1])) == (0, 1)


def _session_worker(urls: dict[int, str], sessions: dict[int, str]) -> Worker:
    """A worker on each shard's pooled URL, given each shard's session URL."""
    return Worker(
        app,
        shards=urls,
        session_urls=sessions,
        queues=["pooled"],
        poll_interval=0.5,
        scan_interval=0.2,
        run_retention=False,
    )


def test_a_worker_built_in_python_takes_each_shards_session_url(two_shards, bouncer) -> None:
    """Before: ``Worker(app, shards=...)`` had no way to give its shards' session URLs (only the
    config's [shards.session_urls] declared them), so a worker built in Python held its LISTEN and
    the sampler's lock through the pooler. ``session_urls`` pairs each shard's pooled URL with
    its own, as the config does; a shard it has no URL for is refused, naming it."""
    urls = {shard: bouncer.url(dsn) for shard, dsn in two_shards.items()}
    with pytest.raises(ConfigError, match=r"session_urls=\.\.\.\)\[2\]: no database URL of shard 2"):
        Worker(app, shards=urls, session_urls={2: two_shards[1]}, queues=["pooled"])
    worker = _session_worker(urls, two_shards)
    for shard, pooled in urls.items():
        assert pooler.session_dsn(pooled) == two_shards[shard] and pooler.is_pooled(pooled)
    running = RunningWorker(worker).start()
    try:
        for shard, pooled in urls.items():
            with Client(pooled) as client:
                handles = [client.start_workflow(adds, i) for i in range(4)]
                assert {shard_of(h.execution_id) for h in handles} == {shard}
                assert [h.result(timeout=60) for h in handles] == [i + 1 for i in range(4)]
    finally:
        running.stop()


def test_pools_and_clients_built_in_python_take_each_shards_session_url(two_shards, bouncer) -> None:
    """Before: only ``Worker`` took ``session_urls``; ``ShardPools`` and ``Client`` built in Python
    had no way to give theirs, so a client's LISTEN went through the pooler. Each takes the
    pairs now, declared before its first connection: its pools stay on the pooler (preparing
    nothing), its own sessions go to the shard's session URL, and workflows run."""
    from harvest.shard.pools import ShardPools
    from harvest.shard.router import ShardRouter

    urls = {shard: bouncer.url(dsn) for shard, dsn in two_shards.items()}
    pools = ShardPools(ShardRouter([0, 1], [0, 1], 0), urls, session_urls={1: two_shards[1]})
    assert pooler.session_dsn(urls[1]) == two_shards[1] and not pooler.is_pooled(urls[0])
    worker = _session_worker(urls, two_shards)
    running = RunningWorker(worker).start()
    try:
        with Client(shards=pools) as client:
            with pools.connection(1) as conn:
                assert conn.info.port == bouncer.port and conn.prepare_threshold is None
            handle = client.start_workflow(adds, 1)
            assert handle.result(timeout=60) == 2
        pooler.forget(urls[0])
        with Client(urls[0], session_urls={0: two_shards[0]}) as client:
            assert pooler.session_dsn(urls[0]) == two_shards[0]
            with connect(urls[0], autocommit=True) as conn:  # a session of its own: direct
                assert conn.info.port != bouncer.port
            assert client.start_workflow(adds, 3).result(timeout=60) == 4
    finally:
        running.stop()
