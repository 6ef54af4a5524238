"""Rendering for operator commands: a readable table by default, JSON for scripts,
a shared connection helper and a progress bar for bulk operations."""

from __future__ import annotations

import contextlib
import copy
import errno
import json
import os
import re
import select
import stat
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import click
from click.decorators import FC

from harvest.cli.http import (
    DEFAULT_TIMEOUT_SECS,
    HTTP_KEY,
    TIMEOUT_ENV,
    TOKEN_ENV,
    URL_ENV,
    HttpSettings,
    default_base_url,
)
from harvest.config import Config, database_url, load_config
from harvest.core.errors import ConfigError, HarvestError, InvalidArgument, with_lookup_hint
from harvest.core.ids import MAX_SHARD, ROW_ID_MAX
from harvest.core.json_values import json_default
from harvest.core.secret_files import env_secret
from harvest.core.text import escape_controls

OUTPUT_CHOICES = click.Choice(["table", "json"])
# Bounded numbers: an unbounded int reached the database as a numeric with no matching
# function ("function ... does not exist"), so every count, id and timeout has its range here.
ROW_ID = click.IntRange(1, ROW_ID_MAX)
PAGE = click.IntRange(1, 1000)
WAIT_SECS = click.FloatRange(0, 86_400, min_open=True)


if TYPE_CHECKING:
    from harvest.db.sqlapi import SqlApi

if TYPE_CHECKING:  # click's ParamType is generic from 8.4 on; the floor (pyproject) is 8.1
    _DateTimeParam = click.ParamType[datetime]
    _TextParam = click.ParamType[str]
else:
    _DateTimeParam = _TextParam = click.ParamType


class IsoTime(_DateTimeParam):
    """A time option, in any ISO 8601 spelling ``datetime.fromisoformat`` reads: a date (UTC
    midnight), minutes with or without seconds and fractions, ``Z`` or an offset; a time with no
    offset is UTC; the value is in UTC. One type for every time option: the CLI had four lists
    of strptime formats, so ``2026-01-31T09:30`` was refused by some commands and taken by
    others."""

    name = "iso_time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            parsed = value
        else:
            try:
                parsed = datetime.fromisoformat(str(value).strip())
            except ValueError:
                self.fail(
                    f"{value!r} is not an ISO 8601 time: give e.g. 2026-01-31, 2026-01-31T09:30, "
                    "2026-01-31T09:30:00Z or 2026-01-31T09:30:00+02:00 (no offset: UTC)",
                    param,
                    ctx,
                )
        # In UTC: one instant is one text (a list's cursor compares its filters as text).
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


ISO_TIME = IsoTime()


class Interval(_TextParam):
    """An age the database reads as a PostgreSQL interval ('30 days'), ``off`` too where it
    turns the setting off. One type for every such option, so a value it cannot be is refused
    naming the option (exit 2), where the database's words named none."""

    name = "interval"

    def __init__(self, off: bool = False):
        self.off = off

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from harvest.core.durations import interval_problem

        text = str(value)
        if self.off and text.strip().lower() in ("off", "none", ""):  # (sqlapi._age_or_off)
            return text
        problem = interval_problem(text)
        if problem is not None:
            self.fail(problem + ("; off keeps everything" if self.off else ""), param, ctx)
        return text


INTERVAL = Interval()
INTERVAL_OR_OFF = Interval(off=True)


def non_empty_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A name option (``callback=``) given empty is refused at the edge, in the management API's
    words for an empty query parameter: over SQL an empty filter matched nothing (no output,
    exit 0), over HTTP it was a 400 (exit 2)."""
    if value == "":
        raise click.BadParameter("is empty: pass a non-empty value, or leave it out")
    return value


def execution_id_argument(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """An execution id argument, checked at the edge (``callback=``): a workflow id given in its
    place (the usual slip) reached one database as text, refused in PostgreSQL's words
    ("invalid input syntax for type uuid"), but in Harvest's over HTTP and over [shards]."""
    if not value.strip():
        raise click.BadParameter("an empty name or id names nothing: give one")  # as cli/http.py's
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an execution id (a UUID); `harvest workflow list` shows each "
            "run's execution id beside its workflow id"
        ) from None
    # Its canonical form, as the routes read a path's id: uuid.UUID takes spellings PostgreSQL
    # refuses (urn:uuid:...), and the output names the run as every other command does.
    return str(parsed)


