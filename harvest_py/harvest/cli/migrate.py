"""`harvest migrate`: apply and inspect schema migrations."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any, NoReturn

import click

from harvest.cli.output import SHARD_NUMBER, cli_config, cli_dsn, output_option, scrub, to_json
from harvest.core.durations import plain_number
from harvest.core.errors import ROLE_ADVICE, HarvestError
from harvest.db import DEFAULT_LOCK_TIMEOUT, DEFAULT_LOCK_WAIT

# The migration runner (the database driver) is imported when a command runs, never for --help
# (tests/unit/test_startup.py): its option defaults are harvest.db's constants.

database_url_option = click.option(
    "--database-url",
    envvar=None,
    default=None,
    help="Database DSN. Prefer HARVEST_DATABASE_URL: a command line is visible to ps.",
)
include_dir_option = click.option(
    "--include-dir",
    "include_dirs",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="An extra migration set to apply after Harvest's own (repeatable).",
)


MIGRATE_ROLE_ADVICE = (
    "(harvest migrate runs as the owner of the harvest schema, on a new database a login that may "
    "create a schema in it, or a superuser: no harvest_* role may migrate; `migrate status` also "
    "runs as a harvest_reader login)"
)


class _MigrateGroup(click.Group):
    """Errors become one line on stderr and the error's exit code, also when this group
    runs on its own (``harvest.cli.migrate.migrate``) rather than under ``harvest``."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HarvestError as exc:
            _fail(str(exc), exc.exit_code)
        except Exception as exc:
            # A database error the SQL API has no class for (a table of the ledger refused): one
            # line, as `harvest` prints it (harvest/cli/main.py), never a traceback.
            if "psycopg" not in sys.modules:
                raise
            from harvest.db.connection import DatabaseError, database_error_message

            if not isinstance(exc, DatabaseError):
                raise
            _fail(*database_error_message(exc))


def _fail(message: str, exit_code: int) -> NoReturn:
    # No harvest_* role migrates: a refusal's advice is which login does, not the roles.
    click.echo(f"error: {scrub(message.replace(ROLE_ADVICE, MIGRATE_ROLE_ADVICE))}", err=True)
    sys.exit(exit_code)


@click.group(cls=_MigrateGroup)
def migrate() -> None:
    """Apply and inspect Harvest's schema migrations."""


