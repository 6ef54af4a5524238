"""``GET /admin/metrics``: this process's Prometheus text exposition (docs/observability.md).

Mount beside the management API: ``routes += metrics_routes(authorizer=authorizer)``. The route
needs the ``read`` scope; with no authorizer it answers 401 (fail closed), so a process that
forgets to pass one never serves its metrics to anyone who can reach the socket. The answer is
``text/plain; version=0.0.4``: send ``Accept: text/plain`` (or nothing), not JSON.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from harvest.core.extras import missing_extra

try:  # the [web] extra
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
except ImportError as exc:
    raise missing_extra("harvest.web.metrics", "web", exc) from exc

from harvest.telemetry.metrics import CONTENT_TYPE, Metrics, NullMetrics, render_metrics
from harvest.web.openapi import Mounted

if TYPE_CHECKING:
    from starlette.requests import Request

    from harvest.web.principal import Authorizer

__all__ = ["METRICS", "metrics_routes", "run_samplers"]

# The route as /openapi.json shows it (metrics_routes builds its route from it).
METRICS = Mounted(
    "GET",
    "/admin/metrics",
    "admin_metrics",
    "This process's metrics in the Prometheus text exposition format (send Accept: text/plain).",
    "read",
    CONTENT_TYPE,
    responses={200: "The exposition", 401: "No authorizer or no token"},
    tag="admin",
)


def metrics_routes(
    *,
    authorizer: Authorizer | None = None,
    metrics: Metrics | NullMetrics | None = None,
    path: str = "/admin/metrics",
) -> list[Route]:
    """The metrics route; ``metrics`` defaults to this process's registry."""

    async def admin_metrics(request: Request) -> Response:
        if authorizer is None:
            return JSONResponse(
                {
                    "error": {
                        "code": "unauthenticated",
                        "message": "no authorizer is configured for this route: pass one to metrics_routes()",
                    }
                },
                status_code=401,
            )
        await authorizer.authorize(request, "read")
        body = render_metrics() if metrics is None else render_metrics(metrics)
        return Response(body, media_type=CONTENT_TYPE)

    return [Route(path, admin_metrics, methods=["GET"], name=METRICS.operation_id)]


async def run_samplers(
    urls: Mapping[int, str], *, interval: float = 15.0, metrics: Metrics | NullMetrics | None = None
) -> None:
    """Run the database-gauge sampler of each shard in ``urls`` until cancelled: for a web process
    that runs no worker (``HARVEST_ROLE=web``), started from the app's lifespan. It samples a
    database only while it holds that database's sampler lock, so running it beside workers never
    emits a gauge twice (harvest/worker/sampler.py)."""
    from harvest.telemetry.metrics import process_metrics
    from harvest.worker.sampler import MetricsSampler

    sampler = MetricsSampler(metrics if metrics is not None else process_metrics(), interval=interval)
    await asyncio.gather(*(sampler.run(dsn, shard) for shard, dsn in sorted(urls.items())))
