"""`harvest retention status|set|run-now`: the janitor for terminal executions (functions/retention.sql)."""

from __future__ import annotations

import click

from harvest.cli.output import database_url_option, emit, mapping, output_option, progress, sql_api

STATUS_KEYS = ["configured", "max_age", "batch_size", "eligible", "last_run_at", "last_run_deleted", "updated_at"]


@click.group()
def retention() -> None:
    """Delete terminal executions older than the configured age."""


@retention.command("status")
@database_url_option
@output_option
def status(database_url, output) -> None:
    """Show the settings, the last run and how many executions a run would delete."""
    with sql_api(database_url, read_only=True) as sql:
        data = sql.retention_status()
    emit(data, output, lambda d: mapping(d, STATUS_KEYS))


@retention.command("set")
@click.option("--max-age", required=True, help="A PostgreSQL interval, e.g. '30 days'; 'off' keeps everything.")
@click.option("--batch-size", default=None, type=click.IntRange(1, 10_000), help="Executions deleted per transaction (1..10000).")
@click.option("--operator", default=None, help="Who you are, for the audit log.")
@database_url_option
@output_option
def set_(max_age, batch_size, operator, database_url, output) -> None:
    """Configure retention."""
    value = None if max_age.strip().lower() in ("off", "none", "") else max_age
    with sql_api(database_url, read_only=False) as sql:
        data = sql.set_retention(value, batch_size, operator)
    emit(data, output, lambda d: mapping(d, STATUS_KEYS))


@retention.command("run-now")
@click.option("--max-age", default=None, help="Override the configured age for this run.")
@click.option("--batch-size", default=None, type=click.IntRange(1, 10_000))
@click.option("--max-batches", default=1000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Stop after this many batches (each is one transaction).")
@click.option("--operator", default=None, help="Who you are, for the audit log.")
@database_url_option
@output_option
def run_now(max_age, batch_size, max_batches, operator, database_url, output) -> None:
    """Delete expired terminal executions now, batch by batch, until none remain."""
    deleted = 0
    batches = 0
    with sql_api(database_url, read_only=False) as sql:
        eligible = sql.retention_status().get("eligible") or 0
        with progress(eligible, "deleting executions", enabled=output != "json" and eligible > 0) as bar:
            while batches < max_batches:
                result = sql.run_retention(max_age, batch_size, operator)
                batches += 1
                deleted += result["deleted"]
                bar.update(result["deleted"])
                if result["deleted"] == 0 or result["remaining"] == 0:
                    break
    data = {"deleted": deleted, "batches": batches, "remaining": result["remaining"], "cutoff": result["cutoff"]}
    emit(data, output, lambda d: f"deleted {d['deleted']} execution(s) in {d['batches']} batch(es); "
                                 f"{d['remaining']} remaining (cutoff {d['cutoff']})")
