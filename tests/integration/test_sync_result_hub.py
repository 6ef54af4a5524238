"""The synchronous client's result waits share one LISTEN connection per shard and channel
(harvest.db.notify.ThreadNotificationHub, read by a thread of its own), as the AsyncClient's share
a NotificationHub: no connection is opened per result(), a wait is woken by its run's NOTIFY,
and a lost LISTEN connection wakes every wait (which reads its run again) and is made again."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from harvest import App, Client, activity, workflow
from harvest.core.errors import TimeoutError_
from harvest.db import channels, notify
from harvest.db.notify import ThreadNotificationHub
from harvest.db.sqlapi import SqlApi


@activity
async def square(ctx, x: int) -> int:
    return x * x


@workflow
async def squared(ctx, x: int) -> int:
    return await ctx.execute_activity(square, x)


@workflow
async def gated(ctx) -> str:
    return await ctx.wait_for_signal("go")


@workflow
async def counter(ctx) -> int:
    count = 0

    def add(ctx, by: int) -> int:
        nonlocal count
        count += by
        return count

    ctx.register_query_handler("count", lambda ctx: count)
    ctx.register_update_handler("add", add)
    return await ctx.wait_for_signal("stop")


APP = App(workflows=[squared, gated, counter], activities=[square])


def _count_connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    connects: list[str] = []
    for module in (notify,):  # the hub's LISTEN connection; every read takes a pooled one
        real = module.connect

        def counted(*args, _real=real, **kwargs):
            connects.append("listen")
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "connect", counted)
    return connects


def test_sync_results_share_one_listen_connection_and_clean_up_only_what_they_left(
    start_worker, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    connects = _count_connects(monkeypatch)
    cleanups: list[str] = []
    real_stop = SqlApi.stop_waiting_for_result

    def stop(self, waiter_id):
        cleanups.append(waiter_id)
        return real_stop(self, waiter_id)

    monkeypatch.setattr(SqlApi, "stop_waiting_for_result", stop)
    start_worker(APP)
    with Client(db) as client:
        handles = [client.start_workflow(squared, i) for i in range(6)]
        with ThreadPoolExecutor(3) as pool:  # waits from several threads at once
            answers = list(pool.map(lambda handle: handle.result(timeout=30), handles))
        waiting = client.start_workflow(gated)
        with pytest.raises(TimeoutError_):
            waiting.result(timeout=0.3)
        hub = client._hubs[(client.router.default, channels.DONE)]
        assert hub.waiters == 0  # every wait unregistered
    assert answers == [0, 1, 4, 9, 16, 25]
    assert connects == ["listen"]  # one LISTEN connection for every wait, none per result()
    assert len(cleanups) == 1  # only the wait that gave up with its mark still there
    assert not any(t.name == f"harvest-listen-{channels.DONE}" for t in threading.enumerate())  # closed
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.result_waiters").fetchone()[0] == 0


def test_a_wait_is_woken_by_its_runs_notification_only(db: str) -> None:
    hub = ThreadNotificationHub(db)
    hub.start()
    try:
        with hub.waiting("run-a") as a, hub.waiting("run-b") as b:
            with psycopg.connect(db, autocommit=True) as conn:
                conn.execute("SELECT pg_notify(%s, 'run-a')", (channels.DONE,))
            assert a.wait(30)
            assert not b.is_set()
        assert hub.waiters == 0
    finally:
        hub.close()
    with hub.waiting("late") as late:
        # A closed hub stays closed, and starting it does not wait out its timeout (it waited
        # the whole of it: 10 s by default, 5 s from a Client).
        starting = threading.Thread(target=hub.start, kwargs={"timeout": 3600}, daemon=True)
        starting.start()
        starting.join(60)
        assert not starting.is_alive(), "start() of a closed hub waited for its timeout"
        assert hub.waiters == 1 and not late.is_set()


def test_a_lost_listen_connection_wakes_the_waits_and_is_made_again(
    start_worker, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notify, "RECONNECT_SECS", 0.05)
    with Client(db) as client:
        waiting = client.start_workflow(gated)
        hub = client._listener(client.router.default, channels.DONE)
        answer: dict[str, object] = {}

        def wait() -> None:
            answer["value"] = waiting.result(timeout=60)

        listening = (
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE %s"
            " AND pid <> pg_backend_pid()"
        )
        with hub.waiting(str(waiting.execution_id)) as seen:
            thread = threading.Thread(target=wait)
            thread.start()
            with psycopg.connect(db, autocommit=True) as conn:
                (first,) = conn.execute(listening, (f"LISTEN {channels.DONE}%",)).fetchall()
                conn.execute("SELECT pg_terminate_backend(%s)", first)
                assert seen.wait(30)  # the drop woke the registered waits
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    now = conn.execute(listening, (f"LISTEN {channels.DONE}%",)).fetchall()
                    if now and now != [first]:
                        break
                    time.sleep(0.02)
                assert now and now != [first]  # listening again, on a new connection
        # The hub listens again: the run's end reaches the wait by its notification.
        start_worker(APP)
        client.get_handle(execution_id=str(waiting.execution_id)).signal("go", "through")
        thread.join(60)
        assert answer == {"value": "through"}
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.result_waiters").fetchone()[0] == 0


def test_closing_the_client_wakes_a_hub_wait_with_no_notification(db: str) -> None:
    hub = ThreadNotificationHub(db)
    hub.start()
    with hub.waiting(str(uuid.uuid4())) as event:
        hub.close()
        assert event.is_set()


def test_sync_queries_and_updates_wait_on_the_same_listen_connection(
    start_worker, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    connects = _count_connects(monkeypatch)
    start_worker(APP)
    with Client(db) as client:
        handle = client.start_workflow(counter)
        answers = [handle.update("add", 2, timeout=30), handle.update("add", 3, timeout=30)]
        answers.append(handle.query("count", timeout=30))
        _, done = client.update_with_start(
            counter, workflow_id="wid-uws", update="add", update_arg=4, timeout=30
        )
        answers.append(done)
    assert answers == [2, 5, 5, 4]
    assert connects == ["listen"]  # the answers channel's one LISTEN connection, none per wait
