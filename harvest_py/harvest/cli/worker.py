"""`harvest worker module:app`: run a worker for an App."""

from __future__ import annotations

import asyncio
import importlib
import logging
import sys

import click

from harvest.definitions import App
from harvest.errors import ConfigError


def load_app(target: str) -> App:
    """Import ``module:attribute`` (attribute defaults to ``app``) and check it is an App."""
    module_name, _, attribute = target.partition(":")
    attribute = attribute or "app"
    if "." not in sys.path and "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r} for {target!r}: {exc}") from None
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise ConfigError(f"{target!r} is not a harvest.App (found {type(app).__name__}); "
                          "pass module:attribute naming your App")
    return app


@click.command()
@click.argument("target")
@click.option("--queue", "queues", multiple=True, help="Poll this task queue (repeatable; default: "
              "every queue the App's workflows and activities use).")
@click.option("--concurrency", default=20, show_default=True, type=click.IntRange(1, 10_000),
              help="Tasks in flight at once.")
@click.option("--database-url", default=None, help="Prefer HARVEST_DATABASE_URL.")
@click.option("--shutdown-grace", default=30.0, show_default=True, type=float,
              help="Seconds to finish in-flight work after SIGTERM before releasing it.")
@click.option("--log-level", default="INFO", show_default=True)
def worker(target: str, queues: tuple[str, ...], concurrency: int, database_url: str | None,
           shutdown_grace: float, log_level: str) -> None:
    """Run a worker for the App at TARGET (module:attribute)."""
    from harvest.worker import Worker

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    app = load_app(target)
    instance = Worker(app, database_url, queues=list(queues) or None, concurrency=concurrency,
                      shutdown_grace=shutdown_grace)
    asyncio.run(instance.run(install_signal_handlers=True))
