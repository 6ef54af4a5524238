"""Schedule operations the faces share (`harvest schedule`, the HTTP API's ``/admin/schedules``,
the dashboard's schedule pages), each written once for a synchronous and an asyncio SQL API as a
flow (:mod:`harvest.core.stepper`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from harvest.core.stepper import Do, Flow, adriven, driven
from harvest.declare.schedules import backfill_slots


def backfill_flow(
    sql: Any,
    name: str,
    start: dt.datetime,
    end: dt.datetime,
    overlap: str,
    operator_id: str | None,
    *,
    slots_of: Callable[[dict[str, Any], dt.datetime, dt.datetime], list[dt.datetime]] = backfill_slots,
    on_slots: Callable[[int], None] | None = None,
) -> Flow[dict[str, Any]]:
    """Backfill schedule ``name`` on ``sql`` (its home shard's SqlApi or AsyncSqlApi): its slots
    in [start, end] (:func:`~harvest.declare.schedules.backfill_slots`: the range checked, at
    most BACKFILL_MAX_SLOTS, else InvalidArgument before anything is written), fired by
    ``backfill_schedule`` under ``overlap``. Answers ``{name, slots, **counts}``: how many slots,
    and backfill_schedule's counts by outcome. ``slots_of``: backfill_slots, or a face's wrapper of
    it that names the face's field in its errors (the dashboard's). ``on_slots``: told how many
    slots before they are fired (the CLI's progress line for a long backfill)."""
    row = yield Do(lambda: sql.get_schedule(name, 1))
    slots = slots_of(row, start, end)
    if on_slots is not None:
        on_slots(len(slots))
    counts = yield Do(lambda: sql.backfill_schedule(name, slots, overlap, operator_id))
    return {"name": name, "slots": len(slots), **counts}


backfill = driven(backfill_flow)
abackfill = adriven(backfill_flow)
