"""One history export (``harvest history export``, ``GET /workflows/{id}/history/export``;
docs/payloads.md "Exports"): ``{"execution", "events", "redacted"}`` as ``json.dumps(doc,
indent=2)`` would write it, produced one event at a time as the events are read (a server-side
cursor), so no whole history is ever held. Written once, so both faces give the same bytes.

A redacted export (the default) shows each payload value as ``{"redacted": true, "bytes": n}``;
a full one carries payloads as stored, offloaded ones read back from the store
(:func:`harvest.client.export_batch.resolved`) a batch of events at a time (:func:`resolved_in_batches`),
codec envelopes as they are.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any

from harvest.core.codecs import referenced_bytes
from harvest.core.json_values import json_default
from harvest.core.payload import redact
from harvest.core.statuses import LIVE_STATUSES

# Events fetched per round trip (a server-side cursor's page).
EXPORT_PAGE_SIZE = 500

# A full export reads its events' offloaded payloads back a batch at a time, one read of the
# store a batch (it was one an event): a cursor page of events (what the read holds anyway), or
# fewer once the payloads their references name come to this many bytes (a reference records
# its payload's size), so what a batch holds stays bounded however large the payloads are (one
# payload past it: a batch alone).
RESOLVE_BYTES = 16 << 20

# A batch of exports (harvest.client.export_batch): the most runs it takes, and which runs each
# state group takes. Here, not there, so that `harvest history export-batch --help` builds its
# options without the SQL API under the batch (tests/unit/test_startup.py).
MAX_LIMIT = 10_000
_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TERMINATED", "TIMED_OUT", "CONTINUED_AS_NEW")
STATE_GROUPS: dict[str, set[str]] = {
    "terminal": set(_ENDED),
    # running: every live run, a PAUSED one too (docs/lifecycle.md).
    "running": set(LIVE_STATUSES),
    "all": {*LIVE_STATUSES, *_ENDED},
}


Events = list[dict[str, Any]]


def _batch_full(events: Events, held: int, page_size: int) -> bool:
    return len(events) >= page_size or held >= RESOLVE_BYTES


def resolved_in_batches(
    events: Iterable[dict[str, Any]], resolve: Callable[[Events], Events], page_size: int
) -> Iterator[dict[str, Any]]:
    """``events`` in order, each batch (``page_size`` of them, the cursor's page, or fewer whose
    references name RESOLVE_BYTES) passed through ``resolve`` (one read of the store for the
    batch's references) first."""
    batch: Events = []
    held = 0
    for event in events:
        batch.append(event)
        held += referenced_bytes(event)
        if _batch_full(batch, held, page_size):
            yield from resolve(batch)
            batch, held = [], 0
    if batch:
        yield from resolve(batch)


async def aresolved_in_batches(
    events: AsyncIterable[dict[str, Any]], resolve: Callable[[Events], Awaitable[Events]], page_size: int
) -> AsyncIterator[dict[str, Any]]:
    """:func:`resolved_in_batches` of events read under asyncio."""
    batch: Events = []
    held = 0
    async for event in events:
        batch.append(event)
        held += referenced_bytes(event)
        if _batch_full(batch, held, page_size):
            for done in await resolve(batch):
                yield done
            batch, held = [], 0
    if batch:
        for done in await resolve(batch):
            yield done


def _indented(value: Any, level: int) -> str:
    # json.dumps(indent=2) of a value nested `level` spaces deep: its strings hold no raw
    # newline (JSON escapes them), so every newline starts one of its own lines. Its times in
    # ISO 8601 and UTC as every face writes them (json_default): read in the reader's session
    # zone (PGTZ, a role's TimeZone), one history was two files, over SQL and over HTTP.
    return json.dumps(value, default=json_default, indent=2).replace("\n", "\n" + " " * level)


def _head(execution: dict[str, Any], full: bool) -> str:
    shown = execution if full else redact(execution)
    return '{\n  "execution": ' + _indented(shown, 2) + ',\n  "events": ['


def _event(event: dict[str, Any], first: bool, full: bool) -> str:
    return ("\n    " if first else ",\n    ") + _indented(event if full else redact(event), 4)


def _tail(none: bool, full: bool) -> str:
    return ("]" if none else "\n  ]") + ',\n  "redacted": ' + json.dumps(not full) + "\n}\n"


def export_chunks(execution: dict[str, Any], events: Iterable[dict[str, Any]], full: bool) -> Iterator[str]:
    """The export's text, a piece per event (``full``: payloads shown; else redacted here)."""
    yield _head(execution, full)
    first = True
    for event in events:
        yield _event(event, first, full)
        first = False
    yield _tail(first, full)


async def aexport_chunks(
    execution: dict[str, Any], events: AsyncIterable[dict[str, Any]], full: bool
) -> AsyncIterator[str]:
    """:func:`export_chunks` of events read under asyncio."""
    yield _head(execution, full)
    first = True
    async for event in events:
        yield _event(event, first, full)
        first = False
    yield _tail(first, full)
