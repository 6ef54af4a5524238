"""`harvest queue coverage`: each declared queue with no live worker (harvest/config.py)."""

from __future__ import annotations

import click

from harvest.cli.output import database_url_option, emit, output_option, sql_api, table


@click.group("queue")
def queue() -> None:
    """Task queues: which declared queue a live worker polls."""


@queue.command("coverage")
@click.option("--app", "app_target", required=True, help="module:app whose declared queues to check.")
@click.option("--strict", is_flag=True, help="Exit 2 when a declared queue has no live worker.")
@database_url_option
@output_option
def coverage(app_target: str, strict: bool, database_url: str | None, output: str) -> None:
    """List every queue the App declares with no live worker (active and not stale).

    A draining or stopped worker takes no new run, so it does not count.
    """
    from harvest.cli.worker import load_app
    from harvest.config import declared_queues, queue_coverage

    app = load_app(app_target)
    with sql_api(database_url, read_only=True) as sql:
        data = queue_coverage(sql, declared_queues(app))

    def render(d):
        rows = [{"queue": q, "live_workers": n, "covered": "yes" if n else "NO"}
                for q, n in d["live_workers"].items()]
        unpolled = d["unpolled_declared_queues"]
        return table(rows, ["queue", "live_workers", "covered"]) + (
            f"\nunpolled declared queues: {', '.join(unpolled)}" if unpolled else "\nevery declared queue is polled")

    emit(data, output, render)
    if strict and data["unpolled_declared_queues"]:
        raise SystemExit(2)
