"""Schedules under real concurrency and hostile input (docs/schedules.md "Guarantees").

Two sessions on real connections race the schedule functions: one holds its transaction open,
the other is started in a thread and the test waits until Postgres says it is blocked on a lock
(pg_stat_activity), then lets the first commit. No sleep decides anything.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import psycopg
import pytest
from race_helpers import Racer, in_thread, race_behind_a_held_lock

from harvest.core.errors import ScheduleAlreadyExists
from harvest.db.sqlapi import AsyncSqlApi, SqlApi
from harvest.worker import scheduler

SPEC = {"name": "nightly", "workflow_name": "nightly_wf", "cron": "0 3 * * *", "timezone": "UTC"}


def _race(db: str, conn: psycopg.Connection, first: str, second: str, args: Any) -> Any:
    """``first`` runs in an open transaction, ``second`` on another connection blocks behind it;
    the first commits and the second's outcome (a row, or the exception) is returned."""
    outcome = race_behind_a_held_lock(
        db,
        conn,
        lambda holder: holder.execute(first, args),
        Racer(
            "second",
            lambda c: c.execute(second, args).fetchone(),
            waits_on="the first's uncommitted schedule (its name's unique key)",
            may_fail=True,  # the outcome, a row or an error, is the test's to judge
        ),
        end_within=10,
    )
    return outcome["second"]


def test_two_workers_declaring_a_new_schedule_at_once_both_boot(db: str, conn: psycopg.Connection) -> None:
    """A rolling deploy: two workers' boots upsert the same new schedule at the same moment.
    The second waits for the first and finds the schedule there: nothing to change, no error
    (a unique violation here failed the second worker's start)."""
    declare = "SELECT harvest.declare_schedules(%s::jsonb)"
    got = _race(db, conn, declare, declare, (json.dumps([SPEC]),))
    assert got == (0,), got
    assert conn.execute("SELECT count(*) FROM harvest.schedules").fetchone() == (1,)


def test_two_operators_creating_one_name_at_once_the_second_is_told_it_exists(
    db: str, conn: psycopg.Connection
) -> None:
    """Two create_schedule calls of one name at once: the second answers HR014 (the API's
    409, 'update it, or delete it first'), as it does when it comes later, not a raw unique
    violation (a 500)."""
    create = "SELECT harvest.create_schedule(%s, 'nightly_wf', p_cron => '0 3 * * *')"
    got = _race(db, conn, create, create, ("nightly",))
    assert isinstance(got, psycopg.Error) and got.sqlstate == "HR014", repr(got)
    with pytest.raises(ScheduleAlreadyExists):
        SqlApi(conn).create_schedule("nightly", "nightly_wf", cron="0 3 * * *")


def _tick_at(db: str, at: str) -> Any:
    """One scheduler tick (harvest.worker.scheduler.tick) on its own connection at engine time ``at``."""

    async def run() -> Any:
        async with await psycopg.AsyncConnection.connect(db, autocommit=True) as aconn:
            await aconn.execute("SELECT set_config('harvest.fake_now', %s, false)", (at,))
            return await scheduler.tick(AsyncSqlApi.on_connection(aconn))

    return asyncio.run(run())


