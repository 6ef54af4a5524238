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
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import conninfo

from harvest import App, Client, activity, workflow
from harvest.cli.main import main as cli
from harvest.core.errors import ConfigError
from harvest.db import pooler
from harvest.db.connection import connect, set_role
from harvest.db.embedded import SERVICE_USER
from harvest.db.migrate import Migrator
from harvest.db.pools import open_async_pool
from harvest.telemetry.metrics import NullMetrics
from harvest.worker.sampler import MetricsSampler

PGBOUNCER = shutil.which("pgbouncer", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
pytestmark = pytest.mark.skipif(
    PGBOUNCER is None and os.environ.get("CI") != "true",
    reason="pgbouncer is not installed (make pgbouncer)",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgBouncer:
    """A pgbouncer of one test in front of ``dsn``'s server: its own port and directory, every
    database passed through, logins of ``dsn``'s user trusted; killed at the end. As root it
    runs as the embedded server's user (pgbouncer refuses root)."""

    def __init__(self, dsn: str, mode: str):
        self.target = conninfo.conninfo_to_dict(dsn)
        self.dsn, self.mode = dsn, mode
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="harvest-pgbouncer-"))
        self.proc: subprocess.Popen | None = None

    def url(self, dsn: str | None = None) -> str:
        """``dsn`` (default: the one it stands in front of) through this pgbouncer."""
        return conninfo.make_conninfo(dsn or self.dsn, host="127.0.0.1", port=str(self.port))

    def start(self) -> PgBouncer:
        assert PGBOUNCER is not None, "pgbouncer is not installed: make pgbouncer"
        user = str(self.target.get("user") or "postgres")
        (self.directory / "users.txt").write_text(f'"{user}" ""\n')
        config = self.directory / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host={self.target.get('host') or '127.0.0.1'} port={self.target.get('port') or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.directory / 'users.txt'}\n"
            f"pool_mode = {self.mode}\ndefault_pool_size = 10\nmax_client_conn = 200\n"
            "ignore_startup_parameters = extra_float_digits\n"
        )
        command = [PGBOUNCER, str(config)]
        if os.geteuid() == 0:
            service = pwd.getpwnam(SERVICE_USER)  # (made by the embedded server, started by now)
            self.directory.chmod(0o755)
            for path in (self.directory, config, self.directory / "users.txt"):
                os.chown(path, service.pw_uid, service.pw_gid)
            command = [PGBOUNCER, "-u", SERVICE_USER, str(config)]
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"pgbouncer did not start: {self.proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                with psycopg.connect(self.url(), connect_timeout=2):
                    return self
            except psycopg.OperationalError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError(f"pgbouncer did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)


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


@activity(queue="pooled")
async def add(ctx, a: int, b: int) -> int:
    return a + b


@workflow(queue="pooled")
async def adds(ctx, n: int) -> int:
    return await ctx.execute_activity(add, n, 1)


app = App(workflows=[adds], activities=[add])


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
