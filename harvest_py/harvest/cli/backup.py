"""`harvest backup verify`: a restore drill against scratch databases (harvest/db/backup.py,
docs/runbooks/backup-restore.md). One of the DSN-only commands: it runs when no app is up.

Exit codes (for CI):
  0  every database restored and every check passed
  1  the restore does not preserve something (each problem printed)
  2  the command line was wrong
  3  the drill could not run (pg_dump/pg_restore missing, a database unreachable, a dump or a
     restore that failed, no right to create a scratch database)
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from harvest.cli.output import cli_config, cli_dsn, echo_error, emit, output_option
from harvest.config import shard_urls, shards_configured
from harvest.core.errors import HarvestError
from harvest.core.secret_files import env_secret
from harvest.db import SCHEMA_VERSION

# The drill (and the database driver under it) is imported when it runs, never for --help
# (tests/unit/test_startup.py).
if TYPE_CHECKING:
    from harvest.db.backup import Problem

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_CANNOT_RUN = 0, 1, 2, 3

SCRATCH_URL_ENV = "HARVEST_BACKUP_SCRATCH_URL"
SHARD_WARNING = (
    "restore every shard to the same instant: a point-in-time restore that rolls shards back to "
    "different instants can leave a child alive on one shard whose parent-side ChildWorkflowStarted "
    "and lifecycle row were rolled away on another, an orphan no relay sees; this drill derives its "
    "cross-shard child checks from parent-side events and cannot catch that direction"
)


@click.group("backup")
def backup() -> None:
    """Backup drills (DSN-only: they need no running app)."""


def _say(line: str) -> None:
    click.echo(line, err=True)


def _replay(app_target: str | None, copies: list[Any]) -> tuple[list[Problem], dict[str, int]]:
    """Replay every whole history of the App's workflows in each scratch copy."""
    if app_target is None:
        return [], {}
    from harvest.cli.worker import load_app
    from harvest.db.backup import Problem, histories
    from harvest.testing.replay import WorkflowReplayer

    app = load_app(app_target)
    replayer = WorkflowReplayer(app)
    names = set(app.workflows)
    problems: list[Problem] = []
    tally = {"replayed": 0, "failed": 0}
    for copy in copies:
        _say(f"shard {copy.shard}: replaying histories of {len(names)} workflow type(s)")
        for execution_id, workflow_name, events in histories(copy.dsn, names):
            result = replayer.replay(events, workflow_name)
            tally["replayed"] += 1
            if not result.ok:
                tally["failed"] += 1
                problems.append(Problem(copy.shard, "replay", result.error or "did not replay", execution_id))
    return problems, tally


@backup.command("verify")
@click.option(
    "--database-url",
    default=None,
    help="The live database (shard 0 with [shards]). Prefer HARVEST_DATABASE_URL.",
)
@click.option(
    "--scratch-url",
    default=None,
    help="A server DSN whose role may CREATE DATABASE, for the scratch copies (default: the live "
    "database's server and role). Prefer HARVEST_BACKUP_SCRATCH_URL (or HARVEST_BACKUP_SCRATCH_URL_FILE).",
    envvar=SCRATCH_URL_ENV,
)
@click.option(
    "--app",
    "app_target",
    default=None,
    help="module:attribute of the App: replay every history under its code.",
)
@output_option
def verify(database_url: str | None, scratch_url: str | None, app_target: str | None, output: str) -> None:
    """Dump the live database(s) with pg_dump, restore into scratch databases, check the copies,
    drop them. Exit 0 verified, 1 a check failed, 2 usage, 3 the drill could not run."""
    from harvest.db.backup import DrillFailed, check_children_across, check_copy, drill

    try:
        config = cli_config()
        dsn = cli_dsn(database_url)
        # (click read the variable; its _FILE spelling, and both set, are env_secret's)
        from_env = env_secret(SCRATCH_URL_ENV)
        scratch_url = scratch_url or from_env
        sources = shard_urls(config, dsn) if shards_configured(config) else {0: dsn}
        if len(sources) > 1:
            _say(f"warning: {SHARD_WARNING}")
        problems: list[Problem] = []
        tally: dict[str, int] = {}
        with drill(sources, scratch_url=scratch_url, progress=_say) as (snapshots, copies):
            for source, copy in zip(snapshots, copies, strict=True):
                _say(f"shard {copy.shard}: checking the restored copy ({copy.dump_bytes} dump bytes)")
                problems += check_copy(source, copy)
            if len(copies) > 1:
                _say("checking children across shards")
                problems += check_children_across({c.shard: c.dsn for c in copies})
            replayed, tally = _replay(app_target, copies)
            problems += replayed
        versions = sorted({s.schema_version for s in snapshots if s.schema_version})
    except DrillFailed as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_CANNOT_RUN)
    except HarvestError as exc:
        echo_error(exc, "error: the drill could not run: ")  # (and an --app module's traceback)
        sys.exit(EXIT_CANNOT_RUN)
    data = {
        "status": "failed" if problems else "verified",
        "shards": [s.shard for s in snapshots],
        "schema_versions": versions,
        "package_schema_version": SCHEMA_VERSION,
        "rows": {s.shard: sum(s.counts.values()) for s in snapshots},
        "replay": tally or None,
        "problems": [p.__dict__ for p in problems],
        "warning": SHARD_WARNING if len(snapshots) > 1 else None,
    }

    def render(d: dict[str, Any]) -> str:
        lines = [p.line() for p in problems]
        replay = (
            f", {d['replay']['replayed']} history(ies) replayed"
            if d["replay"]
            else ", no --app: histories checked structurally"
        )
        lines.append(
            f"{d['status']}: {len(d['shards'])} database(s), {sum(d['rows'].values())} row(s), "
            f"schema {', '.join(versions) or '?'}{replay}, {len(problems)} problem(s)"
        )
        return "\n".join(lines)

    emit(data, output, render)
    sys.exit(EXIT_PROBLEMS if problems else EXIT_OK)