def execution_ids_option(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    """A repeatable execution id option (``multiple=True``), each checked as
    :func:`execution_id_argument` checks one."""
    return tuple(execution_id_argument(ctx, param, v) for v in value)


# ctx.meta keys the root `harvest` group sets (ctx.meta is shared by every nested context).
CONFIG_PATH_KEY = "harvest.config_path"
CONFIG_KEY = "harvest.config"
GLOBAL_OUTPUT_KEY = "harvest.output"


def scrub(text: str) -> str:
    """An error line without any password: the DSNs this command could have used (flag or
    environment) are known here, so their passwords go whatever form libpq echoed them in."""
    import os
    import sys

    from harvest.core.secret_files import env_secret_or_none
    from harvest.db.connection import DSN_ENV, redact

    # (each from its variable or from the file its _FILE variable names)
    dsns = [env_secret_or_none(DSN_ENV), env_secret_or_none("HARVEST_DEV_DATABASE_URL")]
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
    # The API token (--token, HARVEST_TOKEN) never shows either.
    tokens = [env_secret_or_none("HARVEST_TOKEN")]
    for i, arg in enumerate(argv):
        if arg == "--token" and i + 1 < len(argv):
            tokens.append(argv[i + 1])
        elif arg.startswith("--token="):
            tokens.append(arg.split("=", 1)[1])
    ctx = click.get_current_context(silent=True)
    options = ctx.meta.get("harvest.http") if ctx is not None else None
    tokens.append(getattr(options, "token", None))
    for token in tokens:
        if token and len(token) >= 4:
            text = text.replace(token, "***")
    # The management API's URL may carry HTTP credentials (user:password@, sent as basic auth):
    # its password goes as a DSN's does, whatever it holds (a space, a quote).
    text = redact(text, getattr(options, "base_url", None) or os.environ.get("HARVEST_URL"))
    return redact(text)


def echo_error(exc: HarvestError, lead: str = "error: ") -> None:
    """A Harvest error on stderr: its one line after ``lead``, then what it has to show after
    the line (:attr:`HarvestError.trailer`: a user module's traceback), both scrubbed."""
    # (a lookup by workflow id said as this CLI's command, over SQL and over HTTP alike)
    line = with_lookup_hint(str(exc), lambda given: f"harvest workflow current {given}")
    click.echo(f"{lead}{escape_controls(scrub(line))}", err=True)
    if exc.trailer:
        click.echo(scrub(exc.trailer), err=True, nl=False)


class AliasedOption(click.Option):
    """An option whose first name is the one --help shows; the later names are old spellings,
    still accepted but no longer advertised (CONTRIBUTING.md "Names")."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
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


# A shard number's type (core.ids.MAX_SHARD: two bytes of an execution id), for every option
# and argument that takes one.
SHARD_NUMBER = click.IntRange(0, MAX_SHARD)


def operator_id_option(f: FC) -> FC:
    return click.option(
        "--operator-id",
        "--operator",
        "operator",
        cls=AliasedOption,
        default=None,
        help="Who you are, for the audit log.",
    )(f)


def signal_reapply_option(f: FC) -> FC:
    """A reset's --signal-reapply (`workflow reset`, `workflow bulk-reset`)."""
    return click.option(
        "--signal-reapply",
        type=click.Choice(["drop", "buffer"]),
        default="drop",
        show_default=True,
        help="Signals received after the reset point: drop them, or carry them into the fork.",
    )(f)


def database_url_option(f: FC) -> FC:
    return click.option(
        "--database-url",
        default=None,
        help="Database DSN. Prefer HARVEST_DATABASE_URL: a command line is visible to ps.",
    )(f)


def log_format_option(f: FC) -> FC:
    """The log lines of a long-running command (`harvest worker`, `dev`, `serve`)."""
    return click.option(
        "--log-format",
        default="text",
        show_default=True,
        type=click.Choice(["text", "json"]),
        help="json: one object per line, with execution_id, workflow, activity, attempt and trace_id on "
        "the lines of workflow and activity code (docs/observability.md).",
    )(f)


def health_options(whose: str) -> Callable[[FC], FC]:
    """``--health-port`` and ``--health-host``: the worker's probes (harvest/worker/probes.py) of
    a process that runs one (`harvest worker`, `harvest serve`); ``whose``: which worker."""

    def add(f: FC) -> FC:
        f = click.option(
            "--health-host",
            default="127.0.0.1",
            show_default=True,
            help="The address --health-port binds (0.0.0.0: every interface, for the kubelet's probes).",
        )(f)
        return click.option(
            "--health-port",
            default=None,
            type=click.IntRange(1, 65535),
            help=f"Serve the liveness and readiness probes of {whose} on http://HOST:PORT/health/live "
            "and /health/ready (docs/operations.md, Kubernetes).",
        )(f)

    return add


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
    return cast("Config", meta[CONFIG_KEY])


def cli_dsn(explicit: str | None) -> str:
    """--database-url, else HARVEST_DATABASE_URL, else database_url in the config file."""
    return database_url(explicit, cli_config())


@contextlib.contextmanager
def sql_api(database_url: str | None, *, read_only: bool) -> Iterator[SqlApi]:
    """A SqlApi on one autocommit connection; read-only commands cannot write by accident.
    Over HTTP (harvest/cli/http.py): the same calls as requests to the management API."""
    from harvest.cli.http import HttpApi, http_session
    from harvest.db.connection import connect  # (the driver: not for a command's --help)
    from harvest.db.connection import read_only as set_read_only
    from harvest.db.sqlapi import SqlApi, translated_errors

    settings = selected(database_url)
    if settings is not None:
        with http_session(settings) as http:
            yield HttpApi(http)  # type: ignore[misc]
        return
    dsn = cli_dsn(database_url)
    conn = connect(dsn, autocommit=True)
    try:
        if read_only:
            set_read_only(conn, dsn)
        with translated_errors():
            yield SqlApi(conn)
    finally:
        conn.close()


# An ISO 8601 time as json_default writes it (a row's time read back from the API's JSON).
_ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return (value.astimezone(UTC) if value.tzinfo else value).isoformat(timespec="seconds")
    if isinstance(value, str) and _ISO_TIME.fullmatch(value):
        return value[:19] + value[value.index("T") + 9 :].lstrip("0123456789.")  # to the second
    if isinstance(value, list | tuple):
        return ",".join(_cell(v) for v in value) if value else "-"
    if isinstance(value, dict):
        return json.dumps(value, default=json_default, separators=(",", ":"))
    # A cell is data a user chose (an id, a name, an error): a newline in it would start a row
    # of its own, an escape sequence drive the operator's terminal.
    return escape_controls(str(value), newlines=False)


def to_json(data: Any) -> str:
    return json.dumps(data, default=json_default)


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


def emit(data: Any, output: str, render: Callable[[Any], str]) -> None:
    """JSON as-is for --output json; otherwise the render(data) text, its control characters
    but newline and tab printed escaped (a reason or a failure's message a caller wrote must not
    drive the terminal; a table's cells escape their newlines too)."""
    if output == "json":
        click.echo(to_json(data))
    else:
        click.echo(escape_controls(render(data)))


@contextlib.contextmanager
def output_file(path: str, private: bool = False) -> Iterator[Any]:
    """Where a command writes a file it was given (``-``: standard output). A regular file (or
    a new one) is written beside its target, under a name of its own, and put in its place only
    once everything is written and on disk, with the mode and owner of the file it replaces: a
    command that fails midway (the database or the server gone, an interrupt, a crash) leaves no
    truncated file and an earlier file of that name as it was. A new file gets the mode open()
    would give it, or 0600 when ``private`` (payloads in full: what the runs were given and
    answered). A symlink is followed (its target is replaced); what is not a regular file (a
    pipe, a device, ``/dev/fd/N``) is written as it is."""
    if path == "-":
        yield sys.stdout
        return
    target = os.path.realpath(path)
    try:
        existing: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        with open(path, "w") as out:
            yield out
        return
    fd, partial = tempfile.mkstemp(
        dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.", suffix=".partial"
    )
    try:
        with os.fdopen(fd, "w") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())  # (on disk before it replaces anything)
        if existing is not None:
            os.chmod(partial, stat.S_IMODE(existing.st_mode))
            with contextlib.suppress(PermissionError):  # (only a privileged user may give it away)
                os.chown(partial, existing.st_uid, existing.st_gid)
        elif not private:  # the mode open() would have given a new file (mkstemp's is 0600)
            umask = os.umask(0o022)
            os.umask(umask)
            os.chmod(partial, 0o666 & ~umask)
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(partial)
        raise


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
        length=max(total, 1),
        label=label,
        file=sys.stderr,  # read at the call: a CliRunner's stream in tests
        show_pos=True,
    ) as bar:
        yield bar


