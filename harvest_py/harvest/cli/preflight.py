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
from typing import Any

import click

from harvest.cli.output import cli_dsn, database_url_option, output_option, table, to_json
from harvest.core.errors import HarvestError, InvalidArgument

# The checks (harvest.config.preflight: the SQL API, the database driver) are imported when they
# run, never for --help (tests/unit/test_startup.py).


@click.command()
@click.option(
    "--app", "app_target", default=None, help="module:app whose queues and declared dependencies to check."
)
@database_url_option
@output_option
def preflight(app_target: str | None, database_url: str | None, output: str) -> None:
    """Read-only deploy gate. Exit 0 = pass, 2 = warn, 1 = fail."""
    from harvest.cli.http import http_session
    from harvest.cli.output import selected
    from harvest.config.preflight import EXIT, Check

    settings = selected(database_url)
    if settings is not None:
        # The server runs the same checks on its own database(s) and App, and adds whether the
        # API has an auth boundary (admin_auth_boundary).
        if app_target:
            raise InvalidArgument(
                "--app is not sent over HTTP: the server checks the App it serves "
                "(harvest serve --app); give a DSN to check a local App"
            )
        with http_session(settings) as http:
            report = http.request("GET", "/admin/preflight", scope="admin")[1]
    else:
        report = _local_report(app_target, database_url)
    result, observed = report["overall_status"], report["observed_at"]
    checks = [Check(**c) for c in report["checks"]]
    if output == "json":
        click.echo(to_json(report))
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
                # (a shard's check names its shard: each shard's block reads alike otherwise)
                scope = f", {c.scope}" if c.scope != "-" else ""
                click.echo(f"\n{c.name} ({c.status}{scope})")
                for line in c.details.get("pending") or []:
                    click.echo(f"  - pending migration {line}")
                for line in c.details.get("stale_function_files") or []:
                    click.echo(f"  - changed function file functions/{line}")
                for line in c.details.get("changed_functions") or []:
                    click.echo(f"  - function harvest.{line} replaced since its file was applied")
                for line in c.details.get("failures") or []:
                    click.echo(f"  - {line}")
                for queue in c.details.get("uncovered") or []:
                    click.echo(f"  - queue '{queue}' has no live worker")
                if c.remediation:
                    click.echo(f"  remediation: {c.remediation}")
    sys.exit(EXIT[result])


def _local_report(app_target: str | None, database_url: str | None) -> dict[str, Any]:
    """The checks run here, over the DSN (or [shards]), as the route's JSON."""
    from harvest.cli.output import cli_config
    from harvest.cli.shard import shard_targets
    from harvest.config.preflight import Check, overall, run_checks, run_shard_checks
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
    observed = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {
        "overall_status": overall(checks),
        "observed_at": observed,
        "checks": [c.to_json() for c in checks],
    }
