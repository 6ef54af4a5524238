"""Schedules end to end on a real database, time driven by harvest.fake_now (docs/schedules.md).

The scheduler's tick (harvest.worker.scheduler.tick: list_due_schedules, the slots computed in
Python, fire_schedule) runs on one connection whose engine clock the test moves, so a week of a
cron schedule, two DST transitions in two zones, catch-up windows and every overlap policy run in
seconds. The racing processes and the SIGKILL are tests/chaos/test_chaos_schedules.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import time
from zoneinfo import ZoneInfo

import psycopg
import pytest
from dag_helpers import register_one_task_dag

from harvest import App, Schedule, WorkflowSchedule, workflow
from harvest.core.errors import InvalidArgument, ScheduleAlreadyExists
from harvest.db.sqlapi import AsyncSqlApi, SqlApi
from harvest.worker import scheduler

UTC = dt.UTC
ONE_SECOND = dt.timedelta(seconds=1)


class Clock:
    """One async connection with its own engine clock, and the SQL API over it."""

    def __init__(self, dsn: str, start: dt.datetime):
        self.dsn, self.now = dsn, start
        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(psycopg.AsyncConnection.connect(dsn, autocommit=True))
        self.sql = AsyncSqlApi.on_connection(self.conn)
        self.set(start)

    def set(self, at: dt.datetime) -> None:
        self.now = at
        self.run(self.conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (at.isoformat(),)))

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def tick(self) -> scheduler.TickReport:
        return self.run(scheduler.tick(self.sql))

    def walk(self, until: dt.datetime, step: dt.timedelta) -> list[scheduler.TickReport]:
        """Tick every ``step`` up to ``until``, as a scheduler running all along would."""
        reports = [self.tick()]
        while self.now < until:
            # Wake at the next due slot (a second late) when it comes before the next step.
            cur = self.run(
                self.conn.execute("SELECT min(next_due_at) FROM harvest.schedules WHERE NOT paused")
            )
            due = self.run(cur.fetchone())[0]
            wake = (
                self.now + step if due is None or due <= self.now else min(self.now + step, due + ONE_SECOND)
            )
            self.set(min(wake, until))
            reports.append(self.tick())
        return reports

    def call(self, name: str, *args, **kwargs):
        return self.run(getattr(self.sql, name)(*args, **kwargs))

    def firings(self, schedule: str) -> list[tuple[dt.datetime, str, str | None]]:
        got = self.call("get_schedule", schedule, 1000)["firings"]
        return sorted((dt.datetime.fromisoformat(f["slot_at"]), f["status"], f["reason"]) for f in got)

    def close(self) -> None:
        self.run(self.conn.close())
        self.loop.close()


@pytest.fixture
def clock(db: str):
    made: list[Clock] = []

    def make(start: dt.datetime) -> Clock:
        made.append(Clock(db, start))
        return made[-1]

    yield make
    for c in made:
        c.close()


def _started_slots(c: Clock, schedule: str) -> list[dt.datetime]:
    return [slot for slot, status, _ in c.firings(schedule) if status == "started"]


def test_a_week_of_a_cron_schedule_fires_each_slot_once(clock, db) -> None:
    c = clock(dt.datetime(2030, 1, 6, 23, 0, tzinfo=UTC))
    c.call("create_schedule", "nightly", "report_wf", cron="0 3 * * *", timezone="Europe/Paris")
    c.call("create_schedule", "quarter", "report_wf", interval_secs=900, overlap="allow_all")
    started = time.monotonic()
    c.walk(dt.datetime(2030, 1, 13, 23, 0, tzinfo=UTC), dt.timedelta(hours=1))
    assert time.monotonic() - started < 60
    paris = ZoneInfo("Europe/Paris")
    firings = c.firings("nightly")
    assert [s.astimezone(paris).replace(tzinfo=None) for s, _, _ in firings] == [
        dt.datetime(2030, 1, day, 3, 0) for day in range(7, 14)
    ]
    # max_active_runs=1, overlap skip (the defaults): no worker ends the first run, so the
    # next six slots are recorded as skipped, each once.
    assert [(status, reason) for _, status, reason in firings] == [("started", None)] + [
        ("skipped", "max_active_runs")
    ] * 6
    nightly = _started_slots(c, "nightly")
    quarter = _started_slots(c, "quarter")
    assert len(quarter) == 7 * 96 and len(set(quarter)) == len(quarter)
    assert all(b - a == dt.timedelta(minutes=15) for a, b in itertools.pairwise(quarter))
    with psycopg.connect(db) as conn:
        ids = {
            r[0]
            for r in conn.execute(
                "SELECT workflow_id FROM harvest.executions WHERE workflow_id LIKE 'sched:nightly:%'"
            )
        }
    assert ids == {f"sched:nightly:{int(s.timestamp())}" for s in nightly}
    assert c.call("count_schedule_misses")[0]["missed_slots"] == 0


@pytest.mark.parametrize(
    ("zone", "expr", "start", "expected_local"),
    [
        # Spring forward: Paris skips 02:00-03:00 on 31 March 2030; 02:30 fires once, at 03:00.
        (
            "Europe/Paris",
            "30 2 * * *",
            dt.datetime(2030, 3, 29, 12, tzinfo=UTC),
            ["2030-03-30T02:30:00+01:00", "2030-03-31T03:00:00+02:00", "2030-04-01T02:30:00+02:00"],
        ),
        # Fall back: Paris repeats 02:00-03:00 on 27 October 2030; 02:30 fires once, the first time.
        (
            "Europe/Paris",
            "30 2 * * *",
            dt.datetime(2030, 10, 25, 12, tzinfo=UTC),
            ["2030-10-26T02:30:00+02:00", "2030-10-27T02:30:00+02:00", "2030-10-28T02:30:00+01:00"],
        ),
        # New York skips 02:00-03:00 on 10 March 2030.
        (
            "America/New_York",
            "30 2 * * *",
            dt.datetime(2030, 3, 8, 12, tzinfo=UTC),
            ["2030-03-09T02:30:00-05:00", "2030-03-10T03:00:00-04:00", "2030-03-11T02:30:00-04:00"],
        ),
        # New York repeats 01:00-02:00 on 3 November 2030: 01:30 fires once.
        (
            "America/New_York",
            "30 1 * * *",
            dt.datetime(2030, 11, 1, 12, tzinfo=UTC),
            ["2030-11-02T01:30:00-04:00", "2030-11-03T01:30:00-04:00", "2030-11-04T01:30:00-05:00"],
        ),
    ],
)
def test_dst_transitions_fire_once(clock, zone, expr, start, expected_local) -> None:
    c = clock(start)
    c.call("create_schedule", "dst", "report_wf", cron=expr, timezone=zone, overlap="allow_all")
    c.walk(start + dt.timedelta(days=3), dt.timedelta(minutes=10))
    got = [s.astimezone(ZoneInfo(zone)).isoformat() for s in _started_slots(c, "dst")]
    assert got == expected_local


def test_an_hourly_schedule_across_the_paris_gap_and_overlap(clock) -> None:
    """Hourly in Paris: the skipped hour collapses into 03:00 CEST; the repeated hour fires once."""
    c = clock(dt.datetime(2030, 3, 30, 22, 30, tzinfo=UTC))
    c.call("create_schedule", "hourly", "wf", cron="0 * * * *", timezone="Europe/Paris", overlap="allow_all")
    c.walk(dt.datetime(2030, 3, 31, 3, 30, tzinfo=UTC), dt.timedelta(minutes=5))
    paris = ZoneInfo("Europe/Paris")
    assert [s.astimezone(paris).strftime("%H:%M%z") for s in _started_slots(c, "hourly")] == [
        "00:00+0100",
        "01:00+0100",
        "03:00+0200",
        "04:00+0200",
        "05:00+0200",
    ]


@pytest.mark.parametrize(
    ("catchup", "fired", "missed"),
    [
        (False, [], 5),
        ("3h", ["03:00", "04:00", "05:00"], 2),
        (True, ["01:00", "02:00", "03:00", "04:00", "05:00"], 0),
    ],
)
def test_catch_up_after_downtime(clock, catchup, fired, missed) -> None:
    c = clock(dt.datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC))
    spec = WorkflowSchedule(
        "hourly", Schedule.every("1h"), workflow="wf", catchup=catchup, overlap="allow_all"
    )
    c.call("declare_schedules", [spec.spec()])
    c.tick()  # the first slot is computed: 01:00
    c.set(dt.datetime(2030, 1, 1, 5, 30, tzinfo=UTC))  # the scheduler was down from 00:00:30 to 05:30
    report = c.tick()
    assert [s.strftime("%H:%M") for s in _started_slots(c, "hourly")] == fired
    assert report.missed == missed
    got = c.call("get_schedule", "hourly")
    if missed:
        assert got["misses"][0]["slots"] == missed
        assert got["misses"][0]["reason"] == ("catchup_off" if catchup is False else "outside_catchup_window")
    assert got["missed_slots"] == missed
    assert got["next_fire_at"].startswith("2030-01-01T06:00:00")
    c.walk(dt.datetime(2030, 1, 1, 6, 0, 30, tzinfo=UTC), dt.timedelta(seconds=10))
    assert _started_slots(c, "hourly")[-1] == dt.datetime(2030, 1, 1, 6, tzinfo=UTC)


def test_a_long_outage_is_counted_and_skipped_quickly(clock) -> None:
    c = clock(dt.datetime(2030, 1, 1, tzinfo=UTC))
    c.call("create_schedule", "secondly", "wf", cron="* * * * * *")
    c.tick()
    c.set(dt.datetime(2030, 1, 2, tzinfo=UTC))  # a day down: 86400 slots
    started = time.monotonic()
    report = c.tick()
    assert time.monotonic() - started < 10
    assert report.missed >= scheduler.MAX_MISSED_COUNTED
    assert c.call("get_schedule", "secondly")["next_fire_at"].startswith("2030-01-02T00:00:01")


@pytest.mark.parametrize(
    ("overlap", "statuses"),
    [
        ("skip", ["started", "skipped", "skipped"]),
        ("buffer_one", ["started", "buffered", "skipped"]),
        ("buffer_all", ["started", "buffered", "buffered"]),
        ("cancel_other", ["started", "skipped", "buffered"]),
        ("terminate_other", ["started", "started", "started"]),
        ("allow_all", ["started", "started", "started"]),
    ],
)
def test_overlap_policies(clock, db, overlap, statuses) -> None:
    c = clock(dt.datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC))
    c.call("create_schedule", "ov", "wf", interval_secs=60, overlap=overlap)
    c.tick()
    c.walk(dt.datetime(2030, 1, 1, 0, 3, 1, tzinfo=UTC), dt.timedelta(seconds=20))
    assert [status for _, status, _ in c.firings("ov")] == statuses
    with psycopg.connect(db, autocommit=True) as conn:
        live = conn.execute("SELECT count(*) FROM harvest.executions WHERE status = 'RUNNING'").fetchone()[0]
        assert live == (3 if overlap == "allow_all" else 1)
        # The live run ends: a buffered slot starts on the next tick, oldest first.
        conn.execute(
            "SELECT harvest.terminate_workflow(id, 'done') FROM harvest.executions WHERE status = 'RUNNING'"
        )
    report = c.tick()
    after = [status for _, status, _ in c.firings("ov")]
    if "buffered" in statuses:
        assert report.buffered_started == 1
        assert after[statuses.index("buffered")] == "started"
    else:
        assert report.buffered_started == 0


def test_buffer_all_keeps_at_most_ten_thousand_waiting_slots(clock, db) -> None:
    """A run that never ends under buffer_all: the waiting slots stop at the limit (later slots
    are skipped, buffer_full), and a backfill that would pass it is refused before it fires."""
    c = clock(dt.datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC))
    c.call("create_schedule", "bq", "wf", interval_secs=60, overlap="buffer_all")
    c.tick()
    c.walk(dt.datetime(2030, 1, 1, 0, 1, 1, tzinfo=UTC), dt.timedelta(seconds=20))
    assert [status for _, status, _ in c.firings("bq")] == ["started"]
    with psycopg.connect(db, autocommit=True) as conn:
        # 9,998 older slots already waiting, as a long stuck run would have left them.
        conn.execute(
            """
            INSERT INTO harvest.schedule_firings
                (schedule_id, slot_at, origin, status, workflow_id, recorded_at)
            SELECT s.id, timestamptz '2029-01-01 00:00:00+00' + make_interval(mins => i), 'schedule',
                   'buffered', 'sched:bq:' || i, harvest.now()
            FROM harvest.schedules AS s, generate_series(1, 9998) AS i WHERE s.name = 'bq'
            """
        )
    c.walk(dt.datetime(2030, 1, 1, 0, 2, 1, tzinfo=UTC), dt.timedelta(seconds=20))
    assert c.firings("bq")[-1][1:] == ("buffered", None)  # the 9,999th
    backfill = Schedule.every("1m").slots(
        dt.datetime(2029, 12, 31, 0, 0, tzinfo=UTC), dt.datetime(2029, 12, 31, 0, 3, tzinfo=UTC)
    )
    with pytest.raises(InvalidArgument) as refused:
        c.call("backfill_schedule", "bq", backfill)  # 3 new slots: 10,002 would wait
    message = str(refused.value)
    assert "of 3 new slot(s) of schedule bq would leave 10002 waiting, over the limit of 10000" in message
    assert "9999 slot(s) of it are already waiting" in message  # what to do: the hint
    assert c.call("get_schedule", "bq")["buffered"] == 9999, "a refused backfill writes nothing"
    assert c.call("backfill_schedule", "bq", backfill[:1])["buffered"] == 1  # exactly at the limit
    c.walk(dt.datetime(2030, 1, 1, 0, 4, 1, tzinfo=UTC), dt.timedelta(seconds=20))
    assert [f[1:] for f in c.firings("bq")[-2:]] == [("skipped", "buffer_full")] * 2
    assert c.call("get_schedule", "bq")["buffered"] == 10000
    assert c.call("backfill_schedule", "bq", backfill[1:], "skip")["skipped"] == 2  # another overlap goes
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.terminate_workflow(id, 'done') FROM harvest.executions WHERE status = 'RUNNING'"
        )
    assert c.tick().buffered_started == 1  # the oldest waiting slot runs when the run ends


def test_pause_resume_trigger_backfill_and_declared_upsert(clock, db) -> None:
    c = clock(dt.datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC))

    @workflow(name="sched_wf")
    async def sched_wf(ctx, region: str) -> str:
        return region

    app = App(
        workflows=[sched_wf],
        schedules=[
            WorkflowSchedule("eu", Schedule.every("1m"), workflow=sched_wf, input="eu", overlap="allow_all")
        ],
    )
    from harvest.declare.schedules import schedule_specs

    assert c.call("declare_schedules", schedule_specs(app)) == {"changed": 1, "kept": []}
    c.tick()
    c.walk(dt.datetime(2030, 1, 1, 0, 2, 30, tzinfo=UTC), dt.timedelta(seconds=30))
    assert len(_started_slots(c, "eu")) == 2
    c.call("pause_schedule", "eu", "maintenance")
    c.walk(dt.datetime(2030, 1, 1, 0, 10, 30, tzinfo=UTC), dt.timedelta(seconds=30))
    assert len(_started_slots(c, "eu")) == 2, "a paused schedule fires nothing"
    assert c.call("declare_schedules", schedule_specs(app))["changed"] == 0, "a boot changes nothing"
    assert c.call("get_schedule", "eu")["paused"] is True, "and keeps the pause"
    c.call("resume_schedule", "eu")
    c.walk(dt.datetime(2030, 1, 1, 0, 11, 30, tzinfo=UTC), dt.timedelta(seconds=30))
    slots = _started_slots(c, "eu")
    assert slots[-1] == dt.datetime(2030, 1, 1, 0, 11, tzinfo=UTC) and len(slots) == 3
    assert c.call("get_schedule", "eu")["missed_slots"] == 0, "paused slots are not missed"
    firing = c.call("trigger_schedule", "eu")
    assert firing["origin"] == "trigger" and firing["status"] == "started"
    counts = c.call(
        "backfill_schedule",
        "eu",
        Schedule.every("1m").slots(
            dt.datetime(2030, 1, 1, 0, 0, tzinfo=UTC), dt.datetime(2030, 1, 1, 0, 5, tzinfo=UTC)
        ),
        "allow_all",
    )
    assert counts == {"started": 3, "buffered": 0, "skipped": 0, "failed": 0, "duplicate": 2}
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT input FROM harvest.executions WHERE workflow_id = %s",
            (f"sched:eu:{int(dt.datetime(2030, 1, 1, 0, 1, tzinfo=UTC).timestamp())}",),
        ).fetchone()
    assert row[0] == ["eu"]
    with pytest.raises(ScheduleAlreadyExists):
        c.call("create_schedule", "eu", "sched_wf", interval_secs=60)


def test_jitter_delays_each_firing_by_a_stable_amount(clock) -> None:
    c = clock(dt.datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC))
    c.call("create_schedule", "jit", "wf", interval_secs=3600, jitter_secs=600, overlap="allow_all")
    c.tick()
    due = dt.datetime.fromisoformat(c.call("get_schedule", "jit")["next_due_at"])
    slot = dt.datetime(2030, 1, 1, 1, tzinfo=UTC)
    assert slot < due < slot + dt.timedelta(minutes=10)
    c.set(due - dt.timedelta(seconds=1))
    c.tick()
    assert _started_slots(c, "jit") == []
    c.set(due)
    c.tick()
    assert _started_slots(c, "jit") == [slot], "the slot keeps its id; only its start moves"


def test_a_firing_whose_workflow_is_unknown_fails_visibly(clock, db) -> None:
    c = clock(dt.datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC))
    with psycopg.connect(db, autocommit=True) as conn:
        SqlApi(conn).register_workflows(["default"], ["known_wf"])
    # (kept though refused at its creation: create_schedule's HR010, unless allowed)
    c.call("create_schedule", "typo", "unknown_wf", interval_secs=60, allow_unregistered=True)
    c.tick()
    c.set(dt.datetime(2030, 1, 1, 0, 1, 1, tzinfo=UTC))
    c.tick()
    ((_slot, status, reason),) = c.firings("typo")
    assert status == "failed" and reason.startswith("HR010")


def test_bad_declarations_are_one_line_errors_naming_the_field() -> None:
    with pytest.raises(InvalidArgument, match="the hour field '25'"):
        Schedule.cron("0 25 * * *")
    with pytest.raises(InvalidArgument, match="tz 'Mars/Base' is not a known time zone"):
        Schedule.cron("0 3 * * *", tz="Mars/Base")
    with pytest.raises(InvalidArgument, match="overlap 'stack'"):
        WorkflowSchedule("x", Schedule.every("1m"), overlap="stack")


def test_a_worker_declares_its_schedules_and_fires_them(db, start_worker) -> None:
    """End to end on the real clock: the worker upserts the App's schedule at boot, its scanner
    fires every second, and the runs complete; a process whose scheduler is off fires nothing."""

    @workflow(name="tick_wf")
    async def tick_wf(ctx, n: int) -> dict:
        name, slot = ctx.info.schedule_slot  # the slot this run was fired for
        return {"n": n + 1, "schedule": name, "slot": int(slot.timestamp())}

    app = App(
        workflows=[tick_wf],
        schedules=[WorkflowSchedule("secondly", Schedule.cron("* * * * * *"), workflow=tick_wf, input=41)],
    )
    with psycopg.connect(db, autocommit=True) as conn:
        web = start_worker(app, run_scanner=False)  # the web role: declares, never fires
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not conn.execute("SELECT 1 FROM harvest.schedules").fetchone():
            time.sleep(0.1)
        time.sleep(1.5)
        assert conn.execute("SELECT count(*) FROM harvest.schedule_firings").fetchone()[0] == 0
        web.stop()
        start_worker(app)
        deadline = time.monotonic() + 30
        done = 0
        while time.monotonic() < deadline and done < 3:
            time.sleep(0.2)
            done = conn.execute(
                "SELECT count(*) FROM harvest.executions WHERE workflow_id LIKE 'sched:secondly:%' "
                "AND status = 'COMPLETED' AND output ->> 'n' = '42' AND output ->> 'schedule' = 'secondly' "
                "AND workflow_id = 'sched:secondly:' || (output ->> 'slot')"
            ).fetchone()[0]
        assert done >= 3
        declared = conn.execute(
            "SELECT declared, kind FROM harvest.schedules WHERE name = 'secondly'"
        ).fetchone()
        assert declared == (True, "workflow")


def test_a_trigger_of_a_paused_schedule_leaves_its_buffered_slot_to_the_resume(clock, db) -> None:
    """docs/schedules.md: "A paused schedule's buffered slots wait for the resume." A trigger
    (or a backfill) of the paused schedule fires its own slot and leaves the buffered one (it
    started it: _fire_slot's _start_buffered did not look at the pause)."""
    c = clock(dt.datetime(2030, 1, 1, 0, 0, 30, tzinfo=dt.UTC))
    c.call("create_schedule", "pbuf", "wf", interval_secs=60, overlap="buffer_one")
    c.tick()
    c.set(dt.datetime(2030, 1, 1, 0, 1, 1, tzinfo=dt.UTC))
    c.tick()  # 00:01 started
    c.set(dt.datetime(2030, 1, 1, 0, 2, 1, tzinfo=dt.UTC))
    c.tick()  # 00:02 buffered
    assert [s for _, s, _ in c.firings("pbuf")] == ["started", "buffered"]
    c.call("pause_schedule", "pbuf")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.terminate_workflow(id, 'done') FROM harvest.executions WHERE status = 'RUNNING'"
        )
    c.set(dt.datetime(2030, 1, 1, 0, 2, 30, tzinfo=dt.UTC))
    c.call("trigger_schedule", "pbuf")
    buffered_slot = dt.datetime(2030, 1, 1, 0, 2, tzinfo=dt.UTC)
    status = {slot: s for slot, s, _ in c.firings("pbuf")}[buffered_slot]
    assert status == "buffered", "the paused schedule's buffered slot started before the resume"


