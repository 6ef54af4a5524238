"""The scheduler: the tick caller of schedules (functions/schedules.sql, docs/schedules.md).

The worker's scanner loop calls :func:`tick` on each shard it scans (a process whose scheduler is
off runs no scanner, docs/sharding.md and harvest.config roles). PL/pgSQL cannot evaluate cron,
so a tick is: read the due schedules with the engine's clock (``list_due_schedules``), compute
each one's slots here (:func:`plan_tick`, pure), and hand them to ``fire_schedule``, which locks
the row with SKIP LOCKED, checks the revision the slots were computed from, fires, and stores the
next slot in one transaction. Several schedulers at once, a doubled tick, or a tick killed half
way start no slot twice and lose none: the loser finds the row busy or stale, and a killed
transaction leaves the row to the next tick.
"""

from __future__ import annotations

import datetime as _dt
import logging
from dataclasses import dataclass, field
from typing import Any

from harvest.core.errors import HarvestError
from harvest.db.connection import failure_reason
from harvest.db.resend import connection_lost
from harvest.declare.schedules import Schedule, jitter_offset
from harvest.telemetry import tracing

log = logging.getLogger("harvest.scheduler")

__all__ = [
    "MAX_DUE_PER_TICK",
    "MAX_MISSED_COUNTED",
    "MAX_PAGES_PER_TICK",
    "TickPlan",
    "TickReport",
    "plan_tick",
    "tick",
]

# At most this many slots fire in one call of fire_schedule (a long catch-up goes on next tick).
MAX_DUE_PER_TICK = 1000
# One tick reads at most this many pages of due schedules (the next one while the last was full).
MAX_PAGES_PER_TICK = 20
# Missed slots are counted one by one up to this many per tick; past it the count jumps to the
# catch-up window (the recorded count is then a lower bound).
MAX_MISSED_COUNTED = 10_000


@dataclass
class TickPlan:
    """fire_schedule's arguments for one due schedule."""

    schedule_id: int
    revision: int
    slots: list[_dt.datetime]
    next_fire_at: _dt.datetime
    next_due_at: _dt.datetime
    missed_first_at: _dt.datetime | None = None
    missed_last_at: _dt.datetime | None = None
    missed_slots: int = 0

    def args(self) -> dict[str, Any]:
        return dict(self.__dict__)


def plan_tick(row: dict[str, Any]) -> TickPlan:
    """The slots of one row of ``list_due_schedules`` at its ``now``: the ones to fire (due,
    inside the catch-up window), the ones missed (older than the window), and the next slot
    with its due time (slot + jitter). Raises InvalidArgument for a spec that does not parse."""
    schedule = Schedule.from_row(row["cron"], row["interval_secs"], row["timezone"])
    name, jitter = row["name"], float(row["jitter_secs"] or 0)
    now = row["now"]
    # As fire_schedule: a slot's jitter is not lateness, the window counts from its latest due time.
    cutoff = now - _dt.timedelta(seconds=int(row["catchup_window_secs"]) + jitter)
    slot = row["next_fire_at"]
    if slot is None:  # new, resumed or re-timed: the first slot after the anchor (and the last slot)
        after = max(t for t in (row["anchor_at"], row["last_slot_at"]) if t is not None)
        slots = schedule.iter_after(after)
    else:
        slots = schedule.iter_after(slot - _dt.timedelta(microseconds=1))
    slot = next(slots)
    due: list[_dt.datetime] = []
    missed_first = missed_last = None
    missed = 0
    while slot <= now and len(due) < MAX_DUE_PER_TICK:
        if slot < cutoff:
            missed_first = missed_first or slot
            missed_last = slot
            missed += 1
            if missed >= MAX_MISSED_COUNTED:
                # Jump to the window; the slots in between are not counted one by one.
                slots = schedule.iter_after(max(slot, cutoff - _dt.timedelta(seconds=1)))
                slot = next(slots)
                while slot < cutoff:
                    missed_last, missed = slot, missed + 1
                    slot = next(slots)
                continue
        elif slot + jitter_offset(name, slot, jitter) <= now:
            due.append(slot)
        else:
            break  # due later (its jitter): the next slot
        slot = next(slots)
    return TickPlan(
        schedule_id=row["schedule_id"],
        revision=row["revision"],
        slots=due,
        next_fire_at=slot,
        next_due_at=slot + jitter_offset(name, slot, jitter),
        missed_first_at=missed_first,
        missed_last_at=missed_last,
        missed_slots=missed,
    )


@dataclass
class TickReport:
    """What one tick did on one shard."""

    fired: list[dict[str, Any]] = field(default_factory=list)  # the firings (fire_schedule's)
    missed: int = 0
    busy: int = 0  # schedules another scheduler held
    stale: int = 0  # schedules changed since they were read
    buffered_started: int = 0
    errors: list[str] = field(default_factory=list)
    # The schedules whose slots cannot be computed (a cron stored through psql that does not
    # parse): due for ever, yet nothing fires them (the test kit's idle check leaves them out).
    uncomputable: list[str] = field(default_factory=list)

    @property
    def started(self) -> int:
        return self.buffered_started + sum(1 for f in self.fired if f.get("status") == "started")


