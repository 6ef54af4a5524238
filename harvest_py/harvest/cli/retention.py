"""`harvest retention status|set|run-now`: the janitor for terminal executions (functions/retention.sql)."""

from __future__ import annotations

from typing import Any

import click

from harvest.cli.output import (
    INTERVAL,
    INTERVAL_OR_OFF,
    cli_config,
    database_url_option,
    emit,
    mapping,
    operator_id_option,
    output_option,
    progress,
    sql_api,
)
from harvest.cli.output import selected as http_selected
from harvest.cli.shards import (
    InTurn,
    deployment_read,
    emit_merged,
    fail_if_refused,
    fail_if_refused_over_http,
    fail_if_unreached,
    in_turn,
    shard_writers,
)
from harvest.config import shards_configured
from harvest.core.errors import DatabaseUnavailable
from harvest.shard.fanout import FanOut

STATUS_KEYS = [
    "configured",
    "max_age",
    "batch_size",
    "eligible",
    "last_run_at",
    "last_run_deleted",
    "last_run_remaining",
    "updated_at",
    "worker_max_age",
    "workers_eligible",
    "owed_child_ends",
    "owed_child_ends_by_shard",
]


@click.group()
def retention() -> None:
    """Delete terminal executions older than the configured age."""


@retention.command("status")
@database_url_option
@output_option
def status(database_url: str | None, output: str) -> None:
    """Show the settings, the last run and how many executions a run would delete (on shards,
    over SQL with [shards] or HTTP to a sharded server: per shard, each shard's own settings
    and runs)."""
    _emit_per_shard(*deployment_read(database_url, lambda api: api.get_retention_status()), output)


def _emit_per_shard(sharded: bool, fan: FanOut[Any], output: str, *, write: bool = False) -> None:
    """One database's settings as they are; a sharded deployment's as one row per shard
    (``write``: the settings written, whose shards not reached the command's error names)."""
    if not sharded:
        emit(fan.results[0], output, lambda d: mapping(d, STATUS_KEYS))
        return
    rows = [{"shard_id": s, **data} for s, data in fan.results.items()]
    emit_merged(
        fan.merged(rows),
        "shards",
        output,
        lambda d: "\n\n".join(mapping(r, ["shard_id", *STATUS_KEYS]) for r in d),
        warn=not write,
    )


