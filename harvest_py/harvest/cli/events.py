"""`harvest events tail [--workflow ID]`: print events as they are written, over the database
(the event stream's reader, harvest.db.event_stream; docs/event-streams.md) or the management
API's ``/stream``. With ``[shards]`` every readable shard is followed, merged as ``/stream``
merges them (harvest.shard.event_merge): each line starts with every shard's position. A
database or a shard that cannot be read once followed is followed again when it is back; over
HTTP, a stream that ends or breaks off once open is opened again after its last position."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncGenerator, Callable
from datetime import UTC
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from harvest.cli.output import cli_config, cli_dsn, database_url_option, output_option
from harvest.cli.payloads import Reveal, app_option
from harvest.core.codecs import describe_tree
from harvest.core.errors import (
    ConfigError,
    DatabaseUnavailable,
    HarvestError,
    InvalidArgument,
    PayloadError,
    TimeoutError_,
)
from harvest.core.json_values import json_default
from harvest.core.text import escape_controls
from harvest.shard.event_merge import (
    MergedEvent,
    at_position,
    back_note,
    merge_streams,
    named,
    none_readable,
    parse_global_id,
    parse_positions,
    past_the_end_note,
)

# The event stream's reader (the database driver) and asyncio are imported when a tail
# starts, never for --help (tests/unit/test_startup.py).
if TYPE_CHECKING:
    from harvest.cli.http import Http
    from harvest.db.event_stream import EventSource

_P = TypeVar("_P")

_FIELDS = (
    "global_id",
    "execution_id",
    "event_id",
    "event_type",
    "event_data",
    "created_at",
    "workflow_name",
    "workflow_id",
)


@click.group()
def events() -> None:
    """Follow the event stream."""


def _line(event: dict[str, Any], output: str, position: str | None) -> str:
    """One event's line; ``position`` (on shards): every shard's, first, to resume from."""
    if output == "json":
        shown = {k: event[k] for k in _FIELDS}
        if position is not None:
            shown.update(shard_id=event["shard_id"], position=position)
        return json.dumps(shown, default=json_default, separators=(",", ":"))
    # As `harvest workflow get` shows a payload: an encoded one by what it is ("<encrypted (key
    # k2)>"), not its envelope's bytes; --output json keeps the envelope, for a reader with keys
    # (--app decoded it before: _Printer.show, over SQL its offloaded payloads read back first).
    data = json.dumps(describe_tree(event["event_data"]), default=json_default, separators=(",", ":"))
    first = event["global_id"] if position is None else f"{position}  shard {event['shard_id']}"
    run = f"{event['workflow_name']}/{event['workflow_id']}"
    return escape_controls(  # the ids are a caller's text: one line per event, whatever they hold
        f"{first}  {event['created_at'].astimezone(UTC).isoformat(timespec='milliseconds')}  "
        f"{run}  #{event['event_id']} {event['event_type']}  {data}",
        newlines=False,
    )


class _Printer:
    """Prints the events --workflow selects until --limit of them are printed, their payloads
    decoded by --app's codecs when it is given (``reveal``)."""

    def __init__(self, workflow: str | None, limit: int | None, output: str, reveal: Reveal):
        self.workflow, self.limit, self.output, self.reveal = workflow, limit, output, reveal
        self.printed = 0

    def wanted(self, event: dict[str, Any]) -> bool:
        """Whether --workflow selects ``event``."""
        return self.workflow is None or str(event["execution_id"]) == self.workflow

    def show(self, event: dict[str, Any], position: str | None = None) -> bool:
        """Print ``event`` unless --workflow names another run; False once --limit is reached."""
        if self.wanted(event):
            if self.reveal:  # the one decoding of every path's events (over SQL, shards and
                # HTTP); over SQL their offloaded payloads were read back, not decoded: _followed
                event = {**event, "event_data": self.reveal.decoded(None, event["event_data"])}
            click.echo(_line(event, self.output, position))
            self.printed += 1
        return self.limit is None or self.printed < self.limit


async def _tail(dsn: str, after: int | None, printer: _Printer) -> None:
    """One database's events. One that cannot be read when the tail starts is an error; one lost
    while followed (a restart, a failover) is followed again when it is back (_followed)."""
    events = _followed(None, dsn, after, await _open(dsn, None, after), printer)
    async with contextlib.aclosing(events):
        async for event in events:
            if event is not None and not printer.show(event):
                return


# How long a tail on shards waits before it tries a shard it cannot read again.
RETRY_SECS = 5.0


def _warn(text: str) -> None:
    click.echo(f"warning: {text}", err=True)


