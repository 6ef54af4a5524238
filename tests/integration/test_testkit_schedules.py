"""The test kit drives schedules (docs/testing.md "Testing schedules"): a schedule the App declares
fires under the environment's test clock through the worker's own scheduler tick, each slot on
time as the clock walks (env.sleep, env.skip_schedule, a result wait), late as after a real
outage (env.sleep(..., outage=True)), under its overlap and catch-up policies; and a schedule that
fires for ever keeps neither wait_until_idle() nor a stuck result wait going."""

from __future__ import annotations

import datetime as dt
import itertools
import time
from collections.abc import Iterator

import psycopg
import pytest

from harvest import App, Schedule, WorkflowSchedule, workflow
from harvest.core.errors import InvalidArgument, TimeoutError_
from harvest.declare.schedules import jitter_offset
from harvest.testing import TestServer, WorkflowEnvironment

HOUR = dt.timedelta(hours=1)
# How late a slot may fire and still be "on time": the real time a step of the walk takes.
ON_TIME = dt.timedelta(seconds=30)
# How far from the hour an environment must start (see the environment fixture).
HOUR_MARGIN_SECS = 30


@workflow
async def stamp(ctx) -> dict:
    """What a scheduled run saw: its slot, and the clock when it ran."""
    slot = ctx.info.schedule_slot
    return {"slot": slot[1].isoformat() if slot else None, "at": ctx.now().isoformat()}


@workflow
async def held(ctx) -> str:
    await ctx.wait_for_signal("release")
    return "released"


@workflow
async def napper(ctx) -> str:
    await ctx.sleep("3h")
    return "rested"


@workflow
async def waiter(ctx) -> str:
    return await ctx.wait_for_signal("never")


def _app(*schedules: WorkflowSchedule) -> App:
    return App(workflows=[stamp, held, napper, waiter], schedules=list(schedules))


def hourly(workflow_fn=stamp, **options) -> WorkflowSchedule:
    return WorkflowSchedule("hourly", Schedule.every("1h"), workflow=workflow_fn, **options)


@pytest.fixture(scope="module")
def kit_server(pg_server) -> Iterator[TestServer]:
    server = TestServer(dsn=pg_server.dsn).start()
    yield server
    server.stop()


@pytest.fixture
def environment(kit_server: TestServer):
    made: list[WorkflowEnvironment] = []

    def make(*schedules: WorkflowSchedule, **options) -> WorkflowEnvironment:
        # The kit's clock starts at real time, and an hourly slot falls on the hour: one due in
        # the few seconds an environment takes to start fired before the test walked the clock,
        # so its first walked slot was skipped (CI 67b, at 06:00). Start clear of the hour.
        to_hour = HOUR.total_seconds() - time.time() % HOUR.total_seconds()
        if to_hour < HOUR_MARGIN_SECS:
            time.sleep(to_hour + 1)
        made.append(WorkflowEnvironment(_app(*schedules), server=kit_server, **options).start())
        return made[-1]

    yield make
    for env in made:
        env.close()


def _firings(env: WorkflowEnvironment, name: str) -> list[dict]:
    """The schedule's firings, oldest first, read with the SQL API (not the kit's helpers)."""
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        got = conn.execute("SELECT harvest.get_schedule(%s, 1000)", (name,)).fetchone()[0]
    return sorted(got["firings"], key=lambda f: f["slot_at"])


def _misses(env: WorkflowEnvironment, name: str) -> list[dict]:
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        return conn.execute("SELECT harvest.get_schedule(%s, 1000)", (name,)).fetchone()[0]["misses"]


def _slot(firing: dict) -> dt.datetime:
    return dt.datetime.fromisoformat(firing["slot_at"])


def _started_on_time(env: WorkflowEnvironment, firings: list[dict]) -> list[dict]:
    """The results of the started firings' runs, each checked to have run at its slot."""
    results = []
    for firing in firings:
        assert firing["status"] == "started", firing
        result = env.client.get_handle(firing["execution_id"]).result(timeout=10)
        slot, at = dt.datetime.fromisoformat(result["slot"]), dt.datetime.fromisoformat(result["at"])
        assert slot == _slot(firing)
        assert slot <= at < slot + ON_TIME, f"slot {slot} ran at {at}: late"
        results.append(result)
    return results


def test_env_sleep_fires_each_slot_on_time_as_a_scheduler_running_all_along_would(environment):
    """Sleeping 3 hours over an hourly schedule fires 3 runs, each at its slot: none is missed
    (the environment's worker was up the whole time), none fires late."""
    env = environment(hourly(overlap="allow_all"))
    env.wait_until_idle()
    before = env.now()
    env.sleep("3h")
    firings = [f for f in _firings(env, "hourly") if _slot(f) > before]
    assert len(firings) == 3, firings
    assert [_slot(b) - _slot(a) for a, b in itertools.pairwise(firings)] == [HOUR, HOUR]
    _started_on_time(env, firings)
    assert _misses(env, "hourly") == []


