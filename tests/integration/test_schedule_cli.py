"""`harvest schedule ...` end to end (real processes, one database): create, list (kind shown),
get (next fire times, firings with run ids and outcomes), pause, resume, trigger, update, backfill,
delete; one-line errors naming the bad field; -o json."""

from __future__ import annotations

import json

from operator_helpers import harvest


def _json(dsn: str, *args: str):
    done = harvest(dsn, *args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_schedule_cli(db: str) -> None:
    made = _json(
        db,
        "schedule",
        "create-workflow",
        "--name",
        "billing",
        "--workflow",
        "billing_wf",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Paris",
        "--input-json",
        '{"region": "eu"}',
        "--operator-id",
        "ann",
    )
    assert (
        made["cron"] == "0 3 * * *"
        and made["timezone"] == "Europe/Paris"
        and made["args"] == [{"region": "eu"}]
    )
    assert len(made["next_fire_times"]) == 5 and all(
        "T01:00:00" in t or "T02:00:00" in t for t in made["next_fire_times"]
    )
    _json(
        db, "schedule", "create-workflow", "--name", "dag_nightly", "--every", "1h", "--kind", "dag",
        "--allow-unregistered",  # (no worker registered the DAG)
    )  # fmt: skip

    table = harvest(db, "schedule", "list")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "KIND"]
    assert [line.split()[:2] for line in lines[1:-1]] == [["billing", "workflow"], ["dag_nightly", "dag"]]
    assert lines[-1] == "2 schedule(s)"
    assert [r["name"] for r in _json(db, "schedule", "list", "--kind", "dag")["schedules"]] == ["dag_nightly"]
    # A page of --limit by name, the footer (JSON: next_cursor) naming the next one's --cursor.
    first = _json(db, "schedule", "list", "--limit", "1")
    assert [r["name"] for r in first["schedules"]] == ["billing"] and first["next_cursor"]
    assert f"--cursor {first['next_cursor']}" in harvest(db, "schedule", "list", "--limit", "1").stdout
    rest = _json(db, "schedule", "list", "--limit", "1", "--cursor", first["next_cursor"])
    assert [r["name"] for r in rest["schedules"]] == ["dag_nightly"] and rest["next_cursor"] is None
    other = harvest(db, "schedule", "list", "--kind", "dag", "--cursor", first["next_cursor"])
    assert other.returncode != 0 and "other filters" in other.stderr

    fired = _json(db, "schedule", "trigger", "billing")
    assert fired["status"] == "started" and fired["workflow_id"].startswith("sched:billing:")
    got = _json(db, "schedule", "get", "billing")
    assert got["firings"][0]["execution_id"] == fired["execution_id"]
    assert got["firings"][0]["run_status"] == "RUNNING" and got["active_runs"] == 1
    text = harvest(db, "schedule", "get", "billing")
    assert "last firings:" in text.stdout and fired["execution_id"] in text.stdout

    assert _json(db, "schedule", "pause", "billing", "--note", "audit")["paused"] is True
    assert _json(db, "schedule", "get", "billing")["next_fire_times"] == []
    assert _json(db, "schedule", "resume", "billing")["paused"] is False
    updated = _json(
        db, "schedule", "update", "billing", "--every", "15m", "--overlap", "buffer_all", "--catchup"
    )
    assert updated["interval_secs"] == 900 and updated["cron"] is None and updated["overlap"] == "buffer_all"
    assert updated["catchup"] is True and updated["catchup_window_secs"] == 365 * 86400

    counts = _json(
        db,
        "schedule",
        "backfill",
        "dag_nightly",
        "--from",
        "2020-01-01",
        "--to",
        "2020-01-01T02:00:00+0000",
        "--overlap",
        "allow_all",
    )
    assert counts["slots"] == 3 and counts["started"] == 3
    # A long backfill says what it is doing before its seconds of silence (stderr: the JSON stays
    # whole); a short one says nothing.
    long = harvest(
        db,
        "schedule",
        "backfill",
        "dag_nightly",
        "--from",
        "2010-01-01",
        "--to",
        "2010-02-12",
        "--overlap",
        "skip",
        "-o",
        "json",
    )
    assert long.returncode == 0 and json.loads(long.stdout)["slots"] == 1009, long.stderr
    assert long.stderr == "backfill: firing 1009 slots of dag_nightly in one transaction ...\n"

    bad = harvest(db, "schedule", "create-workflow", "--name", "x", "--cron", "0 25 * * *")
    assert (
        bad.returncode == 2
        and "the hour field '25'" in bad.stderr
        and len(bad.stderr.strip().splitlines()) == 1
    )
    bad = harvest(
        db, "schedule", "create-workflow", "--name", "x", "--cron", "0 3 * * *", "--tz", "Mars/Base"
    )
    assert bad.returncode == 2 and "tz 'Mars/Base'" in bad.stderr
    dup = harvest(db, "schedule", "create-workflow", "--name", "billing", "--every", "1m")
    assert dup.returncode == 2 and "already exists" in dup.stderr

    assert _json(db, "schedule", "delete", "billing")["deleted"] is True
    gone = harvest(db, "schedule", "get", "billing")
    assert gone.returncode != 0 and "does not exist" in gone.stderr
    # A delete of a schedule that is not there is a not-found like the other verbs' (exit 1, the
    # same line), not a bad argument (exit 2).
    again = harvest(db, "schedule", "delete", "billing")
    assert (again.returncode, again.stderr) == (gone.returncode, gone.stderr)


