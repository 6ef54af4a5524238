"""`harvest throttle get|override|clear-override`: a workflow's start throttle and its TTL'd
pacing override (functions/flow_throttle.sql; docs/flow-control.md, "Start throttle").

The throttle's bucket is per shard, so an override is written to every configured shard (one
database: to it), one audited call each; a shard that cannot be reached is named on stderr and
the command exits 1 (the others have the override: run it again when the shard is up). A
throttle declared with a key has no single bucket: HR007, exit code of PolicyConflict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from harvest.cli.output import database_url_option, emit, operator_id_option, output_option, table
from harvest.cli.shards import InTurn, each_shard, report_shard_write

COLUMNS = [
    "shard_id",
    "workflow_name",
    "rps",
    "burst",
    "override_rps",
    "override_burst",
    "override_expires_at",
]


def on_every_shard(
    database_url: str | None,
    call: Any,
    *,
    read_only: bool,
    output: str,
    what: str,
    shape: Callable[[Any], dict[str, Any] | None] = lambda row: row,
    columns: list[str] = COLUMNS,
    audit: tuple[str, str, str | None] | None = None,
    none_declared: str | None = None,
) -> None:
    """``call(api)`` on every shard (over HTTP the route answers per shard), each answer made a
    row by ``shape`` (also `harvest rate-limit`'s). ``audit`` (operation, target, operator): a
    write that missed a shard is audited as failed on each shard that took it (over HTTP the
    server does it). ``none_declared``: said on stderr when no shard read answered a row (a
    misspelt name reads as a row of dashes otherwise)."""
    incomplete: Callable[[Any, list[dict[str, Any]]], Any] | None = None
    if audit is not None:
        operation, target, operator = audit
        incomplete = lambda api, missed: api.record_incomplete_write(  # noqa: E731
            operation, target, missed, operator
        )
    fan = each_shard(
        database_url,
        call,
        read_only=read_only,
        none_is_error=False,
        refusals_apart=True,
        incomplete=incomplete,
    )
    rows = [{"shard_id": s, **(shape(row) or {})} for s, row in fan.results.items()]

    def emit_rows() -> None:
        emit(
            {"shards": rows, "status": fan.status, "unavailable_shards": fan.unavailable_shards},
            output,
            lambda d: table(d["shards"], columns),
        )

    if none_declared and fan.results and all(row is None for row in fan.results.values()):
        click.echo(f"note: {none_declared} on the shards read (is the name right?)", err=True)
    report_shard_write(InTurn(fan.results, fan.unavailable_shards, fan.refused), emit_rows, what)


@click.group()
def throttle() -> None:
    """A workflow's start throttle and its pacing override, on every shard."""


@throttle.command("get")
@click.argument("workflow_name")
@database_url_option
@output_option
def get(workflow_name: str, database_url: str | None, output: str) -> None:
    """The declared rate and the live override (none once expired), per shard."""
    on_every_shard(
        database_url,
        lambda api: api.get_start_throttle(workflow_name),
        read_only=True,
        output=output,
        what="were not read",
        shape=lambda row: row or {"workflow_name": workflow_name},
        none_declared=f"workflow {workflow_name} declares no start throttle",
    )


@throttle.command("override")
@click.argument("workflow_name")
@click.option("--rps", type=float, required=True, help="Starts per second while the override lasts.")
@click.option("--burst", type=float, default=None, help="Bucket size (default: max(rps, 1)).")
@click.option("--ttl-secs", type=float, default=3600, show_default=True, help="It reverts by itself after.")
@operator_id_option
@database_url_option
@output_option
def override(
    workflow_name: str,
    rps: float,
    burst: float | None,
    ttl_secs: float,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Lay a temporary rate over the declared throttle (admin; audited on each shard)."""
    on_every_shard(
        database_url,
        lambda api: api.set_start_throttle_override(workflow_name, rps, burst, ttl_secs, operator),
        read_only=False,
        output=output,
        what="did not get the override",
        audit=("start_throttle.override", workflow_name, operator),
    )


@throttle.command("clear-override")
@click.argument("workflow_name")
@operator_id_option
@database_url_option
@output_option
def clear_override(workflow_name: str, operator: str | None, database_url: str | None, output: str) -> None:
    """Drop the override now (admin; audited on each shard)."""
    on_every_shard(
        database_url,
        lambda api: api.clear_start_throttle_override(workflow_name, operator),
        read_only=False,
        output=output,
        what="still have the override",
        shape=lambda was_live: {"workflow_name": workflow_name, "was_live": was_live},
        columns=["shard_id", "workflow_name", "was_live"],  # the rate's columns would all be "-"
        audit=("start_throttle.clear_override", workflow_name, operator),
    )
