"""Run one scheduler for the chaos tests: ``python tests/chaos/run_scheduler.py SECONDS HOLD``.

It ticks (harvest.worker.scheduler.tick) in one transaction per tick on its own connection and,
when a tick fired something, holds that transaction open HOLD seconds before it commits, saying
``HOLDING <slots>`` first: a SIGKILL then lands in the middle of a tick, its firings and its run
starts uncommitted. Prints ``COMMITTED <slots>`` after each commit and ``DONE <counts>`` at the end.
The DSN comes from ``HARVEST_DATABASE_URL``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from harvest.db.connection import connect_async
from harvest.db.sqlapi import AsyncSqlApi
from harvest.worker import scheduler


def say(what: str, value: object) -> None:
    sys.stdout.write(f"{what} {json.dumps(value)}\n")
    sys.stdout.flush()


async def main(seconds: float, hold: float) -> None:
    # Harvest's connect, as a worker's scheduler gets its connections: a scheduler cut off from
    # the server has its session ended in about 30 s (tests/chaos/test_chaos_network.py).
    conn = await connect_async(os.environ["HARVEST_DATABASE_URL"])
    sql = AsyncSqlApi.on_connection(conn)
    counts = {"fired": 0, "busy": 0, "stale": 0, "ticks": 0}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        report = await scheduler.tick(sql)
        slots = [f["slot_at"] for f in report.fired]
        counts["ticks"] += 1
        counts["busy"] += report.busy
        counts["stale"] += report.stale
        if slots:
            say("HOLDING", slots)
            await asyncio.sleep(hold)
        await conn.commit()
        if slots:
            counts["fired"] += len(slots)
            say("COMMITTED", slots)
        await asyncio.sleep(0.02)
    say("DONE", counts)
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]), float(sys.argv[2])))
