"""The durable mutex end to end: ctx.mutex with a real worker on a real Postgres."""

from __future__ import annotations

import itertools
import threading
import time

import psycopg
import pytest

from harvest import App, activity, workflow

spans: dict[int, tuple[float, float]] = {}
spans_lock = threading.Lock()


@activity(start_to_close="30s")
async def critical(ctx, n: int) -> None:
    import asyncio

    began = time.monotonic()
    await asyncio.sleep(0.15)
    with spans_lock:
        spans[n] = (began, time.monotonic())


@workflow
async def serialised(ctx, n: int) -> int:
    async with ctx.mutex("printer"):
        await ctx.execute_activity(critical, n)
    return n


@workflow
async def hog(ctx, key: str) -> None:
    async with ctx.mutex(key):
        await ctx.sleep(3600)


@workflow
async def polite(ctx, key: str) -> str:
    async with ctx.mutex(key):
        return "got it"


@workflow
async def locks_then_waits(ctx, key: str) -> str:
    async with ctx.mutex(key):
        pass
    return await ctx.wait_for_signal("go")


APP = App(workflows=[serialised, hog, polite, locks_then_waits], activities=[critical])


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def queue_of(conn: psycopg.Connection, key: str) -> list[str]:
    """[holder, waiter, waiter, ...] of a key."""
    row = conn.execute(
        "SELECT holder_execution_id::text, waiters FROM harvest.list_mutexes(%s)", (key,)
    ).fetchone()
    if row is None:
        return []
    return ([row[0]] if row[0] else []) + list(row[1])


def test_holders_never_overlap_and_are_granted_in_fifo_order(db, start_worker, client) -> None:
    spans.clear()
    start_worker(APP, concurrency=8)
    handles = []
    with psycopg.connect(db, autocommit=True) as conn:
        for n in range(5):  # one at a time, so the queue order is known
            handles.append(client.start_workflow(serialised, n))
            wait_for(
                lambda n=n: (
                    handles[n].execution_id in queue_of(conn, "printer")
                    or handles[n].describe()["status"] != "RUNNING"
                )
            )
    assert [h.result(timeout=60) for h in handles] == list(range(5))
    ordered = sorted(spans.items(), key=lambda item: item[1][0])
    assert [n for n, _ in ordered] == list(range(5)), "FIFO grant order"
    for (_, (_, end)), (_, (begin, _)) in itertools.pairwise(ordered):
        assert begin >= end, f"holders overlap: {ordered}"
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.mutex_locks").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM harvest.mutex_waiters").fetchone()[0] == 0
        kinds = [
            r[0]
            for r in conn.execute(
                "SELECT event_type || coalesce(':' || (event_data ->> 'kind'), '') FROM harvest.events "
                "WHERE execution_id = %s ORDER BY event_id",
                (handles[0].execution_id,),
            )
        ]
    assert "MarkerRecorded:mutex_acquire" in kinds and "MutexAcquired" in kinds
    assert "MarkerRecorded:mutex_release" in kinds


def test_a_terminated_holder_releases_the_key(db, start_worker, client) -> None:
    start_worker(APP, concurrency=4)
    holder = client.start_workflow(hog, "door")
    with psycopg.connect(db, autocommit=True) as conn:
        wait_for(lambda: queue_of(conn, "door")[:1] == [holder.execution_id])
        waiter = client.start_workflow(polite, "door")
        wait_for(lambda: queue_of(conn, "door") == [holder.execution_id, waiter.execution_id])
        holder.terminate("operator")
        assert waiter.result(timeout=30) == "got it"
        assert queue_of(conn, "door") == []


def test_a_reset_to_a_point_inside_a_mutex_block_is_refused_and_the_key_stays_put(
    db, start_worker, client
) -> None:
    """docs/lifecycle.md (reset), docs/guarantees.md "holders of a durable mutex never overlap": a
    fork of a holder reset inside its block would replay its grant while the source's close hands
    the key to the next waiter (both were inside the block). Such a reset point is refused."""
    start_worker(APP, concurrency=4)
    a = client.start_workflow(hog, "vault").execution_id
    with psycopg.connect(db, autocommit=True) as conn:
        wait_for(lambda: queue_of(conn, "vault")[:1] == [a])
        b = client.start_workflow(hog, "vault").execution_id
        wait_for(lambda: queue_of(conn, "vault") == [a, b])
        granted_at = conn.execute(
            "SELECT event_id FROM harvest.events WHERE execution_id = %s AND event_type = 'MutexAcquired'",
            (a,),
        ).fetchone()[0]
        plan = conn.execute(
            "SELECT harvest.reset_workflow(%s, %s, 'redo', p_dry_run => true)", (a, granted_at)
        )
        problems = plan.fetchone()[0]["problems"]
        assert any("mutex 'vault'" in p and "held or awaited" in p for p in problems), problems
        with pytest.raises(psycopg.Error, match="mutex 'vault'") as refused:
            conn.execute("SELECT harvest.reset_workflow(%s, %s, 'redo the tail')", (a, granted_at))
        assert refused.value.sqlstate == "HR001"
        assert queue_of(conn, "vault") == [a, b], "nothing changed"
        running = conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE workflow_name = 'hog' AND status = 'RUNNING'"
        ).fetchone()[0]
    assert running == 2, "no fork was made"


def test_a_reset_past_a_finished_mutex_block_carries_it_as_history_only(db, start_worker, client) -> None:
    """A reset copies the history up to its point into the fork. A mutex block finished there
    (acquire, grant, release) is the past: copying its markers must not ask for the key again.
    They were applied by the events_mutex trigger on harvest.events, so the copy re-ran them: the
    free key was granted to the fork once more (a MutexAcquired appended after the carried
    history, before WorkflowResetFork), and the grant and release hung on the copy's row order."""
    worker = start_worker(APP, concurrency=4)
    handle = client.start_workflow(locks_then_waits, "ledger")
    with psycopg.connect(db, autocommit=True) as conn:

        def released() -> bool:  # the block is done and the run waits for its signal
            return conn.execute(
                "SELECT EXISTS (SELECT FROM harvest.events WHERE execution_id = %s "
                "AND event_data ->> 'kind' = 'mutex_release') "
                "AND NOT EXISTS (SELECT FROM harvest.tasks WHERE execution_id = %s)",
                (handle.execution_id, handle.execution_id),
            ).fetchone()[0]

        wait_for(released)
        worker.stop()
        source = handle.execution_id
        boundary = handle.describe()["last_event_id"]
        (plan,) = conn.execute("SELECT harvest.reset_workflow(%s, %s, 'new')", (source, boundary)).fetchone()
        fork = plan["new_execution_id"]
        after_prefix = [
            r[0]
            for r in conn.execute(
                "SELECT event_type FROM harvest.events "
                "WHERE execution_id = %s AND event_id > %s ORDER BY event_id",
                (fork, boundary),
            )
        ]
        assert after_prefix == ["WorkflowResetFork"], "the copy asked for the key again"
        assert queue_of(conn, "ledger") == [], "the fork holds or awaits nothing"
        start_worker(APP, concurrency=4)
        other = client.start_workflow(polite, "ledger")
        assert other.result(timeout=30) == "got it"
        client.get_handle(fork).signal("go", "done")
        assert client.get_handle(fork).result(timeout=30) == "done"
        assert queue_of(conn, "ledger") == []
