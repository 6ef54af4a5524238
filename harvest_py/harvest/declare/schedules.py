"""Schedules: ``Schedule.cron(expr, tz=)``, ``Schedule.every("15m")`` and ``WorkflowSchedule``.

A schedule names *slots*: UTC instants, whole seconds. A cron schedule's slots are the wall-clock
times its expression matches in its time zone (croniter over local wall time, ``zoneinfo`` for the
zone); an interval schedule's are the multiples of its interval since the Unix epoch. The SQL tick
(``harvest.fire_schedule``) fires a slot once: the run's workflow id is ``sched:{name}:{unix_ts}``
and (schedule, slot) is unique (docs/schedules.md).

Daylight saving time, for cron schedules: a local time that does not exist (the spring-forward
gap) fires once, at the instant the gap starts (02:30 on a day Paris skips 02:00-03:00 fires at
03:00 CEST); a local time that happens twice (the fall-back hour) fires once, at its first
occurrence. Slots are strictly increasing in UTC.

Everything here is pure: the worker's scheduler (worker/scheduler.py) and the CLI compute slots
with it.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from harvest.core import payload
from harvest.core.durations import parse_duration
from harvest.core.errors import ConfigError, InvalidArgument

__all__ = [
    "CATCHUP_GRACE_SECS",
    "CATCHUP_WINDOW_SECS",
    "MAX_ACTIVE_RUNS",
    "OVERLAP_POLICIES",
    "Schedule",
    "WorkflowSchedule",
    "backfill_slots",
    "catchup_options",
    "describe_row",
    "jitter_offset",
    "jitter_secs",
    "next_fire_times",
    "register_schedules",
    "schedule_problem",
    "schedule_specs",
    "schedule_view",
    "timing",
    "timing_changes",
    "workflow_id_of",
]

UTC = _dt.UTC
OVERLAP_POLICIES = ("skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all")
# catchup=False: a slot the scheduler sees later than this is missed, not fired (a tick's delay
# is well inside it). catchup=True: missed slots replay up to this far back.
CATCHUP_GRACE_SECS = 60
CATCHUP_WINDOW_SECS = 365 * 86400
# The most runs of a schedule at once, whichever face declares or changes it.
MAX_ACTIVE_RUNS = 1_000_000
_FIELDS_5 = ("minute", "hour", "day-of-month", "month", "day-of-week")
_FIELDS_6 = ("second", *_FIELDS_5)
_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


def _zone(tz: Any, what: str) -> ZoneInfo:
    if isinstance(tz, ZoneInfo):
        return tz
    if not isinstance(tz, str) or not tz:
        raise InvalidArgument(f"{what}: tz must be an IANA zone name such as 'Europe/Paris', got {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(
            f"{what}: tz {tz!r} is not a known time zone (use an IANA name such as 'Europe/Paris' or 'UTC')"
        ) from None


def _check_cron(expr: Any, what: str) -> str:
    """The expression, or InvalidArgument naming the field that is wrong."""
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidArgument(f"{what}: expected a cron expression such as '0 3 * * *', got {expr!r}")
    text = " ".join(expr.split())
    if text.startswith("@"):
        if text.lower() not in _ALIASES:
            raise InvalidArgument(f"{what}: alias {text!r} is not one of {', '.join(_ALIASES)}")
        return text.lower()
    parts = text.split(" ")
    if len(parts) not in (5, 6):
        raise InvalidArgument(
            f"{what}: {text!r} has {len(parts)} fields; a cron expression has 5 "
            f"({' '.join(_FIELDS_5)}) or 6 with the seconds first"
        )
    from croniter import croniter  # (only a cron schedule needs it: not every worker's start)

    names = _FIELDS_5 if len(parts) == 5 else _FIELDS_6
    for i, (name, value) in enumerate(zip(names, parts, strict=True)):
        probe = ["*"] * len(parts)
        probe[i] = value
        if not croniter.is_valid(" ".join(probe), second_at_beginning=True):
            raise InvalidArgument(f"{what}: the {name} field {value!r} of {text!r} is not valid")
    if not croniter.is_valid(text, second_at_beginning=True):
        raise InvalidArgument(f"{what}: {text!r} is not a valid cron expression")
    try:  # a valid expression that never matches (30 February) has no next slot
        croniter(text, _dt.datetime(2000, 1, 1), second_at_beginning=True).get_next(_dt.datetime)
    except Exception:
        raise InvalidArgument(f"{what}: {text!r} never matches a date") from None
    return text


def _aware(t: _dt.datetime, what: str = "time") -> _dt.datetime:
    if not isinstance(t, _dt.datetime) or t.tzinfo is None:
        raise InvalidArgument(f"{what}: expected a timezone-aware datetime, got {t!r}")
    return t.astimezone(UTC)


def _to_utc(naive: _dt.datetime, zone: ZoneInfo) -> _dt.datetime:
    """The UTC instant of a local wall time: the first occurrence of a repeated time, and the
    instant the gap starts for a time that does not exist."""
    first = naive.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == naive:
        return first
    other = naive.replace(tzinfo=zone, fold=1).astimezone(UTC)
    lo, hi = int(min(first, other).timestamp()), int(max(first, other).timestamp())
    # The first instant whose wall time reaches `naive`: the end of the gap.
    while lo < hi:
        mid = (lo + hi) // 2
        if _dt.datetime.fromtimestamp(mid, zone).replace(tzinfo=None) >= naive:
            hi = mid
        else:
            lo = mid + 1
    return _dt.datetime.fromtimestamp(hi, UTC)


@dataclass(frozen=True)
class Schedule:
    """When a schedule fires: ``Schedule.cron(expr, tz=)`` or ``Schedule.every(duration)``."""

    expression: str | None = None
    interval_secs: int | None = None
    timezone: str = "UTC"

    @classmethod
    def cron(cls, expr: str, tz: str = "UTC") -> Schedule:
        """A cron expression in a time zone: 5 fields (minute hour day-of-month month
        day-of-week), 6 with the seconds first, or an alias (``@daily``, ``@hourly``, ...)."""
        text = _check_cron(expr, "Schedule.cron")
        zone = _zone(tz, "Schedule.cron")
        return cls(expression=text, timezone=zone.key)

    @classmethod
    def every(cls, interval: Any) -> Schedule:
        """Every ``interval`` (``"15m"``, ``"1h"``, seconds, a timedelta), in whole seconds, on
        the multiples of the interval since the Unix epoch (``"15m"``: :00, :15, :30, :45 UTC)."""
        secs = parse_duration(interval, "Schedule.every", positive=True)
        if secs < 1 or not float(secs).is_integer():
            raise InvalidArgument(
                f"Schedule.every: {interval!r} must be a whole number of seconds, at least 1"
            )
        return cls(interval_secs=int(secs))

    @classmethod
    def from_row(cls, cron: str | None, interval_secs: int | None, timezone: str | None) -> Schedule:
        """The schedule of a stored row (harvest.schedules), checked as a declaration is."""
        if cron:
            return cls.cron(cron, tz=timezone or "UTC")
        if interval_secs:
            return cls.every(int(interval_secs))
        raise InvalidArgument("a schedule needs a cron expression or an interval")

    def __post_init__(self) -> None:
        if (self.expression is None) == (self.interval_secs is None):
            raise InvalidArgument("a Schedule is Schedule.cron(...) or Schedule.every(...)")

    @property
    def zone(self) -> ZoneInfo:
        return _zone(self.timezone, "Schedule")

    def describe(self) -> str:
        """When it fires in one phrase, as a stored schedule reads (:func:`describe_row`)."""
        return describe_row(
            {"cron": self.expression, "interval_secs": self.interval_secs, "timezone": self.timezone}
        )

    def next_after(self, t: _dt.datetime) -> _dt.datetime:
        """The first slot strictly after ``t`` (UTC)."""
        return next(self.iter_after(t))

    def slots(self, after: _dt.datetime, until: _dt.datetime, limit: int = 10_000) -> list[_dt.datetime]:
        """The slots in (after, until], at most ``limit`` of them, ascending."""
        out: list[_dt.datetime] = []
        until = _aware(until)
        for slot in self.iter_after(after):
            if slot > until or len(out) >= limit:
                break
            out.append(slot)
        return out

    def iter_after(self, t: _dt.datetime) -> Iterator[_dt.datetime]:
        """The slots strictly after ``t``, ascending (strictly, in UTC), without end."""
        last = _aware(t)
        if self.interval_secs is not None:
            step = self.interval_secs
            ts = int(last.timestamp() // step) * step
            while True:
                ts += step
                yield _dt.datetime.fromtimestamp(ts, UTC)
        zone = self.zone
        wall = last.astimezone(zone).replace(tzinfo=None, microsecond=0)
        # croniter walks local wall time; each match maps to UTC (_to_utc), and a match at or
        # before the last slot (a gap's times collapsing into one instant, the second pass of
        # a repeated hour) is dropped.
        from croniter import croniter

        it = croniter(cast(str, self.expression), wall - _dt.timedelta(seconds=1), second_at_beginning=True)
        while True:
            slot = _to_utc(it.get_next(_dt.datetime), zone)
            if slot > last:
                last = slot
                yield slot


# A schedule's timing and options as an operator gives them (the API's and the dashboard's
# fields, harvest.web.schedule_spec; the CLI's options, harvest.cli.schedule), checked here once,
# as a declaration's are. Each refusal is an InvalidArgument whose ``field`` names the field as
# the API does (its 400's "field"); its message spells the fields as the face does (``spell``:
# "catchup_window" as it is, or "--catchup-window"), and ``usage`` marks two fields given
# together (the CLI's usage error).


def _as_given(name: str) -> str:
    return "catchup false" if name == "no_catchup" else name


def refused(field_name: str, message: str, *, usage: bool = False) -> InvalidArgument:
    """An InvalidArgument about the schedule field ``field_name``."""
    exc = InvalidArgument(message)
    exc.field = field_name  # type: ignore[attr-defined]
    exc.usage = usage  # type: ignore[attr-defined]
    return exc


def timing(
    cron: str | None, every: Any, tz: str | None, *, spell: Callable[[str], str] = _as_given
) -> dict[str, Any]:
    """``{"cron", "timezone"}`` or ``{"interval_secs"}`` as create_schedule takes them, ``{}``
    when neither is given (None: not given; an empty string is given, and refused)."""
    if cron is not None and every is not None:
        raise refused("every", f"give {spell('cron')} or {spell('every')}, not both", usage=True)
    if cron is not None:
        if tz is not None:
            try:  # the zone alone first, so an unknown one is refused naming tz, not cron
                _zone(tz, "Schedule.cron")
            except InvalidArgument as exc:
                raise refused("tz", str(exc)) from None
        try:
            spec = Schedule.cron(cron, tz="UTC" if tz is None else tz)
        except InvalidArgument as exc:
            raise refused("cron", str(exc)) from None
        return {"cron": spec.expression, "timezone": spec.timezone}
    if tz is not None:
        why = " (an interval is in UTC)" if every is not None else ""
        raise refused("tz", f"{spell('tz')} goes with {spell('cron')}{why}", usage=True)
    if every is not None:
        try:
            return {"interval_secs": Schedule.every(every).interval_secs}
        except InvalidArgument as exc:
            raise refused("every", str(exc)) from None
    return {}


def timing_changes(
    cron: str | None, every: Any, tz: str | None, *, spell: Callable[[str], str] = _as_given
) -> dict[str, Any]:
    """An update's timing: as :func:`timing`, but a cron alone keeps the schedule's zone."""
    if tz is not None and cron is None:
        raise refused("tz", f"{spell('tz')} goes with {spell('cron')}", usage=True)
    changes = timing(cron, every, tz, spell=spell)
    if tz is None:
        changes.pop("timezone", None)
    return changes


def catchup_options(
    catchup: bool | None, window: Any, *, spell: Callable[[str], str] = _as_given
) -> dict[str, Any]:
    """``catchup`` / ``catchup_window_secs`` from catch-up on or off and a window (which turns
    it on); None: not given."""
    if catchup is False and window is not None:
        raise refused(
            "catchup_window",
            f"give {spell('no_catchup')} or {spell('catchup_window')}, not both (a window turns catch-up on)",
            usage=True,
        )
    out: dict[str, Any] = {}
    if catchup is not None:
        out["catchup"] = catchup
    if window is not None:
        out["catchup"] = True
        try:
            secs = parse_duration(window, spell("catchup_window"), positive=True)
        except InvalidArgument as exc:
            raise refused("catchup_window", str(exc)) from None
        out["catchup_window_secs"] = max(1, int(secs))
    return out


def jitter_secs(value: Any, *, spell: Callable[[str], str] = _as_given) -> float:
    """The jitter in seconds (any non-negative duration)."""
    try:
        return parse_duration(value, spell("jitter"))
    except InvalidArgument as exc:
        raise refused("jitter", str(exc)) from None


def _moment(value: Any) -> _dt.datetime | None:
    if value is None or isinstance(value, _dt.datetime):
        return value
    return _dt.datetime.fromisoformat(value)


def upcoming_slots(row: dict[str, Any], count: int = 5) -> list[_dt.datetime]:
    """The next ``count`` slots of a stored schedule (``get_schedule``'s JSON or a
    ``list_schedules`` row): its stored next slot, then the ones after it; none while paused."""
    if row.get("paused"):
        return []
    spec = Schedule.from_row(row.get("cron"), row.get("interval_secs"), row.get("timezone"))
    first = _moment(row.get("next_fire_at"))
    if first is None:
        known = [t for t in (_moment(row.get("anchor_at")), _moment(row.get("last_slot_at"))) if t]
        first = spec.next_after(max(known) if known else _dt.datetime.now(UTC))
    out = [first]
    for slot in spec.iter_after(first):
        if len(out) >= count:
            break
        out.append(slot)
    return out


def jitter_offset(name: str, slot: _dt.datetime, jitter_secs: float) -> _dt.timedelta:
    """How long after its slot a firing is due: a fraction of ``jitter_secs`` drawn from a hash
    of (name, slot), so every scheduler computes the same delay for a slot."""
    if not jitter_secs:
        return _dt.timedelta(0)
    digest = hashlib.blake2b(f"{name}:{int(slot.timestamp())}".encode(), digest_size=8).digest()
    fraction = int.from_bytes(digest, "big") / 2**64
    return _dt.timedelta(seconds=round(fraction * jitter_secs, 3))


# A backfill fires at most this many slots per call.
BACKFILL_MAX_SLOTS = 10_000


def describe_row(row: dict[str, Any]) -> str:
    """A stored schedule's timing in one phrase: ``cron 0 3 * * * UTC`` or ``every 900s``. The
    one spelling: `schedule list`'s WHEN, a DAG's SCHEDULE (`dag list`: :meth:`Schedule.describe`,
    stored at registration) and the dashboard's pages."""
    if row.get("cron"):
        return f"cron {row['cron']} {row.get('timezone') or 'UTC'}"
    return f"every {row.get('interval_secs')}s"


