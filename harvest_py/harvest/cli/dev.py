"""`harvest dev`: Harvest end to end on an embedded PostgreSQL, for development only."""

from __future__ import annotations

import contextlib
import inspect
import shlex
import signal
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from harvest.cli.output import log_format_option
from harvest.core.errors import ConfigError
from harvest.core.secret_files import env_secret

# The database driver and asyncio are imported when the runner starts, never for --help
# (tests/unit/test_startup.py).
if TYPE_CHECKING:
    import uvicorn

    from harvest.declare.definitions import App
    from harvest.worker import Worker
    from harvest.worker.options import WorkerOptions

DEV_DSN_ENV = "HARVEST_DEV_DATABASE_URL"


def require_local(dsn: str) -> None:
    """`harvest dev` may only touch a database on this machine."""
    from harvest.db.connection import is_local_host, parse_dsn

    host = parse_dsn(dsn, DEV_DSN_ENV).get("host") or "localhost"
    for part in host.split(","):
        if is_local_host(part):
            continue
        raise ConfigError(
            f"{DEV_DSN_ENV} points at host {part!r}: harvest dev only runs against a "
            "local database (localhost, 127.0.0.1, ::1 or a socket directory)"
        )


@click.command()
@click.argument("target", required=False)
@click.option(
    "--demo-and-exit", is_flag=True, help="Start the demo workflow, print its result and exit (a smoke test)."
)
@click.option(
    "--host", default=None, help="The management API's interface (default web.host, else 127.0.0.1)."
)
@click.option(
    "--port", default=None, type=click.IntRange(0, 65535), help="Its port (default web.port, else 3000)."
)
@click.option("--no-api", is_flag=True, help="Run the worker only, without the management API.")
@click.option(
    "--data-dir",
    default=None,
    type=click.Path(file_okay=False, resolve_path=True, path_type=Path),
    help="Keep the embedded database in this directory across runs (made on first use, never "
    "removed); by default it is a fresh one, removed at the end.",
)
@log_format_option
def dev(
    target: str | None,
    demo_and_exit: bool,
    host: str | None,
    port: int | None,
    no_api: bool,
    data_dir: Path | None,
    log_format: str,
) -> None:
    """Run a worker and the management API on an embedded PostgreSQL (or
    HARVEST_DEV_DATABASE_URL, local only).

    TARGET is module:attribute of your App; without it the built-in demo runs.
    Ctrl-C stops the worker, the server, and removes what it created (a --data-dir stays).
    Killed outright, its embedded PostgreSQL stops too.
    """
    import asyncio

    from harvest.cli.appname import name_connections
    from harvest.cli.worker import load_app
    from harvest.db.connection import PROCESS_APPLICATION_NAMES, redact
    from harvest.db.embedded import EmbeddedPostgres, bin_dir
    from harvest.db.migrate import Migrator
    from harvest.telemetry.logs import configure_logging
    from harvest.worker import Worker
    from harvest.worker.collector import freeze_at_exit

    configure_logging("INFO", log_format)
    freeze_at_exit()  # (the process ends with the command: its exit need not free every module)
    name_connections(PROCESS_APPLICATION_NAMES["dev"])
    # mypy does not narrow by an import: the demo's binds app when None (the two ignores below)
    app = load_app(target) if target else None
    if app is None:
        from harvest.cli.demo import app
    server = None
    dsn = env_secret(DEV_DSN_ENV)
    if dsn and data_dir is not None:
        raise click.UsageError(f"--data-dir is the embedded database's; {DEV_DSN_ENV} names another one")
    if dsn:
        require_local(dsn)
    # The API's port is taken before the database starts and migrates (seconds): a busy port
    # ends the command at once, with the error that names it.
    listening = None if no_api or demo_and_exit else _listen(host, port)
    stops = (
        "Ctrl-C stops everything and removes what was created.\n"
        if data_dir is None
        else f"Ctrl-C stops everything; the database stays in {data_dir} for the next run.\n"
    )
    try:
        if dsn is None:
            kept = f" (kept in {data_dir})" if data_dir is not None else ""
            click.echo(f"starting an embedded PostgreSQL{kept} ...", err=True)
            server = EmbeddedPostgres(base_dir=data_dir)
            dsn = server.start()
        Migrator(dsn, progress=lambda msg: click.echo(msg, err=True)).run()
        # A DSN given in the environment may hold a password: refer to the variable instead.
        quoted = f'"${DEV_DSN_ENV}"' if server is None else shlex.quote(dsn)
        click.echo(f"\nHarvest is ready on {redact(dsn, dsn)}\n  psql:   {bin_dir() / 'psql'} {quoted}\n")
        if not target:
            click.echo(
                "Start the demo workflow, then read its result:\n"
                f"  HARVEST_DATABASE_URL={quoted} harvest workflow start greet --input-json '[\"world\"]'\n"
                f"  HARVEST_DATABASE_URL={quoted} harvest workflow result <execution_id>\n"
            )
        from harvest.cli.output import cli_config

        worker = Worker(app, dsn, options=_dev_options(), redis_url=cli_config().get("redis.url"))  # type: ignore[arg-type]
        if demo_and_exit:
            click.echo(stops)
            asyncio.run(_demo(worker, dsn))
        else:
            api = None if listening is None else _api_server(app, dsn, listening, demo=not target)  # type: ignore[arg-type]
            click.echo(stops)
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(_run(worker, api))
    finally:
        for sock in listening[2] if listening is not None else ():
            sock.close()  # (closed already after a run; not when the boot failed)
        if server is not None:
            removing = (
                "removing its files (in the background)"
                if data_dir is None
                else f"keeping its data in {data_dir}"
            )
            click.echo(f"stopping the embedded PostgreSQL and {removing}", err=True)
            # (the prompt comes back once the server is down, not after every file is unlinked)
            server.stop(remove_in_background=True)


