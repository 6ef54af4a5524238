"""The asyncio client does what the synchronous one does: signal-with-start, children, reset,
and the continue-as-new chain a signal follows (tests/unit/test_client_parity.py keeps the
method sets equal; these run the methods the AsyncClient gained against a real database)."""

from __future__ import annotations

import asyncio
import time

import pytest

from harvest import App, AsyncClient, activity, workflow
from harvest.core.errors import InvalidArgument, WorkflowNotRunning


@activity
async def square(ctx, x: int) -> int:
    return x * x


@workflow
async def child_square(ctx, x: int) -> int:
    return await ctx.execute_activity(square, x)


@workflow
async def parent_sum(ctx, n: int) -> int:
    return sum(await asyncio.gather(*(ctx.execute_child_workflow(child_square, i) for i in range(n))))


@workflow
async def collector(ctx, n: int) -> list:
    return [await ctx.wait_for_signal("item") for _ in range(n)]


@workflow
async def gated(ctx) -> list:
    done = [await ctx.execute_activity(square, 3)]
    done.append(await ctx.wait_for_signal("go"))
    return done


@workflow
async def rotating(ctx, rounds: int) -> str:
    if rounds:
        await ctx.continue_as_new(rounds - 1)
    return await ctx.wait_for_signal("last")


APP = App(workflows=[child_square, parent_sum, collector, gated, rotating], activities=[square])


def test_async_signal_with_start_starts_then_signals_the_same_run(start_worker, db: str) -> None:
    async def go() -> tuple:
        async with await AsyncClient.connect(db) as aclient:
            first = await aclient.signal_with_start(
                collector, 2, workflow_id="batch-a", signal="item", signal_payload="a"
            )
            second = await aclient.signal_with_start(
                collector, 2, workflow_id="batch-a", signal="item", signal_payload="b"
            )
            start_worker(APP)
            return first, second, await first.result(timeout=30)

    first, second, result = asyncio.run(go())
    assert first.started_fresh and not second.started_fresh
    assert first.execution_id == second.execution_id and first.workflow_id == "batch-a"
    assert result == ["a", "b"]


def test_async_children_lists_the_runs_children(start_worker, db: str) -> None:
    start_worker(APP)

    async def go() -> tuple:
        async with await AsyncClient.connect(db) as aclient:
            handle = await aclient.start_workflow(parent_sum, 3)
            return (
                handle,
                await handle.result(timeout=30),
                await handle.children(),
                await handle.children(status="RUNNING"),
            )

    handle, result, children, running = asyncio.run(go())
    assert result == 0 + 1 + 4
    assert len(children) == 3 and {c["status"] for c in children} == {"COMPLETED"}
    assert all(c["workflow_id"].startswith(handle.workflow_id + "/") for c in children)
    assert running == []


def test_async_reset_forks_a_stuck_run(start_worker, db: str) -> None:
    worker = start_worker(APP)

    async def go() -> None:
        async with await AsyncClient.connect(db) as aclient:
            handle = await aclient.start_workflow(gated, workflow_id="gate-1")
            deadline = time.monotonic() + 20
            while not any(e["event_type"] == "ActivityCompleted" for e in await handle.history()):
                assert time.monotonic() < deadline, "the activity never completed"
                await asyncio.sleep(0.05)
            await asyncio.to_thread(worker.stop)

            plan = await handle.reset(1, "dry", operator_id="oncall", dry_run=True)
            assert plan["valid"] and plan["new_execution_id"] is None
            assert (await handle.describe())["status"] == "RUNNING"  # the dry run wrote nothing
            with pytest.raises(InvalidArgument, match="unresolved"):
                await handle.reset(3, "mid-group")

            plan = await handle.reset(1, "recover", operator_id="oncall")
            assert (await handle.describe())["status"] == "TERMINATED"
            fork = aclient.get_handle(plan["new_execution_id"], gated)
            assert repr(fork) == f"AsyncWorkflowHandle({plan['new_execution_id']!r}, workflow_id='')"
            start_worker(APP)
            await fork.signal("go", "now")
            assert await fork.result(timeout=30) == [9, "now"]
            with pytest.raises(WorkflowNotRunning):
                await handle.reset(1, "again")

    asyncio.run(go())


def test_async_signal_follows_the_continue_as_new_chain(start_worker, db: str) -> None:
    start_worker(APP)

    async def go() -> None:
        async with await AsyncClient.connect(db) as aclient:
            handle = await aclient.start_workflow(rotating, 2)
            deadline = time.monotonic() + 20
            while (await handle.describe())["status"] != "CONTINUED_AS_NEW":
                assert time.monotonic() < deadline, "the first run never continued as new"
                await asyncio.sleep(0.05)
            # Addressed to the first run, the signal reaches the run that is current now.
            await handle.signal("last", "through")
            assert await handle.result(timeout=30) == "through"
            with pytest.raises(WorkflowNotRunning):  # the whole chain has ended
                await handle.cancel("late")

    asyncio.run(go())


def test_async_iter_history_streams_the_same_events_as_get_history(start_worker, db: str) -> None:
    start_worker(APP)

    async def go() -> tuple:
        async with await AsyncClient.connect(db) as aclient:
            handle = await aclient.start_workflow(parent_sum, 2)
            await handle.result(timeout=30)
            streamed = [event async for event in aclient.sql.iter_history(handle.execution_id, page_size=2)]
            return streamed, await aclient.sql.get_history(handle.execution_id)

    streamed, whole = asyncio.run(go())
    assert len(whole) > 2 and streamed == whole  # more than one page, in order


def test_async_results_share_one_listen_connection_and_clean_up_only_what_they_left(
    start_worker, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from harvest.core.errors import TimeoutError_
    from harvest.db import notify, steps
    from harvest.db.sqlapi import AsyncSqlApi

    connects: list[str] = []
    cleanups: list[str] = []
    for module in (notify, steps):
        real = module.connect_async

        async def counted(*args, _real=real, **kwargs):
            connects.append("listen")
            return await _real(*args, **kwargs)

        monkeypatch.setattr(module, "connect_async", counted)
    real_stop = AsyncSqlApi.stop_waiting_for_result

    async def stop(self, waiter_id):
        cleanups.append(waiter_id)
        return await real_stop(self, waiter_id)

    monkeypatch.setattr(AsyncSqlApi, "stop_waiting_for_result", stop)
    start_worker(APP)

    async def go() -> list:
        async with await AsyncClient.connect(db) as aclient:
            handles = [await aclient.start_workflow(child_square, i) for i in range(4)]
            answers = [await handle.result(timeout=30) for handle in handles]
            waiting = await aclient.start_workflow(collector, 1)
            with pytest.raises(TimeoutError_):
                await waiting.result(timeout=0.3)
            return answers

    assert asyncio.run(go()) == [0, 1, 4, 9]
    assert connects == ["listen"]  # one LISTEN connection for every wait, none per result()
    assert len(cleanups) == 1  # only the wait that gave up with its mark still there
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.result_waiters").fetchone()[0] == 0
