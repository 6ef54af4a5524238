"""`harvest concurrency status`: in-flight and pending work per concurrency key.

SQL: functions/flow_concurrency.sql.
"""

from __future__ import annotations

import click

from harvest.cli.output import database_url_option, emit, output_option, sql_api, table


@click.group("concurrency")
def concurrency() -> None:
    """Concurrency keys: their limit, what runs and what waits."""


@concurrency.command("status")
@click.option("--key", default=None, help="Only this concurrency key.")
@database_url_option
@output_option
def status(key: str | None, database_url: str | None, output: str) -> None:
    """One row per key: key, max_concurrent, in_flight, pending (and task_type, workflows)."""
    with sql_api(database_url, read_only=True) as sql:
        rows = sql.list_concurrency_keys(key)
    data = [
        {
            "key": r["key"],
            "max_concurrent": r["max_concurrent"],
            "in_flight": r["in_flight"],
            "pending": r["pending"],
            "task_type": r["task_type"],
        }
        for r in rows
    ]
    for row, r in zip(data, rows, strict=True):
        if r["workflows"]:  # the spec omits the field when empty, never "workflows": null
            row["workflows"] = r["workflows"]
    emit(
        data,
        output,
        lambda d: (
            table(d, ["key", "task_type", "max_concurrent", "in_flight", "pending"]) + f"\n{len(d)} key(s)"
        ),
    )
