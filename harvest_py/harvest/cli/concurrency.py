"""`harvest concurrency status`: in-flight and pending work per concurrency key.

SQL: functions/flow_concurrency.sql.
"""

from __future__ import annotations

import click

from harvest.cli.output import database_url_option, output_option, table
from harvest.cli.shards import emit_merged, read_shards, with_page_footer
from harvest.shard.fanout import CONCURRENCY_PAGE, CONCURRENCY_PAGE_MAX


@click.group("concurrency")
def concurrency() -> None:
    """Concurrency keys: their limit, what runs and what waits."""


@concurrency.command("status")
@click.option("--key", default=None, help="Only this concurrency key.")
@click.option(
    "--limit",
    type=click.IntRange(1, CONCURRENCY_PAGE_MAX),
    default=CONCURRENCY_PAGE,
    show_default=True,
    help="Keys at most on this page.",
)
@click.option("--cursor", default=None, help="next_cursor from the previous page (every shard).")
@database_url_option
@output_option
def status(key: str | None, limit: int, cursor: str | None, database_url: str | None, output: str) -> None:
    """One row per key over every shard, in key order: key, max_concurrent, in_flight, pending (and
    task_type, workflows, shards); a page of --limit keys, the next with --cursor. Each shard
    enforces max_concurrent on its own: in_flight is their sum."""
    merged = read_shards(database_url, lambda reads: reads.list_concurrency_keys(key, limit, cursor))
    data = [
        {
            "key": r["key"],
            "max_concurrent": r["max_concurrent"],
            "in_flight": r["in_flight"],
            "pending": r["pending"],
            "task_type": r["task_type"],
            "shards": r["shards"],
        }
        for r in merged.value
    ]
    for row, r in zip(data, merged.value, strict=True):
        if r["workflows"]:  # the spec omits the field when empty, never "workflows": null
            row["workflows"] = r["workflows"]
    merged.value = data
    emit_merged(
        merged,
        "keys",
        output,
        lambda d: with_page_footer(
            table(d, ["key", "task_type", "max_concurrent", "in_flight", "pending"]),
            sorted({r["key"] for r in d}),
            "key(s)",
            merged,
        ),
    )
