"""A pooled connection whose backend ended while it sat idle (a server restart, pg_terminate_backend,
idle_session_timeout) is not lent: its server spoke (its FATAL error, then the socket's end), so the
pool pings it, finds it dead and sweeps the others at once (harvest.db.pools, ``_server_spoke``).
A call then runs on a live connection, whatever it does: nothing was sent to the dead one, so even
a start or a signal is made exactly once. Before, the call raised AdminShutdown (57P01) or
"server closed the connection unexpectedly", one call per dead connection."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import psycopg_pool.pool
import psycopg_pool.pool_async
import pytest

from harvest import AsyncClient, Client
from harvest.db.pools import open_async_pool, open_pool


def _terminate_all_but_me(db: str) -> int:
    """Terminate every other client backend of the test database, and wait until they are gone
    (each has then sent its FATAL error and closed its socket)."""
    with psycopg.connect(db, autocommit=True) as admin:
        mine = "datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        pids = [r[0] for r in admin.execute(f"SELECT pid FROM pg_stat_activity WHERE {mine}").fetchall()]
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        deadline = time.monotonic() + 20
        alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
        while admin.execute(alive, [pids]).fetchone()[0]:
            assert time.monotonic() < deadline, "the terminated backends did not end"
            time.sleep(0.01)
    return len(pids)


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses psycopg_pool takes between two failed checks of one lend (none is wanted)."""
    taken: list[float] = []
    sleep, asleep = psycopg_pool.pool.sleep, psycopg_pool.pool_async.asleep

    def sleeping(delay: float) -> None:
        if delay > 0:
            taken.append(delay)
        sleep(delay)

    async def asleeping(delay: float) -> None:
        if delay > 0:
            taken.append(delay)
        await asleep(delay)

    monkeypatch.setattr(psycopg_pool.pool, "sleep", sleeping)
    monkeypatch.setattr(psycopg_pool.pool_async, "asleep", asleeping)
    return taken


def test_the_sync_pool_lends_a_live_connection_after_its_backends_ended(db: str, pauses: list[float]) -> None:
    pool = open_pool(db, min_size=4, max_size=4)
    try:
        pool.wait()
        with pool.connection() as a, pool.connection() as b, pool.connection() as c, pool.connection() as d:
            before = {conn.info.backend_pid for conn in (a, b, c, d)}
        assert _terminate_all_but_me(db) >= 4
        for _ in range(4):
            with pool.connection() as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
                assert conn.info.backend_pid not in before
        assert pauses == []  # the dead were swept at once, not found one pause at a time
    finally:
        pool.close()


def test_the_async_pool_lends_a_live_connection_after_its_backends_ended(
    db: str, pauses: list[float]
) -> None:
    async def go() -> None:
        pool = await open_async_pool(db, min_size=4, max_size=4)
        try:
            async with pool.connection() as a, pool.connection() as b, pool.connection() as c:
                before = {conn.info.backend_pid for conn in (a, b, c)}
            assert _terminate_all_but_me(db) >= 4
            for _ in range(4):
                async with pool.connection() as conn:
                    assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
                    assert conn.info.backend_pid not in before
        finally:
            await pool.close()

    asyncio.run(go())
    assert pauses == []


def _calls(handle: Any, client: Any, workflow_id: str) -> list[tuple[str, Any]]:
    return [
        ("start", lambda: client.start_workflow("pool_wf", 2, workflow_id=workflow_id)),
        ("signal", lambda: handle.signal("nudge", 1)),
        ("describe", lambda: handle.describe()),
        ("cancel", lambda: handle.cancel()),
    ]


def _assert_two_runs_one_signal(db: str) -> None:
    """What _calls made, each once: two runs started, one signal received."""
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.executions").fetchone()[0] == 2
        assert (
            conn.execute(
                "SELECT count(*) FROM harvest.events WHERE event_type = 'SignalReceived'"
            ).fetchone()[0]
            == 1
        )


def test_a_client_call_after_its_backends_ended_runs_once(db: str) -> None:
    """Each call, a start and a signal too, after every backend of the client's pool ended: made
    once, on a live connection (before: AdminShutdown from psycopg, for each dead connection)."""
    with Client(db) as client:
        handle = client.start_workflow("pool_wf", 1, workflow_id="pool-1")
        for name, call in _calls(handle, client, "pool-2"):
            _terminate_all_but_me(db)
            assert call() is not None or name == "signal", name
    _assert_two_runs_one_signal(db)


def test_an_async_client_call_after_its_backends_ended_runs_once(db: str) -> None:
    async def go() -> None:
        async with await AsyncClient.connect(db) as client:
            handle = await client.start_workflow("pool_wf", 1, workflow_id="pool-1")
            for name, call in _calls(handle, client, "pool-2"):
                _terminate_all_but_me(db)
                assert (await call()) is not None or name == "signal", name

    asyncio.run(go())
    _assert_two_runs_one_signal(db)