BAD_SPECS = {
    # What the SQL API took and the scheduler could not compute: a zone name Postgres reads
    # (case-insensitively, or as an abbreviation or a POSIX rule) but zoneinfo does not know,
    # and numbers past what a duration may be (the scheduler's datetime arithmetic overflowed).
    "timezone": [("p_cron", "0 3 * * *"), ("p_timezone", "europe/paris")],
    "timezone abbreviation": [("p_cron", "0 3 * * *"), ("p_timezone", "PST")],
    "timezone posix": [("p_cron", "0 3 * * *"), ("p_timezone", "UTC+3")],
    "catchup_window_secs": [("p_interval_secs", 60), ("p_catchup_window_secs", 10**11)],
    "jitter_secs": [("p_interval_secs", 60), ("p_jitter_secs", 1e300)],
    "jitter_secs nan": [("p_interval_secs", 60), ("p_jitter_secs", float("nan"))],
    "jitter_secs infinity": [("p_interval_secs", 60), ("p_jitter_secs", float("inf"))],
    "interval_secs": [("p_interval_secs", 10**12)],
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_the_sql_api_refuses_a_schedule_the_scheduler_cannot_compute(
    conn: psycopg.Connection, case: str
) -> None:
    """create_schedule (psql, role harvest_operator) refuses what the CLI and the HTTP API
    refuse: one HR001 naming the field, and nothing written."""
    args = dict(BAD_SPECS[case])
    named = ", ".join(f"{k} => %({k})s" for k in args)
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(f"SELECT harvest.create_schedule('bad', 'wf', {named})", args)
    assert caught.value.sqlstate == "HR001", caught.value
    assert case.split()[0] in str(caught.value), caught.value
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM harvest.schedules").fetchone() == (0,)


def test_one_schedule_the_scheduler_cannot_compute_stops_no_other(db: str, conn: psycopg.Connection) -> None:
    """A row no check guards (the owner's UPDATE) that the scheduler's arithmetic cannot take
    is reported and left; the other schedules of the shard fire on the same tick."""
    conn.execute("SELECT set_config('harvest.fake_now', '2030-01-01T00:00:00+00:00', false)")
    api = SqlApi(conn)
    api.create_schedule("a_bad", "wf", interval_secs=60)
    api.create_schedule("healthy", "wf", interval_secs=60)
    conn.execute("UPDATE harvest.schedules SET jitter_secs = 'NaN' WHERE name = 'a_bad'")
    conn.commit()
    _tick_at(db, "2030-01-01T00:00:00.5+00:00")  # computes the first slots
    report = _tick_at(db, "2030-01-01T00:01:00.5+00:00")
    assert [f["workflow_id"] for f in report.fired] == [f"sched:healthy:{1893456060}"], report
    assert len(report.errors) == 1 and "a_bad" in report.errors[0], report.errors


def _gated_dag(conn: psycopg.Connection) -> None:
    """A DAG bounded to one RUNNING run, with its schedule (kind dag, every minute), as
    ``App(dags=[Dag(..., schedule=Schedule.every("1m"), max_active_runs=1)])`` declares them."""
    conn.execute("SELECT set_config('harvest.fake_now', '2030-01-01T00:00:00+00:00', false)")
    dag = [{"dag_name": "gated", "queue": "default", "tasks": [], "max_active_runs": 1}]
    conn.execute("SELECT harvest.register_dags(%s::jsonb)", (json.dumps(dag),))
    spec = {
        "name": "gated",
        "kind": "dag",
        "workflow_name": "gated",
        "interval_secs": 60,
        "max_active_runs": 1,
    }
    conn.execute("SELECT harvest.declare_schedules(%s::jsonb)", (json.dumps([spec]),))
    conn.commit()
    _tick_at(conn.info.dsn, "2030-01-01T00:00:00.5+00:00")  # computes the first slot


def _running(conn: psycopg.Connection) -> int:
    row = conn.execute(
        "SELECT count(*) FROM harvest.executions WHERE workflow_name = 'gated' AND status = 'RUNNING'"
    ).fetchone()
    return int(row[0])  # type: ignore[index]  # one row


def test_a_dag_schedule_counts_the_dags_triggered_runs(conn: psycopg.Connection) -> None:
    """The DAG's max_active_runs bounds its RUNNING runs (docs/dags.md): a trigger is refused
    while a scheduled run is live, and a slot is skipped while a triggered run is live (the
    schedule counted only the runs it had started itself, and started a second one)."""
    _gated_dag(conn)
    conn.execute("SELECT * FROM harvest.trigger_dag('gated')")
    conn.commit()
    report = _tick_at(conn.info.dsn, "2030-01-01T00:01:00.5+00:00")
    assert [(f["status"], f["reason"]) for f in report.fired] == [("skipped", "max_active_runs")], report
    assert _running(conn) == 1


def test_a_dag_trigger_and_its_schedules_tick_at_once_start_one_run(
    db: str, conn: psycopg.Connection
) -> None:
    """A trigger holds the DAG's row while it starts its run; the tick of the DAG's schedule
    waits for it and then counts that run: one RUNNING run, the slot skipped. (The tick read
    neither the DAG's row nor its runs under a lock and started a second run beside it.)"""
    _gated_dag(conn)
    with psycopg.connect(db, application_name="trigger") as trigger:
        trigger.execute("SELECT * FROM harvest.trigger_dag('gated')")  # not committed
        outcome: dict[str, Any] = {}
        thread = in_thread(lambda: _tick_at(db, "2030-01-01T00:01:00.5+00:00"), outcome)
        deadline = time.monotonic() + 10
        while (
            thread.is_alive()
            and not conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE '%%fire_schedule%%')"
            ).fetchone()[0]
        ):  # type: ignore[index]  # one row
            assert time.monotonic() < deadline, "the tick neither waited nor ended"
            time.sleep(0.01)
        trigger.commit()
        thread.join(10)
    report = outcome["result"]
    assert not isinstance(report, BaseException), report
    assert _running(conn) == 1
    assert [(f["status"], f["reason"]) for f in report.fired] == [("skipped", "max_active_runs")], report