def test_skip_schedule_walks_the_clock_to_the_next_fires_and_returns_them(environment):
    env = environment(hourly(overlap="allow_all"))
    fired = env.skip_schedule("hourly", fires=3)
    assert [f.status for f in fired] == ["started"] * 3
    assert [f.slot for f in fired] == [_slot(f) for f in _firings(env, "hourly")]
    assert fired[1].slot - fired[0].slot == HOUR and fired[2].slot - fired[1].slot == HOUR
    assert all(f.workflow_id == f"sched:hourly:{int(f.slot.timestamp())}" for f in fired)
    assert fired[2].slot <= env.now() < fired[2].slot + ON_TIME  # the clock stopped at the third
    results = _started_on_time(env, _firings(env, "hourly"))
    assert [r["slot"] for r in results] == [f.slot.isoformat() for f in fired]
    assert env.schedule_firings("hourly") == fired
    # The next call goes on from there.
    (fourth,) = env.skip_schedule("hourly")
    assert fourth.slot - fired[2].slot == HOUR


@pytest.mark.parametrize(
    ("catchup", "started", "missed"),
    [(True, 3, 0), (False, 1, 2)],
    ids=["catchup-fires-every-slot", "no-catchup-fires-the-latest-only"],
)
def test_an_outage_over_three_slots_catches_up_as_in_production(environment, catchup, started, missed):
    """env.sleep(..., outage=True): nothing ran for 3 hours, so the scheduler sees the slots late:
    catch-up on fires the three (in order, under the overlap policy); off, the two older than 60 s
    are missed (catchup_off) and the one due now fires."""
    env = environment(hourly(overlap="allow_all", catchup=catchup))
    (first,) = env.skip_schedule("hourly")
    env.sleep("3h", outage=True)
    after = [f for f in _firings(env, "hourly") if _slot(f) > first.slot]
    assert [f["status"] for f in after] == ["started"] * started
    assert _slot(after[-1]) == first.slot + 3 * HOUR
    misses = _misses(env, "hourly")
    assert sum(m["slots"] for m in misses) == missed
    if missed:
        assert {m["reason"] for m in misses} == {"catchup_off"}
        assert dt.datetime.fromisoformat(misses[0]["first_slot_at"]) == first.slot + HOUR


def test_overlap_policies_decide_under_the_test_clock(environment):
    """max_active_runs=1: with skip, the slots while the first run is live are skipped; with
    buffer_one, one waits and starts once the first run ends (wait_until_idle waits for it)."""
    env = environment(
        WorkflowSchedule("skipper", Schedule.every("1h"), workflow=held, overlap="skip"),
        WorkflowSchedule("bufferer", Schedule.every("1h"), workflow=held, overlap="buffer_one"),
        WorkflowSchedule("canceller", Schedule.every("1h"), workflow=held, overlap="cancel_other"),
    )
    skipped = env.skip_schedule("skipper", fires=3)
    assert [(f.status, f.reason) for f in skipped] == [
        ("started", None),
        ("skipped", "max_active_runs"),
        ("skipped", "max_active_runs"),
    ]
    buffered = env.schedule_firings("bufferer")[-3:]
    assert [(f.status, f.reason) for f in buffered] == [
        ("started", None),
        ("buffered", None),
        ("skipped", "buffer_full"),
    ]
    # cancel_other: each slot asks the live run to cancel, waits for it to end, then starts.
    cancelled = _firings(env, "canceller")[-3:]
    assert [(f["status"], f["run_status"]) for f in cancelled] == [
        ("started", "CANCELLED"),
        ("started", "CANCELLED"),
        ("started", "RUNNING"),
    ]
    env.client.get_handle(buffered[0].execution_id).signal("release")
    env.wait_until_idle()
    later = {f.slot: f for f in env.schedule_firings("bufferer")}
    assert later[buffered[1].slot].status == "started"
    assert env.client.get_handle(buffered[0].execution_id).result(timeout=10) == "released"


def test_jitter_delays_the_start_and_the_slot_keeps_its_id(environment):
    env = environment(hourly(overlap="allow_all", jitter="20m"))
    (fired,) = env.skip_schedule("hourly")
    delay = jitter_offset("hourly", fired.slot, 20 * 60)
    result = env.client.get_handle(fired.execution_id).result(timeout=10)
    at = dt.datetime.fromisoformat(result["at"])
    assert result["slot"] == fired.slot.isoformat()
    assert fired.slot + delay <= at < fired.slot + delay + ON_TIME