def test_a_paused_dags_schedule_does_not_end_the_runs_in_flight(db: str) -> None:
    """docs/dags.md, Paused: "Runs in flight go on. ... While the DAG is paused its schedule's
    slots are skipped, recorded with the reason dag_paused." A DAG schedule under
    terminate_other (harvest schedule update --overlap terminate_other) terminates the run in
    flight at the next slot of the paused DAG, and then skips that slot: no run at all."""
    with psycopg.connect(db, autocommit=True) as conn:
        register_one_task_dag(SqlApi(conn), "term_dag", 1)
    c = Clock(db, dt.datetime(2030, 1, 1, 0, 0, 30, tzinfo=dt.UTC))
    try:
        c.call(
            "create_schedule", "term_dag", "term_dag", interval_secs=60, kind="dag", overlap="terminate_other"
        )
        c.tick()
        c.set(dt.datetime(2030, 1, 1, 0, 1, 1, tzinfo=dt.UTC))
        c.tick()  # 00:01 starts a run of the DAG
        with psycopg.connect(db, autocommit=True) as conn:
            SqlApi(conn).pause_dag("term_dag")
        c.set(dt.datetime(2030, 1, 1, 0, 2, 1, tzinfo=dt.UTC))
        c.tick()  # 00:02 of the paused DAG
        firings = c.firings("term_dag")
    finally:
        c.close()
    with psycopg.connect(db, autocommit=True) as conn:
        statuses = [
            r[0]
            for r in conn.execute(
                "SELECT status FROM harvest.executions WHERE workflow_name = 'term_dag' ORDER BY created_at"
            )
        ]
    assert firings[-1][1:] == ("skipped", "dag_paused")
    assert statuses == ["RUNNING"], f"the run in flight was ended by a slot of the paused DAG: {statuses}"


