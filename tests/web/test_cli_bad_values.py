"""Every `harvest` command, given values no command takes, answers one line and an exit code,
over SQL and over HTTP: no traceback, whatever the argument or option.

Each argument gets an empty string, "nan" and a string past every limit (3000 characters, every
argument at once); each option (not a flag, not a file) an empty string and "nan", with the
arguments plausible (an id where the argument is one, else "x"). A command with no argument runs
once with none: its three argument trials were the same command line, run three times (the
expensive ones: `workflow list`, `backup verify`'s drill). A walk of this kind found the HTTP
transport's tracebacks on a NaN option (JSON has no NaN) and an empty name (`workflow get ''`
asked the collection's route). Commands that serve, follow or run for ever are left out; the
rest run against a cloned database, in process (the HTTP transport through a TestClient).
"""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from harvest.cli import http as cli_http
from harvest.cli.main import main
from harvest.config import load_config
from harvest.web.app import management_app

pytestmark = pytest.mark.webfuzz

# They serve, follow a stream or run a worker until stopped.
LONG_RUNNING = {("dev",), ("serve",), ("demo",), ("worker", "run"), ("events", "tail")}
# Options that name a file to read or write, or code to import: what they do with a bad value is
# the OS's answer (tests/web/test_cli_http.py and the command's own tests cover them).
FILE_OPTIONS = {"--input-file", "--output-file", "--file", "--app", "--config", "--include-dir"}
ID = "00000000-0000-0000-0000-000000000000"
BAD_ARGUMENTS = ("", "nan", "x" * 3000)
BAD_OPTIONS = ("", "nan")


Walked = Iterator[tuple[tuple[str, ...], click.Command]]


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Walked:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        elif (*path, name) not in LONG_RUNNING:
            yield (*path, name), command


def _trials(command: click.Command) -> Iterator[list[str]]:
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    options = [
        p
        for p in command.params
        if isinstance(p, click.Option)
        and not p.is_flag
        and p.name not in ("database_url", "output")
        and not FILE_OPTIONS & set(p.opts)
    ]
    for bad in BAD_ARGUMENTS if arguments else BAD_ARGUMENTS[:1]:
        yield [bad] * len(arguments)
    plausible = [ID if (a.name or "").endswith("id") else "x" for a in arguments]
    for option in options:
        for bad in BAD_OPTIONS:
            yield [*plausible, option.opts[0], bad]


COMMANDS = sorted(_commands(main), key=lambda c: c[0])


@pytest.fixture
def http_base(db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    app = management_app(dsn=db, config=load_config(env={}), profile="dev")
    with TestClient(app, base_url="http://testserver") as client:
        monkeypatch.setattr(cli_http, "TRANSPORT", client._transport)
        yield "http://testserver"


def test_the_walk_reaches_the_commands() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert len(names) > 60
    assert {"workflow get", "schedule create-workflow", "dlq replay", "token revoke"} <= names


@pytest.mark.parametrize("transport", ["sql", "http"])
def test_no_command_answers_a_bad_value_with_a_traceback(db: str, http_base: str, transport: str) -> None:
    runner = CliRunner()
    env = {
        "HARVEST_DATABASE_URL": db if transport == "sql" else None,
        "HARVEST_URL": http_base if transport == "http" else None,
        "HARVEST_TOKEN": None,
        "HARVEST_CONFIG": None,
        "HARVEST_HTTP_TIMEOUT_SECS": "10",
    }
    broken = []
    for path, command in COMMANDS:
        for trial in _trials(command):
            result = runner.invoke(main, [*path, *trial], env=env, input="")
            exc = result.exception
            if (exc is not None and not isinstance(exc, SystemExit)) or "Traceback" in result.output:
                broken.append(f"harvest {' '.join(path)} {[t[:20] for t in trial]}: {exc!r}")
            elif result.exit_code not in range(9):
                broken.append(f"harvest {' '.join(path)} {[t[:20] for t in trial]}: exit {result.exit_code}")
    assert not broken, "\n".join(broken)
