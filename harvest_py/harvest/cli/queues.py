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
    help="module:app whose declared queues to check (default over HTTP: the server's App; "
    "without either the list is unknown).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 2 when a declared queue has no live worker, or when the list is unknown "
    "(no App declares the queues, a writable shard not read, or a server that omits it).",
)
@database_url_option
@output_option
def coverage(app_target: str | None, strict: bool, database_url: str | None, output: str) -> None:
    """List every declared queue with no live worker (active and not stale).

    A draining or stopped worker takes no new run, so it does not count; nor does a drained
    shard (one not in shards.writable). The declared queues are the App's (--app; over HTTP,
    else the server's App). Without an App the list is unknown (null): the queues the fleet's
    workers registered are shown, but a queue no worker ever registered is not among them.
    """
    from harvest.cli.worker import load_app
    from harvest.config import declared_queues, queue_coverage

    app = load_app(app_target) if app_target else None
    declared = declared_queues(app) if app is not None else None
    if http_selected(database_url) is not None:
        # The server's own list, computed per writable shard where the shards are: rebuilt here
        # from /workers it lost each row's shard and the shards the server missed.
        with sql_api(database_url, read_only=True) as api:
            data = api.queue_coverage(declared)
        if app is not None and data.get("declared_source") != "request":
            # A server that ignores queue= answered for other queues than the App's: unknown.
            data["unpolled_declared_queues"] = None
        if app is None and data.get("declared_source") == "fleet":
            # An older server stood the fleet's registered queues in for the declared ones.
            data["unpolled_declared_queues"] = None
        source = f"app {app_target}" if app is not None else data.get("declared_source", "none")
    elif shards_configured(cli_config()):
        data = _coverage_shards(database_url, declared)
        source = f"app {app_target}" if app is not None else "none"
    else:
        with sql_api(database_url, read_only=True) as sql:
            data = queue_coverage(sql, declared)
        source = f"app {app_target}" if app is not None else "none"
    data["declared_source"] = source

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
            # No App: the registered queues are shown, but they are not the declared ones.
            known = table(rows, ["queue", "live_workers", "covered"]) + "\n" if rows else ""
            return known + (
                "coverage unknown: no App declares the queues (a queue no worker ever registered "
                "is not listed); give --app module:app, or serve the API with --app"
            )
        return table(rows, ["queue", "live_workers", "covered"]) + (
            f"\nunpolled declared queues: {', '.join(unpolled)}"
            if unpolled
            else "\nevery declared queue is polled"
        )

    emit(data, output, render)
    if data.get("status") == PARTIAL:
        warn_partial(Merged(None, data["unavailable_shards"], PARTIAL))
    # No App, a writable shard not read (merge_coverage), or an older server's missing list:
    # coverage unknown, and the gate fails closed.
    if strict and data.get("unpolled_declared_queues", None) != []:
        raise SystemExit(2)


def _coverage_shards(database_url: str | None, declared: list[str] | None) -> dict[str, Any]:
    """Coverage over every shard by merge_coverage's rule (each writable shard needs a live
    worker on the queue; a drained shard does not count)."""
    from harvest.config import coverage_facts, merge_coverage
    from harvest.shard.router import ShardRouter

    fan = each_shard(database_url, coverage_facts)
    writable = ShardRouter.from_config(cli_config()).writable  # a drained shard takes no new run
    return {
        **merge_coverage(fan.results, declared, writable, fan.unavailable_shards),
        "status": fan.status,
        "unavailable_shards": fan.unavailable_shards,
    }
