"""The memory one stalled client of ``GET /stream`` (harvest/web/streams.py) makes the server hold:
a uvicorn in this process, one client that opens the stream and then reads nothing (its socket
stays open), and ``--events`` signals of ``--size`` bytes written by another process. Prints one
JSON line: this process' peak RSS over its RSS before the writes, tracemalloc's peak over its
start, and what the stalled subscriber's queue holds once the hub has read every event.

    python bench/stream_memory.py --dsn postgresql://... --events 2000 --size 1000000

The before/after of two checkouts: run it with each one's harvest_py on PYTHONPATH, each on a
fresh database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import psycopg
import uvicorn
from sse_fanout import _Everyone  # (bench/ is on the path of a script it holds)
from starlette.applications import Starlette

from harvest.web.streams import EventHub, stream_routes

WRITER = """
import sys, psycopg
dsn, events, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pad = '{"pad": "' + 'x' * (size - 12) + '"}'
with psycopg.connect(dsn, autocommit=True) as conn:
    run = conn.execute("SELECT execution_id FROM harvest.start_workflow('wf', '[]', 'mem', 'q')").fetchone()[0]
    for i in range(events):
        conn.execute("SELECT harvest.signal_workflow(%s, %s, %s::jsonb)", (run, f"s{i}", pad))
"""


def rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


async def measure(dsn: str, events: int, size: int) -> dict[str, Any]:
    hub = EventHub(dsn)
    app = Starlette(routes=stream_routes(hub, _Everyone()))  # type: ignore[arg-type]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    reader, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
    writer.write(b"GET /stream HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n")
    await writer.drain()
    seen = b""
    while b": stream open" not in seen:  # then read nothing more: a stalled client
        seen += await reader.read(4096)
    base_rss, peak_rss = rss(), rss()
    tracemalloc.start()
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", WRITER, dsn, str(events), str(size))
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:  # until the writer is done and the hub has read its every event
            peak_rss = max(peak_rss, rss())
            if proc.returncode is not None:
                last = conn.execute("SELECT max(global_id) FROM harvest.events").fetchone()[0]
                if hub.cursor >= last:
                    break
            await asyncio.sleep(0.05)
    assert await proc.wait() == 0
    elapsed = time.perf_counter() - started
    _, traced_peak = tracemalloc.get_traced_memory()
    (sub,) = hub.subscribers
    queued = [e for e in list(sub.queue._queue) if isinstance(e, dict)]  # type: ignore[attr-defined]
    result = {
        "events": events,
        "size": size,
        "write_s": round(elapsed, 1),
        "peak_rss_over_base_mb": round((peak_rss - base_rss) / 1e6, 1),
        "tracemalloc_peak_mb": round(traced_peak / 1e6, 1),
        "queued_events": len(queued),
        "queued_mb": round(sum(len(json.dumps(e["event_data"])) for e in queued) / 1e6, 1),
        "resyncs": sub.resyncs,
    }
    writer.close()
    server.should_exit = True
    await serving
    await hub.aclose()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--size", type=int, default=1_000_000)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.dsn, args.events, args.size))), flush=True)


if __name__ == "__main__":
    main()
