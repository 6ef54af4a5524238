"""Offload from clients (docs/payloads.md "Large payloads"): a client with an offload threshold
stores a start argument and a signal payload above it in the offload store of the run's database,
the history holds references, the worker resolves them, and every stored row belongs to the run
(a start's handed to it in the start's transaction), so retention's sweep of run-less rows never
takes them. The AsyncClient does the same."""

from __future__ import annotations

import asyncio

import psycopg

from harvest import App, AsyncClient, Client, workflow
from harvest.core.codecs import Payloads

BIG = "x" * 4000


@workflow
async def co_inbox(ctx, big: str, small: int) -> list:
    extra = await ctx.wait_for_signal("more")
    return [len(big), small, len(extra)]


APP = App(workflows=[co_inbox])


def _rows(dsn: str, sql: str, *args: object) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, args).fetchall()


def test_a_clients_large_start_argument_and_signal_payload_are_offloaded_and_owned_by_the_run(
    db: str, start_worker
) -> None:
    start_worker(APP)
    with Client(db, codecs=Payloads(offload_bytes=256)) as client:
        handle = client.start_workflow(co_inbox, BIG, 7)
        handle.signal("more", BIG + "y")
        assert handle.result(timeout=30) == [4000, 7, 4001]
    [(stored_input,)] = _rows(db, "SELECT input FROM harvest.executions WHERE id = %s", handle.execution_id)
    assert stored_input[0]["_harvest_ref"] and stored_input[1] == 7, "the big argument is a reference"
    signal = _rows(
        db,
        "SELECT event_data -> 'payload' FROM harvest.events WHERE execution_id = %s"
        " AND event_type = 'SignalReceived'",
        handle.execution_id,
    )
    assert signal[0][0]["_harvest_ref"], "the signal's payload is a reference"
    owners = _rows(db, "SELECT execution_id::text, bytes FROM harvest.payloads ORDER BY bytes")
    assert [o for o, _ in owners] == [handle.execution_id, handle.execution_id], "both rows belong to the run"

    async def start_async() -> str:
        client = await AsyncClient.connect(db, codecs=Payloads(offload_bytes=256))
        try:
            started = await client.start_workflow(co_inbox, BIG, 8)
            return str(started.execution_id)
        finally:
            await client.close()

    other = asyncio.run(start_async())
    assert _rows(db, "SELECT count(*) FROM harvest.payloads WHERE execution_id = %s", other) == [(1,)]
    assert _rows(db, "SELECT count(*) FROM harvest.payloads WHERE execution_id IS NULL") == [(0,)]
