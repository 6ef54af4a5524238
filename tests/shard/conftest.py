"""Shard fixtures: three embedded PostgreSQL servers (not three databases on one server), each
with a migrated template; per test, a clone on each server given its shard id 0, 1, 2 with
harvest.set_shard_id (made ahead, on the three servers at once: ClusterPool); and a way to
stop one server mid-test and start it again.

The servers are embedded ones even when HARVEST_TEST_DSN names another server: the point is
several servers, one of which can be taken down.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import psycopg
import pytest
from stopping import assert_thread_stopped

from harvest.db import testkit
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

SHARD_COUNT = 3
TEMPLATE = "harvest_shard_template"
SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "max_connections": "100"}


def _admin(server: EmbeddedPostgres) -> psycopg.Connection:
    return psycopg.connect(server.dsn, autocommit=True)


@dataclass
class ShardServers:
    """The session's servers: ``servers[n]`` hosts shard n's databases."""

    servers: list[EmbeddedPostgres]

    def create_database(self, shard: int, name: str, template: str | None = TEMPLATE) -> str:
        server = self.servers[shard]
        testkit.create_database(server.dsn, name, template)
        return server.dsn_for(name)

    def drop_database(self, shard: int, name: str) -> None:
        server = self.servers[shard]
        if not server.started:
            server.resume()
        with _admin(server) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class ShardCluster:
    """One test's shards: ``dsns[n]`` is shard n's database (on server n, shard id n).

    ``stop(n)`` takes server n down (its sessions are cut), ``start(n)`` brings it back with
    its data; the fixture restarts any server a test left stopped."""

    servers: ShardServers
    dsns: dict[int, str]
    names: dict[int, str] = field(default_factory=dict)

    def stop(self, shard: int) -> None:
        self.servers.servers[shard].pause()

    def start(self, shard: int) -> None:
        self.servers.servers[shard].resume()

    def is_up(self, shard: int) -> bool:
        return self.servers.servers[shard].started

    def connect(self, shard: int) -> psycopg.Connection:
        return psycopg.connect(self.dsns[shard], autocommit=True)


def _on_each_shard(action: Callable[[int], object]) -> None:
    """``action(shard)`` for the three shards at once, a thread each; raises the first error once
    all have finished. Each server works on its own: one after another, a test's setup waited
    for the sum of three CREATE DATABASE (0.2 to 2 s each on a loaded machine), now for the
    slowest."""
    with ThreadPoolExecutor(SHARD_COUNT, thread_name_prefix="shard") as pool:
        done = [pool.submit(action, shard) for shard in range(SHARD_COUNT)]
    for future in done:
        future.result()


@pytest.fixture(scope="session")
def shard_servers() -> Iterator[ShardServers]:
    servers = [EmbeddedPostgres(settings=SETTINGS, in_memory=True) for _ in range(SHARD_COUNT)]

    def start(shard: int) -> None:
        server = servers[shard]
        server.start()
        with _admin(server) as conn:
            conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
        template = server.dsn_for(TEMPLATE)
        Migrator(template).run()
        with psycopg.connect(template, autocommit=True) as conn:
            conn.execute("UPDATE harvest.engine_settings SET test_clock_allowed = true")

    try:
        _on_each_shard(start)
        yield ShardServers(servers)
    finally:
        _on_each_shard(lambda shard: servers[shard].stop())


class ClusterPool:
    """The next test's three databases, made on a thread while the current test runs: a clone of
    the template on each server, given its shard id (harvest.set_shard_id). A test's setup then
    waits only when the thread has fallen behind (as tests/conftest.py's ClonePool does for the
    fast suite). A cluster is made from the template after the previous one was taken and
    never handed out twice: a test sees what a clone made in its own setup gave it.

    A test may stop a server while the next cluster is being made: that cluster is then
    dropped and made again in the next test's setup (after the teardown has restarted every
    server). The thread never starts a server a test stopped."""

    def __init__(self, servers: ShardServers):
        self._servers = servers
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="shard-clones")
        self._next = self._submit()

    def _make(self, name: str) -> None:
        def create(shard: int) -> None:
            dsn = self._servers.create_database(shard, name)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SELECT harvest.set_shard_id(%s, 'tests')", (shard,))

        _on_each_shard(create)

    def _submit(self) -> tuple[str, Future[None]]:
        name = f"s_{uuid.uuid4().hex[:12]}"
        return name, self._thread.submit(self._make, name)

    def drop(self, name: str) -> None:
        """Drop ``name`` on each server (starting a stopped one), made or not."""
        _on_each_shard(lambda shard: self._servers.drop_database(shard, name))

    def take(self) -> ShardCluster:
        name, made = self._next
        try:
            made.result()
        except Exception:  # a server stopped while it was made: again, now that all are up
            self.drop(name)
            self._make(name)
        finally:
            self._next = self._submit()
        names = dict.fromkeys(range(SHARD_COUNT), name)
        dsns = {shard: self._servers.servers[shard].dsn_for(name) for shard in range(SHARD_COUNT)}
        return ShardCluster(self._servers, dsns, names)

    def close(self) -> None:
        """Drop the cluster nobody took (made, half made if a server was stopped, or not)."""
        name, made = self._next
        made.exception()  # finished, whichever way: it is dropped either way
        self._thread.shutdown()
        self.drop(name)


@pytest.fixture(scope="session")
def cluster_pool(shard_servers: ShardServers) -> Iterator[ClusterPool]:
    pool = ClusterPool(shard_servers)
    yield pool
    pool.close()


@pytest.fixture
def shards(cluster_pool: ClusterPool) -> Iterator[ShardCluster]:
    """A fresh database on each of the three servers, shard ids 0, 1, 2 (harvest.set_shard_id)."""
    cluster = cluster_pool.take()
    yield cluster
    cluster_pool.drop(cluster.names[0])


@pytest.fixture
def empty_db(shard_servers: ShardServers) -> Iterator[tuple[int, str]]:
    """An empty database (no Harvest schema) on server 1: (server, dsn), for migrate tests."""
    name = f"e_{uuid.uuid4().hex[:12]}"
    dsn = shard_servers.create_database(1, name, template=None)
    yield 1, dsn
    shard_servers.drop_database(1, name)


class PerShardWorkers:
    """One ordinary single-database Worker per shard database, all on one event loop in a thread:
    everything of a run lives on its shard, so a worker per shard runs every run."""

    def __init__(self, workers: list):
        self.workers = workers
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def go() -> None:
            self.loop = asyncio.get_running_loop()
            self._ready.set()
            await asyncio.gather(*(worker.run() for worker in self.workers))

        try:
            asyncio.run(go())
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    def start(self) -> PerShardWorkers:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self.loop is not None and self._thread.is_alive():
            for worker in self.workers:
                self.loop.call_soon_threadsafe(worker.request_stop)
        self._thread.join(30)
        if self.error is not None:
            raise self.error
        assert_thread_stopped(self._thread, self.loop, "the per-shard workers (30 s after their stop)")


@pytest.fixture
def per_shard_workers(shards: ShardCluster) -> Iterator:
    """per_shard_workers(app, shard_ids=(0, 1, 2), **worker_options): a Worker on each of those
    shards' databases, stopped after the test (until the worker itself is shard-aware)."""
    from harvest import Worker

    running: list[PerShardWorkers] = []

    def start(app, shard_ids=tuple(range(SHARD_COUNT)), **options) -> PerShardWorkers:
        options.setdefault("poll_interval", 0.5)
        options.setdefault("scan_interval", 0.2)
        options.setdefault("run_retention", False)  # a test that wants the janitor asks for it
        group = PerShardWorkers([Worker(app, shards.dsns[s], **options) for s in shard_ids]).start()
        running.append(group)
        return group

    yield start
    for group in running:
        group.stop()