def test_a_paused_dags_slot_is_recorded_dag_paused_even_with_a_run_in_flight(db: str) -> None:
    """docs/dags.md: "While the DAG is paused its schedule's slots are skipped, recorded with
    the reason dag_paused". The DAG's own schedule (max_active_runs=1, overlap skip, as
    Dag.as_schedule makes it) records a slot of the paused DAG as max_active_runs when a run
    is in flight: _fire_slot decides the overlap before _start_firing looks at the pause."""
    with psycopg.connect(db, autocommit=True) as conn:
        register_one_task_dag(SqlApi(conn), "reason_dag", 1)
    c = Clock(db, dt.datetime(2030, 1, 1, 0, 0, 30, tzinfo=dt.UTC))
    try:
        c.call("create_schedule", "reason_dag", "reason_dag", interval_secs=60, kind="dag")
        c.tick()
        c.set(dt.datetime(2030, 1, 1, 0, 1, 1, tzinfo=dt.UTC))
        c.tick()
        with psycopg.connect(db, autocommit=True) as conn:
            SqlApi(conn).pause_dag("reason_dag")
        c.set(dt.datetime(2030, 1, 1, 0, 2, 1, tzinfo=dt.UTC))
        c.tick()
        firings = c.firings("reason_dag")
    finally:
        c.close()
    assert firings[-1][1:] == ("skipped", "dag_paused"), firings


