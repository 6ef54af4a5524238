"""The root `harvest` group and the one place errors become exit codes."""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, NoReturn, cast

import click

# (the application_name of every connection a command opens: harvest.cli.appname)
from harvest.cli.appname import CLI_APPLICATION_NAME, DEFAULT_APPLICATION_NAME_KEY
from harvest.core.errors import HarvestError

# This module is all `harvest --help` imports (besides click and harvest.core.errors): each
# command's module, and what it needs (the database driver, the config, the web server, the
# worker), is imported when that command is resolved. tests/unit/test_cli_lazy.py holds it.


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


class LazyCommand(NamedTuple):
    """A root command known by name before its module is imported."""

    load: Callable[[], click.Command]  # imports the command's module(s), returns the command
    help: str  # its one-line help in `harvest --help` (the command's own, checked by a test)


def _usage_error(exc: click.UsageError) -> NoReturn:
    """A bad option value (--page-size 99999999999, --log-level verbose, ...): one line too."""
    where = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
    click.echo(f"error: {exc.format_message()}{where}", err=True)
    sys.exit(exc.exit_code)


# The exit status when the reader of stdout went away before the output was written (`harvest
# workflow list | head -1`): 141, what a shell reports for a tool SIGPIPE ended (128 + 13), as
# `cat big | head -1` gives. Not 0: the output was not all delivered, and a script with
# `set -o pipefail` should see so, as it does for any other tool; not 1, which says the command
# itself failed (a database error, a refusal), nor 2, a usage error.
EXIT_STDOUT_CLOSED = 141


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (its write end polls POLLERR then)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # (no fileno: a test's captured stream)
        return False


def _end_on_closed_stdout(exc: BrokenPipeError) -> NoReturn:
    """The reader of stdout went away (`harvest preflight | head -1`): stop quietly with
    EXIT_STDOUT_CLOSED, no traceback, and stdout pointed at /dev/null so that the interpreter's
    last flush of what is still buffered raises nothing ("Exception ignored ... BrokenPipeError").
    A broken pipe that is not stdout's (a socket) is raised on as any other error."""
    if not _stdout_closed():
        raise exc
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass
    sys.exit(EXIT_STDOUT_CLOSED)


