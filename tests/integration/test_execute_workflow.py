"""Client.execute_workflow / AsyncClient.execute_workflow: start a run and wait for its result,
the start marking the caller as the run's result waiter in its own transaction, so the wait
makes no marking read of its own (one read of the run, after its close's notification, where
start_workflow then result() makes two). A start that attached to a running run, and a hub that
may have missed a notification, fall back to result()'s marking read."""

from __future__ import annotations

import asyncio
import threading

import psycopg
import pytest

from harvest import App, AsyncClient, Client, StartOptions, activity, workflow
from harvest.core.errors import TimeoutError_
from harvest.db import channels, notify
from harvest.db.sqlapi import AsyncSqlApi, SqlApi


@activity
async def square(ctx, x: int) -> int:
    return x * x


@workflow
async def squared(ctx, x: int) -> int:
    return await ctx.execute_activity(square, x)


@workflow
async def gated(ctx) -> str:
    return await ctx.wait_for_signal("go")


APP = App(workflows=[squared, gated], activities=[square])


def _count_reads(monkeypatch: pytest.MonkeyPatch, api: type) -> list[str]:
    reads: list[str] = []
    real = api.wait_for_result

    def counted(self, execution_id, waiter_id):
        reads.append(str(execution_id))
        return real(self, execution_id, waiter_id)

    monkeypatch.setattr(api, "wait_for_result", counted)
    return reads


def _marks(db: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM harvest.result_waiters").fetchone()[0]


def test_execute_workflow_reads_the_run_once_after_its_close(
    start_worker, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    start_worker(APP)
    with Client(db) as client:
        assert client.execute_workflow(squared, 7, result_timeout=30) == 49  # warm: the hub listens
        reads = _count_reads(monkeypatch, SqlApi)
        assert [client.execute_workflow(squared, i, result_timeout=30) for i in range(4)] == [0, 1, 4, 9]
        assert len(reads) == 4  # one read per run, after its close (start_workflow then result(): two)
    assert _marks(db) == 0


def test_async_execute_workflow_reads_the_run_once_after_its_close(
    start_worker, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    start_worker(APP)

    async def go() -> tuple[list[int], int]:
        async with await AsyncClient.connect(db) as aclient:
            await aclient.execute_workflow(squared, 2, result_timeout=30)
            reads = _count_reads(monkeypatch, AsyncSqlApi)
            answers = list(
                await asyncio.gather(
                    *(aclient.execute_workflow(squared, i, result_timeout=30) for i in range(6))
                )
            )
            return answers, len(reads)

    answers, reads = asyncio.run(go())
    assert answers == [0, 1, 4, 9, 16, 25]
    assert reads == 6  # a batch of starts marks every caller; one read each after the close
    assert _marks(db) == 0


def test_execute_workflow_attached_to_a_running_run_marks_by_reading(
    start_worker, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """use_existing on a running run: the start did not mark (the run may be closing), so the
    wait reads and marks first, as result() does, and is woken by the close."""
    start_worker(APP)
    with Client(db) as client:
        first = client.start_workflow(gated, options=StartOptions(workflow_id="ex-gated"))
        reads = _count_reads(monkeypatch, SqlApi)
        answer: dict[str, object] = {}

        def wait() -> None:
            answer["value"] = client.execute_workflow(
                gated,
                options=StartOptions(workflow_id="ex-gated", conflict_policy="use_existing"),
                result_timeout=60,
            )

        thread = threading.Thread(target=wait)
        thread.start()
        for _ in range(600):  # the wait's own marking read has marked it
            if _marks(db):
                break
            threading.Event().wait(0.05)
        first.signal("go", "open")
        thread.join(60)
    assert answer["value"] == "open"
    assert reads[0] == str(first.execution_id) and len(reads) == 2


def test_execute_workflow_timeout_leaves_no_mark(start_worker, db: str) -> None:
    start_worker(APP)
    with Client(db) as client:
        client.execute_workflow(squared, 1, result_timeout=30)
        with pytest.raises(TimeoutError_):
            client.execute_workflow(gated, result_timeout=0.3)
    assert _marks(db) == 0  # the start's mark dropped when the wait gave up


def test_a_hub_keeps_a_notification_no_wait_was_registered_for(db: str) -> None:
    """The close of a run whose start marked its waiter can come before the wait registers: the
    hub keeps it (bounded), and a wait registered after it is woken at once."""
    hub = notify.ThreadNotificationHub(db)
    assert hub.listening_since() is None  # not listening: a start marked for it reads first
    hub.start()
    try:
        token = hub.listening_since()
        assert token is not None
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("SELECT pg_notify(%s, 'run-early')", (channels.DONE,))
            conn.execute("SELECT pg_notify(%s, 'run-sync')", (channels.DONE,))  # read in order
        with hub.waiting("run-sync") as synced:
            synced.wait(30)
        with hub.waiting("run-early") as early, hub.waiting("run-other") as other:
            assert early.is_set() and not other.is_set()
        assert hub.listening_since() == token
    finally:
        hub.close()
    assert hub.listening_since() is None


def test_waiters_keep_unclaimed_payloads_bounded_and_count_wake_alls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify, "UNCLAIMED_KEPT", 3)
    waiters: notify._Waiters[threading.Event] = notify._Waiters()
    for payload in ("a", "b", "c", "d"):
        waiters.wake(payload)
    events = {p: threading.Event() for p in "abcd"}
    for payload, event in events.items():
        waiters.add(payload, event)
    assert [p for p, e in events.items() if e.is_set()] == ["b", "c", "d"]  # "a" went first
    again = threading.Event()
    waiters.add("d", again)  # a kept payload wakes one registration, once
    assert not again.is_set()
    before = waiters.epoch
    waiters.wake_all()
    assert waiters.epoch == before + 1 and again.is_set()


def test_execute_workflow_takes_its_result_timeout_as_any_duration(start_worker, db: str) -> None:
    """result_timeout is result()'s timeout, which takes "5s" or a timedelta; execute_workflow
    compared the text with a number (min("30s", 5.0): a TypeError) before it waited."""
    import datetime

    start_worker(APP)
    with Client(db) as client:
        assert client.execute_workflow(squared, 3, result_timeout="30s") == 9
        assert client.execute_workflow(squared, 4, result_timeout=datetime.timedelta(seconds=30)) == 16

    async def go() -> int:
        async with await AsyncClient.connect(db) as aclient:
            return await aclient.execute_workflow(squared, 5, result_timeout="30s")

    assert asyncio.run(go()) == 25
