"""`harvest serve`: the management API on uvicorn, as the ``web`` process role (it claims no
task and fires no schedule; docs/http-api.md). Host and port: ``--host``/``--port``, else
``web.host``/``web.port`` (``HARVEST_WEB__HOST``, ``HARVEST_WEB__PORT``), else 127.0.0.1:3000
(where the CLI looks when it is given nothing)."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shlex
import signal
import socket
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

import click

from harvest.cli.http import DEFAULT_PORT, MOUNT
from harvest.cli.output import cli_config, database_url_option, health_options, log_format_option
from harvest.core.errors import ConfigError, HarvestError
from harvest.core.extras import missing_extra

# The database driver (harvest.db.connection) is imported when a socket is opened or the
# server starts, never for --help (tests/unit/test_startup.py).

DEFAULT_HOST = "127.0.0.1"
# How long a stopping server waits for requests in flight before it cuts them (a long-poll client
# polls again, on another replica).
GRACE_SECS = 5


def web_address(config: Any, host: str | None, port: int | None) -> tuple[str, int]:
    """The flag, else the config's web.host / web.port, else 127.0.0.1:3000."""
    return (
        host or config.get("web.host") or DEFAULT_HOST,
        port if port is not None else config.get("web.port", DEFAULT_PORT),
    )


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """The management API's listening sockets on ``host``:``port`` (one per address it resolves
    to, as uvicorn binds them: ``localhost`` on both 127.0.0.1 and ::1 where it has both; an
    IPv6 socket IPv6 only), each with TCP keepalives and a user timeout, which the connections
    it accepts inherit (Linux and the BSDs): a client that goes silent (a host cut off, a laptop
    closed, a NAT that forgets the flow) is given up after about 30 s, as a database is
    (harvest.db.connection), and its event stream or long-poll ends, instead of holding a
    subscription while TCP retransmits the stream's keepalives for 15 minutes or an idle
    long-poll for the OS's two hours. A live client's kernel acknowledges and answers the
    probes, however slow its process; one that stops reading a stream with data to send for 30 s
    (its window full) is given up too, and reconnects."""
    from harvest.db.connection import SOCKET_KEEPALIVE_OPTIONS

    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise HarvestError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (check --host)") from None
    sockets: list[socket.socket] = []
    try:
        bound: set[tuple[int, Any]] = set()
        for family, kind, proto, _, address in found:
            if (family, address) in bound:  # (an address resolved twice)
                continue
            bound.add((family, address))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            if os.name == "posix":  # (elsewhere it would let two servers share the port)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for option, value in SOCKET_KEEPALIVE_OPTIONS.items():
                sock.setsockopt(socket.IPPROTO_TCP, option, value)
            sock.bind(address)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        hint = (
            "another server on that port? choose another with --port or web.port"
            if exc.errno == errno.EADDRINUSE
            else "check --host: an address of this machine"
        )
        raise HarvestError(f"cannot listen on {host}:{port}: {exc.strerror or exc} ({hint})") from None
    return sockets


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM as Ctrl-C: uvicorn stops gracefully on it, then raises it again here."""
    raise KeyboardInterrupt


def served_url(host: str, sockets: list[socket.socket], mount: str = MOUNT) -> str:
    """The API's URL as ``host`` names it, with the port it got (``--port 0``: the system's)."""
    port = sockets[0].getsockname()[1]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{mount}"


def served_app(
    api: Any,
    mount: str = MOUNT,
    runtimes: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None,
) -> Any:
    """The management API mounted at ``mount`` (the spec's /api/harvest), its lifespan run;
    ``runtimes``: the Harvest runtimes this process runs beside it (:class:`PlacedRuntimes`)."""
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route

    from harvest.db.connection import failure_reason

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        state = api.state.harvest
        try:
            await state.open()
        except Exception as exc:  # served anyway: /health/ready answers 503 until the database is back
            logging.getLogger("harvest.web").warning(
                "harvest: the database is not reachable yet: %s", failure_reason(exc)
            )
        try:
            async with runtimes() if runtimes is not None else contextlib.nullcontext():
                yield
        finally:
            await state.close()

    async def outside(request: Any, exc: Any) -> Any:
        # A path outside the mount (the host's root, /health without the prefix): the API's JSON
        # error shape pointing at it, not Starlette's text/plain "Not Found".
        from starlette.responses import JSONResponse

        from harvest.web.errors import error_body

        if exc.status_code != 404:
            return JSONResponse(error_body("http_error", str(exc.detail)), exc.status_code, exc.headers)
        said = f"no route {request.url.path}: the management API is under {mount} ({mount}/openapi.json)"
        return JSONResponse(error_body("not_found", said), 404)

    async def base(request: Any) -> Any:
        # The base URL without its slash answers the API's index, not a 307 to it.
        from harvest.web.app import api_index

        return api_index(mount)

    return Starlette(
        routes=[Route(mount, base, methods=["GET"]), Mount(mount, app=api)],
        lifespan=lifespan,
        exception_handlers={404: outside},
    )


class PlacedRuntimes:
    """The runtimes a `harvest serve` replica's plan places in it, run beside the API as
    `harvest worker` runs them (harvest.config.process.run_worker): none for the web role, the
    janitor with ``retention.run_on = "all"``, the scheduler or the claim loop where an explicit
    switch turns them on. A runtime that fails stops the server (exit 1), as it stops a worker
    process: a replica that reports a runtime and runs none would mislead (/admin/config,
    /admin/retention)."""

    def __init__(self, app: Any, config: Any, dsn: str | None) -> None:
        from harvest.config import runtime_plan
        from harvest.config.process import configured_options
        from harvest.declare.definitions import App

        plan = runtime_plan(config)
        if plan.worker.value and app is None:
            raise ConfigError(
                f"harvest serve: {plan.worker.line()} places the claim loop here, which needs the "
                "App: pass --app module:app, or leave the worker to `harvest worker` (a web replica "
                "claims no task)"
            )
        self.app = app if app is not None else App()  # the scheduler and the janitor need no code
        self.config = config
        self.dsn = dsn
        self.options = configured_options(self.app, config) if plan.runs_anything() else None
        self.failure: BaseException | None = None
        self.on_failure: Callable[[], None] = lambda: None  # the server's stop
        # A remote drain of the worker: what the API reports of this process from then on.
        self.on_drained: Callable[[Any, datetime], None] = lambda worker, at: None
        self.probes: Any = None  # (--health-port's WorkerProbes: the runtimes' liveness and readiness)

    def __bool__(self) -> bool:
        return self.options is not None

    @contextlib.asynccontextmanager
    async def __call__(self) -> AsyncIterator[None]:
        from harvest.config.process import WorkerBeside

        assert self.options is not None  # (served only when something is placed)

        def ended(error: BaseException) -> None:
            self.failure = error
            logging.getLogger("harvest.web").error(
                "harvest serve: the runtimes of this replica stopped: %s; stopping the server", error
            )
            self.on_failure()

        def drained(worker: Any, at: datetime) -> None:
            logging.getLogger("harvest.web").warning(
                "harvest serve: worker %s was drained and stopped (its claim loop, scheduler and "
                "janitor); the management API stays up until the process stops, and reports the drain",
                worker.worker_id,
            )
            self.on_drained(worker, at)

        runtimes = WorkerBeside(
            self.app,
            self.config,
            self.options,
            database_url=self.dsn,
            name="harvest-runtimes",
            on_failure=ended,
            on_drained=drained,
            probes=self.probes,
        )
        try:
            yield
        finally:
            # (a failure while serving is self.failure, which `harvest serve` exits with)
            with contextlib.suppress(Exception):
                await runtimes.stop()


def curl_line(base: str, route: str = "/workflows/greet/start", body: str = '{"input": ["world"]}') -> str:
    """One curl that starts a durable workflow (the dev runner's demo by default): a POST of
    ``body`` to ``route`` (a workflow's start, or a DAG's trigger)."""
    return (
        f"curl -s -X POST {base}{route} -H 'Accept: application/json' "
        f"-H 'Content-Type: application/json' -d {shlex.quote(body)}"
    )


@click.command("serve")
@click.option("--host", default=None, help=f"Interface to listen on (default web.host, else {DEFAULT_HOST}).")
@click.option(
    "--port",
    default=None,
    type=click.IntRange(0, 65535),
    help=f"Port (default web.port, else {DEFAULT_PORT}).",
)
@click.option("--app", "app_target", default=None, help="module:app whose workflow catalog the API serves.")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]))
@health_options("the worker this replica runs (its role places one)")
@log_format_option
@database_url_option
def serve(
    host: str | None,
    port: int | None,
    app_target: str | None,
    log_level: str,
    health_port: int | None,
    health_host: str,
    log_format: str,
    database_url: str | None,
) -> None:
    """Serve the management API (mounted at /api/harvest) as the web process role."""
    try:
        import uvicorn

        from harvest.web.app import management_app
    except ImportError as exc:
        raise HarvestError(str(missing_extra("harvest serve", "web", exc))) from None
    from harvest.config import runtime_plan
    from harvest.telemetry.logs import configure_logging
    from harvest.worker.collector import freeze_at_exit

    configure_logging(log_level.upper(), log_format)
    freeze_at_exit()  # (the process ends with the command: its exit need not free every module)
    config = cli_config()
    if config.get("role") is None:
        config = config.with_overrides({"role": ("web", "harvest serve")})
    from harvest.cli.appname import name_connections
    from harvest.db.connection import PROCESS_APPLICATION_NAMES

    name_connections(PROCESS_APPLICATION_NAMES["web"])  # (each request's transaction names its face)
    app = None
    if app_target:
        from harvest.cli.worker import load_app

        app = load_app(app_target)
    dsn = None
    if database_url or not config.get("shards.urls"):
        from harvest.cli.output import cli_dsn

        dsn = cli_dsn(database_url)
    runtimes = PlacedRuntimes(app, config, dsn)
    if health_port is not None:
        if not runtimes:
            raise ConfigError(
                "harvest serve --health-port serves the probes of a worker this replica runs, and its "
                "role places none here: probe /api/harvest/health/live and /health/ready instead"
            )
        from harvest.worker.probes import probes_on

        runtimes.probes = probes_on(health_port, health_host)
    api = management_app(dsn=dsn, config=config, app=app, runtimes_failure=lambda: runtimes.failure)
    if not runtimes:
        # The process's startup line and notes, as a worker logs them: a web replica's retention
        # runs elsewhere (run_on = "scheduler"), and the operator reads that here. (Runtimes
        # placed here log them as they start, as `harvest worker` does.)
        runtime_plan(config).log()
    host, port = web_address(config, host, port)
    sockets = listening_sockets(host, port)
    banner = f"Harvest management API on {served_url(host, sockets)}"
    if log_format == "json":  # (every line of a json log is an object: a collector parses each)
        logging.getLogger("harvest.web").info(banner)
    else:
        click.echo(banner, err=True)
    # Long-polls (result?wait=) may hold a request for minutes: a stop waits GRACE_SECS for them.
    served = uvicorn.Config(
        served_app(api, runtimes=runtimes if runtimes else None),
        host=host,
        port=port,
        log_level=log_level,
        # uvicorn's own lines (its startup, errors, one per request) go to the handler
        # configure_logging set up, in its format: uvicorn's default config would print them
        # as its own text, also under --log-format json.
        log_config=None,
        timeout_graceful_shutdown=GRACE_SECS,
    )
    server = uvicorn.Server(served)
    runtimes.on_failure = lambda: setattr(server, "should_exit", True)
    runtimes.on_drained = lambda worker, at: api.state.harvest.note_drained(worker.worker_id, at)
    # uvicorn raises the signal that stopped it again once its graceful stop is done: SIGTERM
    # (a kubelet's, systemd's) then ends as Ctrl-C does, exit 0, not killed by the signal (143).
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        # Ctrl-C ends it as uvicorn.run does: after the graceful stop, not as an abort (exit 0).
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=sockets)
    finally:
        signal.signal(signal.SIGTERM, previous)
        for sock in sockets:
            sock.close()
    if runtimes.failure is not None:
        raise HarvestError(f"the runtimes of this replica stopped: {runtimes.failure}")
