"""The management API under many long-polls and event-stream subscribers: N concurrent
``GET /workflows/{id}/result?wait=`` and S server-sent event streams held by one ``harvest serve``
process on loopback.

    python bench/http_long_polls.py [--n 1000] [--sse 200] [--wait 60]     # make bench-http

A load check beside `make bench` (not a test). It starts an EmbeddedPostgres, migrates it,
starts N runs (no worker: they stay RUNNING), starts ``harvest serve`` as its own process, and
opens N concurrent long-polls and S streams (half of them one run's
``/workflows/{id}/events/stream``, half ``/stream``, every event). Once every poll is parked and
every stream open it reads the server's resident memory (/proc) and the database connections
the server holds (pg_stat_activity: all of them, and how many LISTEN), then terminates every run
in one statement and times how long until every poll has answered 200 and every stream has
seen its runs' WorkflowTerminated events. It prints one JSON line, peak RSS included.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import SERVER_SETTINGS

from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rss_mib(pid: int, field: str = "VmRSS") -> float:
    """Resident memory now (VmRSS), or the peak so far (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_secs(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_connections(dsn: str) -> tuple[int, int]:
    """The connections of the database other than this bench's own (the API's pool, its LISTEN
    connections and the event streams' reader: the bench's sessions run no other client), and
    how many of them LISTEN."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE query LIKE 'LISTEN %%') FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchone()


class Stream:
    """One SSE subscriber: counts the WorkflowTerminated events it reads until it has ``expect``."""

    def __init__(self, client: httpx.AsyncClient, url: str, expect: int):
        self.client, self.url, self.expect = client, url, expect
        self.opened = asyncio.Event()
        self.terminated = 0
        self.done_at: float | None = None

    async def run(self) -> None:
        async with self.client.stream("GET", self.url, headers={"Accept": "text/event-stream"}) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if line.startswith(": stream open"):
                    self.opened.set()
                elif line.startswith("data:") and '"WorkflowTerminated"' in line:
                    self.terminated += 1
                    if self.terminated >= self.expect:
                        self.done_at = time.monotonic()
                        return


async def main_async(args: argparse.Namespace, dsn: str, base: str, pid: int) -> dict:
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [
            str(row[0])
            for row in conn.execute(
                "SELECT (harvest.start_workflow(p_workflow_name => 'poll', p_input => '[]'::jsonb, "
                "p_workflow_id => 'poll-' || n)).execution_id FROM generate_series(1, %s) AS n",
                (args.n,),
            )
        ]
    total = args.n + args.sse
    limits = httpx.Limits(max_connections=total + 10, max_keepalive_connections=total + 10)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=args.wait + 60) as client:

        async def one(execution_id: str) -> tuple[int, float]:
            response = await client.get(f"/workflows/{execution_id}/result", params={"wait": f"{args.wait}s"})
            return response.status_code, time.monotonic()

        cpu_before = _cpu_secs(pid)
        opened = time.monotonic()
        own = args.sse // 2  # one run's stream each; the rest follow every event
        streams = [Stream(client, f"/workflows/{ids[k % len(ids)]}/events/stream", 1) for k in range(own)]
        streams += [Stream(client, "/stream", args.n) for _ in range(args.sse - own)]
        readers = [asyncio.create_task(s.run()) for s in streams]
        await asyncio.wait_for(asyncio.gather(*(s.opened.wait() for s in streams)), args.wait)
        streams_open_after = time.monotonic() - opened
        tasks = [asyncio.create_task(one(i)) for i in ids]
        # Parked: every poll has marked its waiter row (harvest.wait_for_result).
        deadline = time.monotonic() + args.wait
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                parked = conn.execute("SELECT count(*) FROM harvest.result_waiters").fetchone()[0]
                if parked >= args.n:
                    break
                await asyncio.sleep(0.1)
        parked_after = time.monotonic() - opened
        rss = _rss_mib(pid)
        connections, listening = _server_connections(dsn)
        cpu_parked = _cpu_secs(pid) - cpu_before
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT harvest.terminate_workflow(id, 'bench') FROM harvest.executions WHERE status = 'RUNNING'"
            )
        ended = time.monotonic()  # every run ended (and notified) at this commit
        results = await asyncio.gather(*tasks)
        await asyncio.wait_for(asyncio.gather(*readers), args.wait)
        cpu_answered = _cpu_secs(pid) - cpu_before - cpu_parked
        peak = _rss_mib(pid, "VmHWM")
    statuses = sorted({status for status, _ in results})
    done = [at - ended for _, at in results]
    streamed = [s.done_at - ended for s in streams if s.done_at is not None]
    return {
        "polls": args.n,
        "streams": args.sse,
        "statuses": statuses,
        "streams_open_secs": round(streams_open_after, 2),
        "parked_secs": round(parked_after, 2),
        "server_rss_mib": round(rss, 1),
        "server_peak_rss_mib": round(peak, 1),
        "server_db_connections": connections,
        "server_listen_connections": listening,
        "streams_complete": len(streamed),
        "all_streams_complete_after_end_secs": round(max(streamed), 3) if streamed else None,
        "server_cpu_secs_to_park": round(cpu_parked, 2),
        "server_cpu_secs_to_answer": round(cpu_answered, 2),
        "all_answered_after_end_secs": round(max(done), 3),
        "median_answer_after_end_secs": round(sorted(done)[len(done) // 2], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument(
        "--sse", type=int, default=200, help="Event-stream subscribers (half one run's, half /stream)."
    )
    parser.add_argument("--wait", type=float, default=60.0)
    args = parser.parse_args()
    server = EmbeddedPostgres(settings={**SERVER_SETTINGS, "max_connections": "300"})
    server.start()
    serve = None
    try:
        dsn = server.dsn
        Migrator(dsn).run()
        port = _free_port()
        env = {**os.environ, "HARVEST_DATABASE_URL": dsn, "HARVEST_PROFILE": "dev"}
        serve = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from harvest.cli import main; main()",
                "serve",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            env=env,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}/api/harvest"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/health/ready").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("harvest serve did not become ready")
            time.sleep(0.2)
        print(json.dumps(asyncio.run(main_async(args, dsn, base, serve.pid))))
    finally:
        if serve is not None:
            serve.send_signal(signal.SIGINT)
            serve.wait(30)
        server.stop()


if __name__ == "__main__":
    main()
