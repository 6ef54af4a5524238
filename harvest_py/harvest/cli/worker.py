"""`harvest worker module:app`: run a worker for an App."""

from __future__ import annotations

import importlib
import logging
import os
import sys

import click

from harvest.cli.output import health_options, log_format_option
from harvest.core.errors import ConfigError
from harvest.declare.definitions import App
from harvest.worker.options import WorkerOptions


def load_app(target: str) -> App:
    """Import ``module:attribute`` (attribute defaults to ``app``) and check it is an App."""
    module_name, _, given = target.partition(":")
    attribute = given or "app"
    if "." not in sys.path and "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            # The module itself is not there (a typo, a missing sys.path entry): one line.
            raise ConfigError(f"cannot import {module_name!r} for {target!r}: {exc}") from None
        raise _import_failed(module_name, target, exc) from None
    except Exception as exc:  # the module's own code raised as it was imported
        raise _import_failed(module_name, target, exc) from None
    app = getattr(module, attribute, None)
    if isinstance(app, App):
        return app
    apps = [f"{module_name}:{name}" for name, value in vars(module).items() if isinstance(value, App)]
    found = f"its App: {', '.join(apps)}" if apps else "it has no App"
    if not hasattr(module, attribute):  # (a misspelt name read "found NoneType", as if it existed)
        default = "" if given else " (the default)"
        raise ConfigError(
            f"{target!r}: module {module_name!r} has no attribute {attribute!r}{default}; {found}"
        )
    raise ConfigError(
        f"{target!r} is not a harvest.App (found {type(app).__name__}); {found}: "
        "pass module:attribute naming your App"
    )


def _import_failed(module_name: str, target: str, exc: Exception) -> ConfigError:
    """The error of a module that raised as it was imported: one line naming the module and
    the exception, then the traceback of the module's own frames (its files; not Harvest's nor
    importlib's, which say nothing about the cause), printed after the line."""
    import traceback

    error = ConfigError(
        f"cannot import {module_name!r} for {target!r}: {type(exc).__name__}: {exc}"
        if str(exc)
        else f"cannot import {module_name!r} for {target!r}: {type(exc).__name__}"
    )
    shown = traceback.TracebackException.from_exception(exc)
    ours = tuple(
        os.path.dirname(os.path.abspath(f)) + os.sep
        for f in (os.path.dirname(os.path.abspath(__file__)), importlib.__file__ or "")
    )  # (harvest's package, the importlib package)
    shown.stack = traceback.StackSummary.from_list(
        [
            frame
            for frame in shown.stack
            if not frame.filename.startswith("<frozen importlib")
            and not os.path.abspath(frame.filename).startswith(ours)
        ]
    )
    error.trailer = "".join(shown.format())  # (HarvestGroup prints it after the error line)
    return error