class HarvestGroup(click.Group):
    """Turn every Harvest error into one line on stderr and its exit code; no traceback.

    Commands in `lazy` are imported the first time they are resolved (run, --help, a
    completion); `harvest --help` lists them from their registered one-line help."""

    lazy: Mapping[str, LazyCommand] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            command = self.lazy[cmd_name].load()
            _reads_config_first(command)
            self.commands[cmd_name] = command
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:
            # "Did you mean ...?" from every command's name, not only the ones imported so far
            raise click.exceptions.NoSuchCommand(
                exc.command_name, possibilities=self.list_commands(ctx), ctx=exc.ctx
            ) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own listing, with a stand-in carrying the registered help for each command
        # not imported yet (its short help is made from that help exactly as from the real one).
        shown = click.Group(self.name)
        for name in self.list_commands(ctx):
            command = self.commands.get(name) or click.Command(name, help=self.lazy[name].help)
            shown.add_command(command, name)
        click.Group.format_commands(shown, ctx, formatter)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # The group's own options (`harvest --log-level verbose ...`) are parsed before invoke:
        # a bad one is the same one line as a subcommand's, not click's usage block.
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            _usage_error(exc)
        except BrokenPipeError as exc:  # `harvest --help | head -1`, `--version`
            _end_on_closed_stdout(exc)

    def invoke(self, ctx: click.Context) -> Any:
        previous = os.environ.get("PGAPPNAME")
        os.environ["PGAPPNAME"] = previous or CLI_APPLICATION_NAME
        ctx.meta[DEFAULT_APPLICATION_NAME_KEY] = not previous
        # The invoked subcommand's own --config (`harvest worker --config x.toml app:app`) is
        # the config file of this invocation: found before the root callback loads it.
        ctx.meta[_OWN_CONFIG_PATH_KEY] = _own_config_path(ctx)
        try:
            done = super().invoke(ctx)
            if sys.stdout is not None:  # (None: started with no stdout at all, `>&-`)
                sys.stdout.flush()  # (what is still buffered fails here, not at the interpreter's exit)
            return done
        except BrokenPipeError as exc:  # the reader of stdout went away: every command, once
            _end_on_closed_stdout(exc)
        except HarvestError as exc:
            from harvest.cli.output import echo_error

            echo_error(exc)
            sys.exit(exc.exit_code)
        except click.exceptions.NoArgsIsHelpError:
            raise  # `harvest workflow` alone prints its help, as before
        except click.UsageError as exc:
            _usage_error(exc)
        except Exception as exc:
            # A database error the SQL API has no class for: still one line, never a traceback.
            # The driver is imported here, not above: a command that raised one has loaded it.
            if "psycopg" not in sys.modules:
                raise
            from harvest.db.connection import DatabaseError, database_error_message

            if not isinstance(exc, DatabaseError):
                raise
            from harvest.cli.output import scrub

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
@click.option(
    "--log-level",
    default=None,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
    help="Log every record at this level and above on stderr, the libraries' too (the database "
    "pool's reconnect attempts, HTTP requests). Default: only Harvest's own warnings. "
    "`worker`, `serve` and `dev` take their own --log-level.",
)
@click.pass_context
def main(
    ctx: click.Context,
    config_path: str | None,
    output: str | None,
    base_url: str | None,
    token: str | None,
    http_timeout_secs: float | None,
    log_level: str | None,
) -> None:
    """Harvest: durable workflows on Postgres.

    Operator commands speak SQL (a DSN: HARVEST_DATABASE_URL, --database-url) or HTTP to the
    management API (--base-url or HARVEST_URL, with --token or HARVEST_TOKEN)."""
    _configure_logging(log_level)
    from harvest.cli.http import HTTP_KEY
    from harvest.cli.output import CONFIG_PATH_KEY, GLOBAL_OUTPUT_KEY, RootOptions

    # A subcommand's own --config wins over this one: one file is read per invocation.
    ctx.meta[CONFIG_PATH_KEY] = ctx.meta.get(_OWN_CONFIG_PATH_KEY) or config_path
    ctx.meta[GLOBAL_OUTPUT_KEY] = output
    ctx.meta[HTTP_KEY] = RootOptions(base_url, token, http_timeout_secs)
    # The configuration is not read here: this callback runs before the subcommand's own
    # arguments are parsed, so `harvest worker --help` would need a valid ./harvest.toml.
    # Each command reads it as it starts (_reads_config_first).


class _HarvestWarningsOnly(logging.Handler):
    """Harvest's own warnings and errors on stderr, as logging's last resort writes them (the
    message alone); a library's records nowhere. Without it a partial read's one warning line
    came after psycopg_pool's reconnect attempts to the shard that is down, two lines each."""

    def emit(self, record: logging.LogRecord) -> None:
        if (
            record.name == "harvest" or record.name.startswith("harvest.")
        ) and logging.lastResort is not None:
            logging.lastResort.handle(record)


def _configure_logging(level: str | None) -> None:
    """The CLI's logging: ``--log-level`` logs everything at that level on stderr (the worker's
    format); without it, only Harvest's own warnings reach stderr. A process that configured
    logging before (a program calling ``main``, a test) keeps its handlers."""
    if level is not None:
        from harvest.telemetry.logs import configure_logging

        configure_logging(level)
        return
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(_HarvestWarningsOnly())


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


def load_commands() -> None:
    """Import every command now (a process that forks commands, like the tests' CLI zygote,
    imports them once instead of in each fork)."""
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        main.get_command(ctx, name)


def _command(module: str, name: str) -> Callable[[], click.Command]:
    def load() -> click.Command:
        return cast("click.Command", getattr(importlib.import_module(module), name))

    return load


def _worker() -> click.Command:
    from harvest.cli import worker, workers

    return workers.worker_group(worker.worker)


def _history() -> click.Command:
    from harvest.cli import export_batch, workflow

    workflow.history_group.add_command(export_batch.export_batch)
    return workflow.history_group


def _workflow() -> click.Command:
    from harvest.cli import workflow, workflow_batch

    for command in workflow_batch.COMMANDS:
        workflow.workflow.add_command(command)
    return workflow.workflow


def _shard() -> click.Command:
    from harvest.cli import owner_mode, rebalance, shard

    shard.shard.add_command(rebalance.rebalance)
    shard.shard.add_command(rebalance.rebalance_resume)
    shard.shard.add_command(owner_mode.owner_mode)
    return shard.shard