def schedule_problem(row: dict[str, Any]) -> str | None:
    """Why the slots of a stored schedule cannot be computed (a cron stored through psql that
    does not parse: SQL cannot parse cron), or None. The scheduler logs it on each tick."""
    try:
        Schedule.from_row(row.get("cron"), row.get("interval_secs"), row.get("timezone"))
    except InvalidArgument as exc:
        return str(exc)
    return None


def next_fire_times(row: dict[str, Any], count: int = 5) -> list[str]:
    """:func:`upcoming_slots` as ISO 8601 text (``harvest schedule get``, the HTTP API); none
    for a schedule that cannot be computed (:func:`schedule_problem` says why)."""
    if schedule_problem(row) is not None:
        return []
    return [s.isoformat() for s in upcoming_slots(row, count)]


# ``next_fire`` in a listed schedule: where its ``next_fire_at`` comes from.
NEXT_FIRE_STORED = "scheduled"  # the scheduler's stored next slot, not yet past
NEXT_FIRE_OVERDUE = "overdue"  # the stored slot's due time (plus its jitter) past: no scheduler fired it
NEXT_FIRE_COMPUTED = "computed"  # none stored yet (no scheduler has ticked): computed as `get` does


def listed_schedule(row: dict[str, Any]) -> dict[str, Any]:
    """A ``list_schedules`` row as ``harvest schedule list`` and ``GET /admin/schedules`` show
    it: while the scheduler has stored no next slot, the one :func:`upcoming_slots` computes (as
    ``get`` does), and ``next_fire`` says which (:data:`NEXT_FIRE_STORED`, ``_OVERDUE`` when the
    stored one's due time, its ``next_due_at`` (the slot plus its jitter: when the scheduler fires
    it), is before the row's ``now``, the engine's, or ``_COMPUTED``); None while paused (and
    ``next_fire_at`` too) or uncomputable. A row that already says (a server's answer) is kept as it is."""
    if "next_fire" in row:
        return row
    out = {k: v for k, v in row.items() if k not in ("now", "next_due_at")}
    stored = _moment(row.get("next_fire_at"))
    due = _moment(row.get("next_due_at")) or stored
    now = _moment(row.get("now"))
    mark: str | None = None
    if row.get("paused"):
        # Nothing fires while paused, and the slot stored before the pause is not the one that
        # fires after it (a resume counts from the resume): shown, it read as a fire time.
        out["next_fire_at"] = None
    elif stored is not None:
        mark = NEXT_FIRE_OVERDUE if now is not None and due is not None and due < now else NEXT_FIRE_STORED
    elif schedule_problem(row) is None:
        out["next_fire_at"] = upcoming_slots(row, 1)[0]
        mark = NEXT_FIRE_COMPUTED
    out["next_fire"] = mark
    return out