def test_preflight_fails_a_schedule_whose_workflow_is_not_registered(
    db: str, conn, tmp_path, monkeypatch
) -> None:
    assert harvest(db, "migrate", "run").returncode == 0
    conn.execute("SELECT harvest.set_retention('30 days')")
    conn.execute("SELECT harvest.register_worker('w1', ARRAY['default'], 'h', 1, 5)")
    conn.execute("SELECT harvest.register_workflows(ARRAY['default'], ARRAY['flow'])")

    def check(*args: str):
        r = harvest(db, "preflight", *args, "--output", "json")
        return r.returncode, next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "schedules")

    conn.execute("SELECT harvest.create_schedule('ok', 'flow', p_interval_secs => 60)")
    code, found = check()
    assert (code, found["status"]) == (0, "pass"), found
    conn.execute(
        "SELECT harvest.create_schedule('typo', 'flwo', p_interval_secs => 60, p_allow_unregistered => true)"
    )
    code, found = check()
    assert (code, found["status"]) == (1, "fail"), found
    assert found["details"]["failures"] == [
        "schedule 'typo' starts workflow 'flwo', which no worker registered on queue 'default'"
    ]
    conn.execute("SELECT harvest.delete_schedule('typo')")
    (tmp_path / "pf_sched.py").write_text(
        "from harvest import App, Schedule, WorkflowSchedule, workflow\n"
        "@workflow\nasync def flow(ctx): return 1\n"
        "app = App(workflows=[flow], schedules=[WorkflowSchedule('nightly', Schedule.cron('0 3 * * *'),"
        " workflow='report')])\n"
    )
    monkeypatch.chdir(tmp_path)
    code, found = check("--app", "pf_sched:app")
    assert code == 1 and found["details"]["failures"] == [
        "declared schedule 'nightly' starts unregistered workflow 'report'"
    ]


def test_update_of_the_cron_alone_keeps_the_zone(db: str) -> None:
    """`schedule update NAME --cron ...` changes the expression, in the zone the schedule has:
    it reset the zone to UTC (a Paris 03:00 schedule moved to 04:00 UTC fired at 05:00 Paris)."""
    _json(db, "schedule", "create-workflow", "--name", "paris", "--cron", "0 3 * * *", "--tz", "Europe/Paris")
    updated = _json(db, "schedule", "update", "paris", "--cron", "0 4 * * *")
    assert (updated["cron"], updated["timezone"]) == ("0 4 * * *", "Europe/Paris")
    moved = _json(db, "schedule", "update", "paris", "--cron", "0 5 * * *", "--tz", "Asia/Tokyo")
    assert (moved["cron"], moved["timezone"]) == ("0 5 * * *", "Asia/Tokyo")
    bad = harvest(db, "schedule", "update", "paris", "--cron", "0 25 * * *")
    assert bad.returncode == 2 and "the hour field '25'" in bad.stderr


def test_get_shows_a_stored_schedule_the_scheduler_cannot_compute(db: str, conn) -> None:
    """`schedule get` of a cron stored through psql that does not parse shows the schedule and
    what is wrong (it failed with the parse error and showed nothing)."""
    conn.execute("SELECT harvest.create_schedule('typo', 'wf', p_cron => '0 25 * * *')")
    got = _json(db, "schedule", "get", "typo")
    assert got["next_fire_times"] == [] and "the hour field '25'" in got["problem"]
    text = harvest(db, "schedule", "get", "typo")
    assert text.returncode == 0 and "the hour field '25'" in text.stdout, text.stderr