def test_a_start_that_fails_for_a_passing_reason_is_fired_again_not_recorded_failed(
    db: str, conn: psycopg.Connection
) -> None:
    """A run's start that meets a deadlock (SQLSTATE 40P01, here a trigger that raises it once
    at the run's insert) rolls its schedule's firing back: the next tick fires the slot. It was
    recorded as a failed firing, and that slot never started a run; a start that fails for good
    (an unregistered workflow, a quota) is still recorded failed. The tick goes on with the other
    schedules (one whose starts failed so on every tick held back every schedule after it)."""
    conn.execute("SELECT set_config('harvest.fake_now', '2030-01-01T00:00:00+00:00', false)")
    SqlApi(conn).create_schedule("flaky", "wf", interval_secs=60)
    SqlApi(conn).create_schedule("steady", "wf", interval_secs=60)
    conn.execute("CREATE SEQUENCE public.refusals")
    conn.execute(
        """
        CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.workflow_id LIKE 'sched:flaky:%' AND nextval('public.refusals') = 1 THEN
                RAISE EXCEPTION 'deadlock detected (raised once by the test)' USING ERRCODE = '40P01';
            END IF;
            RETURN NEW;
        END $$"""
    )
    conn.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON harvest.executions"
        " FOR EACH ROW EXECUTE FUNCTION public.refuse()"
    )
    conn.commit()
    _tick_at(db, "2030-01-01T00:00:00.5+00:00")  # computes the first slots
    refused = _tick_at(db, "2030-01-01T00:01:00.5+00:00")
    assert [e.split(":")[0] for e in refused.errors] == ["schedule 'flaky'"], refused.errors
    assert "40P01" in refused.errors[0]
    assert [(f["workflow_id"], f["status"]) for f in refused.fired] == [
        ("sched:steady:1893456060", "started")
    ]
    report = _tick_at(db, "2030-01-01T00:01:01.5+00:00")
    assert [(f["workflow_id"], f["status"]) for f in report.fired] == [("sched:flaky:1893456060", "started")]
    assert conn.execute("SELECT count(*) FROM harvest.executions").fetchone() == (2,)


