"""The management API as one ASGI application, mountable under any prefix.

    from harvest.web import management_app
    api = management_app(dsn="postgresql://...", authorizer=TokenAuthorizer(...))
    your_app.mount("/api/harvest", api)            # Starlette or FastAPI

or standalone: ``harvest serve`` (uvicorn, the ``web`` process role). The routes are declared
once in ``harvest/web/routes/`` (one module per domain); ``/openapi.json`` is generated from them.

Its pools open in the app's lifespan, or on the first request when the app is mounted inside
another (Starlette runs no lifespan of a mounted app: call ``await api.state.harvest.close()`` in
your own shutdown then). ``api.state.harvest`` (:class:`HarvestState`) holds the pools, the
router, the configuration and the authorizer, for other route modules mounted beside these.

Authorization: every route names the scope it needs and asks ``authorizer.authorize(request,
scope)`` first; the principal's role is applied to each database connection the request uses.
Without an authorizer, the ``dev`` profile serves everyone as admin (:class:`DevAuthorizer`,
with a warning); any other profile checks API tokens in the database (``TokenAuthorizer``,
docs/auth.md): no token, no access (401 on every route but the health probes). The dashboard is
mounted at ``/ui`` and the event streams (one database's, or every shard's merged) beside the
routes, under the same authorizer.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from harvest.core.extras import missing_extra

try:  # the [web] extra: Starlette, and Jinja2 for the dashboard's pages (harvest.web.ui)
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:
    raise missing_extra("harvest.web.app", "web", exc) from exc

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse
from starlette.routing import BaseRoute, Match, Mount, Route

from harvest.config import (
    Config,
    async_shard_pools,
    database_url,
    load_config,
    resolve_queues,
    runtime_plan,
    shards_configured,
)
from harvest.config.config import RuntimePlan
from harvest.core.errors import ConfigError, HarvestError
from harvest.core.shared_attempt import SharedAttempt
from harvest.db import SCHEMA_VERSION, channels
from harvest.db.migrate import (
    read_function_drift_for_boot,
    read_versions,
    schema_mismatch,
    unfinished_migration,
)
from harvest.db.notify import NotificationHub
from harvest.db.pools import open_async_pool
from harvest.db.sqlapi import AsyncSqlApi
from harvest.db.steps import arun_steps
from harvest.shard.router import ShardRouter
from harvest.web.auth import OPEN_SECS, DevAuthorizer, default_authorizer, token_database
from harvest.web.errors import app_outages, error_body, error_response
from harvest.web.metrics import METRICS, metrics_routes
from harvest.web.principal import Authorizer
from harvest.web.routes import Endpoint
from harvest.web.streams import STREAMS, EventHub, ShardStreams, stream_routes
from harvest.web.ui import dashboard_app

log = logging.getLogger("harvest.web")

# The pool of the API process (per shard): requests share it, each call takes a connection.
DEFAULT_POOL_SIZE = 10
# How long a fan-out read waits for one shard before naming it unavailable.
SHARD_TIMEOUT_SECS = 5.0
# How long opening the pool waits for the database (then: 503, and the next request tries
# again): OPEN_SECS, imported from harvest.web.auth, the token authorizer's pool waits as long,
# and over shards each shard's pool (its acquire_timeout, for a connection too, as the
# dashboard's; not AsyncShardPools' default, a client's). HarvestState.open_timeout: a test's.


@dataclass
class HarvestState:
    """What the routes of one management app share (``app.state.harvest``)."""

    config: Config
    profile: str
    authorizer: Authorizer
    app: Any = None  # the App (workflow catalog) when given: handlers, registered types
    dsn: str | None = None
    pool_size: int = DEFAULT_POOL_SIZE
    pool: Any = None  # one database: its AsyncConnectionPool
    pools: Any = None  # shards: an AsyncShardPools
    router: ShardRouter = field(default_factory=lambda: ShardRouter.single(0))
    plan: RuntimePlan | None = None
    # The error of the runtimes this process runs beside the API, once they ended by themselves
    # (HarvestLifespan's worker, `harvest serve`'s): the health probes answer 503 then.
    runtimes_failure: Callable[[], BaseException | None] = lambda: None
    # The remote drain of the worker this process ran beside the API (``harvest worker drain``,
    # the dashboard's button), once over: ``{"worker_id", "at"}`` (:meth:`note_drained`).
    drained: dict[str, str] | None = None
    max_payload_bytes: int | None = None
    shard_timeout: float = SHARD_TIMEOUT_SECS
    hubs: dict[tuple[int, str], NotificationHub] = field(default_factory=dict)
    own_pools: bool = False
    opened: bool = False
    open_timeout: float = OPEN_SECS
    # One open at a time, its outcome shared: the requests that arrive while it runs (a burst
    # with the database down) wait for it and answer with its error, one wait for all, not one
    # each in turn; the next request after it tries again.
    _opening: SharedAttempt[None] = field(default_factory=SharedAttempt, repr=False)

    @property
    def sharded(self) -> bool:
        return self.pools is not None

    def note_drained(self, worker_id: str, at: datetime) -> None:
        """The worker this process ran beside the API was drained (remotely) and has stopped,
        its scheduler and janitor with it: from now on the process reports that it runs none of
        them (``/admin/config``, ``/admin/retention``, the health probes' ``runtimes``), the
        drain named as their source, while the API serves on."""
        when = at.astimezone(UTC).isoformat()
        self.drained = {"worker_id": worker_id, "at": when}
        if self.plan is not None:
            self.plan = self.plan.as_run(
                {"worker": False, "scheduler": False, "retention": False},
                f"drained (worker {worker_id} at {when})",
            )

    @property
    def unauthenticated(self) -> bool:
        """Whether anyone who reaches the socket is served (dev profile, no authorizer)."""
        return isinstance(self.authorizer, DevAuthorizer)

    async def open(self) -> None:
        """Open the pools and the result listeners (once; the lifespan, or the first request)."""
        if not self.opened:
            await self._opening.run(self._open)

    async def _open(self) -> None:
        if self.pools is None and shards_configured(self.config):
            # (fail_fast: a shard whose server refuses answers 503 at once, not after the wait)
            self.pools = async_shard_pools(
                self.config,
                self.dsn,
                max_size=self.pool_size,
                acquire_timeout=self.open_timeout,
                fail_fast=True,
            )
            self.own_pools = True
        if self.pools is not None:
            self.router = self.pools.router
            for shard in self.pools.shards:
                try:
                    async with self.pools.api(shard) as sql:
                        migrated = await _warn_if_not_migrated(sql, f"shard {shard}")
                        if migrated and self.max_payload_bytes is None:
                            self.max_payload_bytes = await sql.payload_limit()
                except Exception as exc:  # a shard down at boot is named, not fatal
                    log.warning(
                        "harvest: shard %s %s", shard, _boot_failure(exc, _shard_dsn(self.pools, shard))
                    )
        else:
            if not self.dsn:
                self.dsn = database_url(None, self.config)
            # fail_fast, as the shards' above: a server that refuses the connect (down, a wrong
            # host or port, a refused login) is said at once, at boot and on each request, not
            # after open_timeout
            pool = await open_async_pool(
                self.dsn,
                max_size=self.pool_size,
                application_name="harvest-api",
                timeout=self.open_timeout,
                fail_fast=True,
            )
            try:
                sql = AsyncSqlApi(pool)
                if await _warn_if_not_migrated(sql, "the database"):
                    self.max_payload_bytes = await sql.payload_limit()
            except BaseException:  # (the next request opens again: this pool must not stay open)
                await pool.close()
                raise
            self.pool, self.own_pools = pool, True
        self.opened = True

    def hub(self, shard: int, channel: str = channels.DONE) -> NotificationHub:
        """The process's one LISTEN connection on ``channel`` of ``shard`` (opened on first use):
        ``harvest_done`` wakes the result waits, ``harvest_query_answers`` the query and update
        waits. N waits share it (fan-out by payload), none holds a connection of its own."""
        hub = self.hubs.get((shard, channel))
        if hub is None:
            dsn = self.pools.dsn(shard) if self.pools is not None else self.dsn
            # (one database: the routes opened the state first, which set its dsn)
            hub = self.hubs[(shard, channel)] = NotificationHub(dsn, channel)  # type: ignore[arg-type]
        return hub

    async def listener(self, shard: int, channel: str) -> NotificationHub:
        """:meth:`hub`, listening (or, after a second without a connection, trying to in the
        background: the waits' own re-reads answer meanwhile)."""
        hub = self.hub(shard, channel)
        await hub.start(timeout=1.0)
        return hub

    async def close(self) -> None:
        for hub in list(self.hubs.values()):
            await hub.close()
        self.hubs.clear()
        if self.own_pools:
            if self.pools is not None:
                await self.pools.close()
            if self.pool is not None:
                await self.pool.close()
        self.opened = False


def _shard_dsn(pools: Any, shard: int) -> str | None:
    try:
        return cast("str", pools.dsn(shard))
    except Exception:  # (a shard without a DSN: nothing of it to mask)
        return None


def _boot_failure(exc: BaseException, dsn: str | None) -> str:
    """Why a database (a shard's, or the one) failed the boot's open, for its log line:
    "unreachable" (an outage, which may pass; also a login the pool retried until its timeout)
    or "refused" (the database's answer: a privilege, a schema, another shard's database), then
    :func:`harvest.db.connection.failure_reason`'s one line (a database error's first line and
    SQLSTATE, never its DETAIL or CONTEXT, which quote values; libpq's prefix naming the host
    cut), without the DSN's password."""
    from harvest.db.connection import failure_reason, is_permanent
    from harvest.shard.fanout import is_shard_failure

    kind = "unreachable" if is_shard_failure(exc) and not is_permanent(exc) else "refused"
    reason = failure_reason(exc, dsn).splitlines()
    return f"{kind} at startup: {reason[0] if reason else type(exc).__name__}"


async def _warn_if_not_migrated(sql: AsyncSqlApi, what: str) -> bool:
    """Warn once, at boot, when ``what`` is not on this Harvest's schema (pending migrations, a
    `harvest migrate run` that stopped before the function files, or a newer release's schema).
    True when it has a Harvest schema to read. A web process never migrates (only `harvest dev`
    does): it serves, its readiness probe answers 503 and preflight fails until the deploy's
    `harvest migrate run` (spec: "pending migrations are reported as warnings and not applied")."""
    found, functions = await arun_steps(read_versions(), sql)
    if found == SCHEMA_VERSION and functions == found:
        # Its schema is this release's; its functions may still not be (releases change
        # functions/ without a migration): an older release's file, a function replaced by hand.
        drift = await read_function_drift_for_boot(sql, what)
        if drift is not None:
            log.warning("harvest: %s: %s", what, drift.describe())
        return True
    if found is not None and found > SCHEMA_VERSION:
        log.warning("harvest: %s: %s", what, schema_mismatch(found, SCHEMA_VERSION, "this web process"))
        return True
    refusal = (
        unfinished_migration(found, functions, "this web process")
        if found == SCHEMA_VERSION
        else schema_mismatch(found, SCHEMA_VERSION, "this web process")
    )
    log.warning("harvest: %s has pending migrations, which this process does not apply: %s", what, refusal)
    return found is not None


def endpoints() -> list[Endpoint]:
    """Every route of the management API, literal paths before parametric ones."""
    from harvest.web.routes import (
        admin,
        dags,
        dead_letters,
        health,
        history,
        lifecycle,
        payloads,
        schedules,
        start_gates,
        tokens,
        workers,
        workflows,
    )

    found = [
        *health.ENDPOINTS,
        *workflows.ENDPOINTS,
        *lifecycle.ENDPOINTS,
        *payloads.ENDPOINTS,
        *dead_letters.ENDPOINTS,
        *start_gates.ENDPOINTS,
        *workers.ENDPOINTS,
        *admin.ENDPOINTS,
        *schedules.ENDPOINTS,
        *dags.ENDPOINTS,
        *tokens.ENDPOINTS,
        *history.ENDPOINTS,
    ]
    return sorted(found, key=lambda e: e.path.count("{"))


def api_index(mounted_at: str) -> JSONResponse:
    """What the API's base URL answers (``GET /``): where its routes are said, for a caller who
    opened the base URL first (it was a 404 "no route")."""
    return JSONResponse(
        {
            "name": "Harvest management API",
            "openapi": f"{mounted_at}/openapi.json",
            "docs": "docs/http-api.md",
            "health": f"{mounted_at}/health",
            "dashboard": f"{mounted_at}/ui/",
        }
    )


async def _index(request: Request) -> JSONResponse:
    return api_index(request.scope.get("root_path", ""))


def _unslashed(request: Request) -> bool:
    """Whether a request's trailing slash hides a route (``/workflows/``: ``/workflows``). A
    JSON client follows no redirect reliably (some drop a POST's body), so the API answers no
    307 and names the route instead."""
    path = request.scope["path"]
    if not path.endswith("/") or path.rstrip("/") == request.scope.get("root_path", ""):
        return False
    bare = {**request.scope, "path": path.rstrip("/")}
    return any(route.matches(bare)[0] is not Match.NONE for route in request.app.router.routes)


async def _to_dashboard(request: Request) -> RedirectResponse:
    """``/ui`` to the dashboard's ``/ui/``: the one redirect the API keeps (a browser's page)."""
    return RedirectResponse(str(request.url.replace(path=request.url.path + "/")))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    status = getattr(exc, "status_code", 500)
    code = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
    mounted_at = request.scope.get("root_path", "")  # `harvest serve`, HarvestLifespan: /api/harvest
    routes_said = f"see {mounted_at}/openapi.json for the routes"
    if status == 404 and _unslashed(request):
        routes_said = f"the route is {request.url.path.rstrip('/')}, without the trailing slash"
    message = {
        404: f"no route {request.url.path}: {routes_said}",
        405: f"{request.method} is not allowed on {request.url.path}",
    }.get(status, str(getattr(exc, "detail", "")))
    return JSONResponse(error_body(code, message), status_code=status, headers=getattr(exc, "headers", None))


async def _harvest_error(request: Request, exc: Exception) -> JSONResponse:
    """A HarvestError raised by a route mounted beside the declared ones (the event streams)."""
    return error_response(exc, request=request)


def management_app(
    *,
    dsn: str | None = None,
    shards: Any = None,
    config: Config | None = None,
    authorizer: Authorizer | None = None,
    profile: str | None = None,
    app: Any = None,
    pool_size: int | None = None,
    plan: RuntimePlan | None = None,
    runtimes_failure: Callable[[], BaseException | None] | None = None,
) -> Starlette:
    """The management API (a Starlette app; mount it under any prefix).

    ``dsn``: one database (default: ``HARVEST_DATABASE_URL`` / ``database_url`` of the config);
    ``shards``: an :class:`harvest.shard.AsyncShardPools` the caller opened (and closes), else the
    config's ``[shards]``; ``config``: a :class:`harvest.config.Config` (default: read
    ``harvest.toml`` and ``HARVEST_*``); ``authorizer``: turns a request into a Principal
    (:class:`harvest.web.principal.Authorizer`); ``profile``: ``dev`` serves everyone as admin when
    no authorizer is given (default: the config's ``profile``, else fail closed); ``app``: the
    :class:`harvest.App` whose catalog the handler and registered-type routes show; ``pool_size``:
    the most connections its pool opens per shard (default: the config's ``web.pool_size``, else
    10); ``plan``: the runtimes this process runs, which ``/admin/config`` and ``/admin/retention``
    report (default: ``runtime_plan(config)``, what the config places here; a process that runs
    fewer passes :meth:`RuntimePlan.as_run`'s); ``runtimes_failure``: the error of the runtimes that
    process runs beside the API once they ended by themselves (None while they run), which makes
    every health probe answer 503."""
    from harvest.web import openapi

    if dsn is not None and shards is not None:
        raise ConfigError("give management_app a dsn or shards=, not both")
    config = load_config() if config is None else config
    if app is not None:
        # An undeclared queue in worker.queues stops the boot, as in `harvest worker` (else
        # GET /admin/config fails on it at every request).
        resolve_queues(app, config)
    profile = cast("str", profile or config.get("profile") or "production")  # config.get: Any
    own_authorizer = authorizer is None
    if authorizer is None:
        authorizer = cast(
            "Authorizer",
            default_authorizer(profile, None if shards is not None else token_database(dsn, config)),
        )
    state = HarvestState(
        config=config,
        profile=profile,
        authorizer=authorizer,
        app=app,
        dsn=dsn,
        pool_size=pool_size if pool_size is not None else config.get("web.pool_size", DEFAULT_POOL_SIZE),
        pools=shards,
        router=shards.router if shards is not None else ShardRouter.from_config(config),
        plan=runtime_plan(config) if plan is None else plan,
    )
    if runtimes_failure is not None:
        state.runtimes_failure = runtimes_failure
    table = endpoints()
    routes: list[BaseRoute] = [
        Route(path, e.__call__, methods=[e.method], name=e.operation_id)
        for e in table
        for path in e.route_paths  # an alias: the same route under the spec's spelling
    ]
    # Beside the declared routes: the dashboard (/ui, docs/dashboard.md), the metrics and the
    # event streams (docs/event-streams.md), under the same authorizer. The metrics
    # and the streams declare their /openapi.json entries (openapi.Mounted); the dashboard's HTML
    # pages and forms are not part of the API document.
    ui = dashboard_app(dsn=dsn, shards=shards, config=config, authorizer=authorizer, profile=profile, app=app)
    routes.append(Mount("/ui", app=ui))
    routes.append(Route("/ui", _to_dashboard, methods=["GET", "HEAD"]))  # (no redirect_slashes below)
    routes.append(Route("/", _index, methods=["GET"], name="index"))
    routes += metrics_routes(authorizer=authorizer)  # GET /admin/metrics (docs/observability.md)
    mounted: list[openapi.Mounted] = [METRICS]
    hub: EventHub | ShardStreams | None = None
    if shards is not None or shards_configured(config):

        async def topology() -> tuple[ShardRouter, Any]:
            await state.open()
            return state.router, state.pools.dsn

        hub = ShardStreams(topology)  # a hub per shard; /stream merges them
    elif stream_dsn := token_database(dsn, config):
        hub = EventHub(stream_dsn)
    if hub is not None:
        routes += stream_routes(hub, authorizer)
        mounted += STREAMS
    routes.append(Route("/openapi.json", openapi.route(table, mounted), methods=["GET"], name="openapi"))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            await state.open()
        except Exception as exc:  # the API still starts: /health/ready says 503, requests retry the open
            log.warning("harvest: the management API's database %s", _boot_failure(exc, state.dsn))
        try:
            yield
        finally:
            await state.close()
            app_outages(_app).close()  # (the dashboard's too: it shares the API's, below)
            await ui.state.dashboard.close()  # Starlette runs no lifespan of a mounted app
            if hub is not None:
                await hub.aclose()
            if own_authorizer and hasattr(authorizer, "aclose"):
                await authorizer.aclose()  # pyright: ignore[reportAttributeAccessIssue]  # hasattr, above

    api = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, HarvestError: _harvest_error},
    )
    # A trailing slash is a 404 naming the route without it (_http_error), not a 307 with an
    # empty body; the dashboard's own routing (its app under /ui) keeps its redirects.
    api.router.redirect_slashes = False
    api.state.harvest = state
    ui.state.harvest_outages_of = api  # one outage log for the API and its dashboard
    api.state.endpoints = table
    api.state.streams = hub  # the event streams' hub(s): closed by the lifespan (aclose())
    return api