def test_list_shows_the_next_slot_before_a_scheduler_ticks_and_marks_an_overdue_one(db: str, conn) -> None:
    """`schedule list` of a schedule no scheduler has ticked showed NEXT_FIRE_AT `-` while `get`
    computed it: it shows the slot `get` shows first, marked computed; a stored slot in the past
    (no worker fires it) stays shown, marked overdue, and a future one scheduled."""
    made = _json(db, "schedule", "create-workflow", "--name", "x", "--every", "15m")
    (row,) = _json(db, "schedule", "list")["schedules"]
    assert (row["next_fire_at"], row["next_fire"]) == (made["next_fire_times"][0], "computed")
    table = harvest(db, "schedule", "list").stdout.splitlines()
    assert "NEXT_FIRE" in table[0].split() and "computed" in table[1].split(), table
    conn.execute("UPDATE harvest.schedules SET next_fire_at = harvest.now() - interval '1 hour'")
    (row,) = _json(db, "schedule", "list")["schedules"]
    assert (
        row["next_fire"] == "overdue"
        and row["next_fire_at"] == _json(db, "schedule", "get", "x")["next_fire_times"][0]
    )
    conn.execute("UPDATE harvest.schedules SET next_fire_at = harvest.now() + interval '1 hour'")
    assert _json(db, "schedule", "list")["schedules"][0]["next_fire"] == "scheduled"
    # A jittered slot is due at its slot plus its jitter (next_due_at): past its slot, not yet
    # due, it is not overdue (it was: every slot of a schedule with jitter, for up to its jitter).
    conn.execute(
        "UPDATE harvest.schedules SET jitter_secs = 3600, next_fire_at = harvest.now() - interval '1 minute',"
        " next_due_at = harvest.now() + interval '30 minutes'"
    )
    (row,) = _json(db, "schedule", "list")["schedules"]
    assert row["next_fire"] == "scheduled" and "next_due_at" not in row, row
    conn.execute("UPDATE harvest.schedules SET next_due_at = harvest.now() - interval '1 second'")
    assert _json(db, "schedule", "list")["schedules"][0]["next_fire"] == "overdue"
    _json(db, "schedule", "pause", "x")
    assert _json(db, "schedule", "list")["schedules"][0]["next_fire"] is None
    # Paused, no NEXT_FIRE_AT either: the slot stored before the pause never fires (a resume
    # counts from the resume), as `get` shows no next fire times. It was listed as if it would.
    (row,) = _json(db, "schedule", "list")["schedules"]
    assert row["next_fire_at"] is None and _json(db, "schedule", "get", "x")["next_fire_times"] == []
    header, line = harvest(db, "schedule", "list").stdout.splitlines()[:2]
    at = header.index("NEXT_FIRE_AT")
    assert line[at:].split()[0] == "-", (header, line)


def test_no_catchup_with_a_catchup_window_is_refused_not_turned_on(db: str) -> None:
    """--no-catchup with --catchup-window contradicts itself, as --cron with --every does: refused
    (exit 2, one line), on create and on update. The window used to win: catch-up silently on."""
    made = harvest(
        db,
        "schedule",
        "create-workflow",
        "--name",
        "nc",
        "--every",
        "1m",
        "--no-catchup",
        "--catchup-window",
        "2d",
    )
    assert made.returncode == 2, (made.returncode, made.stdout)
    assert made.stderr.startswith("error: give --no-catchup or --catchup-window, not both"), made.stderr
    assert harvest(db, "schedule", "get", "nc").returncode == 1  # nothing was created
    _json(db, "schedule", "create-workflow", "--name", "nc", "--every", "1m")
    updated = harvest(db, "schedule", "update", "nc", "--no-catchup", "--catchup-window", "6h")
    assert updated.returncode == 2 and "not both" in updated.stderr, (updated.returncode, updated.stdout)
    assert _json(db, "schedule", "get", "nc")["catchup"] is False
    # Each alone still works: a window turns catch-up on, --no-catchup turns it off.
    assert _json(db, "schedule", "update", "nc", "--catchup-window", "6h")["catchup_window_secs"] == 21600
    assert _json(db, "schedule", "update", "nc", "--no-catchup")["catchup"] is False


