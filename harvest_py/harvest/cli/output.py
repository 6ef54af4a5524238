"""Rendering for operator commands: a readable table by default, JSON for scripts,
a shared connection helper and a progress bar for bulk operations."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import click
from click.decorators import FC

from harvest.config import Config, database_url, load_config
from harvest.db.connection import connect
from harvest.db.sqlapi import SqlApi, translated_errors

OUTPUT_CHOICES = click.Choice(["table", "json"])
# Bounded numbers: an unbounded int reached the database as a numeric with no matching
# function ("function ... does not exist"), so every count, id and timeout has its range here.
ROW_ID = click.IntRange(1, 2**63 - 1)
PAGE = click.IntRange(1, 1000)
WAIT_SECS = click.FloatRange(0, 86_400, min_open=True)
# ctx.meta keys the root `harvest` group sets (ctx.meta is shared by every nested context).
CONFIG_PATH_KEY = "harvest.config_path"
CONFIG_KEY = "harvest.config"
GLOBAL_OUTPUT_KEY = "harvest.output"


def scrub(text: str) -> str:
    """An error line without any password: the DSNs this command could have used (flag or
    environment) are known here, so their passwords go whatever form libpq echoed them in."""
    import os
    import sys

    from harvest.db.connection import DSN_ENV, redact

    dsns = [os.environ.get(DSN_ENV), os.environ.get("HARVEST_DEV_DATABASE_URL")]
    argv = sys.argv[1:]
    for i, arg in enumerate(argv):
        if arg == "--database-url" and i + 1 < len(argv):
            dsns.append(argv[i + 1])
        elif arg.startswith("--database-url="):
            dsns.append(arg.split("=", 1)[1])
    # The config file is a DSN source too (database_url in harvest.toml); a broken config
    # must not hide the error being printed, so its own failure is ignored here.
    with contextlib.suppress(Exception):
        dsns.append(cli_config().get("database_url"))
    for dsn in dsns:
        text = redact(text, dsn)
    return redact(text)


class AliasedOption(click.Option):
    """An option whose first name is the one --help shows; the later names are old spellings,
    still accepted but no longer advertised (CONTRIBUTING.md "Names")."""

    def get_help_record(self, ctx: click.Context):
        shown, self.opts = self.opts, self.opts[:1]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def hidden_alias(group: click.Group, command: click.Command, old_name: str) -> None:
    """Keep COMMAND reachable under its old name, left out of the group's --help."""
    alias = copy.copy(command)
    alias.name, alias.hidden = old_name, True
    group.add_command(alias)


def operator_id_option(f: FC) -> FC:
    return click.option(
        "--operator-id",
        "--operator",
        "operator",
        cls=AliasedOption,
        default=None,
        help="Who you are, for the audit log.",
    )(f)


def database_url_option(f: FC) -> FC:
    return click.option(
        "--database-url",
        default=None,
        help="Database DSN. Prefer HARVEST_DATABASE_URL: a command line is visible to ps.",
    )(f)


def _global_output(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """`harvest --output json CMD` (the spec's form) counts unless CMD's own --output is given."""
    if ctx.get_parameter_source(param.name) is click.core.ParameterSource.DEFAULT:
        return ctx.meta.get(GLOBAL_OUTPUT_KEY) or value
    return value


def output_option(f: FC) -> FC:
    return click.option(
        "--output",
        "-o",
        type=OUTPUT_CHOICES,
        default="table",
        show_default=True,
        callback=_global_output,
        help="table for people, json for scripts (also accepted before the command: "
        "harvest --output json CMD).",
    )(f)


def cli_config() -> Config:
    """The one configuration every command reads (harvest.toml + HARVEST_*, see harvest/config/config.py),
    loaded once per invocation; an unknown key or variable stops any command the same way."""
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    if CONFIG_KEY not in meta:
        meta[CONFIG_KEY] = load_config(meta.get(CONFIG_PATH_KEY))
    return meta[CONFIG_KEY]


def cli_dsn(explicit: str | None) -> str:
    """--database-url, else HARVEST_DATABASE_URL, else database_url in the config file."""
    return database_url(explicit, cli_config())


@contextlib.contextmanager
def sql_api(database_url: str | None, *, read_only: bool) -> Iterator[SqlApi]:
    """A SqlApi on one autocommit connection; read-only commands cannot write by accident."""
    conn = connect(cli_dsn(database_url), autocommit=True)
    try:
        if read_only:
            conn.execute("SET default_transaction_read_only = on")
        with translated_errors():
            yield SqlApi(conn)
    finally:
        conn.close()


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, list | tuple):
        return ",".join(_cell(v) for v in value) if value else "-"
    if isinstance(value, dict):
        return json.dumps(value, default=str, separators=(",", ":"))
    return str(value)


def to_json(data: Any) -> str:
    return json.dumps(data, default=str)


def table(
    rows: Sequence[dict[str, Any]], columns: Sequence[str], headers: Sequence[str] | None = None
) -> str:
    headers = [h.upper() for h in (headers or columns)]
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for r in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def mapping(data: dict[str, Any], keys: Sequence[str] | None = None) -> str:
    keys = list(keys or data.keys())
    width = max((len(k) for k in keys), default=0)
    return "\n".join(f"{k.ljust(width)}  {_cell(data.get(k))}" for k in keys)


def emit(data: Any, output: str, render) -> None:
    """JSON as-is for --output json; otherwise the render(data) text."""
    if output == "json":
        click.echo(to_json(data))
    else:
        click.echo(render(data))


@contextlib.contextmanager
def progress(total: int, label: str, enabled: bool = True) -> Iterator[Any]:
    """A progress bar on stderr (JSON on stdout stays clean)."""
    if not enabled:

        class _Null:
            def update(self, n: int) -> None:
                pass

        yield _Null()
        return
    with click.progressbar(
        length=max(total, 1), label=label, file=click.get_text_stream("stderr"), show_pos=True
    ) as bar:
        yield bar
