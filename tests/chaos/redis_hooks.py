"""What run_worker.py adds to a worker with Redis dispatch (tests/chaos/test_chaos_redis.py).

* ``CHAOS_REDIS_COMMAND_TIMEOUT`` / ``CHAOS_REDIS_RECLAIM_MS``: the channel's command timeout
  and the take-over's idle time, shortened so that a test sees them within its minute;
* ``CHAOS_CLAIM_LATE_MS``: each Postgres claim of the worker starts that late, so that its
  consumer wins more races for the rows it reads references to (LISTEN/NOTIFY usually wins:
  docs/redis-dispatch.md, "Is it worth running?"), as test_redis_dispatch.py does in process;
* ``CHAOS_CLAIM_GATE=<file>``: while ``<file>`` exists, the worker's Postgres claim takes
  workflow tasks only (by name, with the claim's own predicate: claim_named_tasks), so that
  every activity row its decisions make waits for a consumer to read its reference: the moments
  below come for certain, whatever the machine's load (without it, LISTEN/NOTIFY wins most
  races for a row, and under load all of them);
* ``CHAOS_REDIS_HOLD=read:<file>``: the first time the consumer has read references of which
  at least one names a row still claimable (pending and due), the worker writes those tasks
  to ``<file>`` and stops itself (SIGSTOP) before it claims them: the test kills it there;
* ``CHAOS_REDIS_HOLD=claimed:<file>``: the first time a named claim took rows, the worker
  writes them (those rows only) to ``<file>`` and stops itself before it runs them and before
  it acks;
* a log line ``chaos redis: published=.. read=.. claimed=.. skipped=.. losses=.. connected=..``
  whenever the dispatch's counters change, so a test reads them from a killed worker's log too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import psycopg

from harvest import Worker
from harvest.db import redis_channel
from harvest.db.redis_channel import RedisChannel
from harvest.db.sqlapi import AsyncSqlApi
from harvest.worker import redis_dispatch
from harvest.worker.redis_dispatch import RedisDispatch

log = logging.getLogger("chaos")


def _stop_here(mark: Path, tasks: list[dict[str, Any]]) -> None:
    """Write the tasks held to ``mark`` (whole: a rename), then freeze this process."""
    tmp = mark.with_name(mark.name + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "tasks": tasks}))
    tmp.rename(mark)
    os.kill(os.getpid(), signal.SIGSTOP)


async def _claimable(task_ids: list[int]) -> list[dict[str, Any]]:
    async with await psycopg.AsyncConnection.connect(os.environ["HARVEST_DATABASE_URL"]) as conn:
        cur = await conn.execute(
            "SELECT id AS task_id, execution_id::text AS execution_id, kind, seq FROM harvest.tasks "
            "WHERE id = ANY(%s) AND status = 'pending' AND due_at <= now() ORDER BY id",
            (task_ids,),
        )
        names = [d.name for d in cur.description or ()]
        return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]


def _hold_after_read(mark: Path) -> None:
    claim = RedisDispatch._claim

    async def held(self: RedisDispatch, channel: RedisChannel, refs: list[Any]) -> None:
        if not mark.exists():
            pending = await _claimable([r.task_id for r in refs if r.task_id])
            if pending:
                _stop_here(mark, pending)
        await claim(self, channel, refs)

    RedisDispatch._claim = held  # type: ignore[method-assign]


def _hold_after_claim(mark: Path) -> None:
    run_claimed, ack, claim_named = Worker.run_claimed, RedisChannel.ack, AsyncSqlApi.claim_named_tasks
    named: set[int] = set()
    claimed: list[dict[str, Any]] = []

    async def noted_claim(self: AsyncSqlApi, *args: Any, **kwargs: Any) -> Any:
        rows = await claim_named(self, *args, **kwargs)
        named.update(row["task_id"] for row in rows)
        return rows

    def note(self: Worker, task: dict[str, Any]) -> None:
        # Only the consumer's named claim: a task claimed with a batch of activity results
        # (worker/completions.py) comes here too, and it is already running when the ack stops
        # the process (its start_to_close runs out while frozen: it fails, refused, on waking).
        if task["task_id"] in named:
            claimed.append({k: task.get(k) for k in ("task_id", "execution_id", "kind", "seq")})
        run_claimed(self, task)  # (spawned: it runs at the next await, which the ack's stop precedes)

    async def held_ack(self: RedisChannel, refs: Any) -> None:
        if claimed and not mark.exists():
            _stop_here(mark, [{**t, "execution_id": str(t["execution_id"])} for t in claimed])
        claimed.clear()
        await ack(self, refs)

    AsyncSqlApi.claim_named_tasks = noted_claim  # type: ignore[method-assign]
    Worker.run_claimed = note  # type: ignore[method-assign]
    RedisChannel.ack = held_ack  # type: ignore[method-assign]


_CLAIM_NAMED = AsyncSqlApi.claim_named_tasks  # (unwrapped: the hold of 'claimed' notes the consumer's only)


def _gate_claim(gate: Path) -> None:
    claim = Worker._claim
    conn: list[psycopg.AsyncConnection] = []

    async def gated(self: Worker) -> Any:
        if not gate.exists():
            return await claim(self)
        want = min(self.free_slots(), self.claim_batch)
        lane = self.lanes[0]
        lane.backlog = False
        if want <= 0:
            return [], False
        if not conn:
            conn.append(
                await psycopg.AsyncConnection.connect(os.environ["HARVEST_DATABASE_URL"], autocommit=True)
            )
        cur = await conn[0].execute(
            "SELECT id FROM harvest.tasks WHERE kind = 'workflow' AND status = 'pending' "
            "AND due_at <= now() AND queue = ANY(%s) ORDER BY due_at LIMIT %s",
            (self.queues, want),
        )
        ids = [row[0] for row in await cur.fetchall()]
        if not ids:
            return [], False
        with self.holding_slots(len(ids)):
            claimed = await _CLAIM_NAMED(lane.sql, self.worker_id, self.queues, ids, self.workflow_lease)
        for task in claimed:
            task["_lane"] = lane
            self._spawn(task)
        return claimed, False

    Worker._claim = gated  # type: ignore[method-assign]


def _claim_late(ms: int) -> None:
    claim = Worker._claim

    async def late(self: Worker) -> Any:
        await asyncio.sleep(ms / 1000)
        return await claim(self)

    Worker._claim = late  # type: ignore[method-assign]


def install() -> None:
    if gate := os.environ.get("CHAOS_CLAIM_GATE"):
        _gate_claim(Path(gate))
    if late := os.environ.get("CHAOS_CLAIM_LATE_MS"):
        _claim_late(int(late))
    if timeout := os.environ.get("CHAOS_REDIS_COMMAND_TIMEOUT"):
        redis_channel.COMMAND_TIMEOUT_SECS = float(timeout)
        redis_channel.CONNECT_TIMEOUT_SECS = float(timeout)
    if idle := os.environ.get("CHAOS_REDIS_RECLAIM_MS"):
        redis_dispatch.RECLAIM_IDLE_MS = int(idle)
        redis_dispatch.RECLAIM_EVERY_SECS = int(idle) / 2000
    hold = os.environ.get("CHAOS_REDIS_HOLD")
    if hold:
        moment, path = hold.split(":", 1)
        {"read": _hold_after_read, "claimed": _hold_after_claim}[moment](Path(path))


async def report(dispatch: RedisDispatch) -> None:
    last = None
    while True:
        now = (
            dispatch.published,
            dispatch.read,
            dispatch.claimed,
            dispatch.skipped,
            dispatch.losses,
            dispatch.connected,
        )
        if now != last:
            log.info("chaos redis: published=%d read=%d claimed=%d skipped=%d losses=%d connected=%s", *now)
            last = now
        await asyncio.sleep(0.1)


def counters(log_text: str) -> dict[str, Any]:
    """The last counters a worker's log shows (all zero if none)."""
    out: dict[str, Any] = dict.fromkeys(("published", "read", "claimed", "skipped", "losses"), 0)
    out["connected"] = None
    for line in log_text.splitlines():
        if "chaos redis: " in line:
            for pair in line.split("chaos redis: ", 1)[1].split():
                key, value = pair.split("=", 1)
                out[key] = value == "True" if key == "connected" else int(value)
    return out