def test_a_deferred_start_counts_as_the_schedules_live_run(db: str, conn: psycopg.Connection) -> None:
    """A slot whose start a throttle deferred has a run to come: with max_active_runs=1 and
    overlap skip the next slot is skipped, not deferred beside it (every minute against a
    throttle of one an hour piled up 59 deferred starts an hour, without end)."""
    conn.execute("SELECT set_config('harvest.fake_now', '2030-01-01T00:00:00+00:00', false)")
    conn.execute(
        "SELECT harvest.declare_flow_policies(%s::jsonb)",
        (json.dumps({"workflows": {"paced": {"throttle": {"rps": 1 / 3600, "burst": 1}}}}),),
    )
    SqlApi(conn).create_schedule("paced", "paced", interval_secs=60)
    conn.commit()
    _tick_at(db, "2030-01-01T00:00:00.5+00:00")  # computes the first slot
    first = _tick_at(db, "2030-01-01T00:01:00.5+00:00").fired
    assert [(f["status"], f["reason"]) for f in first] == [("started", None)], first
    conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (first[0]["execution_id"],))
    conn.commit()
    second = _tick_at(db, "2030-01-01T00:02:00.5+00:00").fired
    assert [(f["status"], f["reason"]) for f in second] == [("started", "deferred")], second
    third = _tick_at(db, "2030-01-01T00:03:00.5+00:00").fired
    assert [(f["status"], f["reason"]) for f in third] == [("skipped", "max_active_runs")], third
    assert conn.execute("SELECT count(*) FROM harvest.pending_starts").fetchone() == (1,)


def test_one_tick_fires_every_due_schedule_not_only_the_first_page(db: str, conn: psycopg.Connection) -> None:
    """More schedules due at one slot than a page of list_due_schedules: the tick reads the next
    page while the last one was full and fired something, so none waits for a later tick (a
    shard with a few thousand schedules on one minute fired a page a second and missed the
    last ones past the 60 s grace)."""
    conn.execute("SELECT set_config('harvest.fake_now', '2030-01-01T00:00:00+00:00', false)")
    for n in range(5):
        SqlApi(conn).create_schedule(f"s{n}", "wf", interval_secs=60)
    conn.commit()

    def tick(at: str) -> Any:
        async def run() -> Any:
            async with await psycopg.AsyncConnection.connect(db, autocommit=True) as aconn:
                await aconn.execute("SELECT set_config('harvest.fake_now', %s, false)", (at,))
                return await scheduler.tick(AsyncSqlApi.on_connection(aconn), limit=2)

        return asyncio.run(run())

    tick("2030-01-01T00:00:00.5+00:00")  # computes the first slots
    report = tick("2030-01-01T00:01:00.5+00:00")
    assert sorted(f["workflow_id"] for f in report.fired) == [f"sched:s{n}:1893456060" for n in range(5)]


def test_a_sessions_float_output_setting_changes_no_stored_schedule(conn: psycopg.Connection) -> None:
    """extra_float_digits is the caller's to set (a low-privilege session, a pg_dump-era
    driver): the schedule functions carried jitter_secs through JSON with the session's float
    output, so a session with extra_float_digits = -15 stored 1.25 s as 1, and its update of
    max_active_runs alone rounded the schedule's jitter (and restarted its slots) for everyone."""
    api = SqlApi(conn)
    api.create_schedule("jittery", "wf", interval_secs=60, jitter_secs=2.5)
    conn.execute("SET extra_float_digits = -15")
    api.create_schedule("created_rounded", "wf", interval_secs=60, jitter_secs=1.25)
    before = conn.execute("SELECT anchor_at FROM harvest.schedules WHERE name = 'jittery'").fetchone()
    api.update_schedule("jittery", {"max_active_runs": 2})
    conn.execute("RESET extra_float_digits")
    rows = conn.execute("SELECT name, jitter_secs, anchor_at FROM harvest.schedules ORDER BY name").fetchall()
    assert [(n, j) for n, j, _ in rows] == [("created_rounded", 1.25), ("jittery", 2.5)]
    assert rows[1][2] == before[0], "an update of max_active_runs alone does not restart the slots"  # type: ignore[index]


