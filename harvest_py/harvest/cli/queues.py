"""`harvest queue coverage`: each declared queue with no live worker (harvest/config/config.py)."""

from __future__ import annotations

from typing import Any

import click

from harvest.cli.output import cli_config, database_url_option, emit, output_option, sql_api, table
from harvest.cli.shards import each_shard, warn_partial
from harvest.config import shards_configured
from harvest.shard.fanout import PARTIAL, Merged


@click.group("queue")
def queue() -> None:
    """Task queues: which declared queue a live worker polls."""


@queue.command("coverage")
@click.option(
    "--app",
    "app_target",
    default=None,
    help="module:app whose declared queues to check (default: the queues the fleet's workers registered).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 2 when a declared queue has no live worker, or when "
    "the list is unknown (no --app and no worker ever registered).",
)
@database_url_option
@output_option
def coverage(app_target: str | None, strict: bool, database_url: str | None, output: str) -> None:
    """List every declared queue with no live worker (active and not stale).

    A draining or stopped worker takes no new run, so it does not count. Without --app the
    declared queues are those the fleet registered (every worker row, whatever its state).
    """
    from harvest.cli.worker import load_app
    from harvest.config import declared_queues, fleet_queues, queue_coverage

    app = load_app(app_target) if app_target else None
    if shards_configured(cli_config()):
        data = _coverage_shards(database_url, declared_queues(app) if app is not None else None)
        source = f"app {app_target}" if app is not None else "fleet"
        declared = data["declared_queues"]
    else:
        with sql_api(database_url, read_only=True) as sql:
            if app is not None:
                declared, source = declared_queues(app), f"app {app_target}"
            else:
                declared = fleet_queues(sql)
                source = "fleet"
            data = queue_coverage(sql, declared)
    data["declared_source"] = source
    if not declared:
        # Nothing declared and no --app: unknown, not "all covered" (the spec's null fails closed).
        data["unpolled_declared_queues"] = None

    def render(d: dict[str, Any]) -> str:
        unpolled = d["unpolled_declared_queues"]
        rows = [
            {"queue": q, "live_workers": n, "covered": "NO" if not n or q in (unpolled or ()) else "yes"}
            for q, n in d["live_workers"].items()
        ]
        if unpolled is None:
            return "no declared queue known: no worker has registered (give --app to check an App's queues)"
        return table(rows, ["queue", "live_workers", "covered"]) + (
            f"\nunpolled declared queues: {', '.join(unpolled)}"
            if unpolled
            else "\nevery declared queue is polled"
        )

    emit(data, output, render)
    partial = data.get("status") == PARTIAL
    if partial:
        warn_partial(Merged(None, data["unavailable_shards"], PARTIAL))
    if strict and (partial or data["unpolled_declared_queues"] is None or data["unpolled_declared_queues"]):
        raise SystemExit(2)  # a shard not read is coverage unknown: fail closed


def _coverage_shards(database_url: str | None, declared: list[str] | None) -> dict[str, Any]:
    """Coverage over every shard: a queue is polled when each shard that answered has a live
    worker on it (work on a shard no live worker polls waits). ``live_workers`` counts distinct
    workers over the shards; ``by_shard`` names each shard's unpolled queues. ``declared``
    None: the queues the fleet registered on any shard."""
    from harvest.config import fleet_queues, merge_coverage

    fan = each_shard(
        database_url, lambda api: (fleet_queues(api), api.list_workers(None, "active", "healthy"))
    )
    return {
        **merge_coverage(fan.results, declared),
        "status": fan.status,
        "unavailable_shards": fan.unavailable_shards,
    }
