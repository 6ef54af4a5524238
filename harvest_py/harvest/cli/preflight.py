"""`harvest preflight`: read-only deploy checks. Exit 0 = pass, 2 = warn, 1 = fail.

Checks: database reachable, migrations applied (nothing pending), schema version,
catalog consistency of an App's declared dependencies (with --app), worker coverage of
the App's queues (with --app) or of the queues the fleet registered (without), worker
health, dead-letter access, retention configured.

With a ``[shards]`` configuration the database checks run on every configured shard (scope
``shard N``), each with an ``identity`` check (the database is that shard), and a ``shards``
check says whether every writable shard is reachable, migrated and itself.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click

from harvest.cli.output import cli_dsn, database_url_option, output_option, table, to_json
from harvest.config.preflight import EXIT, Check, overall, run_checks, run_shard_checks
from harvest.core.errors import HarvestError


@click.command()
@click.option(
    "--app", "app_target", default=None, help="module:app whose queues and declared dependencies to check."
)
@database_url_option
@output_option
def preflight(app_target: str | None, database_url: str | None, output: str) -> None:
    """Read-only deploy gate. Exit 0 = pass, 2 = warn, 1 = fail."""
    from harvest.cli.output import cli_config
    from harvest.cli.shard import shard_targets
    from harvest.shard.router import ShardRouter

    config = cli_config()
    app, app_error = None, None
    if app_target:
        from harvest.cli.worker import load_app

        try:
            app = load_app(app_target)
        except HarvestError as exc:
            app_error = Check("app", "fail", str(exc), scope=app_target)
    if config.get("shards.urls") or ShardRouter.from_config(config) != ShardRouter.single(0):
        checks = run_shard_checks(*shard_targets(database_url), app, app_error)
    else:
        checks = run_checks(cli_dsn(database_url), app, app_error)
    result = overall(checks)
    observed = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    if output == "json":
        click.echo(
            to_json(
                {"overall_status": result, "observed_at": observed, "checks": [c.to_json() for c in checks]}
            )
        )
    else:
        click.echo(f"overall_status: {result}\nobserved_at: {observed}\n")
        click.echo(
            table(
                [c.to_json() for c in checks],
                ["status", "name", "scope", "summary"],
                ["status", "check", "scope", "summary"],
            )
        )
        for c in checks:
            if c.status in ("warn", "fail") and (
                c.details.get("failures") or c.details.get("uncovered") or c.remediation
            ):
                click.echo(f"\n{c.name} ({c.status})")
                for line in c.details.get("pending") or []:
                    click.echo(f"  - pending migration {line}")
                for line in c.details.get("stale_function_files") or []:
                    click.echo(f"  - changed function file functions/{line}")
                for line in c.details.get("failures") or []:
                    click.echo(f"  - {line}")
                for queue in c.details.get("uncovered") or []:
                    click.echo(f"  - queue '{queue}' has no live worker")
                if c.remediation:
                    click.echo(f"  remediation: {c.remediation}")
    sys.exit(EXIT[result])
