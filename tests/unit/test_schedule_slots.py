"""The pure half of schedules (no database): slots of cron schedules across DST in several zones,
interval slots, jitter, the scheduler's plan of a tick (harvest.worker.scheduler.plan_tick) and
declaration errors."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from harvest import App, Schedule, WorkflowSchedule, workflow
from harvest.core.errors import ConfigError, InvalidArgument, PayloadError
from harvest.declare.schedules import backfill_slots, jitter_offset, schedule_specs, workflow_id_of
from harvest.worker.scheduler import MAX_DUE_PER_TICK, MAX_MISSED_COUNTED, plan_tick

UTC = dt.UTC


@pytest.mark.parametrize("zone", ["Europe/Paris", "America/New_York", "Australia/Lord_Howe"])
@pytest.mark.parametrize("expr", ["0 * * * *", "30 2 * * *"])
def test_a_year_of_slots_is_strictly_increasing_and_each_local_time_fires_once(zone, expr) -> None:
    """Over a year (two DST transitions; Lord Howe shifts by 30 minutes), slots increase
    strictly in UTC and no local (date, hour, minute) the expression names fires twice."""
    schedule = Schedule.cron(expr, tz=zone)
    start = dt.datetime(2030, 1, 1, tzinfo=UTC)
    slots = schedule.slots(start, start + dt.timedelta(days=365), limit=100_000)
    assert all(a < b for a, b in itertools.pairwise(slots))
    local = [s.astimezone(ZoneInfo(zone)) for s in slots]
    wall = [(t.date(), t.hour, t.minute) for t in local]
    assert len(wall) == len(set(wall))
    if expr == "30 2 * * *":
        assert len({t.date() for t in local}) == 365, "a daily slot fires every day, the DST days too"


def test_the_paris_gap_and_the_repeated_hour() -> None:
    paris = ZoneInfo("Europe/Paris")
    hourly = Schedule.cron("0 * * * *", tz="Europe/Paris")
    spring = hourly.slots(dt.datetime(2030, 3, 30, 23, tzinfo=UTC), dt.datetime(2030, 3, 31, 3, tzinfo=UTC))
    assert [s.astimezone(paris).strftime("%H:%M%z") for s in spring] == [
        "01:00+0100",
        "03:00+0200",
        "04:00+0200",
        "05:00+0200",
    ]
    autumn = hourly.slots(dt.datetime(2030, 10, 26, 22, tzinfo=UTC), dt.datetime(2030, 10, 27, 3, tzinfo=UTC))
    assert [s.astimezone(paris).strftime("%H:%M%z") for s in autumn] == [
        "01:00+0200",
        "02:00+0200",
        "03:00+0100",
        "04:00+0100",
    ]


def test_seconds_field_aliases_and_intervals() -> None:
    t = dt.datetime(2030, 1, 1, 0, 0, 0, tzinfo=UTC)
    assert Schedule.cron("*/10 * * * * *").slots(t, t + dt.timedelta(seconds=30)) == [
        t + dt.timedelta(seconds=s) for s in (10, 20, 30)
    ]
    assert Schedule.cron("@daily").next_after(t) == dt.datetime(2030, 1, 2, tzinfo=UTC)
    assert Schedule.every("15m").next_after(t + dt.timedelta(minutes=7)) == t + dt.timedelta(minutes=15)
    assert Schedule.every("15m").next_after(t) == t + dt.timedelta(minutes=15), "strictly after"
    assert workflow_id_of("nightly", t) == f"sched:nightly:{int(t.timestamp())}"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Schedule.cron("0 25 * * *"), "the hour field '25' of '0 25 * * *' is not valid"),
        (lambda: Schedule.cron("61 * * * *"), "the minute field '61'"),
        (lambda: Schedule.cron("0 3 * 13 *"), "the month field '13'"),
        (lambda: Schedule.cron("0 0 3 * * mon-xyz"), "the day-of-week field 'mon-xyz'"),
        (lambda: Schedule.cron("0 3 * *"), "has 4 fields"),
        (lambda: Schedule.cron("@fortnightly"), "alias '@fortnightly'"),
        (lambda: Schedule.cron("0 3 30 2 *"), "never matches"),
        (lambda: Schedule.cron("0 3 * * *", tz="Mars/Base"), "tz 'Mars/Base' is not a known time zone"),
        (lambda: Schedule.every("1.5s"), "whole number of seconds"),
        (lambda: Schedule.every("0s"), "positive"),
        (lambda: WorkflowSchedule("x", Schedule.every("1m"), max_active_runs=0), "max_active_runs"),
        (lambda: WorkflowSchedule("x", Schedule.every("1m"), kind="job"), "kind must be"),
        (lambda: WorkflowSchedule("x", Schedule.every("1m"), catchup="soon"), "catchup"),
        (lambda: WorkflowSchedule("x", "0 3 * * *"), "schedule must be Schedule.cron"),
        (lambda: WorkflowSchedule("x", Schedule.every("1m"), input=1, args=(1, 2)), "not both"),
    ],
)
def test_bad_declarations_are_one_line_errors_naming_the_field(call, message) -> None:
    with pytest.raises(InvalidArgument) as raised:
        call()
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_app_schedules_and_their_specs() -> None:
    @workflow(name="report", queue="reports")
    async def report(ctx, region: str) -> str:
        return region

    nightly = WorkflowSchedule(
        "nightly",
        Schedule.cron("0 3 * * *", tz="Europe/Paris"),
        workflow=report,
        input="eu",
        catchup="6h",
        jitter="30s",
    )
    app = App(workflows=[report], schedules=[nightly])
    (spec,) = schedule_specs(app)
    assert spec == {
        "name": "nightly",
        "kind": "workflow",
        "workflow_name": "report",
        "queue": "reports",
        "input": ["eu"],
        "cron": "0 3 * * *",
        "interval_secs": None,
        "timezone": "Europe/Paris",
        "max_active_runs": 1,
        "overlap": "skip",
        "catchup": True,
        "catchup_window_secs": 6 * 3600,
        "jitter_secs": 30.0,
    }
    with pytest.raises(ConfigError, match="duplicate schedule name 'nightly'"):
        App(schedules=[nightly, WorkflowSchedule("nightly", Schedule.every("1h"))])


def test_jitter_is_stable_and_bounded() -> None:
    slot = dt.datetime(2030, 1, 1, tzinfo=UTC)
    offsets = {jitter_offset(f"s{i}", slot, 60) for i in range(200)}
    assert all(dt.timedelta(0) <= o < dt.timedelta(seconds=60) for o in offsets) and len(offsets) > 100
    assert jitter_offset("s1", slot, 60) == jitter_offset("s1", slot, 60)
    assert jitter_offset("s1", slot, 0) == dt.timedelta(0)


def _row(**overrides):
    row = {
        "schedule_id": 1,
        "name": "s",
        "cron": None,
        "interval_secs": 60,
        "timezone": "UTC",
        "jitter_secs": 0,
        "catchup_window_secs": 60,
        "anchor_at": dt.datetime(2030, 1, 1, tzinfo=UTC),
        "next_fire_at": None,
        "last_slot_at": None,
        "revision": 7,
        "now": dt.datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC),
    }
    return {**row, **overrides}


def test_plan_tick_computes_the_first_slot_then_the_due_and_missed_ones() -> None:
    first = plan_tick(_row())
    assert (first.slots, first.next_fire_at, first.revision) == (
        [],
        dt.datetime(2030, 1, 1, 0, 1, tzinfo=UTC),
        7,
    )
    later = plan_tick(
        _row(next_fire_at=first.next_fire_at, now=dt.datetime(2030, 1, 1, 0, 5, 30, tzinfo=UTC))
    )
    assert later.slots == [dt.datetime(2030, 1, 1, 0, 5, tzinfo=UTC)]
    assert (later.missed_slots, later.missed_first_at, later.missed_last_at) == (
        4,
        dt.datetime(2030, 1, 1, 0, 1, tzinfo=UTC),
        dt.datetime(2030, 1, 1, 0, 4, tzinfo=UTC),
    )
    assert later.next_fire_at == dt.datetime(2030, 1, 1, 0, 6, tzinfo=UTC)


def test_plan_tick_bounds_a_long_catch_up_and_a_long_outage() -> None:
    start = dt.datetime(2030, 1, 1, tzinfo=UTC)
    catchup = plan_tick(
        _row(
            interval_secs=1, catchup_window_secs=86400, next_fire_at=start, now=start + dt.timedelta(hours=2)
        )
    )
    assert len(catchup.slots) == MAX_DUE_PER_TICK and catchup.next_fire_at == start + dt.timedelta(
        seconds=1000
    )
    outage = plan_tick(
        _row(cron="* * * * * *", interval_secs=None, next_fire_at=start, now=start + dt.timedelta(days=2))
    )
    assert outage.missed_slots >= MAX_MISSED_COUNTED
    assert outage.next_fire_at >= start + dt.timedelta(days=2) - dt.timedelta(seconds=61)


def _app_with(schedule_of: Any) -> Any:
    @workflow
    async def report(ctx, day: int) -> int:
        return day

    return App(workflows=[report], schedules=[schedule_of(WorkflowSchedule, report)])


@pytest.mark.parametrize(
    ("schedule_of", "error", "says"),
    [
        (
            lambda ws, wf: ws("nightly", Schedule.every(60), wf, args=(1, 2)),
            TypeError,
            r"WorkflowSchedule 'nightly': bad arguments for report: too many positional arguments",
        ),
        (
            lambda ws, wf: ws("nightly", Schedule.every(60), wf),
            TypeError,
            r"missing a required argument: 'day'",
        ),
        (
            lambda ws, wf: ws("nightly", Schedule.every(60), wf, input="monday"),
            PayloadError,
            r"parameter 'day' of report \(int\): input\[0\]: expected int",
        ),
        (
            lambda ws, wf: ws("nightly", Schedule.every(60), "elsewhere", input="a\x00"),
            PayloadError,
            r"the input of schedule nightly cannot be stored: .*U\+0000",
        ),
        (
            lambda ws, wf: ws("nightly", Schedule.every(60), "elsewhere", input=object()),
            PayloadError,
            r"schedule nightly input\[0\]: cannot encode object of type object",
        ),
    ],
    ids=["too many", "too few", "a str for an int", "a NUL", "unencodable, by name"],
)
def test_a_schedules_arguments_are_checked_when_the_app_is_made(
    schedule_of: Any, error: type, says: str
) -> None:
    """App(schedules=...) took arguments its workflow refuses: a wrong count started a run
    that failed at every slot, an unencodable one failed the worker's start, and a NUL reached
    the database as psycopg's UntranslatableCharacter when the worker declared the schedule."""
    with pytest.raises(error, match=says):
        _app_with(schedule_of)


