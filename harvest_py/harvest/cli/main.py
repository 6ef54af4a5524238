"""The root `harvest` group and the one place errors become exit codes."""

from __future__ import annotations

import os
import sys

import click
import psycopg

from harvest.errors import HarvestError, from_database_error

# The application_name of every connection a command opens (libpq reads PGAPPNAME):
# the audit log records operator actions made through the CLI with source cli.
CLI_APPLICATION_NAME = "harvest-cli"


class HarvestGroup(click.Group):
    """Turn every Harvest error into one line on stderr and its exit code; no traceback."""

    def invoke(self, ctx: click.Context):
        previous = os.environ.get("PGAPPNAME")
        os.environ["PGAPPNAME"] = previous or CLI_APPLICATION_NAME
        try:
            return super().invoke(ctx)
        except HarvestError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except psycopg.Error as exc:
            # A database error the SQL API has no class for: still one line, never a traceback.
            mapped = from_database_error(exc)
            message = str(mapped) if mapped else (exc.diag.message_primary or str(exc)).strip().splitlines()[0]
            click.echo(f"error: {message}", err=True)
            sys.exit(mapped.exit_code if mapped else 1)
        finally:  # an in-process caller (a test) keeps its own environment
            if previous is None:
                os.environ.pop("PGAPPNAME", None)
            else:
                os.environ["PGAPPNAME"] = previous


@click.group(cls=HarvestGroup)
@click.version_option(package_name="harvest-workflows")
def main() -> None:
    """Harvest: durable workflows on Postgres."""


def _register() -> None:
    from harvest.cli import (
        audit,
        concurrency,
        dev,
        dlq,
        migrate,
        preflight,
        queues,
        replay,
        retention,
        worker,
        workers,
        workflow,
    )

    main.add_command(migrate.migrate)
    main.add_command(dev.dev)
    main.add_command(workers.worker_group(worker.worker))
    main.add_command(workflow.workflow)
    main.add_command(workflow.history_group)
    main.add_command(dlq.dlq)
    main.add_command(retention.retention)
    main.add_command(preflight.preflight)
    main.add_command(replay.replay)
    main.add_command(replay.version_usage)
    main.add_command(concurrency.concurrency)
    main.add_command(queues.queue)
    main.add_command(audit.audit)


_register()
