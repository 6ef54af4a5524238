"""`harvest queue coverage`: each declared queue with no live worker (harvest/config/config.py)."""

from __future__ import annotations

from typing import Any

import click

from harvest.cli.output import cli_config, database_url_option, emit, output_option, sql_api, table
from harvest.cli.output import selected as http_selected
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
    help="Exit 2 when a declared queue has no live worker, or when the list is unknown "
    "(no --app and no worker ever registered, a writable shard not read, or a server that omits it).",
)
@database_url_option
@output_option
def coverage(app_target: str | None, strict: bool, database_url: str | None, output: str) -> None:
    """List every declared queue with no live worker (active and not stale).

    A draining or stopped worker takes no new run, so it does not count; nor does a drained
    shard (one not in shards.writable). Without --app the declared queues are those the fleet
    registered (every worker row, whatever its state); over HTTP, the server's App's first.
    """
    from harvest.cli.worker import load_app
    from harvest.config import declared_queues, fleet_queues, queue_coverage

    app = load_app(app_target) if app_target else None
    if http_selected(database_url) is not None:
        # The server's own list, computed per writable shard where the shards are: rebuilt here
        # from /workers it lost each row's shard and the shards the server missed.
        with sql_api(database_url, read_only=True) as api:
            data = api.queue_coverage(declared_queues(app) if app is not None else None)
        if app is not None and data.get("declared_source") != "request":
            # A server that ignores queue= answered for other queues than the App's: unknown.
            data["unpolled_declared_queues"] = None
        source = f"app {app_target}" if app is not None else data.get("declared_source", "fleet")
        declared = data.get("declared_queues") or []
    elif shards_configured(cli_config()):
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
    if not declared and "unpolled_declared_queues" in data:
        # Nothing declared and no --app: unknown, not "all covered" (the spec's null fails closed).
        data["unpolled_declared_queues"] = None

    def render(d: dict[str, Any]) -> str:
        if "unpolled_declared_queues" not in d:
            return "the server gave no unpolled_declared_queues (an older server?): coverage unknown"
        unpolled = d["unpolled_declared_queues"]
        rows = [
            {"queue": q, "live_workers": n, "covered": "NO" if not n or q in (unpolled or ()) else "yes"}
            for q, n in (d.get("live_workers") or {}).items()
        ]
        if unpolled is None and d.get("unavailable_shards"):
            missed = ", ".join(map(str, d["unavailable_shards"]))
            return table(rows, ["queue", "live_workers", "covered"]) + (
                f"\ncoverage unknown: shard(s) {missed} did not answer"
            )
        if unpolled is None and d.get("declared_queues"):
            return "coverage unknown: the server did not check these queues (an older server?)"
        if unpolled is None:
            return "no declared queue known: no worker has registered (give --app to check an App's queues)"
        return table(rows, ["queue", "live_workers", "covered"]) + (
            f"\nunpolled declared queues: {', '.join(unpolled)}"
            if unpolled
            else "\nevery declared queue is polled"
        )

    emit(data, output, render)
    if data.get("status") == PARTIAL:
        warn_partial(Merged(None, data["unavailable_shards"], PARTIAL))
    # A writable shard not read makes the list null (merge_coverage); a missing list is an
    # older server's: either is coverage unknown, and the gate fails closed.
    if strict and data.get("unpolled_declared_queues", None) != []:
        raise SystemExit(2)


def _coverage_shards(database_url: str | None, declared: list[str] | None) -> dict[str, Any]:
    """Coverage over every shard: a queue is polled when each shard that answered has a live
    worker on it (work on a shard no live worker polls waits). ``live_workers`` counts distinct
    workers over the shards; ``by_shard`` names each shard's unpolled queues. ``declared``
    None: the queues the fleet registered on any shard."""
    from harvest.config import fleet_queues, merge_coverage
    from harvest.shard.router import ShardRouter

    fan = each_shard(
        database_url, lambda api: (fleet_queues(api), api.list_workers(None, "active", "healthy"))
    )
    writable = ShardRouter.from_config(cli_config()).writable  # a drained shard takes no new run
    return {
        **merge_coverage(fan.results, declared, writable, fan.unavailable_shards),
        "status": fan.status,
        "unavailable_shards": fan.unavailable_shards,
    }
