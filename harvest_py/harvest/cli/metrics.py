"""`harvest metrics`: the database's sampled gauges in Prometheus text, for a process without
the web app (a cron job feeding a textfile collector, a look from a shell).

It samples every readable shard once (``harvest.get_metric_samples()``, read-only) into a fresh
registry and prints the sampled gauges, and nothing else: a counter of a one-shot process would
start at 0 on every run, so none is printed (the counters of a running worker are that worker's,
its ``/admin/metrics``). A shard that cannot be read is named on stderr and has no
``harvest_sampler_last_success_timestamp_seconds``; none answering exits 1. Prometheus text is
the only form: ``harvest -o json metrics`` is refused (exit 2). Docs: docs/observability.md.
"""

from __future__ import annotations

from typing import Any, cast

import click

from harvest.cli.output import GLOBAL_OUTPUT_KEY, cli_config, database_url_option
from harvest.cli.shards import shard_apis
from harvest.core.errors import DatabaseUnavailable, HarvestError
from harvest.db import SCHEMA_VERSION
from harvest.telemetry.metrics import Metrics, available


@click.command("metrics")
@database_url_option
@click.option(
    "--max-keys",
    default=50,
    show_default=True,
    type=click.IntRange(0, 1000),
    help="Concurrency keys exported one by one (the rest are summed as _other).",
)
def metrics(database_url: str | None, max_keys: int) -> None:
    """Print the sampled gauges of every shard as Prometheus text."""
    if click.get_current_context().meta.get(GLOBAL_OUTPUT_KEY) == "json":
        raise click.UsageError(
            "harvest metrics prints Prometheus text only, not JSON: drop -o json (for JSON, "
            "SELECT harvest.get_metric_samples() answers per database)"
        )
    if not available():
        raise HarvestError(
            "harvest metrics needs prometheus-client: pip install 'harvest-workflows[metrics]'"
        )
    registry = Metrics()
    read = 0
    with shard_apis(cli_config(), database_url) as apis:
        for shard, provider in sorted(apis.items()):
            try:
                if callable(provider):
                    with cast(Any, provider)() as sql:
                        samples = sql.get_metric_samples(max_keys)
                else:
                    samples = provider.get_metric_samples(max_keys)
            except Exception as exc:  # one shard down: the others still print
                click.echo(f"warning: shard {shard} could not be sampled: {exc}", err=True)
                continue
            registry.apply_samples(
                samples, schema_behind=(samples.get("schema_version") or "") < SCHEMA_VERSION
            )
            read += 1
    click.echo(registry.render_sampled().decode(), nl=False)  # (no stdout at all, `>&-`: nothing)
    if not read:
        raise DatabaseUnavailable("no shard could be sampled")
