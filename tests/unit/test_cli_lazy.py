"""The `harvest` command imports a command's module only when that command is resolved.

`harvest --help` (and `import harvest.cli`) loads click and harvest.core.errors, not the
database driver, the config, the web server, OpenTelemetry or the worker; it still lists every
command with the line its own help gives (harvest/cli/main.py COMMANDS).
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from harvest.cli.main import COMMANDS, HarvestGroup, main

# The root commands `harvest --help` listed before the registry became lazy.
ROOT_COMMANDS = [
    "activity",
    "audit",
    "backup",
    "concurrency",
    "dag",
    "dev",
    "dlq",
    "events",
    "health",
    "history",
    "metrics",
    "migrate",
    "preflight",
    "queue",
    "rate-limit",
    "replay",
    "retention",
    "schedule",
    "search-attr",
    "serve",
    "shard",
    "start-gate",
    "throttle",
    "token",
    "usage",
    "version-usage",
    "worker",
    "workflow",
]

# What only a command may import: none of it on `import harvest.cli` or `harvest --help`.
HEAVY = [
    "psycopg",
    "psycopg_pool",
    "starlette",
    "uvicorn",
    "opentelemetry",
    "pydantic",
    "asyncio",
    "harvest.config",
    "harvest.db",
    "harvest.client",
    "harvest.worker",
    "harvest.runtime",
    "harvest.web",
    "harvest.telemetry",
    "harvest.cli.output",
    "harvest.cli.workflow",
]

WIDTHS = (40, 80, 120)

# Run in a fresh interpreter: in this one other tests may have resolved commands already.
_FRESH = """
import contextlib, io, json, sys
from harvest.cli.main import main
out = {"imported": sorted(sys.modules)}
for width in WIDTHS:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
        main.main(["--help"], prog_name="harvest", terminal_width=width)
    out[str(width)] = buf.getvalue()
out["after_help"] = sorted(sys.modules)
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
    main.main(["versio"], prog_name="harvest")
out["no_such_command"] = err.getvalue()
import harvest.cli.dlq
out["dlq"] = sorted(sys.modules)
from harvest.cli.main import load_commands
load_commands()
out["every_command"] = sorted(sys.modules)
print(json.dumps(out))
""".replace("WIDTHS", repr(WIDTHS))


@pytest.fixture(scope="module")
def fresh() -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", _FRESH], check=True, capture_output=True, text=True, timeout=120
    )
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _loaded(modules: object, heavy: list[str]) -> list[str]:
    assert isinstance(modules, list)
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in heavy)]


def test_the_registry_names_every_root_command_as_before() -> None:
    assert sorted(COMMANDS) == ROOT_COMMANDS
    assert main.list_commands(click.Context(main)) == ROOT_COMMANDS


def test_import_and_help_load_no_command_module(fresh: dict[str, object]) -> None:
    assert _loaded(fresh["imported"], HEAVY) == []
    assert _loaded(fresh["after_help"], HEAVY) == []
    # the check can fail: a command's module is among the names it looks for
    assert _loaded(["harvest.cli.workflow", "harvest.worker.worker"], HEAVY) == [
        "harvest.cli.workflow",
        "harvest.worker.worker",
    ]


@pytest.mark.parametrize("width", WIDTHS)
def test_lazy_help_is_the_help_of_the_loaded_commands(
    fresh: dict[str, object], width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = click.Context(main, info_name="harvest", terminal_width=width)
    for name in ROOT_COMMANDS:
        assert main.get_command(ctx, name) is not None, name
    # click's own listing over the real (now imported) commands
    monkeypatch.setattr(HarvestGroup, "format_commands", click.Group.format_commands)
    assert fresh[str(width)] == main.get_help(ctx) + "\n"


@pytest.mark.parametrize("name", ROOT_COMMANDS)
def test_each_registered_help_line_is_the_commands_own(name: str) -> None:
    command = main.get_command(click.Context(main), name)
    assert command is not None
    assert not command.hidden and not command.deprecated
    stand_in = click.Command(name, help=COMMANDS[name].help)
    for limit in range(3, 160):
        assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit), (name, limit)


def test_commands_import_the_web_server_and_telemetry_only_when_they_run(fresh: dict[str, object]) -> None:
    # `harvest serve` and `harvest dev` import the web app (and OpenTelemetry) as they start
    assert _loaded(fresh["every_command"], ["starlette", "uvicorn", "opentelemetry"]) == []
    # an operator command that does not speak through the client does not import it
    assert _loaded(fresh["dlq"], ["harvest.client.client", "harvest.worker.worker"]) == []


def test_a_mistyped_command_suggests_one_not_imported_yet(fresh: dict[str, object]) -> None:
    assert "No such command 'versio'. Did you mean 'version-usage'?" in str(fresh["no_such_command"])


def test_a_resolved_command_reads_the_config_first() -> None:
    command = main.get_command(click.Context(main), "workflow")
    assert isinstance(command, click.Group)
    listing = command.commands["list"]
    assert getattr(listing.callback, "_harvest_reads_config", False)