def test_a_schedule_of_an_activity_is_refused() -> None:
    from harvest import activity

    @activity
    def cleanup(ctx) -> None: ...

    with pytest.raises(InvalidArgument, match=r"WorkflowSchedule 'n': .*cleanup is an @activity"):
        WorkflowSchedule("n", Schedule.every(60), cleanup)


def test_a_schedule_whose_arguments_fit_is_registered() -> None:
    app = _app_with(lambda ws, wf: ws("nightly", Schedule.every(60), wf, input=3))
    assert app.schedules["nightly"].arguments() == [3]
    # (by a name the App does not register: encoded and stored, not bound)
    assert App(schedules=[WorkflowSchedule("n", Schedule.every(60), "elsewhere", args=(1, 2))]).schedules


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("9999-12-31T00:00:00+00:00", "9999-12-31T23:59:59+00:00"),  # the slot after 9999's last
        ("0001-01-01T00:00:00+01:00", "0001-01-02T00:00:00+00:00"),  # before year 1 in UTC
    ],
)
def test_a_backfill_range_at_the_ends_of_time_is_an_invalid_argument(start: str, end: str) -> None:
    """A backfill's range whose slots reach outside the years 1 to 9999 raised OverflowError or
    ValueError out of `harvest schedule backfill` (a traceback) and the API's backfill (a 500)."""
    row = {"name": "hourly", "interval_secs": 3600, "cron": None, "timezone": None}
    with pytest.raises(InvalidArgument, match="reaches past the years 1 to 9999"):
        backfill_slots(row, dt.datetime.fromisoformat(start), dt.datetime.fromisoformat(end))
