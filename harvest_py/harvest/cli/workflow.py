"""`harvest workflow`: start runs and read their state (operator commands grow here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from harvest.errors import InvalidArgument


def read_json_option(inline: str | None, path: str | None, what: str) -> Any:
    """--X-json TEXT or --X-file PATH (- for stdin); a parse error names the option."""
    if inline is not None and path is not None:
        raise InvalidArgument(f"give --{what}-json or --{what}-file, not both")
    text = inline
    if path is not None:
        if path == "-":
            text = sys.stdin.read()
        else:
            try:
                text = Path(path).read_text()
            except OSError as exc:
                raise InvalidArgument(f"--{what}-file {path}: {exc.strerror}") from None
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"--{what}: not valid JSON ({exc})") from None


def _echo(data: Any, output: str) -> None:
    text = json.dumps(data, default=str, indent=None if output == "json" else 2)
    click.echo(text)


@click.group()
def workflow() -> None:
    """Start workflows and inspect executions."""


@workflow.command("start")
@click.argument("name")
@click.option("--input-json", default=None, help="Arguments: a JSON array, or one JSON value.")
@click.option("--input-file", default=None, help="Read the input JSON from a file (- for stdin).")
@click.option("--workflow-id", default=None)
@click.option("--task-queue", default="default", show_default=True)
@click.option("--reuse-policy", default="allow_duplicate", show_default=True)
@click.option("--conflict-policy", default="unspecified", show_default=True)
@click.option("--database-url", default=None, help="Prefer HARVEST_DATABASE_URL.")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
def start(name: str, input_json: str | None, input_file: str | None, workflow_id: str | None,
          task_queue: str, reuse_policy: str, conflict_policy: str, database_url: str | None,
          output: str) -> None:
    """Start workflow NAME (or attach to its run, per the policies)."""
    from harvest.client import Client

    value = read_json_option(input_json, input_file, "input")
    args = [] if value is None else (value if isinstance(value, list) else [value])
    with Client(database_url) as client:
        handle = client.start_workflow(name, *args, workflow_id=workflow_id, task_queue=task_queue,
                                       reuse_policy=reuse_policy, conflict_policy=conflict_policy)
    _echo({"execution_id": handle.execution_id, "workflow_id": handle.workflow_id,
           "started_fresh": handle.started_fresh}, output)


@workflow.command("get")
@click.argument("execution_id")
@click.option("--database-url", default=None)
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
def get(execution_id: str, database_url: str | None, output: str) -> None:
    """Show one execution."""
    from harvest.client import Client

    with Client(database_url) as client:
        _echo(client.get_handle(execution_id).describe(), output)


@workflow.command("result")
@click.argument("execution_id")
@click.option("--timeout", default=None, type=float, help="Seconds to wait (default: forever).")
@click.option("--database-url", default=None)
def result(execution_id: str, timeout: float | None, database_url: str | None) -> None:
    """Wait for an execution to end and print its result (exit 1 if it did not complete)."""
    from harvest.client import Client

    with Client(database_url) as client:
        value = client.get_handle(execution_id).result(timeout=timeout)
    _echo(value, "json")


@workflow.command("history")
@click.argument("execution_id")
@click.option("--database-url", default=None)
def history(execution_id: str, database_url: str | None) -> None:
    """Print an execution's event history, one JSON event per line."""
    from harvest.client import Client

    with Client(database_url) as client:
        for event in client.get_handle(execution_id).history():
            click.echo(json.dumps(event, default=str))


@workflow.command("terminate")
@click.argument("execution_id")
@click.option("--reason", default=None)
@click.option("--database-url", default=None)
def terminate(execution_id: str, reason: str | None, database_url: str | None) -> None:
    """End a run at once; no cleanup code runs."""
    from harvest.client import Client

    with Client(database_url) as client:
        client.get_handle(execution_id).terminate(reason)
    click.echo(f"terminated {execution_id}")