def test_a_schedules_input_comes_from_a_file_or_stdin(db: str) -> None:
    """The spec's CLI: "JSON request payloads accept inline --*-json values or --*-file PATH; use -
    as the file path to read from stdin". `schedule create-workflow` and `update` had only
    --input-json."""
    made = harvest(
        db,
        "schedule", "create-workflow", "--name", "from_stdin", "--cron", "0 3 * * *",
        "--input-file", "-", "-o", "json",
        stdin='{"region": "eu"}',
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["args"] == [{"region": "eu"}]
    changed = harvest(db, "schedule", "update", "from_stdin", "--input-file", "-", "-o", "json", stdin="null")
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout)["args"] == [None]  # a null argument is an argument
    both = harvest(
        db, "schedule", "update", "from_stdin", "--input-json", "1", "--input-file", "-", stdin="2"
    )
    assert both.returncode == 2 and "not both" in both.stderr, both.stderr


def test_shard_health_reports_scheduler_freshness(db: str) -> None:
    """`harvest shard health` said "scheduler freshness: not applicable (this Harvest has no
    schedules)" whatever the database held. The spec's row carries scheduler freshness where
    schedules are enabled: an unpaused schedule whose due time passed a minute ago and more is
    one no scheduler ticks (reason scheduler_stale, degraded, exit 2)."""
    import psycopg

    def health() -> tuple[int, dict]:
        done = harvest(db, "shard", "health", "-o", "json")
        return done.returncode, json.loads(done.stdout)["shards"][0]

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.register_worker('w-fresh', ARRAY['default'], 'host', 1, 3600, '{}')")
    code, row = health()
    assert row["scheduler"]["status"] == "not_applicable" and row["scheduler"]["active"] == 0, row
    assert "scheduler_stale" not in row["reason_codes"] and code == 0, row

    with psycopg.connect(db, autocommit=True) as conn:  # made an hour ago, never ticked since
        conn.execute("SELECT set_config('harvest.fake_now', (now() - interval '1 hour')::text, false)")
        conn.execute("SELECT harvest.create_schedule('unticked', 'wf', NULL, 60)")
    code, row = health()
    assert row["scheduler"]["status"] == "stale" and row["scheduler"]["active"] == 1, row
    assert 3500 < row["scheduler"]["overdue_secs"] < 4000, row
    assert row["reason_codes"] == ["scheduler_stale"] and row["readiness"] == "degraded" and code == 2, row
    table = harvest(db, "shard", "health")
    assert "scheduler freshness: shard 0: stale, 1 unpaused schedule(s), the oldest due" in table.stdout, (
        table.stdout
    )

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.pause_schedule('unticked')")
        conn.execute("SELECT harvest.create_schedule('fresh', 'wf', NULL, 60)")
    code, row = health()
    assert row["scheduler"]["status"] == "fresh" and row["scheduler"]["active"] == 1, row
    assert row["reason_codes"] == [] and code == 0, row


def test_update_clears_the_input_the_queue_and_max_active_runs(db: str) -> None:
    """`schedule update` could set an input, a queue or max active runs but never clear one (an
    option not given keeps the setting). --clear puts each back to what create-workflow without
    it takes, as the API's PATCH clears a null and the dashboard an emptied field."""
    made = _json(
        db, "schedule", "create-workflow", "--name", "clr", "--every", "1h", "--input-json", '{"a": 1}',
        "--queue", "reports", "--max-active-runs", "3",
    )  # fmt: skip
    assert (made["args"], made["queue"], made["max_active_runs"]) == ([{"a": 1}], "reports", 3)
    cleared = _json(
        db, "schedule", "update", "clr", "--clear", "input", "--clear", "queue", "--clear", "max-active-runs"
    )
    assert (cleared["args"], cleared["queue"], cleared["max_active_runs"]) == ([], "default", 1)
    both = harvest(db, "schedule", "update", "clr", "--queue", "x", "--clear", "queue")
    assert both.returncode == 2 and "--clear queue and a new queue together" in both.stderr, both.stderr
    unknown = harvest(db, "schedule", "update", "clr", "--clear", "cron")
    assert unknown.returncode == 2 and "input, queue, max-active-runs" in unknown.stderr.replace("'", "")