# -- the transport of a command: SQL (a DSN) or HTTP (the management API, harvest/cli/http.py) --
# Which one a command uses: docs/operations.md, "The CLI's two transports" (and http.py's docstring).

# The commands that have a route (`harvest <path>`): HARVEST_URL selects HTTP for these only.
HTTP_COMMANDS = frozenset(
    {
        "health",
        "preflight",
        "workflow list",
        "workflow count",
        "workflow get",
        "workflow current",
        "workflow start",
        "workflow result",
        "workflow history",
        "workflow stack",
        "workflow children",
        "workflow signal",
        "workflow query",
        "workflow update",
        "workflow cancel",
        "workflow terminate",
        "workflow pause",
        "workflow resume",
        "workflow reset",
        "workflow bulk-cancel",
        "workflow bulk-terminate",
        "workflow bulk-signal",
        "workflow bulk-pause",
        "workflow bulk-resume",
        "workflow legal-hold set",
        "workflow legal-hold release",
        "dlq list",
        "dlq get",
        "dlq count",
        "dlq aggregate",
        "dlq replay",
        "dlq discard",
        "dlq bulk-replay",
        "dlq bulk-discard",
        "dag list",
        "dag trigger",
        "dag pause",
        "dag unpause",
        "dag runs",
        "dag get",
        "dag retry",
        "worker list",
        "worker get",
        "worker health",
        "worker drain",
        "worker drain-preview",
        "concurrency status",
        "events tail",
        "throttle get",
        "throttle override",
        "throttle clear-override",
        "rate-limit get",
        "rate-limit override",
        "rate-limit clear-override",
        "workflow erase-payloads",
        "history export",
        "history export-batch",
        "version-usage",
        "queue coverage",
        "shard health",
        "shard release-owed-ends",
        "schedule list",
        "schedule get",
        "schedule create-workflow",
        "schedule update",
        "schedule delete",
        "schedule pause",
        "schedule resume",
        "schedule trigger",
        "schedule backfill",
        "retention status",
        "retention set",
        "retention run-now",
        "audit list",
        "audit prune",
        "usage",
        "start-gate list",
        "start-gate discard",
        "start-gate discard-many",
        "token list",
        "token create",
        "token revoke",
        "activity complete",
        "activity fail",
        "activity heartbeat",
    }
)


