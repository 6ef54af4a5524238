"""Schedules under overlap rules and operators, raced on real connections and killed processes
(docs/schedules.md: "no slot fires twice or is lost"; buffer_one keeps at most one slot waiting):

- three schedulers tick a buffer_one (or skip) schedule every second whose runs never end (no
  worker), one is SIGKILLed in the middle of a tick, and the runs are terminated on another
  connection while they tick (a free run again): every second has one firing, no workflow id
  runs twice, never more than one run live nor (buffer_one) more than one slot waiting;
- a backfill races the schedule's update and delete: each call ends (or the backfill finds it
  gone, HR002), no slot fired twice, nothing left of a deleted schedule.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import psycopg
import pytest
from harness import query
from test_chaos_schedules import _spawn, kill_mid_tick

from harvest.db.sqlapi import SqlApi

pytestmark = pytest.mark.chaos

LIVE_AND_WAITING = (
    "SELECT (SELECT count(*) FROM harvest.executions WHERE workflow_id LIKE 'sched:ov:%%'"
    "        AND status IN ('RUNNING', 'PAUSED')) AS live,"
    " (SELECT count(*) FROM harvest.schedule_firings WHERE status = 'buffered') AS waiting"
)


@pytest.mark.parametrize("overlap", ["buffer_one", "skip"])
def test_racing_schedulers_a_kill_and_ended_runs_keep_the_overlap_rule(db: str, overlap: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        SqlApi(conn).create_schedule("ov", "ov_wf", cron="* * * * * *", overlap=overlap, max_active_runs=1)
    procs = [_spawn(db, 30, 0.3), _spawn(db, 5, 0.2), _spawn(db, 5, 0.2)]
    victim = procs[0]
    stop = threading.Event()
    samples: list[dict] = []
    ended: list[str] = []

    def watch_and_end() -> None:
        # Samples what is live and waiting (one snapshot a read), and ends the live run every
        # 2.5 s on a connection of its own, racing the ticks that count it.
        with psycopg.connect(db, autocommit=True) as conn:
            last_end = time.monotonic()
            while not stop.is_set():
                samples.append(query(db, LIVE_AND_WAITING)[0])
                if time.monotonic() - last_end > 2.5:
                    row = conn.execute(
                        "SELECT id FROM harvest.executions WHERE workflow_id LIKE 'sched:ov:%%'"
                        " AND status = 'RUNNING' LIMIT 1"
                    ).fetchone()
                    if row:
                        conn.execute("SELECT harvest.terminate_workflow(%s, 'chaos')", (row[0],))
                        ended.append(str(row[0]))
                    last_end = time.monotonic()
                stop.wait(0.05)

    watcher = threading.Thread(target=watch_and_end, daemon=True)
    watcher.start()
    held = kill_mid_tick(victim)
    procs.append(_spawn(db, 3, 0.1))  # one started after the kill: it fires the killed tick's slots
    outputs = [p.communicate(timeout=60)[0] for p in procs[1:]]
    stop.set()
    watcher.join(20)
    assert all("DONE" in out for out in outputs), outputs

    firings = query(
        db,
        "SELECT slot_at, status, reason, workflow_id, execution_id FROM harvest.schedule_firings"
        " ORDER BY slot_at",
    )
    runs = query(
        db,
        "SELECT workflow_id, count(*) AS n FROM harvest.executions WHERE workflow_id LIKE 'sched:ov:%%'"
        " GROUP BY 1",
    )
    slots = [int(f["slot_at"].timestamp()) for f in firings]
    assert len(slots) >= 5, firings
    # None lost, none twice: one firing a second from the first to the last; one run a workflow id.
    assert slots == list(range(slots[0], slots[-1] + 1)), slots
    assert {dt.datetime.fromisoformat(s) for s in held} <= {f["slot_at"] for f in firings}
    assert all(r["n"] == 1 for r in runs), runs
    started = [f for f in firings if f["status"] == "started"]
    assert {f["workflow_id"] for f in started} == {r["workflow_id"] for r in runs}
    assert len(started) >= 2, "an ended run let a later slot start"
    # The rule held at every sample: one run live at most, one slot waiting at most (none: skip).
    assert max(s["live"] for s in samples) <= 1, samples
    assert max(s["waiting"] for s in samples) <= (1 if overlap == "buffer_one" else 0), samples
    reasons = {f["reason"] for f in firings if f["status"] == "skipped"}
    assert reasons == ({"buffer_full"} if overlap == "buffer_one" else {"max_active_runs"}), reasons
    assert ended, "no run was ended while the schedulers ticked"


def test_a_backfill_racing_update_and_delete_fires_each_slot_once_or_not_at_all(db: str) -> None:
    """Backfills of overlapping ranges race an update of the schedule (its overlap, its limit) on
    other connections, then a delete: each slot fired once; after the delete nothing of it is
    left, and a backfill that came after it is HR002."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    with psycopg.connect(db, autocommit=True) as conn:
        SqlApi(conn).create_schedule(
            "bf", "bf_wf", cron="0 0 1 1 *", overlap="allow_all", max_active_runs=1000
        )
    outcome: dict[str, object] = {}
    go = threading.Barrier(5)

    def backfill(key: str, start: int) -> None:
        slots = [now - dt.timedelta(seconds=s) for s in range(start, start + 200)]
        with psycopg.connect(db, autocommit=True) as conn:
            go.wait()
            try:
                outcome[key] = conn.execute(
                    "SELECT harvest.backfill_schedule('bf', %s, 'allow_all')", (slots,)
                ).fetchone()[0]  # type: ignore[index]  # one row
            except psycopg.Error as exc:
                outcome[key] = exc

    def update(key: str, changes: dict) -> None:
        with psycopg.connect(db, autocommit=True) as conn:
            go.wait()
            try:
                outcome[key] = conn.execute(
                    "SELECT harvest.update_schedule('bf', %s::jsonb)", (json.dumps(changes),)
                ).fetchone()[0]  # type: ignore[index]  # one row
            except psycopg.Error as exc:
                outcome[key] = exc

    threads = [
        threading.Thread(target=backfill, args=("a", 1), daemon=True),
        threading.Thread(target=backfill, args=("b", 101), daemon=True),
        threading.Thread(target=backfill, args=("c", 51), daemon=True),
        threading.Thread(target=update, args=("u1", {"max_active_runs": 500}), daemon=True),
        threading.Thread(target=update, args=("u2", {"overlap": "skip"}), daemon=True),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(isinstance(v, BaseException) for v in outcome.values()), outcome
    firings = query(db, "SELECT slot_at, count(*) AS n FROM harvest.schedule_firings GROUP BY 1")
    runs = query(db, "SELECT workflow_id, count(*) AS n FROM harvest.executions GROUP BY 1")
    assert len(firings) == 300 and all(f["n"] == 1 for f in firings)
    assert len(runs) == 300 and all(r["n"] == 1 for r in runs)
    duplicates = sum(v["duplicate"] for k, v in outcome.items() if k in "abc")  # type: ignore[index]
    started = sum(v["started"] for k, v in outcome.items() if k in "abc")  # type: ignore[index]
    assert (started, duplicates) == (300, 3 * 200 - 300), outcome  # each slot started by one of them

    # A delete racing two backfills: whichever comes first, each slot once, and nothing after the delete.
    older = [now - dt.timedelta(seconds=s) for s in range(1000, 1100)]
    late: dict[str, object] = {}
    go2 = threading.Barrier(3)

    def late_backfill(key: str) -> None:
        with psycopg.connect(db, autocommit=True) as conn:
            go2.wait()
            try:
                late[key] = conn.execute(
                    "SELECT harvest.backfill_schedule('bf', %s, 'allow_all')", (older,)
                ).fetchone()[0]  # type: ignore[index]
            except psycopg.Error as exc:
                late[key] = exc

    def delete() -> None:
        with psycopg.connect(db, autocommit=True) as conn:
            go2.wait()
            late["delete"] = conn.execute("SELECT harvest.delete_schedule('bf')").fetchone()[0]  # type: ignore[index]

    threads = [threading.Thread(target=late_backfill, args=(k,), daemon=True) for k in ("x", "y")]
    threads.append(threading.Thread(target=delete, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert late["delete"] is True, late
    for key in ("x", "y"):
        value = late[key]
        assert isinstance(value, dict) or getattr(value, "sqlstate", None) == "HR002", late
    assert query(db, "SELECT count(*) AS n FROM harvest.schedule_firings")[0]["n"] == 0
    backfilled = query(db, "SELECT workflow_id, count(*) AS n FROM harvest.executions GROUP BY 1")
    assert all(r["n"] == 1 for r in backfilled), backfilled
    started = sum(v["started"] for k, v in late.items() if k in "xy" and isinstance(v, dict))  # type: ignore[index]
    assert len(backfilled) == 300 + started
