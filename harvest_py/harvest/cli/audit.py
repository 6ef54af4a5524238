"""`harvest audit list`: the operator actions recorded in the audit log (functions/audit.sql)."""

from __future__ import annotations

import click

from harvest.cli.output import database_url_option, emit, output_option, table
from harvest.cli.shards import deployment_read, emit_merged
from harvest.shard.fanout import Merged, newest_audit_first

COLUMNS = ["id", "at", "operation", "target", "actor", "login", "operator_id", "source", "route", "details"]


@click.group()
def audit() -> None:
    """Who did what to the engine, when, and through which face (api, cli, ui)."""


@audit.command("list")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@click.option("--operation", default=None, help="Only this operation, e.g. workflow.terminate.")
@database_url_option
@output_option
def list_(limit: int, operation: str | None, database_url: str | None, output: str) -> None:
    """List audit log rows, newest first (on shards, over SQL with [shards] or HTTP to a
    sharded server: every shard's, merged, each with its shard_id; ids are per shard)."""
    sharded, fan = deployment_read(database_url, lambda api: api.list_audit_log(limit, operation))
    if not sharded:
        emit(fan.results[0], output, lambda d: table(d, COLUMNS))
        return
    rows = [{**r, "shard_id": s} for s, found in fan.results.items() for r in found]
    rows.sort(key=newest_audit_first, reverse=True)
    emit_merged(
        Merged(rows[:limit], fan.unavailable_shards, fan.status),
        "audit_log",
        output,
        lambda d: table(d, [*COLUMNS, "shard_id"]),
    )
