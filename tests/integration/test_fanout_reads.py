"""Fan-out reads over three real databases (harvest/shard/fanout.py, docs/sharding.md "Fan-out reads").

Three migrated databases on the test server stand for shards 0, 1 and 2, and a fourth mapping
entry points at a database that is dropped (or at a closed pool): every read answers from the
others, names the missing shard in unavailable_shards and says "partial", never raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from click.testing import CliRunner

from harvest.cli import shards as cli_shards
from harvest.cli.main import main
from harvest.db.connection import connect
from harvest.db.pools import open_async_pool
from harvest.db.sqlapi import AsyncSqlApi, SqlApi
from harvest.shard.fanout import AsyncShardReads, ShardReads

pytestmark = pytest.mark.shard

T0 = datetime(2031, 3, 1, tzinfo=UTC)


@contextlib.contextmanager
def sql_on(dsn: str) -> Iterator[SqlApi]:
    conn = connect(dsn, autocommit=True, connect_timeout=3)
    try:
        yield SqlApi(conn)
    finally:
        conn.close()


@pytest.fixture
def shards(pg_server, template_dsn) -> Iterator[dict[int, str]]:
    """Shard number -> DSN: three migrated databases, and shard 3 whose database is gone."""
    names = {s: f"t_fan{s}_{uuid.uuid4().hex[:8]}" for s in range(4)}
    dsns = {s: pg_server.create_database(name, template="harvest_template") for s, name in names.items()}
    pg_server.drop_database(names[3])
    yield dsns
    for name in names.values():
        pg_server.drop_database(name)


def start(dsn: str, at: datetime, name: str = "fan_wf", parent: str | None = None, **attrs) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (at.isoformat(),))
        row = conn.execute(
            # (the engine's own start: a client's start_workflow names no parent)
            "SELECT execution_id FROM harvest._start_workflow(%s, '[]', NULL, 'fan_q', "
            "p_search_attributes => %s, p_parent_id => %s)",
            (name, json.dumps(attrs), parent),
        ).fetchone()
    return str(row[0])


def apis_for(dsns: dict[int, str]) -> dict[int, functools.partial]:
    return {s: functools.partial(sql_on, dsn) for s, dsn in dsns.items()}


def test_workflow_list_pages_through_three_shards_with_ties_and_one_shard_gone(shards) -> None:
    live = {s: shards[s] for s in (0, 1, 2)}
    made = []
    for i in range(5):  # the same created_at on every shard: ties across shards at every step
        for s, dsn in live.items():
            made.append(start(dsn, T0 + timedelta(seconds=i), tenant="acme" if s != 1 else "other"))
    reads = ShardReads(apis_for(live))
    got, cursor = [], None
    for _ in range(20):
        page = reads.list_workflows(page_size=4, cursor=cursor)
        assert page.status == "complete" and len(page.value) <= 4
        got += page.value
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(str(r["execution_id"]) for r in got) == sorted(made)
    keys = [(r["created_at"], r["execution_id"]) for r in got]
    assert keys == sorted(keys, reverse=True)  # newest first, ties by id, across shards
    filtered = reads.list_workflows(page_size=100, search_attributes=["tenant=acme"])
    assert {r["shard_id"] for r in filtered.value} == {0, 2} and len(filtered.value) == 10

    with_gone = ShardReads(apis_for(shards))
    page = with_gone.list_workflows(page_size=100)
    assert (page.status, page.unavailable_shards, len(page.value)) == ("partial", [3], 15)
    assert page.next_cursor is not None  # shard 3 could not say it had nothing


def test_counts_usage_workers_and_dead_letters_add_up_and_go_partial(shards) -> None:
    for s in (0, 1, 2):
        for i in range(s + 1):
            start(shards[s], T0 + timedelta(minutes=i), name=f"wf{s % 2}")
        with psycopg.connect(shards[s], autocommit=True) as conn:
            conn.execute("SELECT harvest.register_worker(%s, ARRAY['fan_q'], 'h', 1)", (f"w{s}",))
            conn.execute(
                "INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name, queue,"
                " attempts, failure, scheduled_at, failed_at)"
                " SELECT id, workflow_name, 1, 'act', 'fan_q', 3, '{\"error_type\": \"Boom\"}', now(), %s"
                " FROM harvest.executions",
                (T0 + timedelta(hours=s),),
            )
    reads = ShardReads(apis_for(shards))

    counts = reads.count_executions()
    assert counts.value == [{"status": "RUNNING", "workflow_name": None, "executions": 6, "capped": False}]
    # Bounded (the dashboard's chips): each shard counts up to the limit (3, 2 and 1 runs: 2 + 2 + 1),
    # capped when one reached it.
    bounded = reads.count_executions(limit=2).value
    assert bounded == [{"status": "RUNNING", "workflow_name": None, "executions": 5, "capped": True}]
    assert (counts.status, counts.unavailable_shards) == ("partial", [3])
    by_name = reads.count_executions(group_by="workflow_name").value
    assert {r["workflow_name"]: r["executions"] for r in by_name} == {"wf0": 4, "wf1": 2}

    usage = reads.count_usage(T0 - timedelta(days=1), T0 + timedelta(days=1))
    assert {r["group_name"]: r["workflow_starts"] for r in usage.value} == {"wf0": 4, "wf1": 2}
    assert usage.unavailable_shards == [3]

    health = reads.get_worker_health()
    assert health.value["by_shard"] == {"0": 1, "1": 1, "2": 1}
    assert health.value["by_queue"] == {"fan_q": 3} and health.value["total"] == 3
    assert health.status == "partial"
    workers = reads.list_workers(shard_id=1)
    assert [(w["worker_id"], w["shard_id"]) for w in workers.value] == [("w1", 1)]
    assert workers.status == "complete"  # only shard 1 was asked

    dlq = reads.count_dead_letters("activity")
    assert [(r["activity_name"], r["dead_letters"]) for r in dlq.value] == [("act", 6)]
    assert dlq.value[0]["first_failed_at"] == T0 and dlq.value[0]["last_failed_at"] == T0 + timedelta(hours=2)
    seen, cursor = [], None
    for _ in range(10):
        page = ShardReads(apis_for({s: shards[s] for s in (0, 1, 2)})).list_dead_letters(4, cursor=cursor)
        seen += [(r["shard_id"], r["id"]) for r in page.value]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(seen) == [(0, 1), (1, 1), (1, 2), (2, 1), (2, 2), (2, 3)]
    assert [s for s, _ in seen][:3] == [2, 2, 2]  # newest failure first


def test_children_and_tree_cross_shards_and_name_the_shard_that_is_down(shards) -> None:
    root = start(shards[0], T0)
    child_local = start(shards[0], T0 + timedelta(seconds=1), parent=root)
    child_remote = start(shards[1], T0 + timedelta(seconds=2), parent=root)
    grandchild = start(shards[2], T0 + timedelta(seconds=3), parent=child_remote)
    live = ShardReads(apis_for({s: shards[s] for s in (0, 1, 2)}))

    direct = live.list_children(root)
    assert [(str(r["execution_id"]), r["shard_id"], r["depth"]) for r in direct.value] == [
        (child_remote, 1, 1),
        (child_local, 0, 1),
    ]
    deep = live.list_children(root, depth=2)
    assert [str(r["execution_id"]) for r in deep.value] == [grandchild, child_remote, child_local]
    assert deep.value[0]["depth"] == 2 and deep.value[0]["shard_id"] == 2
    tree = live.list_tree(root).value
    assert [str(c["execution_id"]) for c in tree["children"]] == [child_remote, child_local]
    assert [str(g["execution_id"]) for g in tree["children"][0]["children"]] == [grandchild]

    partial = ShardReads(apis_for(shards)).list_children(root, depth=2)
    assert (partial.status, partial.unavailable_shards, len(partial.value)) == ("partial", [3], 3)
    assert live.list_children(root, status="completed").value == []


def test_async_reads_over_pools_with_one_pool_closed(shards) -> None:
    for s in (0, 1, 2):
        start(shards[s], T0 + timedelta(seconds=s))

    async def go():
        pools = {s: await open_async_pool(shards[s], max_size=2) for s in (0, 1, 2)}
        await pools[2].close()  # shard 2's pool is gone: its reads fail to get a connection
        try:
            reads = AsyncShardReads({s: AsyncSqlApi(p) for s, p in pools.items()}, timeout=10)
            return await reads.list_workflows(page_size=10), await reads.count_executions()
        finally:
            for p in pools.values():
                await p.close()

    page, counts = asyncio.run(go())
    assert [r["shard_id"] for r in page.value] == [1, 0]
    assert (page.status, page.unavailable_shards) == ("partial", [2])
    assert counts.value[0]["executions"] == 2 and counts.unavailable_shards == [2]


def test_cli_reads_go_through_the_seam_and_print_partial(shards, monkeypatch) -> None:
    start(shards[0], T0)
    start(shards[1], T0)

    @contextlib.contextmanager
    def three(config, database_url=None):
        yield apis_for({0: shards[0], 1: shards[1], 3: shards[3]})

    monkeypatch.setattr(cli_shards, "shard_apis", three)
    # A DSN selects the SQL transport (with none, the CLI would try the default HTTP URL).
    runner = CliRunner(env={"HARVEST_DATABASE_URL": shards[0], "HARVEST_URL": None})
    out = runner.invoke(main, ["workflow", "list", "--output", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert (data["status"], data["unavailable_shards"], len(data["executions"])) == ("partial", [3], 2)

    out = runner.invoke(main, ["workflow", "count"])
    assert out.exit_code == 0, out.output
    assert "RUNNING" in out.stdout and "partial: shard(s) 3 could not be read" in out.stderr

    out = runner.invoke(main, ["worker", "health", "--output", "json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["unavailable_shards"] == [3]


def test_cli_pages_usage_and_dead_letters_over_three_shards(shards, monkeypatch) -> None:
    live = {s: shards[s] for s in (0, 1, 2)}
    made = set()
    for s, dsn in live.items():
        for i in range(3):
            made.add(start(dsn, T0 + timedelta(seconds=i), name=f"wf{s}"))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name, queue,"
                " attempts, failure, scheduled_at, failed_at)"
                " SELECT id, workflow_name, 1, 'act', 'fan_q', 3, '{\"error_type\": \"Boom\"}', now(), %s"
                " FROM harvest.executions",
                (T0,),
            )

    @contextlib.contextmanager
    def seam(config, database_url=None):
        yield apis_for(live)

    monkeypatch.setattr(cli_shards, "shard_apis", seam)
    runner = CliRunner(env={"HARVEST_DATABASE_URL": live[0], "HARVEST_URL": None})  # SQL, as above

    def pages(*args: str) -> list[dict]:
        got, cursor = [], None
        for _ in range(20):
            out = runner.invoke(main, [*args, "-o", "json", *(["--cursor", cursor] if cursor else [])])
            assert out.exit_code == 0, out.output
            got.append(json.loads(out.stdout))
            cursor = got[-1]["next_cursor"]
            if cursor is None:
                return got
        raise AssertionError("paging did not end")

    listed = pages("workflow", "list", "--page-size", "4")
    assert {e["execution_id"] for p in listed for e in p["executions"]} == made and len(listed) == 3
    dead = pages("dlq", "list", "--limit", "4")
    assert sorted((d["shard_id"], d["id"]) for p in dead for d in p["dead_letters"]) == [
        (s, i) for s in (0, 1, 2) for i in (1, 2, 3)
    ]
    out = runner.invoke(main, ["dlq", "list", "--before-id", "2"])
    assert out.exit_code == 2 and "before_id names a dead letter of one shard" in out.output
    out = runner.invoke(main, ["workflow", "list", "--cursor", "wf1.bm90IGpzb24"])
    assert out.exit_code == 2 and "malformed" in out.output

    out = runner.invoke(
        main, ["usage", "--from", (T0 - timedelta(days=1)).isoformat(), "--to", "2031-03-02", "--json"]
    )
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert {g["group"]: g["workflow_starts"] for g in report["groups"]} == {"wf0": 3, "wf1": 3, "wf2": 3}
    assert report["status"] == "complete" and report["group_by"] == "workflow_name"
    out = runner.invoke(main, ["usage", "--from", "24h"])
    # The runs carry a fake time in 2031: none in the last day.
    assert out.exit_code == 0 and "0 group(s)" in out.stdout
    out = runner.invoke(main, ["usage", "--from", "last tuesday"])
    assert out.exit_code == 2 and "neither an RFC 3339 time" in out.output


# -- each shard's page in the order the merge uses ------------------------------------------------
def _at(conn: psycopg.Connection, moment: datetime) -> None:
    conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (moment.isoformat(),))


def _shard_env(dsns: dict[int, str]) -> dict[str, str | None]:
    readable = ",".join(map(str, sorted(dsns)))
    return {
        "HARVEST_DATABASE_URL": None,
        "HARVEST_URL": None,
        "HARVEST_SHARDS__READABLE": readable,
        "HARVEST_SHARDS__WRITABLE": readable,
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in dsns.items()},
    }


def test_dead_letters_page_newest_failure_first_when_ids_and_times_disagree(shards) -> None:
    """Each shard listed its dead letters by id while the merge ordered them by failure time: a
    shard whose newer id failed earlier (a long transaction, the test clock) held back its
    newest failure behind it. Each shard now pages by (failed_at, id), and the cursor keeps each
    shard's (failed_at, id): a row acted on between pages (replayed, discarded) does not lose
    the place."""
    live = {s: shards[s] for s in (0, 1, 2)}
    times = {0: [10, 0, 7], 1: [5], 2: [5, 3]}  # seconds after T0, in id order
    for s, seconds in times.items():
        run = start(live[s], T0)
        with psycopg.connect(live[s], autocommit=True) as conn:
            for n in seconds:
                conn.execute(
                    "INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name,"
                    " queue, attempts, failure, scheduled_at, failed_at)"
                    " VALUES (%s, 'fan_wf', 1, 'act', 'fan_q', 3, '{}', now(), %s)",
                    (run, T0 + timedelta(seconds=n)),
                )
    reads = ShardReads(apis_for(live))
    got, cursor = [], None
    for _ in range(10):
        page = reads.list_dead_letters(2, cursor=cursor)
        got += page.value
        if page.value and page.value[-1]["shard_id"] == 0 and page.value[-1]["id"] == 1:
            with psycopg.connect(live[0], autocommit=True) as conn:  # the cursor's own row goes
                conn.execute("DELETE FROM harvest.dead_letters WHERE id = 1")
        cursor = page.next_cursor
        if cursor is None:
            break
    keys = [((r["failed_at"] - T0).seconds, r["shard_id"], r["id"]) for r in got]
    assert keys == [(10, 0, 1), (7, 0, 3), (5, 1, 1), (5, 2, 1), (3, 2, 2), (0, 0, 2)]


def test_audit_and_dag_run_lists_keep_the_newest_across_shards(shards, monkeypatch) -> None:
    """`harvest audit list --limit N` merges every shard's newest N by time, but each shard sent
    its newest N by id: shard 0's newest action, written under an older id, was left out. And a
    DAG's runs: each shard sent its ties (one created_at) by ascending id while the merge wants
    descending, so `limit` kept the wrong one. Each shard now orders as the merge does."""
    live = {s: shards[s] for s in (0, 1)}
    with psycopg.connect(live[1], autocommit=True) as conn:  # (its audit row: today, before T0)
        conn.execute("SELECT harvest.set_shard_id(1, 'tests')")
    for s, seconds in {0: [10, 0], 1: [5]}.items():
        with psycopg.connect(live[s], autocommit=True) as conn:
            for n in seconds:
                _at(conn, T0 + timedelta(seconds=n))
                conn.execute("SELECT harvest._audit('worker.drain', %s, 'ops', '{}')", (f"w{s}-{n}",))
    for key, value in _shard_env(live).items():
        monkeypatch.setenv(key, value) if value is not None else monkeypatch.delenv(key, raising=False)
    out = CliRunner().invoke(main, ["audit", "list", "--limit", "1", "--output", "json"])
    assert out.exit_code == 0, out.output
    assert [r["target"] for r in json.loads(out.stdout)["audit_log"]] == ["w0-10"]

    dag = [{"dag_name": "fan_dag", "queue": "fan_q", "tasks": [], "max_active_runs": 10}]
    runs: dict[int, list[str]] = {}
    for s, seconds in {0: [0, 0, 0], 1: [-1]}.items():
        with psycopg.connect(live[s], autocommit=True) as conn:
            conn.execute("SELECT harvest.register_dags(%s::jsonb)", (json.dumps(dag),))
            for n in seconds:
                _at(conn, T0 + timedelta(seconds=n))
                (run,) = conn.execute("SELECT execution_id FROM harvest.trigger_dag('fan_dag')").fetchone()
                runs.setdefault(s, []).append(str(run))
    newest = max(runs[0], key=uuid.UUID)  # ties on created_at: the greater id first, as the merge
    from starlette.testclient import TestClient

    from harvest.config import load_config
    from harvest.web import management_app
    from harvest.web.ui import dashboard_app

    config = load_config(env={k: v for k, v in _shard_env(live).items() if v is not None})
    with TestClient(management_app(config=config, profile="dev")) as api:
        listed = api.get("/dags/fan_dag/runs", params={"limit": 1})
        assert listed.status_code == 200, listed.text
        assert [r["execution_id"] for r in listed.json()["runs"]] == [newest]
    with TestClient(dashboard_app(config=config, profile="dev")) as ui:
        page = ui.get("/dags/fan_dag", params={"limit": 2})
        assert page.status_code == 200, page.text
        shown = [r for r in runs[0] if r[-12:] in page.text]
        assert newest in shown and len(shown) == 2, shown
