"""`harvest audit list`: the operator actions recorded in the audit log (functions/audit.sql)."""

from __future__ import annotations

import click

from harvest.cli.output import database_url_option, output_option, table
from harvest.cli.shards import emit_merged, read_shards, with_page_footer

COLUMNS = [
    "id",
    "at",
    "operation",
    "target",
    "actor",
    "login",
    "acting_role",
    "operator_id",
    "source",
    "route",
    "details",
]


@click.group()
def audit() -> None:
    """Who did what to the engine, when, and through which face (api, cli, ui)."""


@audit.command("list")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@click.option("--operation", default=None, help="Only this operation, e.g. workflow.terminate.")
@click.option("--cursor", default=None, help="next_cursor from the previous page (every shard).")
@database_url_option
@output_option
def list_(
    limit: int, operation: str | None, cursor: str | None, database_url: str | None, output: str
) -> None:
    """List audit log rows over every shard, newest first, each with its shard_id (ids are per
    shard); page with --cursor (over SQL with [shards], or HTTP)."""
    merged = read_shards(database_url, lambda reads: reads.list_audit_log(limit, operation, cursor))
    emit_merged(
        merged,
        "audit_log",
        output,
        lambda d: with_page_footer(table(d, [*COLUMNS, "shard_id"]), d, "audit row(s)", merged),
    )