@click.command()
@click.argument("target")
@click.option(
    "--config",
    "config_path",
    default=None,
    help="The config file (default: HARVEST_CONFIG, else ./harvest.toml if present).",
)
@click.option(
    "--role",
    type=click.Choice(["web", "worker", "combined"]),
    default=None,
    help="The process role (default: HARVEST_ROLE, else combined).",
)
@click.option(
    "--queue",
    "queues",
    multiple=True,
    help="Poll only this declared queue (repeatable; default: "
    "worker.queues, else every queue the App's workflows and activities use).",
)
@click.option(
    "--worker/--no-worker",
    "worker_enabled",
    default=None,
    help="Run the claim loop (default: follow the role).",
)
@click.option(
    "--scheduler/--no-scheduler",
    "scheduler_enabled",
    default=None,
    help="Run the timeout scanner and relays (default: follow the role).",
)
@click.option(
    "--retention-run-on",
    type=click.Choice(["scheduler", "all"]),
    default=None,
    help="Where the retention janitor runs (default: retention.run_on, else scheduler).",
)
# Bounds are WorkerOptions', checked with the file's and the variables' (config.with_overrides).
@click.option(
    "--concurrency",
    default=None,
    type=int,
    help=f"Tasks in flight at once (default: worker.concurrency, else {WorkerOptions.concurrency}).",
)
@click.option(
    "--activity-threads",
    default=None,
    type=int,
    help="Threads that run plain def activities (default: worker.activity_threads, else --concurrency).",
)
@click.option(
    "--activity-processes",
    default=None,
    type=int,
    help="Processes that run executor='process' activities (default: worker.activity_processes, "
    "else the CPU count).",
)
@click.option(
    "--gc-tuning/--no-gc-tuning",
    "gc_tuning",
    default=None,
    help="Freeze start-up's objects and raise the cyclic GC's generation-0 threshold once the App "
    "is imported (default: worker.gc_tuning, else on; docs/operations.md).",
)
@click.option(
    "--event-loop",
    "event_loop",
    default=None,
    type=click.Choice(["auto", "asyncio", "uvloop"]),
    help="The process' event loop: auto takes uvloop when it is installed "
    "(default: worker.event_loop, else auto; docs/operations.md).",
)
@click.option("--database-url", default=None, help="Prefer HARVEST_DATABASE_URL.")
@click.option(
    "--shutdown-grace",
    default=None,
    type=float,
    help="Seconds to finish in-flight work after SIGTERM before releasing it "
    f"(default: worker.shutdown_grace, else {WorkerOptions.shutdown_grace:g}).",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
)
@click.option(
    "--metrics-port",
    default=None,
    type=click.IntRange(1, 65535),
    help="Serve this process's Prometheus metrics on http://HOST:PORT/metrics (docs/observability.md).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="The address --metrics-port binds (0.0.0.0: every interface, for a scraper on another host).",
)
@health_options("this worker")
@click.option(
    "--metrics-interval",
    default=None,
    type=click.FloatRange(0, 3600),
    help="Seconds between samples of the database's gauges, where this process leads the sampler "
    f"(default {WorkerOptions.metrics_interval:g}; 0: no sampler).",
)
@log_format_option
def worker(
    target: str,
    config_path: str | None,
    role: str | None,
    queues: tuple[str, ...],
    worker_enabled: bool | None,
    scheduler_enabled: bool | None,
    retention_run_on: str | None,
    concurrency: int | None,
    activity_threads: int | None,
    activity_processes: int | None,
    gc_tuning: bool | None,
    event_loop: str | None,
    database_url: str | None,
    shutdown_grace: float | None,
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
    health_port: int | None,
    health_host: str,
    metrics_interval: float | None,
) -> None:
    """Run the runtimes of the App at TARGET (module:attribute) that this process's role places here."""
    from harvest.cli.output import CONFIG_KEY, CONFIG_PATH_KEY, cli_config
    from harvest.config import resolve_queues, runtime_plan
    from harvest.config.process import configured_options, run_worker

    # The config first: a bad key stops the boot before the App is even imported. This
    # command's --config wins over `harvest --config` given before it; the root has
    # loaded it already (cli/main.py), unless this command was invoked on its own.
    meta = click.get_current_context().meta
    if config_path is not None and meta.get(CONFIG_PATH_KEY) != config_path:
        meta[CONFIG_PATH_KEY] = config_path
        meta.pop(CONFIG_KEY, None)
    config = cli_config().with_overrides(
        {
            "role": (role, "--role"),
            "worker.queues": (list(queues) or None, "--queue"),
            "worker.enabled": (worker_enabled, "--worker/--no-worker"),
            "scheduler.enabled": (scheduler_enabled, "--scheduler/--no-scheduler"),
            "retention.run_on": (retention_run_on, "--retention-run-on"),
            "worker.concurrency": (concurrency, "--concurrency"),
            "worker.activity_threads": (activity_threads, "--activity-threads"),
            "worker.activity_processes": (activity_processes, "--activity-processes"),
            "worker.shutdown_grace": (shutdown_grace, "--shutdown-grace"),
            "worker.gc_tuning": (gc_tuning, "--gc-tuning/--no-gc-tuning"),
            "worker.event_loop": (event_loop, "--event-loop"),
        }
    )
    plan = runtime_plan(config)
    from harvest.cli.appname import name_connections
    from harvest.db.connection import process_application_name

    # (harvest-worker, or harvest-scheduler / harvest-retention for a process without a claim loop)
    name_connections(process_application_name(worker=plan.worker.value, scheduler=plan.scheduler.value))
    from harvest.telemetry.logs import configure_logging
    from harvest.worker.collector import freeze_at_exit
    from harvest.worker.event_loop import choose_event_loop

    configure_logging(log_level, log_format)
    freeze_at_exit()  # (the process ends with the command: its exit need not free every module)
    if metrics_port is not None:
        from harvest.telemetry.metrics import serve_metrics

        serve_metrics(metrics_port, metrics_host)
        logging.getLogger("harvest.telemetry").info(
            "metrics on http://%s:%d/metrics", metrics_host, metrics_port
        )
    probes = None
    if health_port is not None:
        # Its own port, not the metrics one: that is prometheus-client's server (an optional
        # extra, answering the registry on every path) and often bound where only a scraper
        # reaches; the probes need neither, and must answer the kubelet on the pod's address.
        from harvest.worker.probes import probes_on

        probes = probes_on(health_port, health_host)
    loop = choose_event_loop(config.get("worker.event_loop", "auto"))
    app = load_app(target)
    resolve_queues(app, config)  # an undeclared queue stops the boot here (run_worker logs the rest)
    if not plan.runs_anything():
        raise ConfigError(
            f"nothing to run: role {plan.role} places no runtime in this process (worker, "
            "scheduler and retention are all off); set HARVEST_ROLE=worker, or "
            "HARVEST_WORKER__ENABLED=true / HARVEST_SCHEDULER__ENABLED=true"
        )
    # One database, or a pool per shard ([shards]: docs/sharding.md); worker.shard_assignments
    # picks the shards to poll (auto: every shard with a url), each of which must have a url.
    # One WorkerOptions: flags > HARVEST_* > file for its tunables, the role for the switches.
    fixed = {} if metrics_interval is None else {"metrics_interval": metrics_interval}
    options = configured_options(app, config, **fixed)
    if config.get("worker.gc_tuning", True):
        # Process-wide, so here and not in the library: this process is the worker's own.
        from harvest.worker.collector import tune_collector

        tune_collector()
    logging.getLogger("harvest.worker").info("harvest worker: event loop %s", loop.name)
    loop.run(
        run_worker(
            app, config, options, database_url=database_url, install_signal_handlers=True, probes=probes
        )
    )