def _dev_options() -> WorkerOptions:
    """The dev worker's options: everything runs in this one process, whatever the role (the
    claim loop, the scheduler, the janitor unless ``retention.enabled = false``), with the
    ``[worker]`` and ``[retention]`` tunables as `harvest worker` reads them, on the one
    embedded database (``worker.shard_assignments`` does not apply), polling every second.
    (redis.url is taken as `harvest worker` takes it, docs/redis-dispatch.md: never silently
    ignored; an unreachable Redis stops the boot.)"""
    from harvest.cli.output import cli_config
    from harvest.config import worker_options
    from harvest.worker.options import AUTO

    config = cli_config()
    retention = config.get("retention.enabled")
    return worker_options(
        config,
        run_worker=True,
        run_scanner=True,
        run_retention=retention is not False,
        shard_assignments=AUTO,
        poll_interval=1.0,
    )


def _listen(host: str | None, port: int | None) -> tuple[str, int, list[socket.socket]] | None:
    """The management API's address and its listening sockets, bound (a busy port raises its
    error here); None when uvicorn is missing."""
    try:
        import uvicorn  # noqa: F401

        from harvest.cli.output import cli_config
        from harvest.cli.serve import listening_sockets, web_address
        from harvest.web.app import management_app  # noqa: F401
    except ImportError:
        click.echo("(no management API: install harvest-workflows[web])", err=True)
        return None
    host, port = web_address(cli_config(), host, port)
    return host, port, listening_sockets(host, port)


