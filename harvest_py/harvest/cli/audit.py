"""`harvest audit list`: the operator actions recorded in the audit log (functions/audit.sql)."""

from __future__ import annotations

import click

from harvest.cli.output import cli_config, database_url_option, emit, output_option, sql_api, table
from harvest.cli.shards import each_shard, emit_merged
from harvest.config import shards_configured
from harvest.shard.fanout import Merged

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
    """List audit log rows, newest first (with [shards]: every shard's, merged, each with its
    shard_id; ids are per shard)."""
    if shards_configured(cli_config()):
        fan = each_shard(database_url, lambda api: api.list_audit_log(limit, operation))
        rows = [{**r, "shard_id": s} for s, found in fan.results.items() for r in found]
        rows.sort(key=lambda r: (r["at"], -r["shard_id"], r["id"]), reverse=True)
        emit_merged(
            Merged(rows[:limit], fan.unavailable_shards, fan.status),
            "audit_log",
            output,
            lambda d: table(d, [*COLUMNS, "shard_id"]),
        )
        return
    with sql_api(database_url, read_only=True) as sql:
        rows = sql.list_audit_log(limit, operation)
    emit(rows, output, lambda d: table(d, COLUMNS))
