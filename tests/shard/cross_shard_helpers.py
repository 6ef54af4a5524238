"""Running the cross-shard tests: one ordinary worker per shard database, each ticking a relay
pump for its own shard (the deployment shape of one process per shard), and a client per shard."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg.rows
import psycopg.types.json
from rebalance_helpers import park

from harvest import App, Client, Worker
from harvest.shard import AsyncShardPools, ShardRouter
from harvest.shard.relay_pump import RelayPump

SHARDS = (0, 1, 2)


def enable_cross_shard_relays(cluster: Any) -> None:
    """The owner-only switch, on every shard together (docs/internals.md, "Relays across shards")."""
    for shard in SHARDS:
        with cluster.connect(shard) as conn:
            conn.execute("UPDATE harvest.engine_settings SET cross_shard_relays = true")


def router() -> ShardRouter:
    return ShardRouter(SHARDS, SHARDS, 0)


class ShardWorker:
    """A Worker for one shard's database on its own event loop in a thread, with a relay pump
    over every shard's database that sweeps this shard."""

    def __init__(self, app: App, cluster: Any, shard: int, *, pump: bool = True, **options: Any):
        self.shard = shard
        self.pools = AsyncShardPools(router(), cluster.dsns, max_size=4, acquire_timeout=1.0)
        self.pump = RelayPump(self.pools, sources=(shard,), lease_secs=5.0) if pump else None
        options.setdefault("poll_interval", 0.5)
        options.setdefault("scan_interval", 0.2)
        self.worker = Worker(app, cluster.dsns[shard], relay_pump=self.pump, **options)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def go() -> None:
            self.loop = asyncio.get_running_loop()
            self._ready.set()
            try:
                await self.worker.run()
            finally:
                await self.pools.close()

        try:
            asyncio.run(go())
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    def start(self) -> ShardWorker:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self.loop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.worker.request_stop)
        self._thread.join(30)
        if self.error is not None:
            raise self.error


@contextmanager
def shard_workers(
    app: App, cluster: Any, shards: tuple[int, ...] = SHARDS, **options: Any
) -> Iterator[dict[int, ShardWorker]]:
    workers = {s: ShardWorker(app, cluster, s, **options).start() for s in shards}
    try:
        yield workers
    finally:
        for worker in workers.values():
            worker.stop()


@contextmanager
def clients(cluster: Any) -> Iterator[dict[int, Client]]:
    made = {s: Client(cluster.dsns[s]) for s in SHARDS}
    try:
        yield made
    finally:
        for client in made.values():
            client.close()


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def remote_relays(cluster: Any, shard: int) -> list[tuple]:
    with cluster.connect(shard) as conn:
        return conn.execute(
            "SELECT id, kind, target_shard, attempts, last_error FROM harvest.relays WHERE remote ORDER BY id"
        ).fetchall()


def park_with_remote_child(cluster: Any, key: str, policy: str = "terminate") -> tuple[str, dict[str, Any]]:
    """A parent on shard 0 whose decision placed a child (workflow ``kid``, queue ``kidq``) on
    shard 1 (its row ``starting``), with no worker and no pump: the test plays the pump's steps.
    Returns the parent's id and its ``cross_shard_children`` row, as the pump claims it."""
    command = {
        "type": "start_child_workflow",
        "seq": 1,
        "workflow_name": "kid",
        "workflow_id": f"{key}-kid",
        "task_queue": "kidq",
        "parent_close_policy": policy,
        "shard": 1,
    }
    parent = park(cluster.dsns[0], key, [command])
    with cluster.connect(0) as conn:
        conn.row_factory = psycopg.rows.dict_row
        row = conn.execute(
            "SELECT * FROM harvest.cross_shard_children WHERE parent_execution_id = %s", (uuid.UUID(parent),)
        ).fetchone()
    return parent, row


def decide_child(cluster: Any, commands: list[dict[str, Any]]) -> None:
    """Decide the current run of park_with_remote_child's child on shard 1 (its queue ``kidq``)
    with ``commands``, as a worker there would."""
    with cluster.connect(1) as conn:
        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w-test', ARRAY['kidq'], 1, 30)"
        ).fetchone()
        assert task is not None, "the child has no workflow task"
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s, 'w-test')",
            (task[0], task[1], psycopg.types.json.Jsonb(commands)),
        )
