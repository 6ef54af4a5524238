"""`harvest queue coverage`: each declared queue with no live worker (harvest/config/config.py)."""

from __future__ import annotations

import click

from harvest.cli.output import database_url_option, emit, output_option, sql_api, table


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

    def render(d):
        rows = [
            {"queue": q, "live_workers": n, "covered": "yes" if n else "NO"}
            for q, n in d["live_workers"].items()
        ]
        unpolled = d["unpolled_declared_queues"]
        if unpolled is None:
            return "no declared queue known: no worker has registered (give --app to check an App's queues)"
        return table(rows, ["queue", "live_workers", "covered"]) + (
            f"\nunpolled declared queues: {', '.join(unpolled)}"
            if unpolled
            else "\nevery declared queue is polled"
        )

    emit(data, output, render)
    if strict and (data["unpolled_declared_queues"] is None or data["unpolled_declared_queues"]):
        raise SystemExit(2)
