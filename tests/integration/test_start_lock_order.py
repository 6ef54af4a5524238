"""A run continuing as new and a start of its business key take their locks in one order.

Every start takes its key's start lock (``harvest.start:<name>:<id>``) before it locks the
key's runs; a decision whose continue_as_new starts the successor used to lock its run first
and take the start lock after, so a ``signal_with_start`` (or any attaching start) of the
rotating key could deadlock with it (SQLSTATE 40P01, a raw psycopg error at the client).
docs/internals.md, "Lock order".
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from race_helpers import Racer, race_behind_a_held_lock, run_row

from harvest import App, AsyncClient, Client, workflow
from harvest.core.errors import NotFound, TransactionConflict, WorkflowNotRunning
from harvest.db import sqlapi


def test_a_rotation_and_a_signal_with_start_of_its_key_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """The interleaving that deadlocked, forced: a third session holds the run's row while
    the rotation and then the signal_with_start queue up behind it, then lets go."""
    run_id = conn.execute(
        "SELECT execution_id FROM harvest.start_workflow('rotor', '[0]', 'rotor-1')"
    ).fetchone()[0]
    task_id, token = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('w', ARRAY['default'], 1)"
    ).fetchone()
    through = conn.execute(
        "SELECT last_event_id FROM harvest.executions WHERE id = %s", (run_id,)
    ).fetchone()[0]

    rotation = Jsonb([{"type": "continue_as_new", "input": [1]}])
    outcome = race_behind_a_held_lock(
        db,
        conn,
        run_row(run_id),
        Racer(
            "rotate",
            lambda c: c.execute(
                "SELECT execution_status FROM harvest.complete_workflow_task(%s, %s, %s, %s)",
                (task_id, token, through, rotation),
            ).fetchone()[0],
            waits_on="the run's row",
        ),
        Racer(
            "sws",
            lambda c: c.execute(
                "SELECT execution_id, started_fresh FROM harvest.signal_with_start("
                "'rotor', 'rotor-1', 'tick', '\"x\"')"
            ).fetchone(),
            waits_on="rotor-1's start lock, the rotation holding it (before the fix: the run's row)",
        ),
    )

    assert outcome["rotate"] == "CONTINUED_AS_NEW", outcome
    successor, started_fresh = outcome["sws"]  # no DeadlockDetected on either side
    assert not started_fresh and successor != run_id  # it attached to the rotation's successor
    assert conn.execute(
        "SELECT status, continued_from FROM harvest.executions WHERE id = %s", (successor,)
    ).fetchone() == ("RUNNING", run_id)
    assert (
        conn.execute(
            "SELECT count(*) FROM harvest.events WHERE execution_id = %s AND event_type = 'SignalReceived'"
            " AND event_data ->> 'name' = 'tick'",
            (successor,),
        ).fetchone()[0]
        == 1
    )


@pytest.mark.parametrize("reuse_policy", ["allow_duplicate", "allow_duplicate_failed_only"])
def test_a_start_racing_a_reset_of_its_key_reads_the_fork(
    db: str, conn: psycopg.Connection, reuse_policy: str
) -> None:
    """A reset ends its run and inserts the fork under the same key; a start of the key that
    arrives meanwhile waits, then attaches to the fork: it neither attaches to the ended run
    nor collides with the fork (the reset takes the key's start lock before the run's row)."""
    run_id = conn.execute(
        "SELECT execution_id FROM harvest.start_workflow('rotor', '[0]', 'reset-race')"
    ).fetchone()[0]
    forked: dict[str, Any] = {}

    def reset(holder: psycopg.Connection) -> None:  # the reset, left uncommitted
        forked["fork"] = holder.execute(
            "SELECT (harvest.reset_workflow(%s, 1, 'race') ->> 'new_execution_id')::uuid", (run_id,)
        ).fetchone()[0]

    outcome = race_behind_a_held_lock(
        db,
        conn,
        reset,
        Racer(
            "start",
            lambda c: c.execute(
                "SELECT execution_id, started_fresh FROM harvest.start_workflow("
                "'rotor', '[1]', 'reset-race', 'default', %s)",
                (reuse_policy,),
            ).fetchone(),
            waits_on="the key's start lock, held by the reset",
        ),
    )
    fork = forked["fork"]

    assert outcome["start"] == (fork, False), outcome
    assert conn.execute(
        "SELECT array_agg(status ORDER BY created_at) FROM harvest.executions"
        " WHERE workflow_id = 'reset-race'"
    ).fetchone()[0] == ["TERMINATED", "RUNNING"]


@workflow
async def ticking_rotor(ctx: Any, n: int) -> int:
    await ctx.wait_for_signal("tick")
    await ctx.continue_as_new(n + 1)
    return n


def test_signal_with_start_races_a_worker_rotating_after_every_signal(
    start_worker: Callable[..., Any],
    client: Client,
    conn: psycopg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real connections: a worker continues the run as new after each signal while four
    threads signal_with_start its key; every call succeeds at its first attempt (the client's
    retry is off, so a deadlock would fail the call) and no signal is lost."""
    monkeypatch.setattr(sqlapi, "CONFLICT_ATTEMPTS", 1)
    start_worker(App(workflows=[ticking_rotor]), poll_interval=0.05)
    client.start_workflow(ticking_rotor, 0, workflow_id="ticking")
    threads, calls = 4, 25
    failures: list[BaseException] = []

    def send() -> None:
        for _ in range(calls):
            try:
                client.signal_with_start(ticking_rotor, 0, workflow_id="ticking", signal="tick")
            except BaseException as exc:
                failures.append(exc)

    senders = [threading.Thread(target=send) for _ in range(threads)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(60)
    assert failures == []
    # Each run reads one tick and rotates: the chain grows by one run per signal.
    deadline = time.monotonic() + 30
    while (
        rotated := conn.execute(
            "SELECT count(*) FROM harvest.executions"
            " WHERE workflow_id = 'ticking' AND status = 'CONTINUED_AS_NEW'"
        ).fetchone()[0]
    ) < threads * calls:
        assert time.monotonic() < deadline, f"{rotated} rotations for {threads * calls} signals"
        time.sleep(0.05)
    assert rotated == threads * calls


class _Conflicting:
    """A connection stand-in whose first ``fail`` statements raise ``error`` (as Postgres does
    when it rolls a statement's transaction back), and which runs the rest on ``real``."""

    def __init__(self, real: psycopg.Connection, error: type[psycopg.Error], fail: int):
        self.real, self.error, self.fail, self.calls = real, error, fail, 0
        self.info = real.info

    def cursor(self, **kwargs: Any) -> _ConflictingCursor:
        return _ConflictingCursor(self, self.real.cursor(**kwargs))


class _ConflictingCursor:
    def __init__(self, conn: _Conflicting, real: psycopg.Cursor[Any]):
        self.conn, self.real = conn, real
        self.description: Any = None

    def __enter__(self) -> _ConflictingCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.real.close()

    def execute(self, query: Any, params: Any = None) -> _ConflictingCursor:
        self.conn.calls += 1
        if self.conn.calls <= self.conn.fail:
            raise self.conn.error("forced")
        self.real.execute(query, params)
        self.description = self.real.description
        return self

    @property
    def pgresult(self) -> Any:  # (what the SQL API tests for rows: sqlapi._has_rows)
        return self.real.pgresult

    def fetchall(self) -> list[Any]:
        return self.real.fetchall()


@pytest.mark.parametrize("error", [psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure])
def test_a_conflict_is_retried_then_typed(conn: psycopg.Connection, error: type[psycopg.Error]) -> None:
    conn.execute("SELECT harvest.start_workflow('rotor', '[0]', 'typed-1')")
    once = _Conflicting(conn, error, fail=sqlapi.CONFLICT_ATTEMPTS - 1)
    started = sqlapi.SqlApi(once).start_workflow(  # type: ignore[arg-type]
        "rotor", [0], "typed-1", "default", "allow_duplicate", "unspecified", {}, 0
    )
    assert once.calls == sqlapi.CONFLICT_ATTEMPTS and started["started_fresh"] is False
    always = _Conflicting(conn, error, fail=99)
    with pytest.raises(TransactionConflict, match="retry the call") as raised:
        sqlapi.SqlApi(always).signal_workflow(started["execution_id"], "tick", None)  # type: ignore[arg-type]
    assert always.calls == sqlapi.CONFLICT_ATTEMPTS and raised.value.sqlstate == error.sqlstate
    assert not isinstance(raised.value.__cause__, psycopg.Error)


def test_the_async_api_retries_a_conflict_too(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real_on = sqlapi.AsyncSqlApi._on
    calls = 0

    async def conflicting(conn: psycopg.AsyncConnection, sql: str, params: dict[str, Any]) -> Any:
        nonlocal calls
        calls += 1
        if calls < sqlapi.CONFLICT_ATTEMPTS:
            raise psycopg.errors.DeadlockDetected("forced")
        return await real_on(conn, sql, params)

    monkeypatch.setattr(sqlapi.AsyncSqlApi, "_on", staticmethod(conflicting))

    async def go() -> Any:
        async with await psycopg.AsyncConnection.connect(db, autocommit=True) as aconn:
            return await sqlapi.AsyncSqlApi.on_connection(aconn).signal_with_start(
                "rotor", "async-1", "tick", None, [0], "default", {}
            )

    assert asyncio.run(go())["started_fresh"] is True
    assert calls == sqlapi.CONFLICT_ATTEMPTS


def test_a_conflict_in_the_callers_transaction_is_typed_at_once(db: str) -> None:
    """Inside the caller's transaction nothing is run again: the caller owns the retry."""
    with psycopg.connect(db) as own:  # not autocommit: the call runs in a transaction block
        own.execute("SELECT 1")
        failing = _Conflicting(own, psycopg.errors.DeadlockDetected, fail=99)
        with pytest.raises(TransactionConflict, match="caller's transaction"):
            sqlapi.SqlApi(failing).signal_workflow(  # type: ignore[arg-type]
                "00000000-0000-0000-0000-000000000000", "tick", None
            )
        assert failing.calls == 1


def _rotate(conn: psycopg.Connection, times: int) -> None:
    """Continue the one running run of queue 'default' as new ``times`` times, by SQL."""
    for _ in range(times):
        task_id, token, run = conn.execute(
            "SELECT task_id, fencing_token, execution_id FROM harvest.claim_tasks('w', ARRAY['default'], 1)"
        ).fetchone()
        through = conn.execute(
            "SELECT last_event_id FROM harvest.executions WHERE id = %s", (run,)
        ).fetchone()[0]
        conn.execute(
            "SELECT harvest.complete_workflow_task(%s, %s, %s, %s)",
            (task_id, token, through, Jsonb([{"type": "continue_as_new", "input": []}])),
        )


def test_a_handle_follows_the_chain_from_the_newest_run_it_reached(
    client: Client, conn: psycopg.Connection
) -> None:
    """One call follows at most 100 rotations, counted from the run the handle last reached:
    a handle in use keeps up with a chain of any length; one left behind by more is told
    how to reach the current run."""
    first = str(
        conn.execute("SELECT execution_id FROM harvest.start_workflow('chain', '[]', 'chain-1')").fetchone()[
            0
        ]
    )
    kept = client.get_handle(first)
    _rotate(conn, 60)
    kept.signal("poke")
    _rotate(conn, 60)  # 120 past the first run, 60 past the one the handle reached
    kept.signal("poke")
    current = client.get_handle(workflow_id="chain-1").describe()
    assert current["status"] == "RUNNING"
    assert (
        conn.execute(
            "SELECT count(*) FROM harvest.events WHERE execution_id = %s AND event_type = 'SignalReceived'",
            (current["id"],),
        ).fetchone()[0]
        == 1
    )
    with pytest.raises(WorkflowNotRunning, match=r"more than 100 times.*get_handle\(workflow_id="):
        client.get_handle(first).signal("poke")  # a fresh handle on the first run: 120 hops


def test_a_call_on_a_chain_whose_current_run_is_gone_says_so(
    db: str, client: Client, conn: psycopg.Connection
) -> None:
    """The chain's last run continued as new and its successor was erased by hand (or purged):
    no run of it is current, and none will be. A signal, cancel, terminate, pause or resume by an
    execution id of the chain, and a result wait, walk to that last run and stop there: NotFound
    naming it and why (it said only that the successor does not exist, a run the caller never
    named, with a hint that the execution id given might be a workflow id)."""
    first = str(
        conn.execute("SELECT execution_id FROM harvest.start_workflow('chain', '[]', 'broken-1')").fetchone()[
            0
        ]
    )
    _rotate(conn, 2)
    runs = [
        str(r[0])
        for r in conn.execute(
            "SELECT id FROM harvest.executions WHERE workflow_id = 'broken-1' ORDER BY created_at, id"
        ).fetchall()
    ]
    assert runs[0] == first and len(runs) == 3
    conn.execute("DELETE FROM harvest.executions WHERE id = %s", (runs[2],))  # the current run, erased
    why = (
        rf"chain ends at run {runs[1]}, which continued as new as run {runs[2]}, and that run does not "
        r"exist \(erased or purged\): no run of the chain is current"
    )
    handle = client.get_handle(first)
    for act in (
        lambda: handle.signal("poke"),
        handle.cancel,
        handle.terminate,
        handle.pause,
        handle.resume,
        lambda: client.get_handle(runs[1]).signal("poke"),
    ):
        with pytest.raises(NotFound, match=why) as raised:
            act()
        assert "is a workflow id" not in str(raised.value), "no hint that the id given is a workflow id"

    with pytest.raises(NotFound, match=why):
        handle.result(timeout=5)

    async def by_the_async_client() -> None:
        async with await AsyncClient.connect(db) as aclient:
            with pytest.raises(NotFound, match=why):
                await aclient.get_handle(first).signal("poke")
            with pytest.raises(NotFound, match=why):
                await aclient.get_handle(first).result(timeout=5)

    asyncio.run(by_the_async_client())


@pytest.mark.parametrize("lent", ["idle", "in_the_callers_transaction", "from_a_pool"])
def test_a_roled_connection_is_retried_only_when_it_was_lent_idle(
    db: str, monkeypatch: pytest.MonkeyPatch, lent: str
) -> None:
    """A face's role (RoledPool) does not make a call its own transaction: the connection's
    state when it was lent does. Over a caller's connection inside its transaction, a conflict
    is the caller's to retry (TransactionConflict at once); the call is not run again behind its
    back, in a transaction the conflict rolled back (or, forced here, one still open)."""
    from harvest.db.pools import RoledPool, open_async_pool

    real_on_after = sqlapi.AsyncSqlApi._on_after
    calls = 0

    async def conflicting(conn: Any, before: Any, sql: str, params: dict[str, Any], refused: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise psycopg.errors.SerializationFailure("forced")
        return await real_on_after(conn, before, sql, params, refused)

    monkeypatch.setattr(sqlapi.AsyncSqlApi, "_on_after", staticmethod(conflicting))

    async def signal(pool: Any) -> Any:
        api = sqlapi.AsyncSqlApi(RoledPool(pool, "harvest_operator"))
        return await api.signal_with_start("rotor", f"roled-{lent}", "tick", None, [0], "default", {})

    async def go() -> Any:
        if lent == "from_a_pool":
            pool = await open_async_pool(db, max_size=1)
            try:
                return await signal(pool)
            finally:
                await pool.close()
        async with await psycopg.AsyncConnection.connect(db, autocommit=True) as aconn:
            held = sqlapi.AsyncSqlApi.on_connection(aconn).pool
            if lent == "idle":
                return await signal(held)
            async with aconn.transaction():
                await aconn.execute("SELECT 1")
                return await signal(held)

    if lent == "in_the_callers_transaction":
        with pytest.raises(TransactionConflict, match="caller's transaction"):
            asyncio.run(go())
        assert calls == 1
    else:
        assert asyncio.run(go())["started_fresh"] is True
        assert calls == 2


def test_a_conflict_on_a_callers_connection_without_autocommit_is_the_callers(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller's connection without autocommit, idle when lent: the call's statement opens the
    caller's transaction (psycopg keeps it open for the caller's commit), which a conflict leaves
    aborted. The call is not its own transaction: TransactionConflict at once, not a retry into
    the aborted transaction (InFailedSqlTransaction)."""
    real_on = sqlapi.AsyncSqlApi._on
    calls = 0

    async def conflicting(conn: Any, sql: str, params: dict[str, Any]) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:  # a real 40001: the server aborts the transaction the statement opened
            await conn.execute("DO $$BEGIN RAISE EXCEPTION 'forced' USING ERRCODE = '40001'; END$$")
        return await real_on(conn, sql, params)

    monkeypatch.setattr(sqlapi.AsyncSqlApi, "_on", staticmethod(conflicting))

    async def go() -> Any:
        async with await psycopg.AsyncConnection.connect(db) as aconn:
            api = sqlapi.AsyncSqlApi.on_connection(aconn)
            return await api.signal_with_start("rotor", "held-plain", "tick", None, [0], "default", {})

    with pytest.raises(TransactionConflict, match="caller's transaction"):
        asyncio.run(go())
    assert calls == 1
