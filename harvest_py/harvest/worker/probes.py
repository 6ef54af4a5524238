"""The worker's Kubernetes probes (``harvest worker --health-port``, and the same for the worker
``harvest serve`` runs beside its API, ``HarvestLifespan(health_port=...)`` and ``manage.py
harvest_worker --health-port``: :func:`probes_on`, then ``run_worker(probes=...)``): ``/health/live`` and
``/health/ready``, served from a daemon thread so that they answer while the event loop is
blocked, and read only what the loop and the worker stamp (no database call: a probe answers at
once even when the database is frozen).

- Liveness: the loop stamps a tick every :data:`TICK_SECS` (a timer, not a cost per task); the
  probe answers 503 once the tick is older than ``worker.liveness_stall_after`` (a blocking call
  in async code: only a restart helps). A draining worker is live (its loop turns; failing it
  would have the kubelet kill the drain before its grace).
- Readiness: 200 once the worker has booted (its databases, schema and registration) and its
  claim loop runs; 503 while it boots, while it drains (SIGTERM or a remote drain), while its
  claim loop has ended, and while no heartbeat has reached a database for 2 x
  ``heartbeat_interval`` (the registry's stale mark). A worker takes no traffic from a Service,
  so its readiness is informative (``kubectl get pods``, a rollout's progress) more than routing.

Unauthenticated, like ``harvest serve``'s probes: the bodies carry the status and a reason only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from harvest.core.errors import ConfigError

if TYPE_CHECKING:
    from harvest.worker.worker import Worker

# Seconds between the loop's ticks: liveness is this coarse, and costs one timer a second.
TICK_SECS = 1.0

Answer = tuple[int, dict[str, Any]]


class WorkerProbes:
    """What the probes read: the loop's last tick and the worker, once built (``attach``)."""

    def __init__(self, stall_after: float = 30.0) -> None:
        self.stall_after = stall_after
        self.worker: Worker | None = None
        self.ticked_at: float | None = None  # (None until the loop runs: the process is importing)
        self.server: ThreadingHTTPServer | None = None  # (probes_on's; close() stops it)

    def close(self) -> None:
        """Stop serving (a lifespan's shutdown: its port is free for the next startup)."""
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def attach(self, worker: Worker) -> None:
        """``run_worker``'s ``started``: the worker the readiness reads."""
        self.worker = worker

    async def tick(self) -> None:
        """Stamp the loop's tick every TICK_SECS, until cancelled."""
        while True:
            self.ticked_at = time.monotonic()
            await asyncio.sleep(TICK_SECS)

    def stalled(self) -> float | None:
        """The seconds the loop has not turned for, when past ``stall_after``; else None."""
        if self.ticked_at is None:
            return None
        age = time.monotonic() - self.ticked_at
        return age if age > self.stall_after else None

    def live(self) -> Answer:
        if (age := self.stalled()) is not None:
            return 503, {
                "status": "stalled",
                "reason": f"the event loop has not turned for {age:.0f} s (worker.liveness_stall_after "
                f"= {self.stall_after:g} s): a blocking call in async code? restart the process",
            }
        worker = self.worker
        if self.ticked_at is None or worker is None or not worker.booted.is_set():
            return 200, {"status": "starting"}
        return 200, {"status": "draining" if worker.stopping else "ok"}

    def ready(self) -> Answer:
        worker = self.worker
        if (age := self.stalled()) is not None:
            return _not_ready("stalled", f"the event loop has not turned for {age:.0f} s")
        if worker is None or self.ticked_at is None:
            return _not_ready("starting", "the process is importing the App and building its worker")
        if not worker.booted.is_set():
            if worker.stopping:
                return _not_ready("stopping", "the worker was asked to stop while it booted")
            return _not_ready("booting", "the worker is connecting, checking its schema and registering")
        if worker.stopping:
            return _not_ready("draining", "the worker is draining: it claims no new work")
        if worker.run_worker:
            loop = worker.claim_loop
            if loop is None or loop.done():
                return _not_ready("claim_loop_stopped", "the worker's claim loop is not running")
            silent = time.monotonic() - worker.heartbeat_ok_at
            limit = 2 * worker.heartbeat_interval
            if silent > limit:
                return _not_ready(
                    "database_unreachable",
                    f"no heartbeat reached the database for {silent:.0f} s (more than 2 x "
                    f"heartbeat_interval = {limit:g} s): it is down, frozen or overloaded",
                )
        return 200, {"status": "ready", "worker_id": worker.worker_id}


def _not_ready(reason: str, message: str) -> Answer:
    return 503, {"status": "not_ready", "reason": reason, "message": message}


class _Handler(BaseHTTPRequestHandler):
    probes: WorkerProbes  # (set on the subclass serve_probes makes)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/health/live", "/health"):
            status, body = self.probes.live()
        elif path == "/health/ready":
            status, body = self.probes.ready()
        else:
            status, body = 404, {"status": "not_found", "message": "GET /health/live or /health/ready"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a probe every few seconds is no log line."""


def serve_probes(probes: WorkerProbes, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve ``probes`` on ``http://host:port/health/{live,ready}`` from a daemon thread."""
    handler = type("ProbeHandler", (_Handler,), {"probes": probes})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise ConfigError(f"cannot serve the probes on {host}:{port}: {exc.strerror or exc}") from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="harvest-probes", daemon=True).start()
    return server


def probes_on(port: int, host: str = "127.0.0.1") -> WorkerProbes:
    """Probes served on ``http://host:port/health/{live,ready}`` (logged), before the worker is
    built: they answer ``starting`` until ``run_worker(probes=...)`` attaches it."""
    probes = WorkerProbes()
    probes.server = serve_probes(probes, port, host)
    logging.getLogger("harvest.worker").info(
        "probes on http://%s:%d/health/live and /health/ready", host, port
    )
    return probes


async def run_probed(probes: WorkerProbes, running: Awaitable[None]) -> None:
    """Await ``running`` (the worker) with the loop's tick beside it."""
    ticking = asyncio.create_task(probes.tick(), name="liveness-tick")
    try:
        await running
    finally:
        ticking.cancel()