# Every root command: how to import it and its line in `harvest --help`. A new command is
# one entry here (tests/unit/test_cli_lazy.py checks each help line against the command's).
COMMANDS: dict[str, LazyCommand] = {
    "activity": LazyCommand(
        _command("harvest.cli.activity", "activity"), "Finish activities completed elsewhere, by task token."
    ),
    "audit": LazyCommand(
        _command("harvest.cli.audit", "audit"),
        "Who did what to the engine, when, and through which face (api, cli, ui).",
    ),
    "backup": LazyCommand(
        _command("harvest.cli.backup", "backup"), "Backup drills (DSN-only: they need no running app)."
    ),
    "concurrency": LazyCommand(
        _command("harvest.cli.concurrency", "concurrency"),
        "Concurrency keys: their limit, what runs and what waits.",
    ),
    "dag": LazyCommand(
        _command("harvest.cli.dag", "dag"),
        "DAGs: list, trigger, pause, and their runs with each task's state.",
    ),
    "dev": LazyCommand(
        _command("harvest.cli.dev", "dev"),
        "Run a worker and the management API on an embedded PostgreSQL "
        "(or HARVEST_DEV_DATABASE_URL, local only).",
    ),
    "dlq": LazyCommand(
        _command("harvest.cli.dlq", "dlq"), "Dead letters: activity invocations that exhausted their retries."
    ),
    "events": LazyCommand(_command("harvest.cli.events", "events"), "Follow the event stream."),
    "health": LazyCommand(
        _command("harvest.cli.health", "health"),
        "Ask the management API whether it is ready (--base-url or HARVEST_URL).",
    ),
    "history": LazyCommand(_history, "Export execution histories."),
    "metrics": LazyCommand(
        _command("harvest.cli.metrics", "metrics"),
        "Print the sampled gauges of every shard as Prometheus text.",
    ),
    "migrate": LazyCommand(
        _command("harvest.cli.migrate", "migrate"), "Apply and inspect Harvest's schema migrations."
    ),
    "preflight": LazyCommand(_command("harvest.cli.preflight", "preflight"), "Read-only deploy gate."),
    "queue": LazyCommand(
        _command("harvest.cli.queues", "queue"), "Task queues: which declared queue a live worker polls."
    ),
    "replay": LazyCommand(
        _command("harvest.cli.replay", "replay"),
        "Replay an exported history against the current code; exit 0 on success, 1 on divergence.",
    ),
    "retention": LazyCommand(
        _command("harvest.cli.retention", "retention"),
        "Delete terminal executions older than the configured age.",
    ),
    "schedule": LazyCommand(
        _command("harvest.cli.schedule", "schedule"),
        "Workflows started on a cron or an interval (docs/schedules.md).",
    ),
    "rate-limit": LazyCommand(
        _command("harvest.cli.rate_limit", "rate_limit"),
        "An activity's rate limit and its pacing override, on every shard.",
    ),
    "search-attr": LazyCommand(
        _command("harvest.cli.search_attr", "search_attr"),
        "Index a search attribute for range tests, drop its index, list them (the schema owner).",
    ),
    "serve": LazyCommand(
        _command("harvest.cli.serve", "serve"),
        "Serve the management API (mounted at /api/harvest) as the web process role.",
    ),
    "shard": LazyCommand(
        _shard, "Shards: health and readiness, rebalancing, owner mode, owed child ends (docs/sharding.md)."
    ),
    "start-gate": LazyCommand(
        _command("harvest.cli.start_gate", "start_gate"),
        "Starts held back by a throttle, debounce or batch: list them, discard them.",
    ),
    "throttle": LazyCommand(
        _command("harvest.cli.throttle", "throttle"),
        "A workflow's start throttle and its pacing override, on every shard.",
    ),
    "token": LazyCommand(
        _command("harvest.cli.token", "token"),
        "API tokens for the HTTP management API: read, operate or admin.",
    ),
    "usage": LazyCommand(
        _command("harvest.cli.usage", "usage"),
        "What each workflow type or tenant consumed over a window, summed over every shard.",
    ),
    "version-usage": LazyCommand(
        _command("harvest.cli.replay", "version_usage"),
        "Which recorded versions of a ctx.version() gate are still in use (read-only).",
    ),
    "worker": LazyCommand(
        _worker,
        "Run a worker (`harvest worker module:app [OPTIONS]`, see `harvest worker run --help`), "
        "or inspect and drain the fleet.",
    ),
    "workflow": LazyCommand(_workflow, "Start workflows and inspect executions."),
}
main.lazy = COMMANDS