async def _open(url: str | None, shard: int | None, after: int | None) -> tuple[EventSource, int]:
    """The event source of shard ``shard`` (None: the one database), opened, and the global id
    its events are read after: ``after``, or (None) its last now. Closed again when either step
    fails."""
    from harvest.db.event_stream import EventSource

    if url is None:
        raise ConfigError(f"{named(shard)} has no url in [shards] urls")
    source = EventSource(url)
    try:
        await source.open()
        return source, after if after is not None else await source.start_position()
    except BaseException:
        await source.close()
        raise


async def _not_past_its_end(source: EventSource, shard: int | None, position: int) -> int:
    """Where a source back after an outage is followed from: ``position``, unless its events now
    end before it (a failover to a replica that had not received the last of them): then its
    last, said on stderr, so the events it writes from now on, numbered again from there, are
    not passed over."""
    last = (await source.horizon())["last_global_id"]
    if last >= position:
        return position
    _warn(past_the_end_note(shard, last, position))  # (as /stream says it)
    return cast(int, last)


async def _followed(
    shard: int | None,
    url: str | None,
    after: int | None,
    opened: tuple[EventSource, int] | None,
    printer: _Printer,
) -> AsyncGenerator[dict[str, Any] | None, None]:
    """One shard's events (``shard`` None: the one database's) for as long as the tail runs,
    after global id ``after`` (None: from its events written once it is read). ``opened``: its
    source and start (_open; None: it could not be opened). With --app, the payloads an event
    the printer shows has offloaded are read back through the App's store on its own source
    (Reveal.read_back), before its position moves past it, and left encoded: the printer
    decodes. One that cannot be read (an outage:
    event_stream.source_unreachable), at the start or later, is tried again every RETRY_SECS and
    named on stderr when it goes and when it is back; back, it goes on after the last of its
    events handed on, so nothing it wrote meanwhile is missed. Any other error (a refused login,
    a statement's error) ends the tail."""
    import asyncio

    from harvest.db.connection import error_line
    from harvest.db.event_stream import source_unreachable

    position = after
    lost = opened is None
    try:
        while True:
            try:
                if opened is None:
                    opened = await _open(url, shard, position)
                source, position = opened
                if lost:
                    position = await _not_past_its_end(source, shard, position)
                    _warn(back_note(shard, position))
                    lost = False
                async for batch in source.follow(position):
                    for event in batch:
                        if printer.reveal and printer.wanted(event):
                            data = await printer.reveal.read_back(source, event["event_data"])
                            event = {**event, "event_data": data}
                        position = event["global_id"]
                        yield event
            except Exception as exc:
                if not source_unreachable(exc):
                    raise
                if not lost:
                    after_text = "" if position is None else f" after {at_position(shard, position)}"
                    _warn(
                        f"{named(shard)} cannot be read ({error_line(exc)}): trying again every "
                        f"{RETRY_SECS:g} s, its events{after_text} follow when it is back"
                    )
                    lost = True
                if opened is not None:
                    with contextlib.suppress(Exception):
                        await opened[0].close()
                    opened = None
                await asyncio.sleep(RETRY_SECS)
    finally:
        if opened is not None:
            await opened[0].close()


def _position(after: str, parse: Callable[[str], _P]) -> _P:
    """``--after`` read as ``parse`` reads a stream's Last-Event-ID, its refusal naming the
    option the user wrote, not the header."""
    try:
        return parse(after)
    except InvalidArgument:
        raise _after_refused(after, sharded=parse is parse_positions) from None


def _after_refused(after: str, *, sharded: bool) -> InvalidArgument:
    form = "shard:global_id, comma-separated" if sharded else "a global id"
    return InvalidArgument(
        f"--after {after!r} is not a position of this tail ({form}): pass the first column of a line "
        "it printed"
    )


async def _tail_shards(urls: dict[int, str | None], after: str | None, printer: _Printer) -> None:
    """Every shard's events merged. A shard that cannot be read when the tail starts, or that
    goes later, is named on stderr and followed again when it is back (_followed); one that
    refuses the login (or has no url) is named and not followed; none readable at the start is
    an error."""
    from harvest.db.connection import error_line, is_permanent
    from harvest.db.event_stream import source_unreachable

    given = _position(after, parse_positions) if after is not None else {}
    opened: dict[int, tuple[EventSource, int]] = {}
    retried: list[int] = []
    unavailable: list[int] = []
    try:
        for shard, url in sorted(urls.items()):
            try:
                opened[shard] = await _open(url, shard, given.get(shard))
            except Exception as exc:
                permanent = is_permanent(exc)
                if not permanent and not source_unreachable(exc):
                    raise
                unavailable.append(shard)
                if permanent:
                    _warn(f"shard {shard} not followed: {error_line(exc)} (fix its url and run again)")
                else:
                    retried.append(shard)
                    _warn(
                        f"shard {shard} unavailable ({error_line(exc)}): trying again every "
                        f"{RETRY_SECS:g} s, its events follow when back"
                    )
        if not opened:
            raise none_readable(unavailable)
        streams = {
            s: _followed(s, urls[s], given.get(s), opened.get(s), printer)
            for s in sorted([*opened, *retried])
        }
        starts = {s: start for s, (_, start) in opened.items()}
        merged = merge_streams(streams, {**given, **starts}, keepalive=3600.0)
        try:
            async with contextlib.aclosing(merged):  # its readers stop before the sources close
                async for item in merged:
                    if not isinstance(item, MergedEvent):  # (a keepalive; its streams say no notes)
                        continue
                    if not printer.show({**item.event, "shard_id": item.shard}, item.position):
                        return
        finally:
            for stream in streams.values():  # (each closes the source it holds)
                await stream.aclose()
    finally:
        for source, _ in opened.values():  # (those opened here; closing one twice does nothing)
            await source.close()


