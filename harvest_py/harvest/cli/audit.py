"""`harvest audit list|prune`: the operator actions recorded in the audit log, and their pruning
by age (functions/audit.sql)."""

from __future__ import annotations

from typing import Any

import click

from harvest.cli.output import (
    INTERVAL,
    cli_config,
    database_url_option,
    emit,
    operator_id_option,
    output_option,
    progress,
    sql_api,
    table,
)
from harvest.cli.output import selected as http_selected
from harvest.cli.shards import (
    emit_merged,
    fail_if_refused,
    fail_if_refused_over_http,
    fail_if_unreached,
    in_turn,
    read_shards,
    shard_writers,
    with_page_footer,
)
from harvest.config import shards_configured
from harvest.core.errors import DatabaseUnavailable
from harvest.shard.fanout import audit_prune_totals

COLUMNS = [
    "id",
    "at",
    "operation",
    "target",
    "actor",
    "login",
    "acting_role",
    "operator_id",
    "source",
    "route",
    "details",
]


@click.group()
def audit() -> None:
    """Who did what to the engine, when, and through which face (api, cli, ui)."""


@audit.command("list")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@click.option("--operation", default=None, help="Only this operation, e.g. workflow.terminate.")
@click.option("--cursor", default=None, help="next_cursor from the previous page (every shard).")
@database_url_option
@output_option
def list_(
    limit: int, operation: str | None, cursor: str | None, database_url: str | None, output: str
) -> None:
    """List audit log rows over every shard, newest first, each with its shard_id (ids are per
    shard); page with --cursor (over SQL with [shards], or HTTP)."""
    merged = read_shards(database_url, lambda reads: reads.list_audit_log(limit, operation, cursor))
    emit_merged(
        merged,
        "audit_log",
        output,
        lambda d: with_page_footer(table(d, [*COLUMNS, "shard_id"]), d, "audit row(s)", merged),
    )


@audit.command("prune")
@click.option(
    "--older-than",
    required=True,
    type=INTERVAL,
    help="Delete the audit rows older than this PostgreSQL interval, e.g. '400 days'.",
)
@click.option(
    "--batch-size",
    default=10_000,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Audit rows deleted per transaction (1..100000).",
)
@click.option(
    "--dry-run", is_flag=True, help="Delete nothing: count, per shard, the rows a prune would delete."
)
@operator_id_option
@database_url_option
@output_option
def prune(
    older_than: str,
    batch_size: int,
    dry_run: bool,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Delete the audit rows older than --older-than, oldest first, batch by batch until none
    older remains (admin; each batch that deletes is audited itself, audit.prune), with progress
    on stderr. The janitor prunes the audit log only with retention.audit_max_age set: else run
    this as your audit policy says (cron), --dry-run first. On shards (over SQL with [shards],
    or HTTP to a sharded server) every shard is pruned, one after the other, and the totals
    printed; a shard that refuses or cannot be reached is named and the command exits with its
    code (1 when unreached). Over HTTP the server prunes to the end and the CLI waits at least
    300 s (--http-timeout-secs for longer)."""
    settings = http_selected(database_url)
    if settings is not None:
        data = _prune_over_http(settings, older_than, batch_size, dry_run, operator, output)
    else:
        data = _prune_over_sql(database_url, older_than, batch_size, dry_run, operator, output)
    emit(data, output, _render)
    fail_if_unreached(data.get("unavailable_shards") or [], "were not pruned")


def _prune_over_http(
    settings: Any, older_than: str, batch_size: int, dry_run: bool, operator: str | None, output: str
) -> dict[str, Any]:
    """One POST: the server prunes on every shard, to the end; printed as over SQL."""
    from harvest.cli.http import BULK_WRITE_SECS, http_session

    body = {"older_than": older_than, "batch_size": batch_size, "dry_run": dry_run, "operator_id": operator}
    with http_session(settings) as http:
        budget = max(http.settings.timeout, BULK_WRITE_SECS)
        goes_on = (
            "with the prune to its end, each batch committed as it is made: see what is left with "
            f"`harvest audit prune --older-than '{older_than}' --dry-run`, what was done with "
            "`harvest audit list --operation audit.prune`"
        )
        answer = http.post("/admin/audit/prune", body, scope="admin", timeout=budget, goes_on=goes_on)
    data = {k: v for k, v in answer.items() if k not in ("status", "shard_errors")}
    fail_if_refused_over_http(answer, lambda: emit(data, output, _render))
    return data


def _prune_over_sql(
    database_url: str | None,
    older_than: str,
    batch_size: int,
    dry_run: bool,
    operator: str | None,
    output: str,
) -> dict[str, Any]:
    """Each shard in turn (cli.shards.in_turn: a prune may take many batches, so no shard is cut
    off by shards.cli_timeout, and each has its own progress bar; a shard that refuses is named
    and the others are pruned all the same), then the totals. One database: shard 0."""

    def on(shard: int, sql: Any) -> dict[str, Any]:
        return prune_on_shard(sql, shard, older_than, batch_size, dry_run, operator, output)

    config = cli_config()
    if not shards_configured(config):  # one database: its refusal as it is, no shard named
        with sql_api(database_url, read_only=dry_run) as sql:
            return audit_prune_totals(older_than, dry_run, {0: on(0, sql)}, [])
    with shard_writers(config, database_url) as apis:
        done = in_turn(apis, sorted(apis), on)
    totals = audit_prune_totals(older_than, dry_run, done.results, done.unavailable)
    fail_if_refused(done, lambda: emit(totals, output, _render))
    if not done.results:
        shards = ", ".join(str(s) for s in done.unavailable)
        raise DatabaseUnavailable(
            f"no shard could be pruned (shard(s) {shards} unreachable); retry when one is up"
        )
    return totals


def prune_on_shard(
    sql: Any,
    shard: int,
    older_than: str,
    batch_size: int,
    dry_run: bool,
    operator: str | None,
    output: str = "json",
) -> dict[str, Any]:
    """On one shard: how many rows are older (a dry run), or their deletion batch by batch until
    none older remains; a batch that deletes nothing while some remain (another prune holds
    them) ends it too, with what remains said."""
    from harvest.db.prunes import prune_audit_log_steps
    from harvest.db.steps import run_steps

    counted: dict[str, Any] = sql.count_audit_log(older_than)
    if dry_run:
        return counted
    label = f"shard {shard}: deleting audit rows older than {older_than}"
    with progress(counted["older"], label, enabled=output != "json" and counted["older"] > 0) as bar:
        return run_steps(prune_audit_log_steps(older_than, batch_size, operator, on_batch=bar.update), sql)


def _render(d: dict[str, Any]) -> str:
    if d["dry_run"]:
        head = (
            f"dry run: {d['older']} audit row(s) older than {d['older_than']} would be deleted "
            f"(cutoff {d['cutoff']})"
        )
        lines = [f"  shard {r['shard_id']}: {r['older']}" for r in d["shards"]]
    else:
        head = (
            f"deleted {d['deleted']} audit row(s) older than {d['older_than']} in {d['batches']} batch(es); "
            f"{d['remaining']} remaining (cutoff {d['cutoff']})"
        )
        lines = [
            f"  shard {r['shard_id']}: deleted {r['deleted']} in {r['batches']} batch(es), "
            f"{r['remaining']} remaining"
            for r in d["shards"]
        ]
    return "\n".join([head, *lines])
