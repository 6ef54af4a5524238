"""One burst through the management API's ``GET /stream`` (harvest/web/streams.py): N SSE
clients on one uvicorn in this process, then M runs started in one statement (one event each,
``WorkflowStarted``); the wall time until every client has read M events, and this process' CPU
over it (the clients' and the server's together: one process). Prints one JSON line.

    python bench/sse_fanout.py --dsn postgresql://... --clients 50 --events 2000

The paired A/B of two checkouts: bench/sse_fanout_ab.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time
from typing import Any

import httpx
import psycopg
import uvicorn
from starlette.applications import Starlette

from harvest.web.principal import Principal
from harvest.web.streams import EventHub, stream_routes


class _Everyone:
    """Lets every request read (the bench measures the stream, not the authorizer)."""

    async def authorize(self, request: Any, needed: str) -> Principal:
        return Principal(actor="bench", scope="read")


async def burst(dsn: str, clients: int, events: int) -> dict[str, float]:
    hub = EventHub(dsn)
    app = Starlette(routes=stream_routes(hub, _Everyone()))  # type: ignore[arg-type]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", backlog=1024))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    opened = 0
    all_open = asyncio.Event()

    async def reader(client: httpx.AsyncClient) -> None:
        nonlocal opened
        got = 0
        async with client.stream("GET", "/stream", headers={"Accept": "text/event-stream"}) as answer:
            async for line in answer.aiter_lines():
                if line == ": stream open":
                    opened += 1
                    if opened == clients:
                        all_open.set()
                elif line.startswith("data: "):
                    got += 1
                    if got == events:
                        return

    limits = httpx.Limits(max_connections=clients + 10)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
            readers = [asyncio.create_task(reader(client)) for _ in range(clients)]
            await asyncio.wait_for(all_open.wait(), 60)
            await asyncio.sleep(0.3)
            cpu, began = time.process_time(), time.monotonic()
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "SELECT harvest.start_workflow('bench', '[]', 'sse-' || g, 'bench') "
                    "FROM generate_series(1, %s) AS g",
                    (events,),
                )
            await asyncio.wait_for(asyncio.gather(*readers), 300)
            return {"wall_s": time.monotonic() - began, "cpu_s": time.process_time() - cpu}
    finally:
        server.should_exit = True
        await serving
        sock.close()
        await hub.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="a migrated database, fresh (its events are counted)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--events", type=int, default=2000)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(burst(args.dsn, args.clients, args.events))))


if __name__ == "__main__":
    main()