def _tail_http(http: Http, after: str | None, printer: _Printer) -> None:
    """The events of ``/stream``. A stream that cannot be opened is an error. One that ends
    once open (the server stopped it: it is stopping, or its database went), breaks
    off, or goes silent past its idle limit is named on stderr and opened again every
    RETRY_SECS, after the position of the last block it sent (the opening's, before any
    event), so nothing is missed or printed twice. An error answer then (a revoked token, a
    refused position) ends the tail, naming the position to resume from."""
    position, lost, opened = after, False, False
    while True:
        try:
            for at, event in http.stream_events(position, _warn):
                if lost:
                    _warn(f"the event stream is back: following its events after {_shown(position)}")
                    lost = False
                if not opened and http.settings.implicit:
                    # The default URL answered: from now on one that does not is an outage of
                    # this server, not a missing configuration (Http._unreachable).
                    http.settings = dataclasses.replace(http.settings, implicit=False)
                opened = True
                if at is not None:
                    position = at
                if event is not None and not printer.show(event, event.get("position")):
                    return
            reason = "the server ended it: it is stopping, or its database went"
        except (DatabaseUnavailable, TimeoutError_) as exc:
            if opened:
                reason = str(exc)
            elif isinstance(exc, TimeoutError_):
                raise
            else:
                raise _resumable(exc, position) from None
        except PayloadError:  # the printer's --app decoding (a key the App lacks), not the stream's
            raise
        except HarvestError as exc:
            if not opened and isinstance(exc, InvalidArgument) and str(exc).startswith("Last-Event-ID"):
                # (the server's refusal names its header: the user wrote --after)
                raise _after_refused(cast(str, after), sharded="sharded" in str(exc)) from None
            if not opened:
                raise
            raise _resumable(exc, position) from None
        if not lost:
            _warn(
                f"the event stream ended ({reason}): trying again every {RETRY_SECS:g} s, its "
                f"events after {_shown(position)} follow when it is back"
            )
            lost = True
        time.sleep(RETRY_SECS)


def _shown(position: str | None) -> str:
    return "now" if position is None else position


def _resumable(exc: HarvestError, position: str | None) -> HarvestError:
    """``exc`` (an error answer's class, so the exit code is its own) naming where to go on from."""
    text = f"{exc}: {'run it again' if position is None else f'resume with --after {position}'}"
    try:
        return type(exc)(text)
    except TypeError:  # (a class whose constructor takes more than the message)
        return HarvestError(text)


@events.command("tail")
@click.option("--workflow", "workflow", default=None, help="Only the events of this execution id.")
@click.option(
    "--after",
    default=None,
    help="Start after this position (the first column) instead of now, to resume where you "
    "stopped: a global id, or on shards every shard's (0:812,1:77).",
)
@click.option("--limit", type=click.IntRange(1), default=None, help="Stop after this many events.")
@app_option
@database_url_option
@output_option
def tail(
    workflow: str | None,
    after: str | None,
    limit: int | None,
    app_target: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Print events as they are written (Ctrl-C stops), one line each: global id, time,
    workflow name/id, event id and type, data. On shards every shard's events, each line
    starting with every shard's position and the event's shard. With --output json, one JSON
    object a line."""
    import asyncio

    from harvest.cli.http import http_session
    from harvest.cli.output import selected
    from harvest.config import shards_configured
    from harvest.config.config import _pool_arguments

    printer = _Printer(workflow, limit, output, Reveal(app_target))
    settings = selected(database_url)
    try:
        if settings is not None:
            with http_session(settings) as http:  # GET /stream (docs/event-streams.md)
                _tail_http(http, after, printer)
            return
        config = cli_config()
        if not shards_configured(config):
            start = _position(after, parse_global_id) if after is not None else None
            asyncio.run(_tail(cli_dsn(database_url), start, printer))
            return
        router, urls = _pool_arguments(config, database_url)  # as the CLI's pools find them
        asyncio.run(_tail_shards({s: urls.get(s) for s in router.readable}, after, printer))
    except KeyboardInterrupt:
        pass
