"""Helpers of the rebalancing tests (tests/shard/test_rebalance*.py): park runs with plain SQL
calls (the worker protocol, no workflow code), read a run's rows on every shard, and run a
Worker in a thread."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import psycopg

from harvest import App, Worker


def park(
    dsn: str, workflow_id: str, commands: list[dict[str, Any]] | None = None, queue: str | None = None
) -> str:
    """Start a run on the database and decide its first task with ``commands`` (none: it waits
    for a signal; a start_timer: it waits on a timer), on a queue of its own. Returns the
    execution id."""
    queue = queue or f"rbq-{workflow_id}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT * FROM harvest.start_workflow('rb_wf', '[]', %s, %s)", (workflow_id, queue))
        task = conn.execute(
            "SELECT task_id, fencing_token, execution_id "
            "FROM harvest.claim_tasks('w-test', ARRAY[%s], 1, 30)",
            (queue,),
        ).fetchone()
        assert task is not None, "the start left no claimable workflow task"
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s, 'w-test')",
            (task[0], task[1], json.dumps(commands or [])),
        )
        return str(task[2])


def row(dsn: str, execution_id: str) -> dict[str, Any] | None:
    """The execution's row on one shard (status, pointer, chain), or None."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT status, migrated_to_shard, migrated_from_shards, last_event_id FROM harvest.executions "
            "WHERE id = %s",
            (execution_id,),
        ).fetchone()
    if found is None:
        return None
    return dict(
        zip(("status", "migrated_to_shard", "migrated_from_shards", "last_event_id"), found, strict=True)
    )


def scalar(dsn: str, sql: str, *params: Any) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchone()[0]


def authoritative(dsns: dict[int, str], execution_id: str) -> list[int]:
    """The shards on which the run is authoritative: exactly one, always. A row that is
    neither a seal nor a staged copy is; so is a staged copy a seal points at (between a
    cutover and its activation the run is claimable nowhere, yet it lives there)."""
    rows = {shard: row(dsn, execution_id) for shard, dsn in dsns.items()}
    pointed = {r["migrated_to_shard"] for r in rows.values() if r and r["status"] == "MIGRATED"}
    return sorted(
        shard
        for shard, r in rows.items()
        if r is not None
        and (
            r["status"] not in ("MIGRATED", "MIGRATING") or (r["status"] == "MIGRATING" and shard in pointed)
        )
    )


def signals(dsn: str, execution_id: str, payload: Any) -> int:
    """How many SignalReceived events with ``payload`` the run's history holds on one shard."""
    return scalar(
        dsn,
        "SELECT count(*) FROM harvest.events WHERE execution_id = %s AND event_type = 'SignalReceived' "
        "AND event_data -> 'payload' = %s::jsonb",
        execution_id,
        json.dumps(payload),
    )


def wait_until(predicate, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout}s"
        time.sleep(0.05)


class RunningWorker:
    """A Worker on its own event loop in a thread, on one shard's database."""

    def __init__(self, app: App, dsn: str, **options: Any):
        options.setdefault("poll_interval", 0.2)
        options.setdefault("scan_interval", 0.2)
        self.worker = Worker(app, dsn, **options)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def go() -> None:
            self.loop = asyncio.get_running_loop()
            self._ready.set()
            await self.worker.run()

        try:
            asyncio.run(go())
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    def __enter__(self) -> RunningWorker:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.loop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.worker.request_stop)
        self._thread.join(30)
        if self.error is not None:
            raise self.error
