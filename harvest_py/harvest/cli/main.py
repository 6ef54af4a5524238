"""The root `harvest` group and the one place errors become exit codes."""

from __future__ import annotations

import sys

import click

from harvest.errors import HarvestError


class HarvestGroup(click.Group):
    """Turn every Harvest error into one line on stderr and its exit code; no traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except HarvestError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=HarvestGroup)
@click.version_option(package_name="harvest-workflows")
def main() -> None:
    """Harvest: durable workflows on Postgres."""


def _register() -> None:
    from harvest.cli import dev, migrate, worker, workflow

    main.add_command(migrate.migrate)
    main.add_command(dev.dev)
    main.add_command(worker.worker)
    main.add_command(workflow.workflow)


_register()
