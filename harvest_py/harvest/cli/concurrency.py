"""`harvest concurrency status`: in-flight and pending work per concurrency key.

SQL: functions/flow_concurrency.sql.
"""

from __future__ import annotations

import click

from harvest.cli.output import database_url_option, output_option, table
from harvest.cli.shards import emit_merged, read_shards


@click.group("concurrency")
def concurrency() -> None:
    """Concurrency keys: their limit, what runs and what waits."""


@concurrency.command("status")
@click.option("--key", default=None, help="Only this concurrency key.")
@database_url_option
@output_option
def status(key: str | None, database_url: str | None, output: str) -> None:
    """One row per key over every shard: key, max_concurrent, in_flight, pending (and task_type,
    workflows, shards). Each shard enforces max_concurrent on its own: in_flight is their sum."""
    merged = read_shards(database_url, lambda reads: reads.list_concurrency_keys(key))
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
        lambda d: (
            table(d, ["key", "task_type", "max_concurrent", "in_flight", "pending"]) + f"\n{len(d)} key(s)"
        ),
    )
