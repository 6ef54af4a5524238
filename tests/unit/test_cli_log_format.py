"""`--log-format` of the long-running commands (`harvest worker`, `dev`, `serve`) is one option,
cli/output.py's log_format_option: text by default, or json lines."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from harvest.cli.dev import dev
from harvest.cli.serve import serve
from harvest.cli.worker import worker


@pytest.mark.parametrize("command", [worker, dev, serve], ids=lambda c: c.name)
def test_each_long_running_command_takes_text_or_json_lines(command: click.Command) -> None:
    (option,) = [p for p in command.params if p.name == "log_format"]
    assert isinstance(option.type, click.Choice) and list(option.type.choices) == ["text", "json"]
    assert option.default == "text"
    refused = CliRunner().invoke(command, ["--log-format", "xml"])
    assert refused.exit_code == 2 and "'xml' is not one of 'text', 'json'" in refused.output
