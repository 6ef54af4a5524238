"""`harvest usage`: the historical usage report over every shard (functions/flow_usage.sql,
docs/flow-control.md; the fan-out in harvest/shard/fanout.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from harvest.cli.output import database_url_option, emit, output_option, table
from harvest.cli.shards import read_shards, warn_partial
from harvest.core.durations import moment as when
from harvest.shard.fanout import USAGE_SUMS


@click.command("usage")
@click.option("--from", "from_", required=True, help="Start: RFC 3339, or a duration back from now (24h).")
@click.option("--to", "to", default="0s", show_default=True, help="End (exclusive), the same forms.")
@click.option(
    "--group-by",
    default="workflow_name",
    show_default=True,
    help="workflow_name, or search_attr:<key> (e.g. search_attr:tenant_id).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the same as --output json).")
@database_url_option
@output_option
def usage(from_: str, to: str, group_by: str, as_json: bool, database_url: str | None, output: str) -> None:
    """What each workflow type or tenant consumed over a window, summed over every shard."""
    now = datetime.now(UTC)
    start, end = when(from_, "--from", now), when(to, "--to", now)
    merged = read_shards(database_url, lambda reads: reads.count_usage(start, end, group_by))
    data = {
        "status": merged.status,
        "from": start.isoformat(),
        "to": end.isoformat(),
        "group_by": group_by,
        "groups": [{"group": r["group_name"], **{k: r[k] for k in USAGE_SUMS}} for r in merged.value],
        "unavailable_shards": merged.unavailable_shards,
    }
    emit(
        data,
        "json" if as_json else output,
        lambda d: table(d["groups"], ["group", *USAGE_SUMS]) + f"\n{len(d['groups'])} group(s)",
    )
    warn_partial(merged)