def _api_server(
    app: App, dsn: str, listening: tuple[str, int, list[socket.socket]], demo: bool = True
) -> tuple[uvicorn.Server, list[socket.socket], Any]:
    """The management API of the dev runner (profile dev: every caller is admin, so it listens
    on localhost by default) on the sockets :func:`_listen` bound, with them and its state
    (``HarvestState``), its URL and one curl printed."""
    import uvicorn

    from harvest.cli.output import cli_config
    from harvest.cli.serve import GRACE_SECS, curl_line, served_app, served_url
    from harvest.web.app import management_app

    host, port, sockets = listening
    api = management_app(dsn=dsn, config=cli_config(), profile="dev", app=app)
    base = served_url(host, sockets)
    if demo or not app.workflows:
        curl = curl_line(base)
    else:
        route, body, note = start_hint(app)
        curl = curl_line(base, route, body) + (f"\n    {note}" if note else "")
    click.echo(
        f"Management API: {base}  (OpenAPI: {base}/openapi.json)\n  {curl}\n"
        f"Dashboard: {base}/ui/\n"
        f"  HARVEST_URL={base} harvest workflow list    (the CLI over HTTP)\n"
    )
    server = uvicorn.Server(
        uvicorn.Config(
            served_app(api),
            host=host,
            port=port,
            log_level="warning",
            log_config=None,  # (its lines in the process's log format, as `harvest serve`'s)
            timeout_graceful_shutdown=GRACE_SECS,
        )
    )
    # The worker owns Ctrl-C and stops the server after it. uvicorn (0.29 and later) would
    # take SIGINT and SIGTERM for the length of serve() and raise them again when it returns.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    return server, sockets, api.state.harvest


async def _run(worker: Worker, api: tuple[uvicorn.Server, list[socket.socket], Any] | None) -> None:
    """The worker, and the API (its server and listening sockets) beside it, until Ctrl-C (or a
    SIGTERM). A remote drain (`harvest worker drain`, the dashboard's button) stops the worker
    only: the API and the database stay up, as a `harvest serve` replica's API outlives its
    drained claim loop, rather than end the session and remove its database."""
    import asyncio

    interrupted = asyncio.Event()

    def interrupt() -> None:
        interrupted.set()
        worker.request_stop()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, interrupt)
    serving = None
    if api is not None:
        serving = asyncio.create_task(api[0].serve(sockets=api[1]))
    try:
        await worker.run()
        if not interrupted.is_set():
            if api is not None:  # what the API reports of this process from now on
                api[2].note_drained(worker.worker_id, datetime.now(UTC))
            kept = "the management API and the database" if api is not None else "the database"
            click.echo(f"the worker drained and stopped; {kept} stay up until Ctrl-C", err=True)
            await interrupted.wait()
    finally:
        if api is not None and serving is not None:
            api[0].should_exit = True
            await serving
            for sock in api[1]:
                sock.close()


async def _demo(worker: Worker, dsn: str) -> None:
    import asyncio

    from harvest.cli.demo import greet
    from harvest.cli.output import to_json
    from harvest.client import AsyncClient

    running = asyncio.create_task(worker.run())
    async with await AsyncClient.connect(dsn) as client:
        handle = await client.start_workflow(greet, "world")
        click.echo(f"started greet: execution {handle.execution_id}")
        waiting = asyncio.ensure_future(handle.result(timeout=60))
        # A worker that fails to boot (an unreachable Redis) ends the demo with its error at
        # once, not after the result's timeout.
        await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if running.done() and not waiting.done():
            waiting.cancel()
            await running  # raises the worker's error
        click.echo(f"result: {to_json(await waiting)}")
    worker.request_stop()
    await running


def start_hint(app: App) -> tuple[str, str, str]:
    """The route the dev runner's curl line posts to, its request body, and a note: the first
    workflow (by name) that needs no argument, else the first with a note naming what to fill
    in (an empty input would start a run that fails at once on its missing parameters). A DAG's
    workflow is started by its trigger, with an empty conf, as its schedule starts it: a plain
    start of it passes its pause and max_active_runs by (docs/dags.md)."""
    needs = {
        name: [] if name in app.dags else _required_parameters(defn.fn)
        for name, defn in sorted(app.workflows.items())
    }
    name = next((n for n, required in needs.items() if not required), min(needs))
    if name in app.dags:
        return f"/dags/{name}/trigger", '{"conf": {}}', ""
    note = (
        f"(fill input with {name}'s arguments, a JSON array: {', '.join(needs[name])})" if needs[name] else ""
    )
    return f"/workflows/{name}/start", '{"input": []}', note


def _required_parameters(fn: object) -> list[str]:
    """The parameters after the context that have no default."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())[1:]  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []
    kinds = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )
    return [p.name for p in parameters if p.kind in kinds and p.default is inspect.Parameter.empty]