@migrate.command("status")
@database_url_option
@include_dir_option
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 while anything is pending, or when the database is ahead of this Harvest.",
)
@output_option
def status(database_url: str | None, include_dirs: tuple[Path, ...], check: bool, output: str) -> None:
    """Show which migrations are applied and which are pending."""
    from harvest.db.connection import describe_dsn
    from harvest.db.migrate import Migrator, shipped_functions

    dsn = cli_dsn(database_url)
    migrator = Migrator(dsn, include_dirs)
    report = migrator.inspect()
    rows, stale, unknown = report.migrations, report.stale_functions, report.unknown
    pending = [r for r in rows if r.applied_at is None]
    if output == "json":
        click.echo(
            to_json(
                {
                    "migrations": [
                        {
                            "set": r.migration.set_name,
                            "version": r.migration.version,
                            "name": r.migration.name,
                            "transactional": r.migration.transactional,
                            "applied_at": r.applied_at,
                            "changed": r.changed,
                        }
                        for r in rows
                    ],
                    "pending": len(pending),
                    "stale_function_files": [p.name for p in stale],
                    "changed_functions": report.changed_functions,
                    "retired_function_files": report.retired_functions,
                    "function_file_releases": report.function_releases,
                    "unknown_migrations": [
                        {
                            "set": u.set_name,
                            "version": u.version,
                            "name": u.name,
                            "applied_at": u.applied_at,
                        }
                        for u in unknown
                    ],
                    "database_ahead": report.ahead is not None,
                    "error": str(report.ahead) if report.ahead else None,
                }
            )
        )
    else:
        for r in rows:
            state = f"applied {r.applied_at:%Y-%m-%d %H:%M:%S}" if r.applied_at else "pending"
            mark = "" if r.migration.transactional else "  (non-transactional)"
            if r.changed:
                mark += "  (changed since it was applied: not run again)"
            click.echo(f"{r.migration.label:<45} {state}{mark}")
        for u in unknown:
            click.echo(f"{u.label:<45} applied {u.applied_at:%Y-%m-%d %H:%M:%S}  (unknown to this Harvest)")
        if not report.ahead:
            # Function files are compared only against a schema this package knows: when the
            # database is ahead its files are newer, not "changed".
            replaced = Counter(shipped_functions().files_of[f] for f in report.changed_functions)
            for path in stale:
                if path.name not in report.function_releases:  # (the ledger has no row: never applied)
                    click.echo(f"{'functions/' + path.name:<45} pending")
                    continue
                why = (
                    f"{replaced[path.name]} of its functions replaced since it was applied"
                    if replaced[path.name]
                    else "changed"
                )
                click.echo(f"{'functions/' + path.name:<45} pending ({why})")
            for name in report.retired_functions:
                click.echo(f"{'functions/' + name:<45} pending (retired: no longer in this Harvest)")
        click.echo(
            f"{describe_dsn(migrator.target)}: {len(rows) - len(pending)} applied, {len(pending)} pending"
            + (f", {len(unknown)} unknown to this Harvest" if unknown else "")
        )
        if report.function_releases:
            # Which release's SQL functions the database runs (a rollout applied, a rollback put back).
            counts = Counter(v or "unknown (before 0085)" for v in report.function_releases.values())
            click.echo(
                "function files applied by "
                + ", ".join(f"Harvest {v} ({n})" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            )
        if report.ahead:
            click.echo(str(report.ahead))
        _other_shards_note(describe_dsn(migrator.target))
    if check and (pending or stale or report.retired_functions or report.ahead):
        sys.exit(1)


@migrate.command("run")
@database_url_option
@include_dir_option
@click.option("--dry-run", is_flag=True, help="Print the plan and change nothing.")
@click.option(
    "--shard-id",
    type=SHARD_NUMBER,
    default=None,
    help="After migrating, make this database shard N (idempotent; refused when it holds "
    "another shard's executions).",
)
@click.option(
    "--operator-id",
    default=None,
    help="Who sets the shard id or downgrades the functions, for the audit log.",
)
@click.option(
    "--allow-downgrade",
    is_flag=True,
    help="Put this release's function files back over those a newer release of the same schema "
    "version applied (a rollback; each file is printed and the downgrade audited).",
)
@click.option(
    "--lock-timeout",
    type=float,
    default=None,
    help="Seconds one try of a migration waits for a lock before it gives up and tries again, so "
    "the queries queued behind it go on (config migrate.lock_timeout; default "
    f"{plain_number(DEFAULT_LOCK_TIMEOUT)}; 0 waits without limit).",
)
@click.option(
    "--lock-wait",
    type=float,
    default=None,
    help="Seconds to keep trying for a lock in all before stopping with the blocking session named "
    f"(config migrate.lock_wait; default {plain_number(DEFAULT_LOCK_WAIT)}).",
)
@output_option
def run(
    database_url: str | None,
    include_dirs: tuple[Path, ...],
    dry_run: bool,
    shard_id: int | None,
    operator_id: str | None,
    allow_downgrade: bool,
    lock_timeout: float | None,
    lock_wait: float | None,
    output: str,
) -> None:
    """Apply every pending migration in version order, then changed function files; with
    --shard-id N, then make the database shard N."""
    from harvest.db.connection import describe_dsn
    from harvest.db.migrate import CORE_SET, Migrator

    dsn = cli_dsn(database_url)
    config = cli_config().with_overrides(
        {
            "migrate.lock_timeout": (lock_timeout, "--lock-timeout"),
            "migrate.lock_wait": (lock_wait, "--lock-wait"),
        }
    )
    migrator = Migrator(
        dsn,
        include_dirs,
        progress=lambda msg: click.echo(msg, err=True),
        lock_timeout=config.get("migrate.lock_timeout", DEFAULT_LOCK_TIMEOUT),
        lock_wait=config.get("migrate.lock_wait", DEFAULT_LOCK_WAIT),
    )
    report = migrator.run(
        dry_run=dry_run,
        shard_id=shard_id,
        operator_id=operator_id,
        allow_downgrade=allow_downgrade,
        search_attr_indexes=_declared_elsewhere(migrator.target),
    )
    if output == "json":  # the same facts as the lines below, for scripts
        click.echo(
            to_json(
                {
                    "database": describe_dsn(migrator.target),
                    "dry_run": dry_run,
                    "applied": [m.label for m in report.applied],
                    "applied_non_transactional": [m.label for m in report.applied_non_transactional],
                    "functions_applied": list(report.functions_applied),
                    "functions_retired": list(report.functions_retired),
                    "functions_downgraded": dict(report.functions_downgraded),
                    "shard": report.shard,
                    "search_attr_indexes": report.search_attr_indexes,
                }
            )
        )
        return
    if dry_run:
        click.echo(f"plan for {describe_dsn(migrator.target)} (dry run, nothing changed):")
        # In the order a run applies them: Harvest's migrations, its functions, the included sets.
        core = [m for m in report.applied if m.set_name == CORE_SET]
        for m in core:
            click.echo(f"  would apply {m.label}" + ("" if m.transactional else " (non-transactional)"))
        for name in report.functions_applied:
            was = report.functions_downgraded.get(name)
            click.echo(f"  would apply functions/{name}" + (f" (downgrading Harvest {was}'s)" if was else ""))
        for name in report.functions_retired:
            click.echo(f"  would retire functions/{name} (its ledger row)")
        for m in report.applied:
            if m.set_name != CORE_SET:
                click.echo(f"  would apply {m.label}" + ("" if m.transactional else " (non-transactional)"))
        for name, type_ in report.search_attr_indexes.items():
            click.echo(f"  would build the index of search attribute {name} ({type_})")
        if report.shard is not None:
            if report.shard["changed"]:
                was = report.shard["previous_shard_id"]
                click.echo(
                    f"  would set shard id {shard_id}"
                    + (f" (now {was})" if was is not None else " (after migration 0023)")
                )
            else:
                click.echo(f"  shard id is already {shard_id}")
        if (
            not report.applied
            and not report.functions_applied
            and not report.functions_retired
            and not (report.shard and report.shard["changed"])
            and not report.search_attr_indexes
        ):
            click.echo("  nothing to do")
        _other_shards_note(describe_dsn(migrator.target))
        return
    total = len(report.applied) + len(report.applied_non_transactional)
    click.echo(
        f"{describe_dsn(migrator.target)}: applied {total} migration(s)"
        + (
            f", {len(report.applied_non_transactional)} non-transactional"
            if report.applied_non_transactional
            else ""
        )
        + f", {len(report.functions_applied)} function file(s)"
        + (f", {len(report.functions_retired)} retired" if report.functions_retired else "")
        + (f", {len(report.functions_downgraded)} downgraded" if report.functions_downgraded else "")
        + (_shard_note(report.shard) if report.shard is not None else "")
    )
    _other_shards_note(describe_dsn(migrator.target))


def _declared_elsewhere(target: str) -> list[tuple[str, str]]:
    """The search attributes the other shards of ``[shards]`` (``shards.urls``) have indexed
    (`harvest search-attr index`): `migrate run` records and builds them here too, so a shard
    added later gets them. A shard that cannot be read is a note on stderr, not a failed run."""
    from harvest.config import shard_urls, shards_configured
    from harvest.db import pooler
    from harvest.db.connection import DatabaseError, connect, schema_missing
    from harvest.db.search_indexes import list_indexes

    config = cli_config()
    if not shards_configured(config):
        return []
    found: set[tuple[str, str]] = set()
    for shard, url in shard_urls(config).items():
        if pooler.session_dsn(url) == target:
            continue
        try:
            with connect(url, autocommit=True, connect_timeout=5) as conn:
                found.update((r["name"], r["type"]) for r in list_indexes(conn))
        except DatabaseError as exc:
            if not schema_missing(exc):  # (a shard before migration 0120 records none)
                _unread_note(shard)
        except HarvestError:
            _unread_note(shard)
    return sorted(found)


def _unread_note(shard: int) -> None:
    # (its host unnamed: this command's output names the one database it acted on)
    click.echo(
        f"note: shard {shard} could not be read for the search attributes it indexes: "
        "harvest search-attr indexes shows why, and what this database lacks",
        err=True,
    )


def _other_shards_note(where: str) -> None:
    """On a sharded configuration, say on stderr that this command acted on one database: each
    shard's is migrated (and inspected) on its own (docs/sharding.md, "Adding a shard")."""
    from harvest.config import shards_configured

    config = cli_config()
    if not shards_configured(config):
        return
    urls = {int(k) for k in config.get("shards.urls") or {}}
    shards = sorted({0} | urls | set(config.get("shards.readable") or []))
    click.echo(
        f"note: this configuration names shards {', '.join(map(str, shards))}; harvest migrate "
        f"acted on {where} only: run it against each shard's database (HARVEST_DATABASE_URL set "
        "to that shard's url: its shards.session_urls entry is used)",
        err=True,
    )


def _shard_note(shard: dict[str, Any]) -> str:
    if shard["changed"]:
        return f"; shard id set to {shard['shard_id']} (was {shard['previous_shard_id']})"
    return f"; shard id {shard['shard_id']} (unchanged)"
