"""A client whose database goes silent, for tests/chaos/test_chaos_network.py.

``python run_silent_client.py DSN`` (run inside the test's network namespace) opens a
connection each way Harvest opens one and prints ``{"ready": true}`` once all are in use: a
statement in flight on :func:`connect`, a LISTEN on :func:`connect_async`, one connection in
each kind of pool, and a transaction left open holding the advisory lock ``HELD_LOCK`` (the
test watches the server give that session up). It then waits for a line on stdin (the test
has cut the network), makes a call through each pool, and prints one JSON line per case as
its call fails:
``{"case": ..., "error": ..., "secs": <seconds after the line>}``. A case whose call never
fails prints nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

from harvest.core.errors import HarvestError
from harvest.db.connection import Connection, connect, connect_async, error_line
from harvest.db.pools import open_async_pool, open_pool

HELD_LOCK = 4242
_print_lock = threading.Lock()


def report(case: str, cut_at: float, error: BaseException | None) -> None:
    line = {"case": case, "error": error_line(error) if error else None, "secs": time.monotonic() - cut_at}
    say(line)


def say(line: dict) -> None:
    with _print_lock:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()


def first_connection(dsn: str) -> Connection:
    """The first connection, tried for a while: the test's server may still be reloading the
    pg_hba.conf line that lets this namespace in."""
    deadline = time.monotonic() + 15
    while True:
        try:
            return connect(dsn, autocommit=True)
        except HarvestError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


async def main(dsn: str) -> None:
    in_flight = first_connection(dsn)
    held = connect(dsn)  # not autocommit: the transaction stays open, idle, holding the lock
    held.execute("SELECT pg_advisory_xact_lock(%s)", (HELD_LOCK,))
    sync_pool = open_pool(dsn, max_size=1)
    sync_pool.wait()
    listen = await connect_async(dsn, autocommit=True)
    await listen.execute("LISTEN harvest_silent_test")
    async_pool = await open_async_pool(dsn, max_size=1)
    cut = threading.Event()
    cut_at = [0.0]

    def statement_in_flight() -> None:
        try:
            in_flight.execute("SELECT pg_sleep(600)")
            report("statement_in_flight", cut_at[0], None)
        except Exception as exc:
            report("statement_in_flight", cut_at[0], exc)

    def sync_pool_call() -> None:
        cut.wait()
        try:
            with sync_pool.connection() as conn:
                conn.execute("SELECT 1")
            report("sync_pool_call", cut_at[0], None)
        except Exception as exc:
            report("sync_pool_call", cut_at[0], exc)

    threading.Thread(target=statement_in_flight, daemon=True).start()
    threading.Thread(target=sync_pool_call, daemon=True).start()
    say({"ready": True})  # the test then waits for the statement on the server

    await asyncio.to_thread(sys.stdin.readline)
    cut_at[0] = time.monotonic()
    cut.set()

    async def idle_listen() -> None:
        try:
            async for _ in listen.notifies():
                pass
            report("idle_listen", cut_at[0], None)
        except Exception as exc:
            report("idle_listen", cut_at[0], exc)

    async def async_pool_call() -> None:
        try:
            async with async_pool.connection() as conn:
                await conn.execute("SELECT 1")
            report("async_pool_call", cut_at[0], None)
        except Exception as exc:
            report("async_pool_call", cut_at[0], exc)

    await asyncio.gather(idle_listen(), async_pool_call())
    await asyncio.sleep(3600)  # the test kills this process once every case has reported


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1]))
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)  # the pools' reconnect attempts would keep the interpreter up
