"""`harvest events tail [--workflow ID]`: print events as they are written, over the database
(the event stream's reader, harvest.db.event_stream; docs/event-streams.md)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click

from harvest.cli.output import cli_dsn, database_url_option, output_option
from harvest.db.event_stream import EventSource


@click.group()
def events() -> None:
    """Follow the event stream."""


def _line(event: dict[str, Any], output: str) -> str:
    if output == "json":
        return json.dumps(
            {
                k: event[k]
                for k in (
                    "global_id",
                    "execution_id",
                    "event_id",
                    "event_type",
                    "event_data",
                    "created_at",
                    "workflow_name",
                    "workflow_id",
                )
            },
            default=str,
            separators=(",", ":"),
        )
    data = json.dumps(event["event_data"], default=str, separators=(",", ":"))
    return (
        f"{event['global_id']}  {event['created_at'].isoformat(timespec='milliseconds')}  "
        f"{event['workflow_name']}/{event['workflow_id']}  #{event['event_id']} {event['event_type']}  {data}"
    )


def _show(event: dict[str, Any], workflow: str | None, output: str) -> int:
    """Print ``event`` unless --workflow names another run: 1 when printed, else 0."""
    if workflow is not None and str(event["execution_id"]) != workflow:
        return 0
    click.echo(_line(event, output))
    return 1


async def _tail(dsn: str, workflow: str | None, after: int | None, limit: int | None, output: str) -> None:
    source = EventSource(dsn)
    await source.open()
    printed = 0
    try:
        start = after if after is not None else await source.start_position()
        async for batch in source.follow(start):
            for event in batch:
                printed += _show(event, workflow, output)
                if limit is not None and printed >= limit:
                    return
    finally:
        await source.close()


@events.command("tail")
@click.option("--workflow", "workflow", default=None, help="Only the events of this execution id.")
@click.option(
    "--after",
    type=click.IntRange(0),
    default=None,
    help="Start after this global id (the first column) instead of now: resume where you stopped.",
)
@click.option("--limit", type=click.IntRange(1), default=None, help="Stop after this many events.")
@database_url_option
@output_option
def tail(
    workflow: str | None, after: int | None, limit: int | None, database_url: str | None, output: str
) -> None:
    """Print events as they are written (Ctrl-C stops), one line each: global id, time,
    workflow name/id, event id and type, data. With --output json, one JSON object a line."""
    from harvest.cli.http import http_session
    from harvest.cli.output import selected

    settings = selected(database_url)
    try:
        if settings is None:
            asyncio.run(_tail(cli_dsn(database_url), workflow, after, limit, output))
            return
        with http_session(settings) as http:  # GET /stream (docs/event-streams.md)
            printed = 0
            for event in http.stream_events(after):
                printed += _show(event, workflow, output)
                if limit is not None and printed >= limit:
                    return
    except KeyboardInterrupt:
        pass
