"""Harvest behind a connection pooler (harvest/db/pooler.py, docs/operations.md, "Behind a
connection pooler") on a real PgBouncer (Debian's, `make pgbouncer`) that each test starts on a
free port in front of its database, in transaction or session mode.

In transaction mode a server connection is lent for one transaction: psycopg's prepared
statements failed (DuplicatePreparedStatement, InvalidSqlStatementName: a worker stopped), LISTEN
heard nothing, and the migrate lock was a server connection's. A pooled URL prepares nothing,
a session of Harvest's own goes to session_url, the worker and the client find the pooler, and
migrate refuses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import conninfo
from tests.integration.pgbouncer_helpers import PgBouncer, adds, app, free_port, needs_pgbouncer

from harvest import Client
from harvest.cli.main import main as cli
from harvest.core.errors import ConfigError
from harvest.db import pooler, sqlapi
from harvest.db.connection import connect, describe_dsn, set_role
from harvest.db.migrate import Migrator
from harvest.db.pools import RoledPool, open_async_pool
from harvest.shard.pools import AsyncShardPools
from harvest.shard.router import ShardRouter
from harvest.telemetry.metrics import NullMetrics
from harvest.worker.sampler import MetricsSampler

pytestmark = needs_pgbouncer


@pytest.fixture
def bouncer(db: str) -> Iterator[PgBouncer]:
    """A transaction-mode pgbouncer in front of the test's database; what the test declared or
    found about its URL forgotten at the end."""
    server = PgBouncer(db, "transaction").start()
    try:
        yield server
    finally:
        pooler.forget(server.url())
        server.stop()


@pytest.fixture
def session_bouncer(db: str) -> Iterator[PgBouncer]:
    server = PgBouncer(db, "session").start()
    try:
        yield server
    finally:
        pooler.forget(server.url())
        server.stop()


def test_a_transaction_pooler_is_found_and_a_session_pooler_or_the_server_is_not(
    db, bouncer, session_bouncer
) -> None:
    with Client(bouncer.url()) as client:  # found by its pool's first connection
        with client._target.pool.connection() as conn:
            assert conn.prepare_threshold is None
        assert pooler.is_pooled(bouncer.url()) and pooler.needs_session(bouncer.url())
    assert pooler.detect(bouncer.url())
    assert not pooler.detect(session_bouncer.url())
    assert not pooler.detect(db)
    assert not pooler.is_pooled(db) and not pooler.is_pooled(session_bouncer.url())


def test_a_worker_and_a_client_through_a_transaction_pooler_run_workflows(
    db, bouncer, start_worker, monkeypatch
) -> None:
    """Before: psycopg prepared each statement run 5 times on a connection, and the next
    transaction's server connection had another client's ``_pg3_0`` or none (the worker
    stopped on InvalidSqlStatementName). Declared pooled (HARVEST_SESSION_URL): nothing is
    prepared, and the waits' LISTEN goes to the database itself."""
    pooled = bouncer.url()
    monkeypatch.setenv(pooler.SESSION_URL_ENV, db)
    start_worker(app, dsn=pooled, queues=["pooled"], concurrency=4)
    with Client(pooled) as client:
        handles = [client.start_workflow(adds, i) for i in range(12)]
        assert [h.result(timeout=60) for h in handles] == [i + 1 for i in range(12)]
        for i in range(12):  # each statement of a start and a result many times on one connection
            assert client.start_workflow(adds, i).result(timeout=60) == i + 1
    assert pooler.is_pooled(pooled)


def test_a_session_of_harvests_own_goes_to_the_session_url(db, bouncer, monkeypatch) -> None:
    """LISTEN, the sampler's lock and a migration's session need a session: through a
    transaction pooler LISTEN heard nothing (every wait fell to its poll interval). With
    HARVEST_SESSION_URL, a pooled DSN's own connections go there; its pools stay pooled."""
    pooled = bouncer.url()
    monkeypatch.setenv(pooler.SESSION_URL_ENV, db)
    with Client(pooled) as client:
        assert client.dsn == pooled
        with connect(pooled, autocommit=True) as conn:
            assert conn.info.port == int(conninfo.conninfo_to_dict(db)["port"])
            conn.execute("LISTEN pooled_wake")
            with connect(pooled, autocommit=True) as other:
                other.execute("NOTIFY pooled_wake, 'x'")
            assert [n.payload for n in conn.notifies(timeout=10, stop_after=1)] == ["x"]
        with client._target.pool.connection() as pooled_conn:
            assert pooled_conn.info.port == bouncer.port and pooled_conn.prepare_threshold is None