def test_a_trigger_or_backfill_whose_firing_failed_exits_1_saying_why(db: str, conn) -> None:
    """A firing recorded `failed` (here: a workflow no worker registered on its queue) was an
    exit 0: a script checking $? took it for a success. The answer is still printed; stderr says
    the recorded reason."""
    _json(db, "schedule", "create-workflow", "--name", "gone", "--workflow", "gone_wf", "--every", "1h")
    conn.execute("SELECT harvest.register_workflows(ARRAY['default'], ARRAY['other_wf'])")
    fired = harvest(db, "schedule", "trigger", "gone", "-o", "json")
    assert fired.returncode == 1, fired.stderr
    assert json.loads(fired.stdout)["status"] == "failed"
    assert fired.stderr.startswith("error: schedule gone: its firing failed: slot ")
    assert 'HR010: workflow "gone_wf" is not registered on queue "default"' in fired.stderr
    back = harvest(
        db, "schedule", "backfill", "gone", "--from", "2020-01-01", "--to", "2020-01-01T01:00:00+00:00"
    )
    assert back.returncode == 1 and "failed" in back.stdout, back.stderr
    assert back.stderr.startswith(
        "error: schedule gone: 2 slot(s) failed: slot 2020-01-01T00:00:00+00:00: HR010"
    )
    assert back.stderr.count("HR010") == 2 and len(back.stderr.splitlines()) == 1
    # Slots that were fired already (duplicate) or started are no failure: exit 0.
    conn.execute("SELECT harvest.register_workflows(ARRAY['default'], ARRAY['gone_wf'])")
    again = harvest(db, "schedule", "backfill", "gone", "--from", "2020-01-02", "--to", "2020-01-02")
    assert again.returncode == 0, again.stderr


def test_create_and_update_refuse_a_workflow_or_dag_no_worker_registered(db: str, conn) -> None:
    """create-workflow took any workflow name (and --kind dag any name, not only a DAG's): every
    firing failed, and only preflight said so. Refused where the database can tell, as a start
    is (HR010, exit 2), naming the workflow and --allow-unregistered, which keeps it."""
    # No worker registered anything on the queue: nothing to check (a schedule made before the
    # first deploy), as a start.
    _json(db, "schedule", "create-workflow", "--name", "early", "--workflow", "flwo", "--every", "1h")
    conn.execute("SELECT harvest.register_workflows(ARRAY['default'], ARRAY['flow'])")
    typo = harvest(db, "schedule", "create-workflow", "--name", "t", "--workflow", "flwo", "--every", "1h")
    assert typo.returncode == 2 and len(typo.stderr.strip().splitlines()) == 1, typo.stderr
    assert 'schedule t: workflow "flwo" is not registered on queue "default" (registered there: flow)' in (
        typo.stderr
    )
    assert "pass --allow-unregistered" in typo.stderr and "p_allow_unregistered" not in typo.stderr
    assert conn.execute("SELECT count(*) FROM harvest.schedules WHERE name = 't'").fetchone()[0] == 0
    kept = _json(
        db, "schedule", "create-workflow", "--name", "t", "--workflow", "flwo", "--every", "1h",
        "--allow-unregistered",
    )  # fmt: skip
    assert kept["workflow_name"] == "flwo"
    _json(db, "schedule", "create-workflow", "--name", "ok", "--workflow", "flow", "--every", "1h")
    # An update that changes the workflow (or queue) is checked; one that does not is not.
    moved = harvest(db, "schedule", "update", "ok", "--workflow", "flwo")
    assert moved.returncode == 2 and '"flwo" is not registered' in moved.stderr, moved.stderr
    assert _json(db, "schedule", "update", "t", "--every", "2h")["interval_secs"] == 7200
    assert _json(db, "schedule", "update", "ok", "--workflow", "flwo", "--allow-unregistered")[
        "workflow_name"
    ]
    # --kind dag names a DAG: a workflow's name, or nothing registered, is refused.
    dag = harvest(db, "schedule", "create-workflow", "--name", "d", "--workflow", "flow", "--kind", "dag",
                  "--every", "1h")  # fmt: skip
    assert dag.returncode == 2, dag.stderr
    assert 'schedule d: kind dag names "flow", which no worker registered as a DAG' in dag.stderr
    assert "--allow-unregistered" in dag.stderr
    assert _json(db, "schedule", "create-workflow", "--name", "d", "--workflow", "flow", "--kind", "dag",
                 "--every", "1h", "--allow-unregistered")["kind"] == "dag"  # fmt: skip