def schedule_view(row: dict[str, Any], count: int = 5) -> dict[str, Any]:
    """A stored schedule as ``harvest schedule get`` and the HTTP API show it: its
    ``next_fire_times``, its ``problem`` when its slots cannot be computed, and the run's
    arguments as ``args`` (the SQL's ``input``, a list): what a write's ``args`` takes back as
    it reads, where a write's ``input`` is the one argument. A row that says ``args`` already
    (a server's answer) keeps it."""
    problem = schedule_problem(row)
    shown = {("args" if k == "input" else k): v for k, v in row.items()}
    return {
        **shown,
        "next_fire_times": next_fire_times(row, count),
        **({"problem": problem} if problem else {}),
    }


def backfill_slots(row: dict[str, Any], start: _dt.datetime, end: _dt.datetime) -> list[_dt.datetime]:
    """The slots of a stored schedule in [start, end] (inclusive), at most BACKFILL_MAX_SLOTS."""
    spec = Schedule.from_row(row.get("cron"), row.get("interval_secs"), row.get("timezone"))
    try:
        start, end = _aware(start), _aware(end)
        if end < start:  # (each refusal names the field, the API's 400 too: the range's end)
            raise refused(
                "to", f"backfill: the end {end.isoformat()} is before the start {start.isoformat()}"
            )
        slots = spec.slots(start - _dt.timedelta(microseconds=1), end, limit=BACKFILL_MAX_SLOTS + 1)
    except (OverflowError, ValueError):  # a slot before year 1 or after 9999 (was a traceback, a 500)
        raise InvalidArgument(
            f"backfill: the range {start.isoformat()} to {end.isoformat()} reaches past the years 1 to 9999"
        ) from None
    if len(slots) > BACKFILL_MAX_SLOTS:
        raise refused(
            "to",
            f"{row.get('name')}: more than {BACKFILL_MAX_SLOTS} slots in that range; backfill a shorter one",
        )
    return slots


