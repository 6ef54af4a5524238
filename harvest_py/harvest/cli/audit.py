"""`harvest audit list`: the operator actions recorded in the audit log (functions/audit.sql)."""

from __future__ import annotations

import click

from harvest.cli.output import database_url_option, emit, output_option, sql_api, table


@click.group()
def audit() -> None:
    """Who did what to the engine, when, and through which face (api, cli, ui)."""


@audit.command("list")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@click.option("--operation", default=None, help="Only this operation, e.g. workflow.terminate.")
@database_url_option
@output_option
def list_(limit: int, operation: str | None, database_url: str | None, output: str) -> None:
    """List audit log rows, newest first."""
    with sql_api(database_url, read_only=True) as sql:
        rows = sql.list_audit_log(limit, operation)
    emit(
        rows,
        output,
        lambda d: table(d, ["id", "at", "operation", "target", "actor", "operator_id", "source", "details"]),
    )