# Commands that read no database at all (an App, a file): --base-url changes nothing for them.
NO_DATABASE_COMMANDS = frozenset({"workflow handlers", "replay"})


@dataclass(frozen=True)
class RootOptions:
    """The root group's transport options as given (None: not given on the command line)."""

    base_url: str | None
    token: str | None
    timeout: float | None


def command_name(ctx: click.Context) -> str:
    """``workflow list`` for ``harvest workflow list`` (the path below the root)."""
    parts = []
    while ctx.parent is not None:
        parts.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(parts))


def _timeout(options: RootOptions) -> float:
    if options.timeout is not None:
        return options.timeout
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_TIMEOUT_SECS
    try:
        value = float(raw)
    except ValueError:
        raise InvalidArgument(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds (1..3600)") from None
    if not 1 <= value <= 3600:
        raise InvalidArgument(f"{TIMEOUT_ENV}={raw!r} is out of range 1..3600")
    return value


def selected(database_url: str | None = None) -> HttpSettings | None:
    """The HTTP settings when this command speaks HTTP, else None (the module docstring's order)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    options: RootOptions | None = ctx.meta.get(HTTP_KEY)
    if options is None:
        return None
    name = command_name(ctx)
    routed = name in HTTP_COMMANDS
    if options.base_url:
        if database_url:
            raise InvalidArgument("give --base-url (HTTP) or --database-url (SQL), not both")
        if not routed:
            raise ConfigError(
                f"`harvest {name}` has no HTTP route: it needs a database DSN "
                "(HARVEST_DATABASE_URL or --database-url), not --base-url"
            )
        return HttpSettings(options.base_url, _token(options), _timeout(options))
    if database_url or not routed:
        return None
    env_url = os.environ.get(URL_ENV)
    if env_url:
        return HttpSettings(env_url, _token(options), _timeout(options))
    from harvest.config.config import DSN_ENV

    if env_secret(DSN_ENV) or cli_config().get("database_url") or _shards(cli_config()):
        return None
    url = default_base_url(cli_config().get("web.port"))
    return HttpSettings(url, _token(options), _timeout(options), implicit=True)


def _shards(config: Any) -> bool:
    from harvest.config import shards_configured

    return bool(shards_configured(config))


def _token(options: RootOptions) -> str | None:
    return options.token or env_secret(TOKEN_ENV)


def refuse_dsn_only() -> None:
    """``--base-url`` given to a command that has no route (``migrate``, ``worker run``, ...):
    say it needs a DSN before it runs (HARVEST_URL alone leaves such a command on its DSN)."""
    ctx = click.get_current_context(silent=True)
    options: RootOptions | None = ctx.meta.get(HTTP_KEY) if ctx is not None else None
    if options is not None and options.base_url:
        name = command_name(ctx)  # type: ignore[arg-type]
        if name not in HTTP_COMMANDS and name not in NO_DATABASE_COMMANDS:
            raise ConfigError(
                f"`harvest {name}` has no HTTP route: it needs a database DSN "
                "(HARVEST_DATABASE_URL or --database-url), not --base-url"
            )


# How long a FIFO given as a file waits for its writer to open it: its writer may start after the
# command (another terminal, a producer started next); never for ever (a FIFO no one writes to
# hung the command).
FIFO_WRITER_WAIT_SECS = 10.0


class FifoWithoutWriter(Exception):
    """A FIFO no writer opened within FIFO_WRITER_WAIT_SECS (or a pipe whose writer had gone,
    having written nothing, before it was opened: the same to poll)."""

    def __init__(self, waited: float):
        super().__init__(f"no writer, nothing written within {waited:g} s (start its writer first)")


def _refuse_unreadable_kind(mode: int) -> None:
    """A directory, or a device: /dev/zero has no end and was read to the bound (1 GiB for
    `harvest replay`) before its size refused it; a disk is no JSON file either."""
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    for is_kind, kind in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if is_kind(mode):
            raise OSError(errno.EINVAL, f"{kind}, not a file or a pipe: nothing to read")


def read_path_bounded(path: str, limit: int) -> bytes | None:
    """At most ``limit`` + 1 bytes of ``path`` (None: a file larger than ``limit``, unread): the
    --*-file options' (harvest.cli.workflow) and `harvest replay`'s file.
    Opened non-blocking: a FIFO's open for reading otherwise waits for a writer, for ever when
    there is none; so it opens at once and waits for a writer up to FIFO_WRITER_WAIT_SECS
    (FifoWithoutWriter past that). A pipe with its writer (`--input-file <(...)`, /dev/fd/N,
    /dev/stdin on a pipe) is then read, blocking, to its end. A directory is refused before any
    read; a character or block device (/dev/zero, a disk, /dev/stdin on a terminal) before it is
    opened (OSError)."""
    _refuse_unreadable_kind(os.stat(path).st_mode)  # (follows links: /dev/stdin to what fd 0 is)
    nonblock = getattr(os, "O_NONBLOCK", 0)  # (none on Windows, which has no FIFOs to open)
    fd = os.open(path, os.O_RDONLY | nonblock | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        _refuse_unreadable_kind(info.st_mode)  # (the path changed between the stat and the open)
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            return None  # refused by its size, unread
        first = b""
        if nonblock and stat.S_ISFIFO(info.st_mode):
            first = _first_from_writer(fd, limit + 1)
        if nonblock:
            os.set_blocking(fd, True)
        return first + f.read(limit + 1 - len(first))


def read_input_bounded(path: str, limit: int, name: str, larger: str) -> bytes:
    """The bytes of ``path`` (- for stdin), at most ``limit``, through :func:`read_path_bounded`;
    anything else one InvalidArgument "``name``: why" (exit 2): unreadable, no writer, larger
    than ``limit`` (``larger`` says what bounds it), or empty. The --*-file options' reader and
    `harvest replay`'s."""
    try:
        raw: bytes | None
        if path == "-":
            stdin = sys.stdin
            raw = stdin.buffer.read(limit + 1) if hasattr(stdin, "buffer") else stdin.read(limit + 1).encode()
        else:
            raw = read_path_bounded(path, limit)
    except FifoWithoutWriter as exc:
        raise InvalidArgument(f"{name}: {exc}") from None
    except OSError as exc:
        raise InvalidArgument(f"{name}: {exc.strerror or exc}") from None
    if raw is None or len(raw) > limit:
        raise InvalidArgument(f"{name}: larger than {limit} bytes{larger}")
    if not raw.strip():
        raise InvalidArgument(f"{name}: empty: no JSON value in it")
    return raw


def _first_from_writer(fd: int, most: int) -> bytes:
    """A FIFO opened non-blocking: wait (FIFO_WRITER_WAIT_SECS at most) for a writer, and the
    first bytes it wrote (``most`` at most), if any. Read at once, a FIFO whose writer had not
    opened it yet read as empty (and that writer then blocked for ever with no reader); a
    writer that opens and closes having written nothing is an empty file, as before."""
    came: object = True  # (no poll: an empty read is an empty file)
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        # An event once a writer has written or closed (a FIFO no writer has opened since this
        # open reports neither); none at the end of the wait.
        came = poller.poll(max(0, int(FIFO_WRITER_WAIT_SECS * 1000)))
    try:
        first = os.read(fd, min(most, 65536))
    except BlockingIOError:
        return b""  # a writer has it open and has written nothing yet: read on, blocking
    if not first and not came:
        raise FifoWithoutWriter(FIFO_WRITER_WAIT_SECS)
    return first