async def _traced_fire(sql: Any, row: dict[str, Any], plan: TickPlan) -> dict[str, Any]:
    """``fire_schedule`` inside a ``harvest.schedule.fire`` span, the root of a new trace: the
    runs of the slots it fires (now, or later from the overlap buffer) continue it, each firing
    keeping its traceparent (docs/observability.md)."""
    attributes = {
        "harvest.schedule": row["name"],
        "harvest.schedule.slots": len(plan.slots),
    }
    with tracing.span("harvest.schedule.fire", root=True, attributes=attributes) as current:
        result: dict[str, Any] = await sql.fire_schedule(**plan.args(), traceparent=tracing.traceparent())
        firings = result.get("firings") or []
        current.set_attributes(
            {
                "harvest.schedule.outcome": str(result.get("outcome")),
                "harvest.schedule.started": sum(1 for f in firings if f.get("status") == "started"),
                "harvest.schedule.missed": int(result.get("missed") or 0),
            }
        )
        return result


async def tick(sql: Any, limit: int = 100, metrics: Any = None) -> TickReport:
    """One scheduler tick over ``sql`` (an AsyncSqlApi of one shard); ``metrics`` (the worker's,
    harvest/telemetry/metrics.py) counts the missed slots (``harvest_schedule_missed_total``).

    It reads the due schedules a page of ``limit`` at a time, the next page while the last one
    was full and moved a schedule on, up to MAX_PAGES_PER_TICK: a page a tick fell behind, and
    missed slots, once more schedules were due at one slot than a page."""
    report = TickReport()
    report.buffered_started = await sql.start_buffered_firings(limit)
    seen: set[int] = set()
    for _ in range(MAX_PAGES_PER_TICK):
        rows = await sql.list_due_schedules(limit)
        moved = await _tick_page(sql, [r for r in rows if r["schedule_id"] not in seen], report, metrics)
        # A fired row leaves the due list; the rows left (held by another scheduler, changed,
        # or that cannot be computed) come first again, and are not tried twice in a tick.
        seen.update(r["schedule_id"] for r in rows)
        if len(rows) < limit or not moved:
            break
    return report


async def _tick_page(sql: Any, rows: list[dict[str, Any]], report: TickReport, metrics: Any) -> int:
    """Fire the schedules of one page of ``list_due_schedules``; how many moved on (fired)."""
    moved = 0
    for row in rows:
        try:
            plan = plan_tick(row)
        except Exception as exc:
            # A spec that does not parse or whose slots cannot be computed (a row written past
            # the SQL checks): say so, and leave the others be (raised, it stopped them all).
            report.errors.append(f"schedule {row['name']!r}: {exc}")
            report.uncomputable.append(row["name"])
            log.warning("scheduler: schedule %r cannot be computed: %s", row["name"], exc)
            continue
        try:
            # (a tick that only sets a new or re-timed schedule's first slot fires nothing and
            # misses nothing: no trace of its own, as none of a run starts there)
            if tracing.ACTIVE and (plan.slots or plan.missed_slots):
                result = await _traced_fire(sql, row, plan)
            else:
                result = await sql.fire_schedule(**plan.args())
        except HarvestError as exc:
            # fire_schedule refused the plan (HR001): nothing was written; the others go on.
            report.errors.append(f"schedule {row['name']!r}: {exc}")
            log.warning("scheduler: schedule %r was not fired: %s", row["name"], exc)
            continue
        except Exception as exc:
            if connection_lost(exc):
                raise  # the database or our connection failed: the tick ends, the next retries it
            # A failure a run's start passed up (a deadlock, a timeout: _start_firing): this
            # schedule's firing rolled back and fires next tick; the others go on (one that
            # failed so on every tick would otherwise hold back every schedule after it).
            # failure_reason: the first line and SQLSTATE, redacted (a client error's first
            # line may quote a DSN), as every other failure line of the worker.
            reason = failure_reason(exc)
            report.errors.append(f"schedule {row['name']!r}: {reason}")
            log.warning(
                "scheduler: schedule %r was not fired, tried again next tick: %s", row["name"], reason
            )
            continue
        outcome = result.get("outcome")
        if outcome == "busy":
            report.busy += 1
        elif outcome == "stale":
            report.stale += 1
        else:
            moved += 1
            report.fired.extend(result.get("firings") or [])
            report.missed += int(result.get("missed") or 0)
            if result.get("missed"):
                log.warning("scheduler: schedule %r missed %s slot(s)", row["name"], result["missed"])
                if metrics is not None:
                    metrics.missed_schedule(row["name"], int(result["missed"]))
    return moved
