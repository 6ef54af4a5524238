"""A small Starlette app for the web tests: the stream routes and one dummy route per scope, with
a token authorizer, served through httpx (ASGI transport) or a real uvicorn on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
import uvicorn
from psycopg import conninfo
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from harvest.core.errors import HarvestError
from harvest.web.auth import TokenAuthorizer
from harvest.web.streams import EventHub, stream_routes


def error_code(exc: Exception) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(exc).__name__).lower()


async def harvest_error(request: Request, exc: Exception) -> JSONResponse:
    """The API's error shape (webapi's harvest/web/errors.py does this in management_app)."""
    return JSONResponse(
        {"error": {"code": error_code(exc), "message": str(exc)}},
        status_code=getattr(exc, "http_status", 400),
    )


def make_app(authorizer, hub: EventHub | None = None, *, keepalive: float = 15.0) -> Starlette:
    def dummy(scope: str):
        async def endpoint(request: Request) -> JSONResponse:
            principal = await authorizer.authorize(request, scope)
            return JSONResponse({"actor": principal.actor, "scope": principal.scope, "role": principal.role})

        return Route(f"/{scope}", endpoint)

    routes = [dummy("read"), dummy("operate"), dummy("admin")]
    if hub is not None:
        routes += stream_routes(hub, authorizer, keepalive=keepalive)
    return Starlette(routes=routes, exception_handlers={HarvestError: harvest_error})


@pytest.fixture
def tokens(db: str) -> dict[str, str]:
    """One live token per scope: {scope: secret}."""
    with psycopg.connect(db, autocommit=True) as conn:
        return {
            scope: conn.execute(
                "SELECT secret FROM harvest.create_api_token(%s, %s)", (f"t-{scope}", scope)
            ).fetchone()[0]
            for scope in ("read", "operate", "admin")
        }


@pytest.fixture
def web_login(pg_server, db: str) -> Iterator[str]:
    """The DSN of a login that is a member of the three request roles, as the web process's is."""
    user = f"u_web_{uuid.uuid4().hex[:8]}"
    with pg_server.admin() as admin:
        admin.execute(f'CREATE ROLE "{user}" LOGIN')
        admin.execute(f'GRANT harvest_reader, harvest_operator, harvest_admin TO "{user}"')
    yield conninfo.make_conninfo(db, user=user, password="")
    with pg_server.admin() as admin:
        admin.execute(f'DROP ROLE IF EXISTS "{user}"')


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
