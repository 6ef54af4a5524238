"""``python manage.py harvest_worker``: run the worker of ``settings.HARVEST["app"]``."""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from harvest.config.process import configured_options, run_worker, worker_dsn
from harvest.core.errors import ConfigError
from harvest.integrations.django import APP_KEY, DSN_HINT, SETTING, get_app, get_config
from harvest.worker.probes import probes_on


class Command(BaseCommand):
    help = (
        f'Run a Harvest worker for settings.{SETTING}["{APP_KEY}"] until SIGTERM or Ctrl-C, then drain '
        "(the options of `harvest worker`, from settings.HARVEST and HARVEST_* variables)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            help="Poll only this declared queue (repeatable; default: worker.queues, else every queue "
            "the App uses).",
        )
        parser.add_argument("--concurrency", type=int, help="Tasks in flight at once.")
        parser.add_argument(
            "--shutdown-grace",
            type=float,
            help="Seconds to finish in-flight work after SIGTERM before releasing it.",
        )
        parser.add_argument(
            "--health-port",
            type=int,
            help="Serve the liveness and readiness probes on http://HOST:PORT/health/live and "
            "/health/ready, as `harvest worker --health-port` does.",
        )
        parser.add_argument(
            "--health-host",
            default="127.0.0.1",
            help="The address --health-port binds (0.0.0.0: every interface, for the kubelet's probes).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            app = get_app()
            if app is None:
                raise ConfigError(
                    f'settings.{SETTING} names no App: set "{APP_KEY}" to its dotted path '
                    '("myproject.workflows.app")'
                )
            config = get_config().with_overrides(
                {
                    "worker.queues": (options["queues"], "--queue"),
                    "worker.concurrency": (options["concurrency"], "--concurrency"),
                    "worker.shutdown_grace": (options["shutdown_grace"], "--shutdown-grace"),
                }
            )
            worker_options = configured_options(app, config)
            worker_dsn(config, hint=DSN_HINT)  # a missing database is told before "polling"
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        if not (worker_options.run_worker or worker_options.run_scanner or worker_options.run_retention):
            raise CommandError(
                "nothing to run: the role places no runtime in this process; set HARVEST_ROLE=worker"
            )
        queues = worker_options.queues or sorted(app.queues)  # None: every queue the App uses
        port = options["health_port"]
        if port is not None and not 1 <= port <= 65535:
            raise CommandError(f"--health-port {port}: a port from 1 to 65535")
        try:
            probes = None if port is None else probes_on(port, options["health_host"])
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"harvest worker polling {', '.join(queues)}")
        try:
            asyncio.run(
                run_worker(
                    app,
                    config,
                    worker_options,
                    dsn_hint=DSN_HINT,
                    install_signal_handlers=True,
                    probes=probes,
                )
            )
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write("harvest worker stopped")
