"""Helpers for the web tests: the management API through its ASGI app (api_client); a small
Starlette app with the stream routes and one dummy route per scope, a token authorizer, and a
real uvicorn on loopback (streams need one); the rows a route's reads fetched (rows_read)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from harvest.config import load_config
from harvest.core.errors import HarvestError, NotFound
from harvest.web.auth import TokenAuthorizer
from harvest.web.streams import EventHub, stream_routes


def rows_read(monkeypatch, *names: str) -> list[int]:
    """The rows each call of the AsyncSqlApi reads ``names`` fetched from the database, in call
    order, from now on (what a route's or a dashboard page's read costs; the dashboard's tests
    import it as tests.web.web_helpers)."""
    from harvest.db.sqlapi import AsyncSqlApi

    fetched: list[int] = []
    for name in names:
        read = getattr(AsyncSqlApi, name)

        async def counted(self, *args, read=read, **kwargs):
            rows = await read(self, *args, **kwargs)
            fetched.append(len(rows))
            return rows

        monkeypatch.setattr(AsyncSqlApi, name, counted)
    return fetched


def error_code(exc: Exception) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(exc).__name__).lower()


async def harvest_error(request: Request, exc: Exception) -> JSONResponse:
    """The API's error shape (webapi's harvest/web/errors.py does this in management_app)."""
    return JSONResponse(
        {"error": {"code": error_code(exc), "message": str(exc)}},
        status_code=getattr(exc, "http_status", 404 if isinstance(exc, NotFound) else 400),
    )


def make_app(
    authorizer, hub: EventHub | None = None, *, keepalive: float = 15.0, recheck: float = 15.0
) -> Starlette:
    def dummy(scope: str):
        async def endpoint(request: Request) -> JSONResponse:
            principal = await authorizer.authorize(request, scope)
            return JSONResponse({"actor": principal.actor, "scope": principal.scope, "role": principal.role})

        return Route(f"/{scope}", endpoint)

    routes = [dummy("read"), dummy("operate"), dummy("admin")]
    if hub is not None:
        routes += stream_routes(hub, authorizer, keepalive=keepalive, recheck=recheck)
    return Starlette(routes=routes, exception_handlers={HarvestError: harvest_error})


def authorizer_for(dsn: str) -> TokenAuthorizer:
    return TokenAuthorizer(dsn=dsn)


@contextlib.asynccontextmanager
async def serve(app: Starlette) -> AsyncIterator[str]:
    """The app on a real uvicorn on 127.0.0.1 (streams need one); yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1, backlog=512)
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


def api_client(dsn: str | None, *, env: dict[str, str] | None = None, **options):
    """A TestClient over management_app (its lifespan run), with the config of ``env`` only."""
    from starlette.testclient import TestClient

    from harvest.web.app import management_app

    options.setdefault("profile", "dev")
    app = management_app(dsn=dsn, config=load_config(env=env or {}), **options)
    return TestClient(app, headers={"Accept": "application/json"})


def claimed_activity(db: str, options: dict, key: str = "jn-1") -> str:
    """The task token of the claimed first attempt of an activity scheduled with ``options``
    by a decision made over SQL, as a worker of any SDK makes it (workflow id ``key``, its
    workflow task on jq-``key``, its activity on aq-``key``)."""
    import psycopg
    from psycopg.types.json import Jsonb

    from harvest.core.task_token import TaskToken

    with psycopg.connect(db, autocommit=True) as conn:
        run = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('jn', '[]', %s, %s)", (key, f"jq-{key}")
        ).fetchone()[0]
        task_id, fence = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w', ARRAY[%s], 1)", (f"jq-{key}",)
        ).fetchone()
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)",
            (
                task_id,
                fence,
                Jsonb(
                    [
                        {
                            "type": "schedule_activity",
                            "seq": 1,
                            "name": "act",
                            "queue": f"aq-{key}",
                            "input": [],
                            "options": options,
                        }
                    ]
                ),
            ),
        )
        row = conn.execute(
            "SELECT execution_id, task_id, seq, attempt, fencing_token"
            " FROM harvest.claim_tasks('w', ARRAY[%s], 1)",
            (f"aq-{key}",),
        ).fetchone()
    assert row is not None and str(row[0]) == str(run)
    return str(TaskToken(str(row[0]), row[1], row[2], row[3], row[4]))
