"""harvest.client.history_export.resolved_in_batches: a full export reads its events' offloaded
payloads back a page of events at a time, fewer once their references name RESOLVE_BYTES, every
event once and in order, through the sync and the asyncio readers alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from harvest.client import history_export
from harvest.client.history_export import (
    EXPORT_PAGE_SIZE,
    RESOLVE_BYTES,
    aresolved_in_batches,
    resolved_in_batches,
)


def _event(i: int, size: int) -> dict[str, Any]:
    return {"event_id": i, "event_data": {"payload": {"_harvest_ref": f"r{i}", "bytes": size}}}


def _batches(events: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """The batch sizes each reader hands its resolver, sync then async; both give every event."""
    sync: list[int] = []

    def resolve(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        sync.append(len(batch))
        return batch

    assert list(resolved_in_batches(iter(events), resolve, EXPORT_PAGE_SIZE)) == events
    asynchronous: list[int] = []

    async def aresolve(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        asynchronous.append(len(batch))
        return batch

    async def source() -> AsyncIterator[dict[str, Any]]:
        for event in events:
            yield event

    async def read() -> list[dict[str, Any]]:
        return [e async for e in aresolved_in_batches(source(), aresolve, EXPORT_PAGE_SIZE)]

    assert asyncio.run(read()) == events
    return sync, asynchronous


def test_a_page_of_small_payloads_is_one_batch() -> None:
    events = [_event(i, 100) for i in range(2 * EXPORT_PAGE_SIZE + 1)]
    assert _batches(events) == ([EXPORT_PAGE_SIZE, EXPORT_PAGE_SIZE, 1],) * 2


def test_large_payloads_cut_a_batch_at_the_byte_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Held payloads stay bounded: a batch ends at the event whose references reach the bound;
    one payload past it is a batch of its own."""
    monkeypatch.setattr(history_export, "RESOLVE_BYTES", 1000)
    events = [_event(0, 400), _event(1, 400), _event(2, 400), _event(3, 5000), _event(4, 1)]
    assert _batches(events) == ([3, 1, 1],) * 2
    assert RESOLVE_BYTES >= 1 << 20  # (the real bound: a megabyte or more a read)


def test_no_events_no_batch() -> None:
    assert _batches([]) == ([], [])
