"""Offload from clients beyond start_workflow and signal (docs/payloads.md "Large payloads"):
signal_with_start, update_with_start, and update and query arguments, from the sync Client and
the AsyncClient. Each large payload is stored in the call's own transaction and owned by the run
it reached, so a call the database refuses leaves no row; the workflow sees the original values,
and a replay from the stored history (a query on a finished run replays it) resolves them. Then
a custom store with the sync client, and a start held back by a throttle keeping its offloaded
input through retention until its release hands it to the run. An update_with_start is never held
back: on a gated workflow it is refused, and its offloaded rows go with the refused call."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from harvest import App, AsyncClient, Batch, Client, Throttle, query, update, workflow
from harvest.core.codecs import Payloads
from harvest.core.errors import InvalidArgument

BIG = "x" * 4000
OFFLOAD = Payloads(offload_bytes=256)


@workflow
async def o2_box(ctx: Any, big: str, small: int) -> list[int]:
    ctx.state["start"] = [len(big), small]
    ctx.state["signal"] = len(await ctx.wait_for_signal("more"))
    await ctx.wait_for_signal("close")
    await ctx.drain_admitted_updates()
    return [*ctx.state["start"], ctx.state["signal"], *ctx.state.get("updates", [])]


@query(workflow="o2_box")
def seen(ctx: Any, pad: str) -> list[int]:
    state = ctx.state
    return [*state.get("start", []), state.get("signal"), *state.get("updates", []), len(pad)]


@update(workflow="o2_box")
def grow(ctx: Any, text: str) -> int:
    ctx.state.setdefault("updates", []).append(len(text))
    return len(text)


@workflow(throttle=Throttle(rps=1, burst=1))
async def o2_paced(ctx: Any, big: str) -> int:
    return len(big)


@update(workflow="o2_paced", name="grow")
def grow_paced(ctx: Any, text: str) -> int:
    return len(text)


@workflow(batch=Batch(max_size=1, window=60))
async def o2_batched(ctx: Any, texts: list[str]) -> int:
    return sum(map(len, texts))


APP = App(workflows=[o2_box, o2_paced, o2_batched], queries=[seen], updates=[grow, grow_paced])


def _rows(dsn: str, sql: str, *args: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, args).fetchall()  # type: ignore[arg-type]


def _owners(dsn: str) -> list[str | None]:
    return [
        r[0] for r in _rows(dsn, "SELECT execution_id::text FROM harvest.payloads ORDER BY created_at, id")
    ]


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and "_harvest_ref" in value


def test_sync_client_offloads_signal_with_start_update_and_query_in_their_own_transactions(
    db: str, start_worker: Any
) -> None:
    worker = start_worker(APP)
    with Client(db, codecs=OFFLOAD) as client:
        handle = client.signal_with_start(
            o2_box, BIG, 7, workflow_id="o2-sync", signal="more", signal_payload=BIG + "y"
        )
        run = str(handle.execution_id)
        assert _owners(db) == [run, run], "the start's argument and the signal's payload, owned by the run"
        [(stored_input,)] = _rows(db, "SELECT input FROM harvest.executions WHERE id = %s", run)
        assert _is_ref(stored_input[0]) and stored_input[1] == 7
        [(signal,)] = _rows(
            db,
            "SELECT event_data -> 'payload' FROM harvest.events WHERE execution_id = %s"
            " AND event_type = 'SignalReceived'",
            run,
        )
        assert _is_ref(signal)

        assert handle.update("grow", BIG + "zz") == 4002
        assert handle.query("seen", BIG + "zzz") == [4000, 7, 4001, 4002, 4003]
        assert _owners(db) == [run] * 4, "the update's and the query's arguments are the run's too"
        [(request_arg,)] = _rows(
            db, "SELECT arg FROM harvest.query_requests WHERE kind = 'update' AND execution_id = %s", run
        )
        assert _is_ref(request_arg), "the update request holds a reference"

        # Refused by the database after the payload was stored: nothing of it stays.
        with pytest.raises(InvalidArgument):
            handle.update("other", BIG, update_id=_update_id(db, run))
        with pytest.raises(InvalidArgument):
            handle.query("", BIG)
        with pytest.raises(InvalidArgument):
            client.signal_with_start(o2_box, BIG, 1, workflow_id="o2-sync", signal="", signal_payload=BIG)
        assert _owners(db) == [run] * 4

        handle.signal("close")
        assert handle.result(timeout=30) == [4000, 7, 4001, 4002]
        worker.stop()
        start_worker(APP)  # a worker with no cached state: the query replays the stored history
        assert handle.query("seen", "p") == [4000, 7, 4001, 4002, 1]
        other, grown = client.update_with_start(
            o2_box, BIG, 9, workflow_id="o2-sync-2", update="grow", update_arg=BIG + "q"
        )
        assert grown == 4001
        assert _owners(db).count(str(other.execution_id)) == 2, "its start argument and update argument"
    assert _rows(db, "SELECT count(*) FROM harvest.payloads WHERE execution_id IS NULL") == [(0,)]


def _update_id(dsn: str, run: str) -> str:
    [(update_id,)] = _rows(
        dsn, "SELECT update_id FROM harvest.query_requests WHERE kind = 'update' AND execution_id = %s", run
    )
    return str(update_id)


def test_async_client_offloads_update_with_start_signal_with_start_update_and_query(
    db: str, start_worker: Any
) -> None:
    start_worker(APP)

    async def go() -> tuple[str, list[int]]:
        client = await AsyncClient.connect(db, codecs=OFFLOAD)
        try:
            # Refused after its payloads were stored (an update id taken by another update of a
            # run the call attaches to): none of them stays.
            first = await client.signal_with_start(
                o2_box, "small", 1, workflow_id="o2-async", signal="more", signal_payload=BIG
            )
            run = str(first.execution_id)
            assert _owners(db) == [run]
            assert await first.update("grow", "abc", update_id="u1") == 3
            with pytest.raises(InvalidArgument):
                await client.update_with_start(
                    o2_box, BIG, 2, workflow_id="o2-async", update="other", update_arg=BIG, update_id="u1"
                )
            assert _owners(db) == [run]
            await first.signal("close")
            assert await first.result(timeout=30) == [5, 1, 4000, 3]

            handle, grown = await client.update_with_start(
                o2_box, BIG, 2, workflow_id="o2-async", update="grow", update_arg=BIG + "y"
            )
            second = str(handle.execution_id)
            assert grown == 4001 and second != run
            assert _owners(db) == [run, second, second], "start argument and update argument, the new run's"
            await client.signal_with_start(
                o2_box, "s", 3, workflow_id="o2-async", signal="more", signal_payload=BIG + "yy"
            )
            assert await handle.update("grow", BIG + "yyy") == 4003
            await handle.signal("close")
            assert await handle.result(timeout=30) == [4000, 2, 4002, 4001, 4003]
            answer = await handle.query("seen", BIG)
            return second, answer
        finally:
            await client.close()

    second, answer = asyncio.run(go())
    assert answer == [4000, 2, 4002, 4001, 4003, 4000], (
        "replayed from the stored history, references resolved"
    )
    assert _owners(db).count(second) == 5
    assert _rows(db, "SELECT count(*) FROM harvest.payloads WHERE execution_id IS NULL") == [(0,)]


class MemoryStore:
    """A custom store (harvest.core.codecs.PayloadStore) keeping payloads in this process."""

    def __init__(self) -> None:
        self.rows: dict[str, Any] = {}
        self.put_calls: list[tuple[str | None, int]] = []

    async def put(self, sql: Any, execution_id: str | None, values: list[Any]) -> list[str]:
        # The sql it is given can be awaited from the sync client as from a worker.
        limit = await sql.payload_limit()
        ids = [str(uuid.uuid4()) for _ in values]
        self.rows.update(zip(ids, values, strict=True))
        self.put_calls.append((execution_id, int(limit)))
        return ids

    async def get(self, sql: Any, ids: list[str]) -> dict[str, Any]:
        return {i: self.rows[i] for i in ids if i in self.rows}


@workflow
async def o2_echo(ctx: Any, big: str) -> int:
    text = await ctx.wait_for_signal("text")
    return len(big) + len(text)


def test_a_custom_store_serves_the_sync_client_and_the_worker(db: str, start_worker: Any) -> None:
    store = MemoryStore()
    start_worker(App(workflows=[o2_echo], codecs=Payloads(store=store)))
    with Client(db, codecs=Payloads(offload_bytes=256, store=store)) as client:
        handle = client.start_workflow(o2_echo, BIG)
        handle.signal("text", BIG + "y")
        assert handle.result(timeout=30) == 8001
    assert [run for run, _ in store.put_calls] == [None, handle.execution_id], (
        "start run-less, signal the run's"
    )
    assert all(limit > 0 for _, limit in store.put_calls)
    [(stored_input,)] = _rows(db, "SELECT input FROM harvest.executions WHERE id = %s", handle.execution_id)
    assert stored_input[0]["_harvest_ref"] in store.rows
    assert _rows(db, "SELECT count(*) FROM harvest.payloads") == [(0,)], "nothing in the default store"


@workflow
async def o2_big_answer(ctx: Any, n: int) -> str:
    return BIG * n


def test_both_clients_resolve_a_result_from_a_custom_store(db: str, start_worker: Any) -> None:
    """A worker offloads a large result to its custom store; a client with the same store reads
    the value (it used to read harvest.payloads only, and handed back the reference)."""
    store = MemoryStore()
    start_worker(App(workflows=[o2_big_answer], codecs=Payloads(offload_bytes=256, store=store)))
    with Client(db, codecs=Payloads(store=store)) as client:
        assert client.start_workflow(o2_big_answer, 2).result(timeout=30) == BIG * 2

    async def go() -> str:
        async with await AsyncClient.connect(db, codecs=Payloads(store=store)) as client:
            handle = await client.start_workflow(o2_big_answer, 3)
            return str(await handle.result(timeout=30))

    assert asyncio.run(go()) == BIG * 3
    [(output,)] = _rows(db, "SELECT output FROM harvest.executions ORDER BY created_at LIMIT 1")
    assert output["_harvest_ref"] in store.rows, "the history holds a reference to the custom store"


def test_a_held_back_start_keeps_its_offloaded_input_through_retention_until_released(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
    with Client(db, codecs=OFFLOAD) as client:
        admitted = client.start_workflow(o2_paced, BIG)
        held = client.start_workflow(o2_paced, BIG + "y")
    assert not admitted.deferred and held.deferred
    assert _owners(db) == [admitted.execution_id, None], "the held start's input has no run yet"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.put_payloads(NULL, ARRAY['\"orphan\"'::jsonb])")  # referenced by nothing
        later = dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
        conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (later.isoformat(),))
        [(report,)] = conn.execute("SELECT harvest.run_retention('1 day')").fetchall()
        assert report["runless_payloads_deleted"] == 1, "the orphan goes, the held start's input stays"
        assert _owners(db) == [admitted.execution_id, None]
        [(released,)] = conn.execute("SELECT harvest.release_pending_starts()").fetchall()
        assert released == 1
    [(run,)] = _rows(db, "SELECT id::text FROM harvest.executions WHERE id <> %s", admitted.execution_id)
    assert _owners(db) == [admitted.execution_id, run], "released: handed to its run"
    # Its run's own now: erasing the run erases it (erasure takes only a run's own rows).
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (run,))
        [(erased,)] = conn.execute("SELECT harvest.erase_payloads(%s)", (run,)).fetchall()
    assert erased["offloaded"] == 1
    assert _rows(db, "SELECT erased_at IS NOT NULL FROM harvest.payloads WHERE execution_id = %s", run) == [
        (True,)
    ]


def test_update_with_start_on_a_gated_workflow_is_refused_and_leaves_no_offloaded_row(db: str) -> None:
    # An update_with_start (conflict policy use_existing) is never held back, so its offloaded
    # update argument is never a pending start's run-less row: the call is refused (HR001)
    # whether the throttle has a token, is spent with a start held behind it, or a batch would
    # fill and start its run in the call; the rows it stored go with its transaction.
    refused = r"\(which signal_with_start and update_with_start use\)"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
    with Client(db, codecs=OFFLOAD) as client:
        with pytest.raises(InvalidArgument, match=refused):  # a token left: it would have started
            client.update_with_start(o2_paced, BIG, workflow_id="o2-u1", update="grow", update_arg=BIG + "u")
        assert _owners(db) == [], "nothing stored stays"
        admitted = client.start_workflow(o2_paced, BIG)
        held = client.start_workflow(o2_paced, BIG + "y", workflow_id="o2-held")
        assert not admitted.deferred and held.deferred
        for workflow_id in ("o2-held", "o2-u2"):  # the held start's key, and a key of its own
            with pytest.raises(InvalidArgument, match=refused):
                client.update_with_start(
                    o2_paced, BIG, workflow_id=workflow_id, update="grow", update_arg=BIG + "u"
                )
        with pytest.raises(InvalidArgument, match=refused):  # a batch of one would release here
            client.update_with_start(o2_batched, [BIG], workflow_id="o2-u3", update="grow", update_arg=BIG)

    async def from_async() -> None:
        client = await AsyncClient.connect(db, codecs=OFFLOAD)
        try:
            with pytest.raises(InvalidArgument, match=refused):
                await client.update_with_start(
                    o2_paced, BIG, workflow_id="o2-held", update="grow", update_arg=BIG + "u"
                )
        finally:
            await client.close()

    asyncio.run(from_async())
    assert _owners(db) == [admitted.execution_id, None], "the admitted run's input and the held one's"
    assert _rows(db, "SELECT workflow_id FROM harvest.pending_starts") == [("o2-held",)]
    assert _rows(db, "SELECT count(*) FROM harvest.executions") == [(1,)]
    assert _rows(db, "SELECT count(*) FROM harvest.query_requests") == [(0,)]
