"""`harvest rate-limit get|override|clear-override`: an activity's declared rate limit and its
TTL'd pacing override (functions/flow_rate_limits.sql; docs/flow-control.md, "Rate limits").

The limit's bucket is per shard, so an override is written to every configured shard (one
database: to it), one audited call each, as the sharding guide's "one CLI call, effective
everywhere"; a shard that cannot be reached is named on stderr and the command exits 1 (the
others have the override: run it again when the shard is up). A limit declared with a key has
no single bucket: HR007, exit code of PolicyConflict. The start throttle's twin is
`harvest throttle`.
"""

from __future__ import annotations

import click

from harvest.cli.output import database_url_option, operator_id_option, output_option
from harvest.cli.throttle import on_every_shard

COLUMNS = [
    "shard_id",
    "activity_name",
    "rps",
    "burst",
    "override_rps",
    "override_burst",
    "override_expires_at",
]


@click.group("rate-limit")
def rate_limit() -> None:
    """An activity's rate limit and its pacing override, on every shard."""


@rate_limit.command("get")
@click.argument("activity_name")
@database_url_option
@output_option
def get(activity_name: str, database_url: str | None, output: str) -> None:
    """The declared rate and the live override (none once expired), per shard."""
    on_every_shard(
        database_url,
        lambda api: api.get_rate_limit(activity_name),
        read_only=True,
        output=output,
        what="were not read",
        shape=lambda row: row or {"activity_name": activity_name},
        columns=COLUMNS,
        none_declared=f"activity {activity_name} declares no rate limit",
    )


@rate_limit.command("override")
@click.argument("activity_name")
@click.option("--rps", type=float, required=True, help="Calls per second while the override lasts.")
@click.option("--burst", type=float, default=None, help="Bucket size (default: max(rps, 1)).")
@click.option("--ttl-secs", type=float, default=3600, show_default=True, help="It reverts by itself after.")
@operator_id_option
@database_url_option
@output_option
def override(
    activity_name: str,
    rps: float,
    burst: float | None,
    ttl_secs: float,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Lay a temporary rate over the declared limit (admin; audited on each shard)."""
    on_every_shard(
        database_url,
        lambda api: api.set_rate_limit_override(activity_name, rps, burst, ttl_secs, operator),
        read_only=False,
        output=output,
        what="did not get the override",
        columns=COLUMNS,
        audit=("rate_limit.override", activity_name, operator),
    )


@rate_limit.command("clear-override")
@click.argument("activity_name")
@operator_id_option
@database_url_option
@output_option
def clear_override(activity_name: str, operator: str | None, database_url: str | None, output: str) -> None:
    """Drop the override now (admin; audited on each shard)."""
    on_every_shard(
        database_url,
        lambda api: api.clear_rate_limit_override(activity_name, operator),
        read_only=False,
        output=output,
        what="still have the override",
        shape=lambda was_live: {"activity_name": activity_name, "was_live": was_live},
        columns=["shard_id", "activity_name", "was_live"],  # the rate's columns would all be "-"
        audit=("rate_limit.clear_override", activity_name, operator),
    )