def test_a_one_database_worker_declares_its_schedules_unless_its_database_is_one_shard_of_several(
    db, start_worker
) -> None:
    """The boot check of a worker without [shards] (docs/sharding.md, "Adding a shard", step 2):
    a one-database deployment's worker declares its schedules as ever, beside a worker whose
    registration names this shard alone; once a registration names another shard, it refuses to
    start and declares nothing there."""
    from harvest import Worker
    from harvest.core.errors import ConfigError

    @workflow(name="one_db_tick")
    async def one_db_tick(ctx) -> str:
        return "ok"

    app = App(
        workflows=[one_db_tick],
        schedules=[WorkflowSchedule("one_db", Schedule.every("1h"), workflow=one_db_tick)],
    )
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.register_worker('w-one', ARRAY['default'], 'h', 1, 5,"
            ' \'{"shard_assignments": [0], "readable_shards": [0]}\')'
        )
    running = start_worker(app)
    deadline = time.monotonic() + 20
    with psycopg.connect(db, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if conn.execute("SELECT count(*) FROM harvest.schedules WHERE name = 'one_db'").fetchone()[0]:
                break
            time.sleep(0.05)
        assert conn.execute("SELECT count(*) FROM harvest.schedules WHERE name = 'one_db'").fetchone()[0] == 1
        running.stop()
        conn.execute("DELETE FROM harvest.schedules WHERE name = 'one_db'")
        conn.execute(
            "SELECT harvest.register_worker('w-sharded', ARRAY['default'], 'h', 2, 5,"
            ' \'{"shard_assignments": [0, 1], "readable_shards": [0, 1]}\')'
        )
        with pytest.raises(ConfigError, match=r"shard 0 of a sharded deployment \(shards 0, 1"):
            # (bounded: a worker that is not refused runs until stopped)
            asyncio.run(asyncio.wait_for(Worker(app, db, run_retention=False).run(), 60))
        assert conn.execute("SELECT count(*) FROM harvest.schedules WHERE name = 'one_db'").fetchone()[0] == 0
