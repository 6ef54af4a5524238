"""The root `harvest` group and the one place errors become exit codes."""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, cast

import click

from harvest.cli.output import scrub
from harvest.core.errors import HarvestError
from harvest.db.connection import DatabaseError, database_error_message

# The application_name of every connection a command opens (libpq reads PGAPPNAME):
# the audit log records operator actions made through the CLI with source cli.
CLI_APPLICATION_NAME = "harvest-cli"


_OWN_CONFIG_PATH_KEY = "harvest.own_config_path"


def _own_config_path(ctx: click.Context) -> str | None:
    """The --config option given to the subcommand this invocation runs, if it has one.

    The arguments left after the root's own options are parsed the way the subcommands
    will parse them, leniently (no error, no callback, nothing run); any doubt returns
    None and the real parse reports what is wrong.
    """
    protected = ctx._protected_args if hasattr(ctx, "_protected_args") else ctx.protected_args
    command: click.Command | None
    args, command, parent = [*protected, *ctx.args], ctx.command, ctx
    try:
        while isinstance(command, click.Group) and args:
            name, command, args = command.resolve_command(parent, list(args))
            if command is None:
                return None
            parent = command.make_context(name, list(args), parent=parent, resilient_parsing=True)
            if parent.params.get("config_path") is not None:
                return cast("str", parent.params["config_path"])
            protected = (
                parent._protected_args if hasattr(parent, "_protected_args") else parent.protected_args
            )
            args = [*protected, *parent.args]
    except (click.ClickException, click.exceptions.Exit):
        return None
    return None


class HarvestGroup(click.Group):
    """Turn every Harvest error into one line on stderr and its exit code; no traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        previous = os.environ.get("PGAPPNAME")
        os.environ["PGAPPNAME"] = previous or CLI_APPLICATION_NAME
        # The invoked subcommand's own --config (`harvest worker --config x.toml app:app`) is
        # the config file of this invocation: found before the root callback loads it.
        ctx.meta[_OWN_CONFIG_PATH_KEY] = _own_config_path(ctx)
        try:
            return super().invoke(ctx)
        except HarvestError as exc:
            click.echo(f"error: {scrub(str(exc))}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.NoArgsIsHelpError:
            raise  # `harvest workflow` alone prints its help, as before
        except click.UsageError as exc:
            # A bad option value (--page-size 99999999999, --log-level verbose, ...): one line too.
            where = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
            click.echo(f"error: {exc.format_message()}{where}", err=True)
            sys.exit(exc.exit_code)
        except DatabaseError as exc:
            # A database error the SQL API has no class for: still one line, never a traceback.
            message, exit_code = database_error_message(exc)
            click.echo(f"error: {scrub(message)}", err=True)
            sys.exit(exit_code)
        finally:  # an in-process caller (a test) keeps its own environment
            if previous is None:
                os.environ.pop("PGAPPNAME", None)
            else:
                os.environ["PGAPPNAME"] = previous


@click.group(cls=HarvestGroup)
@click.version_option(package_name="harvest-workflows")
@click.option(
    "--config",
    "config_path",
    default=None,
    help="The config file for every command (default: HARVEST_CONFIG, else ./harvest.toml if present).",
)
@click.option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default=None,
    help="table or json for every command that prints one (a command's own --output wins).",
)
@click.option(
    "--base-url",
    default=None,
    help="Speak to the management API at this URL instead of the database (default: HARVEST_URL; "
    "a command with no route needs a DSN). See docs/operations.md.",
)
@click.option(
    "--token",
    default=None,
    help="The API token sent as a bearer token over HTTP. Prefer HARVEST_TOKEN: a command line is "
    "visible to ps.",
)
@click.option(
    "--http-timeout-secs",
    default=None,
    type=click.FloatRange(1, 3600),
    help="Seconds an HTTP request may take (default: HARVEST_HTTP_TIMEOUT_SECS, else 30).",
)
@click.pass_context
def main(
    ctx: click.Context,
    config_path: str | None,
    output: str | None,
    base_url: str | None,
    token: str | None,
    http_timeout_secs: float | None,
) -> None:
    """Harvest: durable workflows on Postgres.

    Operator commands speak SQL (a DSN: HARVEST_DATABASE_URL, --database-url) or HTTP to the
    management API (--base-url or HARVEST_URL, with --token or HARVEST_TOKEN)."""
    from harvest.cli.http import HTTP_KEY
    from harvest.cli.output import CONFIG_PATH_KEY, GLOBAL_OUTPUT_KEY, RootOptions

    # A subcommand's own --config wins over this one: one file is read per invocation.
    ctx.meta[CONFIG_PATH_KEY] = ctx.meta.get(_OWN_CONFIG_PATH_KEY) or config_path
    ctx.meta[GLOBAL_OUTPUT_KEY] = output
    ctx.meta[HTTP_KEY] = RootOptions(base_url, token, http_timeout_secs)
    # The configuration is not read here: this callback runs before the subcommand's own
    # arguments are parsed, so `harvest worker --help` would need a valid ./harvest.toml.
    # Each command reads it as it starts (_reads_config_first).


def _reads_config_first(command: click.Command) -> None:
    """Every command reads the same configuration before it runs, once its arguments (and
    --help) are parsed: a bad key in harvest.toml or a misspelled HARVEST_* variable stops
    `workflow list` exactly as it stops `harvest worker`, and never stops a --help."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _reads_config_first(sub)
        return
    callback = command.callback
    if callback is None or getattr(callback, "_harvest_reads_config", False):
        return

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        from harvest.cli.output import cli_config, refuse_dsn_only

        refuse_dsn_only()  # --base-url given to a command that has no route
        if kwargs.get("config_path") is None:  # a command's own --config: it reads that file
            cli_config()
        return callback(*args, **kwargs)

    run._harvest_reads_config = True  # type: ignore[attr-defined]  # a mark on the function object
    command.callback = run


def _register() -> None:
    from harvest.cli import (
        activity,
        audit,
        backup,
        concurrency,
        dag,
        dev,
        dlq,
        events,
        export_batch,
        health,
        metrics,
        migrate,
        owner_mode,
        preflight,
        queues,
        rebalance,
        replay,
        retention,
        schedule,
        serve,
        shard,
        throttle,
        token,
        usage,
        worker,
        workers,
        workflow,
    )

    main.add_command(migrate.migrate)
    main.add_command(dev.dev)
    main.add_command(serve.serve)
    main.add_command(workers.worker_group(worker.worker))
    main.add_command(workflow.workflow)
    main.add_command(workflow.history_group)
    workflow.history_group.add_command(export_batch.export_batch)
    main.add_command(dlq.dlq)
    main.add_command(dag.dag)
    main.add_command(retention.retention)
    main.add_command(preflight.preflight)
    main.add_command(health.health)
    main.add_command(replay.replay)
    main.add_command(replay.version_usage)
    main.add_command(concurrency.concurrency)
    main.add_command(queues.queue)
    main.add_command(audit.audit)
    main.add_command(shard.shard)
    shard.shard.add_command(rebalance.rebalance)
    shard.shard.add_command(rebalance.rebalance_resume)
    shard.shard.add_command(owner_mode.owner_mode)
    main.add_command(usage.usage)
    main.add_command(schedule.schedule)
    main.add_command(token.token)
    main.add_command(events.events)
    main.add_command(activity.activity)
    main.add_command(throttle.throttle)
    main.add_command(metrics.metrics)
    main.add_command(backup.backup)
    _reads_config_first(main)


_register()