def workflow_id_of(name: str, slot: _dt.datetime) -> str:
    """The workflow id of a schedule's run for a slot: ``sched:{name}:{unix seconds}``."""
    return f"sched:{name}:{int(_aware(slot).timestamp())}"


def _catchup_window(catchup: Any, what: str) -> tuple[bool, int]:
    if catchup is False or catchup is None:
        return False, CATCHUP_GRACE_SECS
    if catchup is True:
        return True, CATCHUP_WINDOW_SECS
    # a window: the rule the CLI's and the API's catch-up window follow, named as given here
    window = catchup_options(None, catchup, spell=lambda _name: f"{what}: catchup")
    return True, int(window["catchup_window_secs"])


@dataclass(frozen=True)
class WorkflowSchedule:
    """A workflow started on a schedule, declared on the App (``App(schedules=[...])``).

    ``workflow`` is a ``@workflow`` function or a workflow name (default: ``name``); ``input``
    is the one argument the run gets (``args`` for several; neither: none). ``max_active_runs``
    runs at once at most, and ``overlap`` says what a slot does when they are all live: skip
    (default), buffer_one, buffer_all, cancel_other, terminate_other or allow_all. ``catchup``:
    False (a slot seen more than 60 s late is missed and recorded), True (missed slots of the
    last year replay), or a window (``"6h"``). ``jitter`` delays each firing by a stable
    pseudo-random part of it. ``kind`` is ``"dag"`` for a DAG's schedule."""

    name: str
    schedule: Schedule
    workflow: Any = None
    input: Any = None
    args: tuple[Any, ...] = ()
    max_active_runs: int = 1
    overlap: str = "skip"
    catchup: Any = False
    jitter: Any = 0
    kind: str = "workflow"
    queue: str | None = None
    _window: tuple[bool, int] = field(
        default=(False, CATCHUP_GRACE_SECS), init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        what = f"WorkflowSchedule {self.name!r}"
        if not isinstance(self.name, str) or not self.name or len(self.name) > 200:
            long = isinstance(self.name, str) and len(self.name) > 200  # (named, not echoed whole)
            got = f"{self.name[:40]!r}... ({len(self.name)} characters)" if long else repr(self.name)
            raise InvalidArgument(f"WorkflowSchedule: name must be 1 to 200 characters, got {got}")
        if not isinstance(self.schedule, Schedule):
            raise InvalidArgument(
                f"{what}: schedule must be Schedule.cron(...) or Schedule.every(...), got {self.schedule!r}"
            )
        if (
            not isinstance(self.max_active_runs, int)
            or isinstance(self.max_active_runs, bool)
            or not 1 <= self.max_active_runs <= MAX_ACTIVE_RUNS
        ):
            raise InvalidArgument(
                f"{what}: max_active_runs must be an int from 1 to {MAX_ACTIVE_RUNS}, "
                f"got {self.max_active_runs!r}"
            )
        if self.overlap not in OVERLAP_POLICIES:
            raise InvalidArgument(
                f"{what}: overlap {self.overlap!r} is not one of {', '.join(OVERLAP_POLICIES)}"
            )
        if self.kind not in ("workflow", "dag"):
            raise InvalidArgument(f"{what}: kind must be 'workflow' or 'dag', got {self.kind!r}")
        if self.input is not None and self.args:
            raise InvalidArgument(f"{what}: give input (one argument) or args (several), not both")
        if getattr(self.workflow, "__harvest_activity__", None) is not None and not hasattr(
            self.workflow, "__harvest_workflow__"
        ):
            raise InvalidArgument(
                f"{what}: {self.workflow.__qualname__} is an @activity; a schedule starts a @workflow"
            )
        jitter_secs(self.jitter, spell=lambda name: f"{what}: {name}")
        object.__setattr__(self, "_window", _catchup_window(self.catchup, what))

    @property
    def workflow_name(self) -> str:
        wf = self.workflow
        if wf is None:
            return self.name
        if isinstance(wf, str):
            return wf
        defn = getattr(wf, "__harvest_workflow__", None)
        return defn.name if defn is not None else getattr(wf, "__name__", str(wf))

    def arguments(self) -> list[Any]:
        """The run's positional arguments."""
        return list(self.args) if self.args else ([] if self.input is None else [self.input])

    def spec(self, *, queue: str = "default", input: list[Any] | None = None) -> dict[str, Any]:
        """The JSON harvest.declare_schedules takes (``input``: the encoded arguments)."""
        catchup, window = self._window
        return {
            "name": self.name,
            "kind": self.kind,
            "workflow_name": self.workflow_name,
            "queue": self.queue or queue,
            "input": self.arguments() if input is None else input,
            "cron": self.schedule.expression,
            "interval_secs": self.schedule.interval_secs,
            "timezone": self.schedule.timezone,
            "max_active_runs": self.max_active_runs,
            "overlap": self.overlap,
            "catchup": catchup,
            "catchup_window_secs": window,
            "jitter_secs": parse_duration(self.jitter, "jitter"),
        }


def register_schedules(schedules: Any) -> dict[str, WorkflowSchedule]:
    """``App(schedules=[...])``: WorkflowSchedules by name (a name twice is a ConfigError)."""
    out: dict[str, WorkflowSchedule] = {}
    for item in schedules:
        if not isinstance(item, WorkflowSchedule):
            raise ConfigError(f"App(schedules=...) takes WorkflowSchedule objects, got {item!r}")
        if item.name in out and out[item.name] != item:
            raise ConfigError(f"duplicate schedule name {item.name!r} in App(schedules=...)")
        out[item.name] = item
    return out


def check_input(item: WorkflowSchedule, definition: Any) -> None:
    """``App(schedules=...)``: the schedule's arguments as every slot will start the run with
    them, checked once when the App is made: bound to the workflow's parameters and decoded by
    its hints when the App registers it (as a start checks them), encodable, and storable. A
    wrong argument count failed every run the schedule started; a NUL was psycopg's error at
    the worker's start."""
    check_arguments(item.name, item.arguments(), definition, f"WorkflowSchedule {item.name!r}")


def check_arguments(name: str, args: list[Any], definition: Any, what: str) -> None:
    """A schedule's run arguments checked against its workflow's ``definition`` (None: only
    encodable and storable), as :func:`check_input` does for a declaration and the management
    API for a schedule it makes (its served App's workflow): a binding error is a TypeError that
    begins with ``what``."""
    fn = None
    if definition is not None and definition.dag is None and definition.batch is None:
        fn = definition.fn  # (a DAG's run, or a batch's, takes other arguments than the slot's)
    try:
        encoded = payload.encode_args(fn, args, path=f"schedule {name} input")
        if fn is not None:
            payload.decode_args(fn, encoded)
    except TypeError as exc:
        if type(exc) is TypeError:  # a binding error (a PayloadError names the schedule already)
            raise TypeError(f"{what}: {exc}") from None
        raise
    payload.check_storable(encoded, f"the input of schedule {name}")


def schedule_specs(app: Any) -> list[dict[str, Any]]:
    """The JSON harvest.declare_schedules takes for an App's schedules: each with its
    workflow's queue (when the App registers the workflow) and its encoded arguments."""
    specs = []
    for item in getattr(app, "schedules", {}).values():
        defn = app.workflows.get(item.workflow_name)
        queue = defn.queue if defn is not None else "default"
        specs.append(
            item.spec(queue=queue, input=payload.encode(item.arguments(), f"schedule {item.name} input"))
        )
    return specs
