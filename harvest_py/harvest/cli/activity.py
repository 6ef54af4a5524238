"""`harvest activity`: complete, fail or heartbeat an activity by its task token.

An activity that returned "completed elsewhere" (``raise ctx.complete_async()``) is finished
by whoever holds its ``ctx.task_token`` (docs/lifecycle.md); these commands are that holder
on a shell. The token routes the call to the shard its run lives on.
"""

from __future__ import annotations

from typing import Any

import click

from harvest.cli.output import database_url_option, emit, output_option
from harvest.cli.payloads import Reveal, app_write_option
from harvest.cli.shards import cli_client, routed_call
from harvest.cli.workflow import read_json_option
from harvest.core.durations import parse_duration
from harvest.core.errors import ActivityFailure
from harvest.core.task_token import TaskToken


def _by_token(
    database_url: str | None, task_token: str, fn: Any, app_target: str | None = None, keyed: Any = None
) -> Any:
    """``fn(sql, token)`` on the shard the token's run lives on; with --app, ``keyed(client)``
    instead, on a client given the App's codecs, which encodes the payload it sends (as a
    ``Client(codecs=...)`` does: docs/payloads.md, "A key-holding CLI")."""
    token = TaskToken.parse(task_token)
    reveal = Reveal(app_target)
    if reveal:
        with reveal.writing(), cli_client(database_url, reveal.payloads) as client:
            return keyed(client)
    return routed_call(database_url, token.execution_id, lambda sql: fn(sql, str(token)))


@click.group()
def activity() -> None:
    """Finish activities completed elsewhere, by task token."""


@activity.command("complete")
@click.argument("task_token")
@click.option("--result-json", default=None, help="The result: one JSON value (default null).")
@click.option("--result-file", default=None, help="Read the result JSON from a file (- for stdin).")
@app_write_option
@database_url_option
@output_option
def complete(
    task_token: str,
    result_json: str | None,
    result_file: str | None,
    app_target: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Complete the activity: completed, or already_completed for a repeat of the same result
    (encoded with --app's codecs)."""
    result = read_json_option(result_json, result_file, "result")
    outcome = _by_token(
        database_url,
        task_token,
        lambda sql, t: sql.complete_activity_by_token(t, result),
        app_target,
        lambda client: client.complete_activity(task_token, result),
    )
    emit({"task_token": task_token, "outcome": outcome}, output, lambda d: outcome)


@activity.command("fail")
@click.argument("task_token")
@click.option("--error-type", default="ExternalFailure", show_default=True)
@click.option("--message", default="", help="What went wrong.")
@click.option("--non-retryable", is_flag=True, help="Fail for good instead of retrying per the policy.")
@click.option(
    "--next-retry-delay",
    default=None,
    help="Wait this long before the retry instead of the policy's backoff (30, 30s, 5m; a Retry-After).",
)
@database_url_option
@output_option
def fail(
    task_token: str,
    error_type: str,
    message: str,
    non_retryable: bool,
    next_retry_delay: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Fail this attempt: retried, dead-lettered or failed per the activity's retry policy."""
    delay = None if next_retry_delay is None else parse_duration(next_retry_delay, "--next-retry-delay")
    failure = ActivityFailure(error_type, message, non_retryable=non_retryable, next_retry_delay=delay)
    report = failure.to_json()
    outcome = _by_token(database_url, task_token, lambda sql, t: sql.fail_activity_by_token(t, report))
    emit({"task_token": task_token, "outcome": outcome}, output, lambda d: outcome)


@activity.command("heartbeat")
@click.argument("task_token")
@click.option("--details-json", default=None, help="Progress details: one JSON value.")
@click.option("--details-file", default=None, help="Read the details JSON from a file (- for stdin).")
@app_write_option
@database_url_option
@output_option
def heartbeat(
    task_token: str,
    details_json: str | None,
    details_file: str | None,
    app_target: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Heartbeat the activity (its heartbeat timeout still applies); says whether its run was asked
    to cancel. The details are encoded with --app's codecs."""
    details = read_json_option(details_json, details_file, "details")
    cancel = _by_token(
        database_url,
        task_token,
        lambda sql, t: sql.heartbeat_activity_by_token(t, details),
        app_target,
        lambda client: client.heartbeat_activity(task_token, details),
    )
    emit(
        {"task_token": task_token, "cancel_requested": cancel},
        output,
        lambda d: "cancel requested" if cancel else "ok",
    )