def test_migrate_refuses_a_transaction_pooler_and_runs_through_a_session_one(
    db, bouncer, session_bouncer
) -> None:
    """Before: the migrate lock (a session advisory lock) was taken on whichever server
    connection ran it and held there for other clients; two migrators could both hold it."""
    with pytest.raises(ConfigError, match=r"transaction mode.*nothing was changed"):
        Migrator(bouncer.url()).run()
    assert Migrator(session_bouncer.url()).run().applied == []


def test_migrate_runs_on_the_session_url_and_its_report_names_that_database(db, bouncer) -> None:
    """Before: the report named the pooler's host and port, where nothing ran."""
    env = {pooler.SESSION_URL_ENV: db, "HARVEST_DATABASE_URL": bouncer.url()}
    result = CliRunner().invoke(cli, ["migrate", "run", "--output", "json"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["database"] == describe_dsn(db) != describe_dsn(bouncer.url())
    for command in (["migrate", "run"], ["migrate", "status"]):
        result = CliRunner().invoke(cli, command, env=env)
        assert result.exit_code == 0, result.output
        assert f"{describe_dsn(db)}: " in result.stdout and describe_dsn(bouncer.url()) not in result.stdout


def test_a_faces_role_stays_on_its_own_calls_through_a_transaction_pooler(db, bouncer) -> None:
    """Before: set_role's SET ROLE ran as a transaction of its own, so the pooler lent the
    server connection it ran on to the next client (which then ran as harvest_reader) and the
    face's call ran on another one, as the login role (a reader's request with the login's
    rights). Pooled, the role is SET LOCAL in the call's transaction."""
    pooled = bouncer.url()
    pooler.declare(pooled)

    async def roles() -> tuple[str, str, str]:
        pool = await open_async_pool(pooled, min_size=1, max_size=2)
        other = await psycopg.AsyncConnection.connect(pooled, autocommit=True, prepare_threshold=None)
        try:
            async with pool.connection() as conn:
                async with (
                    set_role(conn, "harvest_reader", actor="ann"),
                    other.transaction(),  # a server connection while the face's call runs
                ):
                    theirs = await (await other.execute("SELECT current_user")).fetchone()
                    mine = await (await conn.execute("SELECT current_user")).fetchone()
                after = await (await conn.execute("SELECT current_user")).fetchone()
            return theirs[0], mine[0], after[0]  # type: ignore[index]
        finally:
            await other.close()
            await pool.close()

    assert asyncio.run(roles()) == ("postgres", "harvest_reader", "postgres")


def test_a_read_only_command_through_a_transaction_pooler_leaves_its_server_connection_writable(
    db, bouncer
) -> None:
    """Before: a read-only command's ``SET default_transaction_read_only = on`` stayed on the
    server connection that ran it, and the next client lent it failed (a worker's scan, a start:
    ReadOnlySqlTransaction). Found pooled: the command's calls run in one read-only transaction."""
    pooled = bouncer.url()
    for _ in range(3):
        result = CliRunner().invoke(cli, ["workflow", "list", "--database-url", pooled, "--output", "json"])
        assert result.exit_code == 0, result.output
    with psycopg.connect(pooled, autocommit=True, prepare_threshold=None) as other:
        seen = {other.execute("SHOW default_transaction_read_only").fetchone()[0] for _ in range(10)}  # type: ignore[index]
        other.execute("CREATE TABLE written_after (id int)")
    assert seen == {"off"}


def test_an_asyncio_pool_finds_a_transaction_pooler_before_it_prepares(db, bouncer) -> None:
    """Before: the management API's pool (harvest serve) prepared its statements behind the
    pooler and a listing failed with 500 (42P05 prepared statement "_pg3_0" already exists)."""

    async def run() -> list[int]:
        pool = await open_async_pool(bouncer.url(), min_size=2, max_size=4)
        try:
            async with pool.connection() as conn:
                assert conn.prepare_threshold is None
            found = []
            for _ in range(12):  # past psycopg's threshold (5) on each connection
                async with pool.connection() as conn:
                    found.append((await (await conn.execute("SELECT %s::int", [1])).fetchone())[0])
            return found
        finally:
            await pool.close()

    assert asyncio.run(run()) == [1] * 12
    assert pooler.is_pooled(bouncer.url())


def test_the_metrics_sampler_does_not_lead_through_a_transaction_pooler_without_a_session(
    db, bouncer
) -> None:
    """Before: its lead (a session advisory lock) was taken on a server connection the pooler
    lent other clients next: another worker's sampler lent it led too, and the lock outlived
    the process that took it. With no session URL it now stays off; with one it leads there."""
    pooler.declare(bouncer.url())
    sampler = MetricsSampler(NullMetrics(), interval=0.05)
    asyncio.run(asyncio.wait_for(sampler.run(bouncer.url(), 0), 10))
    assert sampler.samples == 0
    pooler.declare(bouncer.url(), db)

    async def lead() -> None:
        task = asyncio.create_task(sampler.run(bouncer.url(), 0))
        while not sampler.samples:
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(asyncio.wait_for(lead(), 30))


def test_a_commands_own_connection_through_a_transaction_pooler_prepares_nothing(db, bouncer) -> None:
    """Before: only a pool's first connection and a read-only command asked, so a write command's
    connection (connect(): retention run-now's and audit prune's batch loops) kept psycopg's
    prepare threshold; from the sixth identical call it prepared ``_pg3_0`` on a server connection
    the pooler lends to others, and a second such connection failed DuplicatePreparedStatement."""
    url = bouncer.url()
    pooler.forget(url)
    try:
        first, second = connect(url, autocommit=True), connect(url, autocommit=True)
        with first, second:
            assert first.prepare_threshold is None and second.prepare_threshold is None
            for _ in range(8):
                assert first.execute("SELECT 1 + 1").fetchone() == (2,)
                assert second.execute("SELECT 2 + 2").fetchone() == (4,)
        assert pooler.is_pooled(url)
    finally:
        pooler.forget(url)


def _probe_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Detection told nothing: the probe answers "not shared" (as it may on a busy pooler, or
    where it cannot ask: a pooler on a Unix socket, a proxy of another kind)."""
    monkeypatch.setattr(pooler, "shares_server_connections", lambda *args, **kwargs: False)


async def _current_user(conn: psycopg.AsyncConnection) -> str:
    return (await (await conn.execute("SELECT current_user")).fetchone())[0]  # type: ignore[index]


def test_a_faces_role_stays_on_its_calls_through_a_transaction_pooler_detection_missed(
    db, bouncer, monkeypatch
) -> None:
    """Before: pooled (declared or found) the role was SET LOCAL, but a pooler detection missed
    got a session ``SET ROLE``: it ran as a transaction of its own, the pooler lent that server
    connection to the next client (which ran as harvest_reader) and the face's call ran on
    another, as the login role. Now the role is the call's transaction's whatever detection
    says: the API's one-database pool (RoledPool) and its shards' (with_role().api())."""
    pooled = bouncer.url()
    _probe_misses(monkeypatch)

    async def roles() -> list[tuple[str, str, str]]:
        pool = await open_async_pool(pooled, min_size=1, max_size=2)
        shards = AsyncShardPools(ShardRouter.single(), {0: pooled}, max_size=2)
        other = await psycopg.AsyncConnection.connect(pooled, autocommit=True, prepare_threshold=None)
        seen = []
        try:
            async with pool.connection() as conn:
                assert not conn.pooled  # (the miss)
            for lender in (RoledPool(pool, "harvest_reader", actor="ann"), None):
                async with contextlib.AsyncExitStack() as stack:
                    if lender is None:  # a shard's API: its calls on one connection
                        sql = await stack.enter_async_context(shards.with_role("harvest_reader").api(0))
                        lender = sql.pool
                    conn = await stack.enter_async_context(lender.connection())
                    async with other.transaction():  # a server connection while the face's call runs
                        theirs = await _current_user(other)
                        mine = await _current_user(conn)
                async with pool.connection() as conn:
                    seen.append((theirs, mine, await _current_user(conn)))
            return seen
        finally:
            await other.close()
            await shards.close()
            await pool.close()

    assert asyncio.run(roles()) == [("postgres", "harvest_reader", "postgres")] * 2
    assert not pooler.is_pooled(pooled)


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "missed"])
def test_a_conflict_in_a_faces_call_through_a_transaction_pooler_is_run_again(
    db, bouncer, monkeypatch, declared
) -> None:
    """The role's transaction is the call's own: a serialization failure the server raised in it
    (rolling it back) runs the call again, in a new one, as on a connection with no role. Before,
    a pooled URL's role transaction counted as the caller's: TransactionConflict at once."""
    pooled = bouncer.url()
    if declared:
        pooler.declare(pooled)
    else:
        _probe_misses(monkeypatch)
    with psycopg.connect(db, autocommit=True) as admin:  # the server's 40001 in a start, the first time
        admin.execute(
            "CREATE SEQUENCE conflict_calls;"
            "CREATE FUNCTION public.conflict_once() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN IF nextval('public.conflict_calls') = 1 THEN"
            " RAISE EXCEPTION 'forced' USING ERRCODE = 'serialization_failure'; END IF; RETURN NEW; END $$;"
            "CREATE TRIGGER conflict_once BEFORE INSERT ON harvest.executions"
            " FOR EACH ROW EXECUTE FUNCTION public.conflict_once()"
        )

    async def go() -> list[bool]:
        pool = await open_async_pool(pooled, min_size=1, max_size=2)
        shards = AsyncShardPools(ShardRouter.single(), {0: pooled}, max_size=2)
        try:
            face = sqlapi.AsyncSqlApi(RoledPool(pool, "harvest_operator"))
            started = [await face.signal_with_start("rotor", "conflict-1", "tick", None, [0], "default", {})]
            with psycopg.connect(db, autocommit=True) as admin:
                admin.execute("SELECT setval('conflict_calls', 1, false)")
            async with shards.with_role("harvest_operator").api(0) as sql:
                started.append(
                    await sql.signal_with_start("rotor", "conflict-2", "tick", None, [0], "default", {})
                )
            return [row["started_fresh"] for row in started]
        finally:
            await shards.close()
            await pool.close()

    assert asyncio.run(go()) == [True, True]
    with psycopg.connect(db, autocommit=True) as admin:
        assert admin.execute("SELECT last_value FROM conflict_calls").fetchone() == (2,)


def test_migrate_through_a_pooler_that_cannot_be_reached_says_so_as_every_command_does(db) -> None:
    """Before: migrate's own connect through the pooler (the check that the session URL reaches
    the pooled URL's database) was bare psycopg: its error came untyped. Now it is the error, exit
    code and line any command gives for a database it cannot reach, with no password."""
    down = f"postgresql://postgres:pw-s3cret@127.0.0.1:{free_port()}/harvest"
    try:
        migrate = CliRunner().invoke(
            cli, ["migrate", "run"], env={"HARVEST_DATABASE_URL": down, pooler.SESSION_URL_ENV: db}
        )
    finally:
        pooler.forget(down)  # (declared pooled by the run: its session URL would answer a listing)
    listing = CliRunner().invoke(cli, ["workflow", "list"], env={"HARVEST_DATABASE_URL": down})
    assert migrate.exit_code == listing.exit_code != 0, migrate.output
    for result in (migrate, listing):
        assert f"cannot connect to database {describe_dsn(down)}" in result.output
        assert "s3cret" not in result.output and "Traceback" not in result.output


def test_a_role_set_at_connect_that_a_pooler_drops_is_refused(db: str, session_bouncer: PgBouncer) -> None:
    """dsn_with_role starts a request's own connection (a wait's LISTEN, an event stream's
    reads) as the request's role through libpq ``options``. PgBouncer refuses that startup
    parameter by default (a loud failure); listed in its ignore_startup_parameters it drops it
    without a word, and the connection ran as the login. Harvest checks the role once at connect
    (current_user) and refuses such a connection, naming the remedy."""
    from harvest.core.errors import HarvestError
    from harvest.db.connection import connect_async, dsn_with_role

    login = conninfo.conninfo_to_dict(db)["user"]
    with pytest.raises(HarvestError, match="options"):  # the default: refused at the startup
        connect(dsn_with_role(session_bouncer.url(), "harvest_reader"), autocommit=True)
    dropping = PgBouncer(db, "session", ignored=("options",)).start()
    try:
        roled = dsn_with_role(dropping.url(), "harvest_reader")
        with psycopg.connect(roled, autocommit=True) as plain:  # the evidence: dropped unsaid
            assert plain.execute("SELECT current_user").fetchone() == (login,)
        with pytest.raises(ConfigError, match=r"runs as another role.*ignore_startup_parameters"):
            connect(roled, autocommit=True)
        with pytest.raises(ConfigError, match="runs as another role"):
            asyncio.run(connect_async(roled))
    finally:
        pooler.forget(dropping.url())
        dropping.stop()
    with connect(dsn_with_role(db, "harvest_reader")) as direct:  # not autocommit: the check left it idle
        assert direct.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert direct.execute("SELECT current_user").fetchone() == ("harvest_reader",)


def test_a_search_attribute_index_refuses_a_transaction_pooler_and_builds_on_the_session_url(
    db, bouncer
) -> None:
    """`harvest search-attr index` sets its session's timeouts (none, for a concurrent build):
    through a transaction-mode pooler they would land on other clients' server connections, so
    it is refused there, as `migrate run` is, and runs on the session URL when one is declared."""
    args = ["search-attr", "index", "amount", "--type", "number"]
    refused = CliRunner().invoke(cli, args, env={"HARVEST_DATABASE_URL": bouncer.url()})
    assert refused.exit_code == 1, refused.output
    assert "transaction mode" in refused.stderr and "nothing was changed" in refused.stderr
    env = {pooler.SESSION_URL_ENV: db, "HARVEST_DATABASE_URL": bouncer.url()}
    built = CliRunner().invoke(cli, args, env=env)
    assert built.exit_code == 0, built.output
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT name FROM harvest.search_attribute_indexes").fetchall() == [("amount",)]
