"""A lifespan that runs Harvest with a Starlette or FastAPI app.

::

    from fastapi import FastAPI
    from harvest.integrations.starlette import HarvestLifespan

    harvest = HarvestLifespan(app, run_worker=True)      # app: your harvest.App
    api = FastAPI(lifespan=harvest)

    @api.post("/orders")
    async def create(request: Request) -> dict:
        handle = await harvest_client(request).start_workflow(checkout, ...)

At startup it opens an :class:`~harvest.AsyncClient` (``api.state.harvest.client``), mounts the
management API (:func:`harvest.web.management_app`) at ``mount_path`` and opens its pools, and,
with ``run_worker=True``, starts a :class:`~harvest.Worker` for the App on the app's event loop.
At shutdown it stops the worker (it drains: tasks in flight finish within
``worker.shutdown_grace``, the rest is released to other workers), then closes the management
API's pools and the client. docs/integrations.md is the guide.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import logging
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any

from harvest.client.client import AsyncClient
from harvest.config import async_shard_pools, load_config
from harvest.config.config import Config, runtime_plan
from harvest.config.process import WorkerBeside, configured_options, is_sharded, worker_dsn
from harvest.core.extras import missing_extra
from harvest.declare.definitions import App
from harvest.worker.options import WorkerOptions, retention_placed
from harvest.worker.probes import WorkerProbes, probes_on
from harvest.worker.worker import Worker

try:  # the web face's packages (Starlette, Jinja2, ...): the [web] extra
    from starlette.applications import Starlette
    from starlette.requests import HTTPConnection, Request
    from starlette.responses import Response
    from starlette.routing import Mount

    from harvest.web.app import management_app
    from harvest.web.errors import app_outages, error_response
    from harvest.web.principal import Authorizer
except ImportError as exc:
    raise missing_extra("harvest.integrations.starlette", "web", exc) from exc

__all__ = ["DEFAULT_MOUNT_PATH", "HarvestLifespan", "harvest_client", "harvest_error_handler"]

log = logging.getLogger("harvest.integrations")

# Where the management API is mounted by default: the path `harvest serve` serves it at.
DEFAULT_MOUNT_PATH = "/api/harvest"
# Where a lifespan takes its database besides HARVEST_DATABASE_URL, for the error without one.
DSN_HINT = "pass HarvestLifespan(dsn=...), or database_url in harvest.toml"


def _check_worker_options(options: Mapping[str, Any]) -> None:
    """Refuse a key no WorkerOptions field names here, where the app is built (a nearby
    field suggested), rather than as Python's bare TypeError when the lifespan starts."""
    fields = sorted(f.name for f in dataclasses.fields(WorkerOptions))
    for key in options:
        if key not in fields:
            near = difflib.get_close_matches(str(key), fields, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise TypeError(
                f"HarvestLifespan(worker_options=...): {key!r} is not a WorkerOptions field{hint}; "
                "each key is a field of harvest.worker.WorkerOptions"
            )


class HarvestLifespan:
    """Harvest's part of an ASGI app's lifespan; pass it as ``lifespan=`` (it is callable with
    the app), or enter ``harvest(app)`` inside your own lifespan.

    ``app``: the :class:`harvest.App` (its payload codecs are the client's; required with
    ``run_worker``; the management API shows its catalog). ``dsn``: the database (default:
    ``HARVEST_DATABASE_URL``, else the config's ``database_url``; a ``[shards]`` config opens a
    pool per shard instead). ``config``: a :class:`harvest.config.Config` (default:
    ``harvest.toml`` and ``HARVEST_*``, as ``harvest worker`` reads them). ``run_worker``: run
    the App's worker in this process, with the config's ``[worker]`` options and the role's
    switches, overridden by ``worker_options`` (``{"concurrency": 4}``). ``mount_path``: where
    the management API goes (None: not mounted); ``authorizer`` and ``profile`` are
    :func:`harvest.web.management_app`'s (without an authorizer only the ``dev`` profile serves
    anyone, as admin; any other checks API tokens). ``pool_size``: the client's connections.
    ``health_port`` (with ``run_worker``): serve the in-process worker's liveness and readiness
    probes on ``http://health_host:health_port/health/live`` and ``/health/ready``, as ``harvest
    worker --health-port`` does (a thread of their own: they answer while the loop is blocked).
    """

    def __init__(
        self,
        app: App | None = None,
        *,
        dsn: str | None = None,
        config: Config | None = None,
        run_worker: bool = False,
        worker_options: Mapping[str, Any] | None = None,
        mount_path: str | None = DEFAULT_MOUNT_PATH,
        authorizer: Authorizer | None = None,
        profile: str | None = None,
        pool_size: int = 4,
        health_port: int | None = None,
        health_host: str = "127.0.0.1",
    ) -> None:
        if run_worker and app is None:
            raise ValueError("HarvestLifespan(run_worker=True) needs the App the worker runs")
        if health_port is not None and not run_worker:
            raise ValueError(
                "HarvestLifespan(health_port=...) serves the in-process worker's probes: it needs "
                f"run_worker=True (the app's own are {mount_path or DEFAULT_MOUNT_PATH}/health/live "
                "and /health/ready)"
            )
        if mount_path is not None and (not mount_path.startswith("/") or mount_path.endswith("/")):
            raise ValueError(f"mount_path {mount_path!r} must start with / and not end with one")
        _check_worker_options(worker_options or {})
        self.app = app
        self.dsn = dsn
        self.config = config
        self.run_worker = run_worker
        self.worker_options = dict(worker_options or {})
        self.mount_path = mount_path
        self.authorizer = authorizer
        self.profile = profile
        self.pool_size = pool_size
        self.health_port = health_port
        self.health_host = health_host
        self.management_api: Starlette | None = None
        self._client: AsyncClient | None = None
        self._worker: WorkerBeside | None = None

    @property
    def worker(self) -> Worker | None:
        """The in-process :class:`~harvest.Worker` once built (None without ``run_worker``, and
        after shutdown)."""
        return self._worker.worker if self._worker is not None else None

    @property
    def client(self) -> AsyncClient:
        """The :class:`~harvest.AsyncClient` opened at startup (a RuntimeError before it, or after
        shutdown). It belongs to the app's event loop: use it from ``async def`` routes."""
        if self._client is None:
            raise RuntimeError(
                "Harvest is not started: pass HarvestLifespan as the app's lifespan= "
                "(or enter it in your own lifespan) and use the client from requests"
            )
        return self._client

    def __call__(self, asgi_app: Starlette) -> contextlib.AbstractAsyncContextManager[None]:
        return self._lifespan(asgi_app)

    @contextlib.asynccontextmanager
    async def _lifespan(self, asgi_app: Starlette) -> AsyncIterator[None]:
        config = self.config if self.config is not None else load_config()
        asgi_app.state.harvest = self
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(self._forget)
            # The outages harvest_error_handler logged: their counts not said yet, at shutdown.
            stack.callback(app_outages(asgi_app).close)
            self._client = await self._open_client(config, stack)
            options = configured_options(self.app, config, **self.worker_options) if self.run_worker else None
            if self.mount_path is not None:
                await stack.enter_async_context(self._mounted(asgi_app, config, options))
            if options is not None:
                probes = None
                if self.health_port is not None:
                    probes = probes_on(self.health_port, self.health_host)
                    stack.callback(probes.close)
                await self._start_worker(config, options, probes)
                stack.push_async_callback(self._stop_worker)
            yield

    async def _forget(self) -> None:
        self._client = None

    async def _open_client(self, config: Config, stack: contextlib.AsyncExitStack) -> AsyncClient:
        codecs = self.app.payloads if self.app is not None else None
        if is_sharded(config):
            pools = async_shard_pools(config, self.dsn, max_size=self.pool_size)
            stack.push_async_callback(pools.close)
            client = await AsyncClient.connect(shards=pools, codecs=codecs)
        else:
            client = await AsyncClient.connect(
                worker_dsn(config, self.dsn, DSN_HINT), pool_size=self.pool_size, codecs=codecs
            )
        stack.push_async_callback(client.close)
        return client

    @contextlib.asynccontextmanager
    async def _mounted(
        self, asgi_app: Starlette, config: Config, options: WorkerOptions | None
    ) -> AsyncIterator[None]:
        """The management API mounted at ``mount_path``, its own lifespan run (Starlette runs
        none for a mounted app): its pools open now, and close when the app stops. It reports
        the runtimes this process runs (``options``; None: none), not the ones its role places:
        ``run_worker=False`` runs none whatever the role, and ``worker_options`` may turn one off."""
        runs: dict[str, bool]
        if options is None:
            runs = {"worker": False, "scheduler": False, "retention": False}
            source = "off (HarvestLifespan(run_worker=False))"
        else:
            runs = {
                "worker": options.run_worker,
                "scheduler": options.run_scanner,
                "retention": retention_placed(options),
            }
            source = "explicit (HarvestLifespan worker_options)"
        api = management_app(
            dsn=None if is_sharded(config) else worker_dsn(config, self.dsn, DSN_HINT),
            config=config,
            authorizer=self.authorizer,
            profile=self.profile,
            app=self.app,
            plan=runtime_plan(config).as_run(runs, source),
            runtimes_failure=lambda: self.worker_failure,
        )
        api.state.harvest_outages_of = asgi_app  # one outage log: the app's routes' and the API's
        mount = Mount(self.mount_path or DEFAULT_MOUNT_PATH, app=api)
        # First, so that a route of the app matching every path (a single-page app's fallback)
        # does not answer the API's paths.
        asgi_app.router.routes.insert(0, mount)
        self.management_api = api
        try:
            async with api.router.lifespan_context(api):
                yield
        finally:
            asgi_app.router.routes.remove(mount)
            self.management_api = None

    async def _start_worker(
        self, config: Config, options: WorkerOptions, probes: WorkerProbes | None
    ) -> None:
        """The worker beside the app, booted: a worker that cannot start (Redis or the database
        unreachable, a schema or role the worker cannot use, ...) fails the startup with its own
        error, before the app serves (docs/integrations.md)."""
        assert self.app is not None  # checked in __init__
        beside = WorkerBeside(
            self.app,
            config,
            options,
            database_url=self.dsn,
            name="harvest-worker",
            on_failure=_log_worker_end,
            on_drained=self._drained,
            probes=probes,
        )
        try:
            await beside.started()  # (raises what ended the boot; the worker's task is over then)
        except asyncio.CancelledError:
            # The server gave up the startup meanwhile: the worker must not outlive it, booting
            # on beside a client and pools the lifespan closes.
            with contextlib.suppress(Exception):
                await beside.stop()
            raise
        self._worker = beside

    def _drained(self, worker: Worker, at: datetime) -> None:
        """A remote drain stopped the worker (its claim loop, scheduler and janitor): the app
        serves on, and the mounted API reports the drain from now on."""
        log.warning(
            "harvest: the in-process worker %s was drained and stopped; the app serves on, and its "
            "management API reports the drain",
            worker.worker_id,
        )
        if self.management_api is not None:
            self.management_api.state.harvest.note_drained(worker.worker_id, at)

    @property
    def worker_failure(self) -> BaseException | None:
        """The error of an in-process worker that ended by itself after startup (None while it
        runs, and without one). The mounted API's health probes answer 503 then, and the
        shutdown raises it."""
        return self._worker.failure if self._worker is not None else None

    async def _stop_worker(self) -> None:
        """The worker drained (WorkerBeside.stop); one that had failed raises its error here."""
        beside = self._worker
        if beside is None:
            return
        worker = beside.worker
        if worker is not None and beside.booted and (busy := worker.in_flight) > 0:
            # Said where a server's log shows it: the worker's own line is INFO, which a server's
            # logging (uvicorn's) leaves out, and a stop or a --reload looked hung meanwhile.
            log.warning(
                "harvest: the app stops once the in-process worker's %d task(s) in flight finish, "
                "within worker.shutdown_grace = %g s (the rest are released to other workers)",
                busy,
                worker.shutdown_grace,
            )
        try:
            await beside.stop()
        finally:
            self._worker = None


def _log_worker_end(error: BaseException) -> None:
    log.error(
        "harvest: the in-process worker stopped: %s; the health probes answer 503 until the process "
        "restarts, and the shutdown raises it",
        error,
    )


def harvest_client(connection: HTTPConnection) -> AsyncClient:
    """The client of the app serving ``connection`` (a request or a websocket): what a route
    calls (``harvest_client(request).start_workflow(...)``); FastAPI's ``HarvestClient`` is
    this as a dependency."""
    harvest = getattr(connection.app.state, "harvest", None)
    if not isinstance(harvest, HarvestLifespan):
        # (Set when the lifespan starts: a lifespan that never ran looks like none.)
        raise RuntimeError(
            "Harvest has not started for this app: pass HarvestLifespan as the app's lifespan= (or "
            "enter it in your own lifespan), and run the lifespan: a server does; in a test, use "
            "`with TestClient(app)` or `async with app.router.lifespan_context(app)`"
        )
    return harvest.client


async def harvest_error_handler(request: Request, exc: Exception) -> Response:
    """The management API's JSON error for a :class:`harvest.HarvestError` one of your routes
    raised (``NotFound`` 404, ``WorkflowAlreadyExists`` 409, ``WorkflowNotRunning`` 409, ...,
    ``{"error": {"code", "message", ...}}``): ``exception_handlers={HarvestError:
    harvest_error_handler}``."""
    return error_response(exc, request=request)
