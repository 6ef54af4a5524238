"""`harvest shard health [--candidate-shard N]`: the readiness gate for adding a shard
(harvest/shard/health.py; docs/sharding.md, "Shard health and adding a shard").

Exit 0 when every writable shard and the candidate are ready, 2 when the worst of them is
degraded, 1 when one is unavailable (preflight's codes: 0 pass, 2 warn, 1 fail).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from harvest.cli.output import cli_config, cli_dsn, database_url_option, emit, output_option, table
from harvest.core.errors import ConfigError, InvalidArgument

EXIT = {"ready": 0, "degraded": 2, "unavailable": 1}


def shard_targets(database_url: str | None) -> tuple[Any, dict[int, str]]:
    """The configured router and each shard's url (shard 0 on the database url unless
    ``shards.urls.0`` names it): what `shard health` and `preflight` inspect."""
    from harvest.config import shard_urls
    from harvest.shard.router import ShardRouter

    config = cli_config()
    router = ShardRouter.from_config(config)
    try:
        dsn = cli_dsn(database_url)
    except ConfigError:
        if "0" not in (config.get("shards.urls") or {}):
            raise
        dsn = None
    return router, shard_urls(config, dsn)


@click.group("shard")
def shard() -> None:
    """Shards: health and readiness, rebalancing, owner mode (docs/sharding.md)."""


def _render(data: dict[str, Any]) -> str:
    rows = []
    for row in data["shards"]:
        workers = row["workers"] or {}
        pressure = row["pressure"] or {}
        coverage = row["queue_coverage"] or {}
        rows.append(
            {
                "shard": row["shard_id"],
                "roles": row["roles"],
                "reachable": "yes" if row["reachable"] else "NO",
                "schema": row["schema"]["version"],
                "live": workers.get("live"),
                "stale": workers.get("stale"),
                "unpolled": coverage.get("unpolled"),
                "pending": pressure.get("pending"),
                "dlq": pressure.get("dead_letters"),
                "stranded": row["stranded_pending"],
                "readiness": row["readiness"],
                "reasons": row["reason_codes"],
            }
        )
    columns = list(rows[0]) if rows else ["shard"]
    lines = [f"readiness: {data['readiness']}", f"observed_at: {data['observed_at']}"]
    if data["candidate_shard"] is not None:
        lines.append(f"candidate_shard: {data['candidate_shard']}")
    lines += ["", table(rows, columns), ""]
    for row in data["shards"]:
        if row.get("error"):
            lines.append(f"shard {row['shard_id']}: {row['error']}")
        for stranded in row["stranded"] or []:
            lines.append(
                f"shard {row['shard_id']}: {stranded['pending']} claimable task(s) on queue "
                f"'{stranded['queue']}' and no live worker polls it"
            )
    lines.append("scheduler freshness: not applicable (this Harvest has no schedules)")
    return "\n".join(lines).rstrip()


@shard.command("health")
@click.option(
    "--candidate-shard",
    type=click.IntRange(0, 65535),
    default=None,
    help="A shard about to become writable: its row gates the exit code too (added if not configured).",
)
@click.option(
    "--app",
    "app_target",
    default=None,
    help="module:app whose declared queues each shard must cover (default: each shard's registered queues).",
)
@database_url_option
@output_option
def health(
    candidate_shard: int | None, app_target: str | None, database_url: str | None, output: str
) -> None:
    """One row per configured shard: roles, reachability, schema, live workers, queue coverage,
    pressure, stranded work and reason codes. Exit 0 = every writable shard and the candidate
    ready, 2 = degraded, 1 = unavailable."""
    from harvest.cli.http import http_session
    from harvest.cli.output import selected
    from harvest.shard.health import shard_health

    settings = selected(database_url)
    if settings is not None:  # the server's shards, as it sees them
        if app_target:
            raise InvalidArgument(
                "--app is not sent over HTTP: the server checks each shard's registered queues"
            )
        with http_session(settings) as http:
            params = {"candidate_shard": candidate_shard}
            data = http.request("GET", "/admin/shards/health", params=params, scope="admin")[1]
        emit(data, output, _render)
        sys.exit(EXIT[data["readiness"]])
    queues = None
    if app_target:
        from harvest.cli.worker import load_app
        from harvest.config import declared_queues

        queues = declared_queues(load_app(app_target))
    router, urls = shard_targets(database_url)
    data = shard_health(router, urls, candidate=candidate_shard, queues=queues)
    emit(data, output, _render)
    sys.exit(EXIT[data["readiness"]])