@retention.command("set")
@click.option(
    "--max-age",
    default=None,
    type=INTERVAL_OR_OFF,
    help="Terminal executions: a PostgreSQL interval, e.g. '30 days'; 'off' keeps everything.",
)
@click.option(
    "--batch-size",
    default=None,
    type=click.IntRange(1, 10_000),
    help="Executions deleted per transaction (1..10000).",
)
@click.option(
    "--worker-max-age",
    default=None,
    type=INTERVAL_OR_OFF,
    help="Stopped or stale worker rows last seen longer ago are deleted (default 7 days); 'off' keeps them.",
)
@operator_id_option
@database_url_option
@output_option
def set_(
    max_age: str | None,
    batch_size: int | None,
    worker_max_age: str | None,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Configure retention (on shards: every shard, as over HTTP; exit 1 naming the shards that
    could not be reached, which keep their settings)."""
    if max_age is None and worker_max_age is None:
        raise click.UsageError("give --max-age, --worker-max-age or both")
    if batch_size is not None and max_age is None:
        raise click.UsageError("--batch-size goes with --max-age")

    sharded, fan = deployment_read(
        database_url,
        lambda api: api.set_retention_settings(max_age, batch_size, worker_max_age, operator),
        read_only=False,
        refusals_apart=True,
    )
    if fan.refused:  # a shard refused: the shards set printed, then every refusal named
        done = InTurn(fan.results, fan.unavailable_shards, fan.refused)
        set_ones = FanOut.of(fan.results, fan.unavailable_shards)
        fail_if_refused(done, lambda: _emit_per_shard(sharded, set_ones, output, write=True))
    _emit_per_shard(sharded, fan, output, write=True)
    fail_if_unreached(fan.unavailable_shards, "keep their retention settings")


@retention.command("run-now")
@click.option("--max-age", default=None, type=INTERVAL, help="Override the configured age for this run.")
@click.option("--batch-size", default=None, type=click.IntRange(1, 10_000))
@click.option(
    "--max-batches",
    default=1000,  # harvest.db.prunes.MAX_BATCHES, the route's too (imported by no --help)
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    help="Stop after this many batches (each is one transaction).",
)
@operator_id_option
@database_url_option
@output_option
def run_now(
    max_age: str | None,
    batch_size: int | None,
    max_batches: int,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Delete expired terminal executions now, batch by batch, until none remain (and the
    stopped or stale worker rows the worker rule lets go). On shards (over SQL with [shards], or
    HTTP to a sharded server) every shard is swept, one after the other, and the totals printed;
    a shard that could not be reached is named and the command exits 1. Over HTTP the server
    sweeps to the end and the CLI waits at least 300 s (--http-timeout-secs for longer); past
    that it exits 1 saying the server goes on and how to see what it did."""
    config = cli_config()
    if http_selected(database_url) is None and shards_configured(config):
        data = _sweep_shards(config, database_url, max_age, batch_size, max_batches, operator, output)
    else:
        with sql_api(database_url, read_only=False) as sql:
            sweep = getattr(sql, "sweep_retention", None)
            if sweep is not None:  # over HTTP the server sweeps (503 where its janitor does not run)
                from harvest.db.prunes import sweep_totals

                answer = data = sweep(max_age, batch_size, max_batches, operator)
                if "shards" in data:  # a sharded server: each shard's answer
                    data = sweep_totals(data["shards"], data.get("unavailable_shards") or [])
                    totals = data
                    # A shard that refused: the others' totals printed, every refusal named.
                    fail_if_refused_over_http(answer, lambda: emit(totals, output, _render))
            else:
                data = _sweep(sql, max_age, batch_size, max_batches, operator, output)
    emit(data, output, _render)
    fail_if_unreached(data.get("unavailable_shards") or [], "were not swept")


def _render(d: dict[str, Any]) -> str:
    return (
        f"deleted {d['deleted']} execution(s) in {d['batches']} batch(es); "
        f"{d['remaining']} remaining (cutoff {d['cutoff']}); "
        f"deleted {d['workers_deleted']} worker row(s)"
        + "".join(
            f"\n  shard {r['shard_id']}: deleted {r['deleted']}, {r['remaining']} remaining"
            for r in d.get("shards", ())
        )
    )


def _sweep_shards(
    config: Any,
    database_url: Any,
    max_age: Any,
    batch_size: Any,
    max_batches: int,
    operator: Any,
    output: str,
) -> dict[str, Any]:
    """Every readable shard swept in turn (cli.shards.in_turn: each to its end, with its own
    progress bar; a shard that refuses, retention not configured there say, is named and the
    others are swept all the same); the totals, as over HTTP."""

    from harvest.db.prunes import sweep_totals

    def sweep(_shard: int, api: Any) -> dict[str, Any]:
        return _sweep(api, max_age, batch_size, max_batches, operator, output)

    with shard_writers(config, database_url) as apis:
        done = in_turn(apis, sorted(apis), sweep)
    swept = [{"shard_id": s, **r} for s, r in sorted(done.results.items())]
    fail_if_refused(done, lambda: emit(sweep_totals(swept, done.unavailable), output, _render))
    if not done.results:
        shards = ", ".join(str(s) for s in done.unavailable)
        raise DatabaseUnavailable(
            f"no shard could be swept (shard(s) {shards} unreachable); retry when one is up"
        )
    return sweep_totals(swept, done.unavailable)


def _sweep(
    sql: Any, max_age: Any, batch_size: Any, max_batches: int, operator: Any, output: str
) -> dict[str, Any]:
    """The janitor's batches on this database (harvest.db.prunes), with a progress bar
    sized by the executions eligible now."""
    from harvest.db.prunes import sweep_retention_steps
    from harvest.db.steps import run_steps

    eligible = sql.get_retention_status().get("eligible") or 0
    with progress(eligible, "deleting executions", enabled=output != "json" and eligible > 0) as bar:
        steps = sweep_retention_steps(max_age, batch_size, max_batches, operator, on_batch=bar.update)
        return run_steps(steps, sql)