def test_a_dag_schedules_terminate_other_ends_the_dags_triggered_run(conn: psycopg.Connection) -> None:
    """overlap terminate_other (cancel_other) acts on the live runs the policy counts: for a
    DAG's schedule every live run of the DAG (it ended only the runs the schedule had started,
    and started the slot beside a triggered run)."""
    _gated_dag(conn)
    conn.execute("SELECT harvest.update_schedule('gated', '{\"overlap\": \"terminate_other\"}')")
    (triggered,) = conn.execute("SELECT execution_id FROM harvest.trigger_dag('gated')").fetchone()  # type: ignore[misc]
    conn.commit()
    report = _tick_at(conn.info.dsn, "2030-01-01T00:01:00.5+00:00")
    assert [f["status"] for f in report.fired] == ["started"], report
    status = conn.execute("SELECT status FROM harvest.executions WHERE id = %s", (triggered,)).fetchone()
    assert status == ("TERMINATED",)
    assert _running(conn) == 1


def test_a_pause_racing_a_tick_either_way_fires_nothing_after_it(db: str, conn: psycopg.Connection) -> None:
    """(Held as it was.) A pause that waits for a tick's open transaction applies once it
    commits; a tick that meets a pause's open transaction finds the row busy and fires nothing;
    after the pause no slot fires, and none is counted missed."""
    conn.execute("SELECT set_config('harvest.fake_now', '2030-01-01T00:00:00+00:00', false)")
    SqlApi(conn).create_schedule("minutely", "wf", interval_secs=60)
    conn.commit()
    _tick_at(db, "2030-01-01T00:00:00.5+00:00")
    fire = (
        "SELECT harvest.fire_schedule(s.id, s.revision, ARRAY['2030-01-01T00:01:00+00'::timestamptz],"
        " '2030-01-01T00:02:00+00', '2030-01-01T00:02:00+00') FROM harvest.schedules AS s"
    )

    def fired_uncommitted(ticker: psycopg.Connection) -> None:
        ticker.execute("SELECT set_config('harvest.fake_now', '2030-01-01T00:01:00.5+00:00', false)")
        ticker.execute(fire)  # fired, not committed

    pause = Racer(
        "pauser",
        lambda c: c.execute("SELECT harvest.pause_schedule('minutely')").fetchone(),
        waits_on="the schedule's row, the tick's firing holding it",
    )
    outcome = race_behind_a_held_lock(db, conn, fired_uncommitted, pause, end_within=10)
    assert outcome["pauser"][0]["paused"] is True and outcome["pauser"][0]["last_slot_at"].startswith(
        "2030-01-01T00:01"
    )
    with psycopg.connect(db) as pauser:
        pauser.execute("SELECT harvest.resume_schedule('minutely')")
        pauser.execute("SELECT harvest.pause_schedule('minutely')")  # held: the row is locked
        assert _tick_at(db, "2030-01-01T00:05:00.5+00:00").fired == []
        pauser.commit()
    assert _tick_at(db, "2030-01-01T00:09:00.5+00:00").fired == []
    row = conn.execute(
        "SELECT count(*), (SELECT missed_slots FROM harvest.schedules) FROM harvest.schedule_firings"
    )
    assert row.fetchone() == (1, 0)


def test_a_schedule_whose_input_is_over_the_payload_limit_is_refused_at_once(
    conn: psycopg.Connection,
) -> None:
    """Every firing of such a schedule failed (HR008 at the run's start), one `failed` row a
    slot; the create (and an update, a declare) now answers HR008 naming the schedule, and
    nothing is written."""
    conn.execute("UPDATE harvest.engine_settings SET max_payload_bytes = 1000 WHERE id")
    big = json.dumps(["x" * 2000])
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(
            "SELECT harvest.create_schedule('big', 'wf', p_interval_secs => 60, p_input => %s)", (big,)
        )
    assert caught.value.sqlstate == "HR008" and "the input of schedule big" in str(caught.value), caught.value
    conn.rollback()
    SqlApi(conn).create_schedule("small", "wf", interval_secs=60)
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(
            "SELECT harvest.update_schedule('small', jsonb_build_object('input', %s::jsonb))", (big,)
        )
    assert caught.value.sqlstate == "HR008", caught.value
    conn.rollback()
    assert conn.execute("SELECT name, input FROM harvest.schedules").fetchall() == [("small", [])]