def test_a_result_wait_fires_the_slots_it_skips_over_on_time(environment):
    """A run's 3-hour timer, awaited: the hourly slots on the way fire at their times (not late,
    not missed), then the timer fires."""
    env = environment(hourly(overlap="allow_all"))
    env.wait_until_idle()
    before = env.now()
    assert env.client.start_workflow(napper).result(timeout=10) == "rested"
    firings = [f for f in _firings(env, "hourly") if _slot(f) > before]
    assert len(firings) == 3, firings
    _started_on_time(env, firings)
    assert _misses(env, "hourly") == []


def test_a_schedule_that_fires_for_ever_keeps_no_wait_going(environment):
    """A schedule is never a reason to move the clock on its own: wait_until_idle returns between
    slots, and a run waiting for a signal nobody sends is reported stuck (after stuck_after),
    not skipped along the schedule's slots until the result_timeout."""
    env = environment(
        WorkflowSchedule("often", Schedule.every("10s"), workflow=stamp, overlap="allow_all"),
        stuck_after=0.5,
        result_timeout=20,
    )
    env.wait_until_idle(timeout=5)
    before = env.now()
    handle = env.client.start_workflow(waiter)
    # The stuck report, not the result_timeout's bound ("bounds a result() given no timeout").
    with pytest.raises(TimeoutError_, match="nothing in the test environment can make it progress") as stuck:
        handle.result()
    assert "waits for signal 'never'" in str(stuck.value)
    assert "A schedule's next slot" in str(stuck.value) and "env.skip_schedule(name)" in str(stuck.value)
    assert env.now() - before < dt.timedelta(minutes=1)  # no skip along the slots
    env.wait_until_idle(timeout=5)


def test_a_paused_schedule_does_not_fire_and_skip_schedule_says_so(environment):
    env = environment(hourly(overlap="allow_all"))
    env.wait_until_idle()
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute("SELECT harvest.pause_schedule('hourly', 'frozen')")
    env.sleep("3h")
    assert _firings(env, "hourly") == []
    with pytest.raises(InvalidArgument, match="'hourly' is paused"):
        env.skip_schedule("hourly")
    with pytest.raises(InvalidArgument, match=r"no schedule 'nope'.*it has: 'hourly'"):
        env.skip_schedule("nope")
    with pytest.raises(InvalidArgument, match="fires must be a whole number"):
        env.skip_schedule("hourly", fires=0)


def test_a_walk_over_too_many_stops_fails_instead_of_running_for_hours(environment, monkeypatch):
    """Each slot on the way is a stop: past MAX_WALK_STOPS the sleep fails saying what to do (the
    clock where it got to), and outage=True jumps the same span at once."""
    from harvest.testing import environment as environment_module

    monkeypatch.setattr(environment_module, "MAX_WALK_STOPS", 5)
    env = environment(WorkflowSchedule("often", Schedule.every("1m"), workflow=stamp, overlap="allow_all"))
    with pytest.raises(TimeoutError_, match=r"after 5 stops on the way.*outage=True"):
        env.sleep("1h")
    env.sleep("1h", outage=True)
    assert env.schedule_firings("often")[-1].status == "started"


def test_a_schedule_created_through_sql_fires_too(environment):
    env = environment()
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute("SELECT harvest.create_schedule('made', 'stamp', p_interval_secs => 1800)")
    fired = env.skip_schedule("made", fires=2)
    assert [f.status for f in fired] == ["started", "started"]
    assert fired[1].slot - fired[0].slot == dt.timedelta(minutes=30)
    _started_on_time(env, _firings(env, "made"))


def test_a_worker_without_a_scheduler_fires_no_schedule_and_is_idle(environment):
    """run_scanner=False (no scheduler role): the slots are not work the environment waits for,
    nothing fires them, and skip_schedule says why instead of walking for ever."""
    env = environment(hourly(overlap="allow_all"), run_scanner=False)
    env.wait_until_idle(timeout=5)
    env.sleep("3h")
    assert _firings(env, "hourly") == []
    with pytest.raises(InvalidArgument, match="runs no scheduler"):
        env.skip_schedule("hourly")


def test_a_schedule_whose_cron_cannot_be_computed_is_not_waited_for(environment):
    """A cron stored through SQL that the scheduler cannot parse is due for ever and fires
    nothing: the environment does not wait for it, and skip_schedule says what is wrong."""
    env = environment(hourly(overlap="allow_all"))
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute("SELECT harvest.create_schedule('broken', 'stamp', p_cron => '61 * * * *')")
    env.wait_until_idle(timeout=5)
    with pytest.raises(InvalidArgument, match=r"schedule 'broken' never fires: .*minute"):
        env.skip_schedule("broken")
    (fired,) = env.skip_schedule("hourly")  # the others fire as usual
    assert fired.status == "started"
