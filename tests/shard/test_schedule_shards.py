"""Schedules on three real servers (docs/schedules.md "Shards and process roles"): a schedule
lives on its home shard (ShardRouter.schedule_home, from its name) and fires there; the CLI's
create and commands by name go to that shard, `list` reads every shard; a worker on every shard
upserts each declared schedule on its home only, and each shard's scanner fires its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from harvest import App, Schedule, Worker, WorkflowSchedule, workflow
from harvest.cli.main import main
from harvest.db.sqlapi import SqlApi
from harvest.declare.schedules import schedule_specs
from harvest.shard.router import ShardRouter

pytestmark = pytest.mark.shard

ROUTER = ShardRouter([0, 1, 2], [0, 1, 2], 0)


def _names_on_distinct_homes(count: int) -> list[str]:
    names, homes = [], set()
    for i in range(1000):
        name = f"sched{i}"
        if ROUTER.schedule_home(name) not in homes:
            homes.add(ROUTER.schedule_home(name))
            names.append(name)
        if len(names) == count:
            return names
    raise AssertionError("no names on distinct homes")


def _env(shards) -> dict[str, str]:
    return {
        "HARVEST_DATABASE_URL": "",
        "HARVEST_SHARDS__READABLE": "0,1,2",
        "HARVEST_SHARDS__WRITABLE": "0,1,2",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()},
    }


def _json(env: dict[str, str], *args: str):
    result = CliRunner().invoke(main, ["--output", "json", *args], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _rows(shards, shard: int, sql: str) -> list[tuple]:
    with shards.connect(shard) as conn:
        return conn.execute(sql).fetchall()


def test_the_cli_creates_on_the_home_shard_and_lists_every_shard(shards) -> None:
    env = _env(shards)
    names = _names_on_distinct_homes(3)
    for name in names:
        _json(env, "schedule", "create-workflow", "--name", name, "--every", "1h")
    for shard in (0, 1, 2):
        assert [r[0] for r in _rows(shards, shard, "SELECT name FROM harvest.schedules")] == [
            n for n in names if ROUTER.schedule_home(n) == shard
        ]
    listed = _json(env, "schedule", "list")
    assert [(r["name"], r["shard_id"]) for r in listed["schedules"]] == sorted(
        (n, ROUTER.schedule_home(n)) for n in names
    )
    assert listed["status"] == "complete"
    paused = _json(env, "schedule", "pause", names[1])
    assert paused["paused"] is True
    assert _rows(shards, ROUTER.schedule_home(names[1]), "SELECT paused FROM harvest.schedules") == [(True,)]


@contextlib.contextmanager
def _running(worker: Worker) -> Iterator[Worker]:
    """The worker run on a thread of its own until the block ends."""
    loop: list[asyncio.AbstractEventLoop] = []

    async def go() -> None:
        loop.append(asyncio.get_running_loop())
        await worker.run()

    thread = threading.Thread(target=lambda: asyncio.run(go()), daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        while not loop and thread.is_alive():
            time.sleep(0.01)
        if loop:
            loop[0].call_soon_threadsafe(worker.request_stop)
        thread.join(60)


@workflow(name="shard_tick")
async def shard_tick(ctx) -> str:
    return "ok"


def test_a_worker_on_every_shard_declares_each_schedule_on_its_home_and_fires_it_there(
    shards, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="harvest.worker")
    names = _names_on_distinct_homes(2)
    app = App(
        workflows=[shard_tick],
        schedules=[WorkflowSchedule(n, Schedule.cron("* * * * * *"), workflow=shard_tick) for n in names],
    )
    # A reshard moved every home: copies declared where they lived before (each on the next
    # shard), and a schedule an operator made there by hand under the same kind of name.
    specs = {spec["name"]: spec for spec in schedule_specs(app)}
    for name in names:
        with shards.connect((ROUTER.schedule_home(name) + 1) % 3) as conn:
            SqlApi(conn).declare_schedules([specs[name]])
            conn.execute("SELECT harvest.create_schedule('by-hand', 'shard_tick', p_interval_secs => 3600)")
    worker = Worker(app, shards=dict(shards.dsns), router=ROUTER, scan_interval=0.2, poll_interval=0.3)
    with _running(worker):
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            done = {
                n: _rows(
                    shards,
                    ROUTER.schedule_home(n),
                    f"SELECT count(*) FROM harvest.executions WHERE workflow_id LIKE 'sched:{n}:%' "
                    "AND status = 'COMPLETED'",
                )[0][0]
                for n in names
            }
            if all(v >= 2 for v in done.values()):
                break
            time.sleep(0.2)
        assert all(v >= 2 for v in done.values()), done
    # Each shard's declaration is its own line, naming the shard (two alike lines said nothing).
    declared = sorted(r.getMessage() for r in caplog.records if r.getMessage().startswith("declared "))
    assert declared == sorted(
        f"declared 1 schedule(s) (1 changed) on shard {ROUTER.schedule_home(n)}" for n in names
    )
    for shard in (0, 1, 2):
        here = [
            r[0]
            for r in _rows(shards, shard, "SELECT name FROM harvest.schedules WHERE declared ORDER BY name")
        ]
        assert here == sorted(n for n in names if ROUTER.schedule_home(n) == shard), "the old copies are gone"
        runs = _rows(shards, shard, "SELECT DISTINCT split_part(workflow_id, ':', 2) FROM harvest.executions")
        assert {r[0] for r in runs} <= {*here, "by-hand"}, "a schedule fires on its own shard only"
        moved = [n for n in names if (ROUTER.schedule_home(n) + 1) % 3 == shard]
        if moved:
            assert _rows(shards, shard, "SELECT name FROM harvest.schedules WHERE NOT declared") == [
                ("by-hand",)
            ]
            audited = (
                "SELECT target, details ->> 'home_shard' FROM harvest.audit_log"
                " WHERE operation = 'schedule.delete_moved'"
            )
            assert _rows(shards, shard, audited) == [(n, str(ROUTER.schedule_home(n))) for n in moved]


def test_a_copy_stays_while_no_worker_of_the_fleet_has_declared_its_home(shards) -> None:
    """A worker that does not poll a schedule's home never declares it there, so it does not
    delete the copy on its own shards: the schedule keeps firing somewhere until the home's
    worker comes up."""
    name = next(f"stay{i}" for i in range(1000) if ROUTER.schedule_home(f"stay{i}") == 1)
    app = App(
        workflows=[shard_tick],
        schedules=[WorkflowSchedule(name, Schedule.every("1h"), workflow=shard_tick)],
    )
    with shards.connect(2) as conn:
        SqlApi(conn).declare_schedules(schedule_specs(app))
    only = {s: shards.dsns[s] for s in (0, 2)}
    worker = Worker(app, shards=only, router=ROUTER, scan_interval=0.2, poll_interval=0.3)
    with _running(worker):
        deadline = time.monotonic() + 30
        while not all(lane.ready for lane in worker.lanes) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(lane.ready for lane in worker.lanes)
    assert _rows(shards, 2, "SELECT name FROM harvest.schedules") == [(name,)]
    assert _rows(shards, 1, "SELECT name FROM harvest.schedules") == []


def test_a_worker_without_shards_refuses_to_declare_schedules_on_one_shard_of_several(shards) -> None:
    """Growing from one database: once a worker with the new [shards] has run, each shard's
    database knows it is one of several (that worker's row names the readable shards). An old
    one-database worker (no [shards]) booting on it then refuses to start, naming the
    configuration it needs, and declares nothing: it used to upsert every schedule there, so
    each moved one fired on two shards until a sharded worker booted again."""
    from harvest.core.errors import ConfigError

    names = _names_on_distinct_homes(3)
    app = App(
        workflows=[shard_tick],
        schedules=[WorkflowSchedule(n, Schedule.every("1h"), workflow=shard_tick) for n in names],
    )
    worker = Worker(app, shards=dict(shards.dsns), router=ROUTER, scan_interval=0.2, poll_interval=0.3)
    with _running(worker):
        deadline = time.monotonic() + 30
        while not all(lane.ready for lane in worker.lanes) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(lane.ready for lane in worker.lanes)
    declared = "SELECT name FROM harvest.schedules ORDER BY name"
    homed_on_0 = [(n,) for n in names if ROUTER.schedule_home(n) == 0]
    assert _rows(shards, 0, declared) == homed_on_0
    (metadata,) = _rows(shards, 0, "SELECT metadata FROM harvest.workers")[0]
    assert metadata["readable_shards"] == [0, 1, 2]

    old = Worker(app, shards.dsns[0], scan_interval=0.2, poll_interval=0.3)
    with pytest.raises(ConfigError) as caught:
        asyncio.run(old.run())
    message = str(caught.value)
    assert "shard 0 of a sharded deployment (shards 0, 1, 2" in message, message
    assert "[shards]" in message and "shards.urls.N" in message and "fire on both" in message
    assert _rows(shards, 0, declared) == homed_on_0, "nothing declared again"
    assert _rows(shards, 0, "SELECT count(*) FROM harvest.workers")[0][0] == 1, "nor registered"
