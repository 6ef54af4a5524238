"""A schedule's backfill and delete from the dashboard over three shards (marker shard, no
browser): the page is a schedule on one shard (``/schedules/{shard}/{name}``), and its actions act
there only, where another shard holds a schedule of the same name (a reshard's copy)."""

from __future__ import annotations

import sys
import urllib.parse
from pathlib import Path

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))

from dashboard_helpers import TokenScopes
from starlette.testclient import TestClient

from harvest.config import load_config
from harvest.shard.router import ShardRouter
from harvest.web.ui import dashboard_app

pytestmark = pytest.mark.shard
OPERATE = {"Authorization": "Bearer operate-token"}


def test_a_delete_and_a_backfill_act_on_the_page_s_shard_only(shards) -> None:
    config = load_config(
        env={
            "HARVEST_SHARDS__READABLE": "0,1,2",
            "HARVEST_SHARDS__WRITABLE": "0,1,2",
            **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()},
        }
    )
    for s in (0, 1):
        with psycopg.connect(shards.dsns[s], autocommit=True) as conn:
            conn.execute("SELECT harvest.create_schedule('nightly', 'report', p_interval_secs => 3600)")

    def one(shard: int, sql: str) -> object:
        with psycopg.connect(shards.dsns[shard], autocommit=True) as conn:
            return conn.execute(sql).fetchone()[0]

    runs = "SELECT count(*) FROM harvest.executions WHERE workflow_id LIKE 'sched:nightly:%'"
    held = "SELECT count(*) FROM harvest.schedules WHERE name = 'nightly'"
    audited = "SELECT count(*) FROM harvest.audit_log WHERE operation = '{}' AND source = 'ui'"
    with TestClient(dashboard_app(config=config, authorizer=TokenScopes(), timeout=5.0)) as client:
        wanted = {"from": "2025-01-01T00:00Z", "to": "2025-01-01T02:00Z", "overlap": "allow_all"}
        confirm = client.post("/schedules/1/nightly/backfill", headers=OPERATE, data=wanted)
        assert confirm.status_code == 200 and "<strong>3</strong> slots" in confirm.text
        done = client.post(
            "/schedules/1/nightly/backfill",
            headers=OPERATE,
            data={**wanted, "confirm": "yes"},
            follow_redirects=False,
        )
        assert done.status_code == 303, done.text
        assert [one(s, runs) for s in (0, 1, 2)] == [0, 3, 0]
        assert [one(s, audited.format("schedule.backfill")) for s in (0, 1, 2)] == [0, 1, 0]

        page = client.post("/schedules/1/nightly/delete", headers=OPERATE, data={})
        assert page.status_code == 200 and "on shard 1" in page.text
        done = client.post(
            "/schedules/1/nightly/delete",
            headers=OPERATE,
            data={"confirm": "nightly"},
            follow_redirects=False,
        )
        assert done.status_code == 303
        said = urllib.parse.parse_qs(urllib.parse.urlsplit(done.headers["location"]).query)["msg"][0]
        assert said == "deleted schedule nightly on shard 1"
        assert [one(s, held) for s in (0, 1)] == [1, 0]  # shard 0's copy stays
        assert [one(s, audited.format("schedule.delete")) for s in (0, 1, 2)] == [0, 1, 0]
        # shard 2 never held it: a 404 there, nothing deleted elsewhere
        gone = client.post("/schedules/2/nightly/delete", headers=OPERATE, data={"confirm": "nightly"})
        assert gone.status_code == 404 and one(0, held) == 1


def test_the_new_schedule_form_creates_on_the_home_shard_and_edit_acts_there(shards) -> None:
    """The dashboard's New schedule lands where POST /admin/schedules/workflow and a declaration
    put it (ShardRouter.schedule_home, from its name), not on the first shard; Edit changes it
    there."""
    config = load_config(
        env={
            "HARVEST_SHARDS__READABLE": "0,1,2",
            "HARVEST_SHARDS__WRITABLE": "0,1,2",
            **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()},
        }
    )
    router = ShardRouter([0, 1, 2], [0, 1, 2], 0)
    names = {router.schedule_home(f"made{i}"): f"made{i}" for i in range(50)}
    assert set(names) == {0, 1, 2}

    def held(name: str) -> list[int]:
        out = []
        for s, dsn in shards.dsns.items():
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT max_active_runs FROM harvest.schedules WHERE name = %s", (name,)
                ).fetchone()
            out += [(s, row[0])] if row else []
        return out

    with TestClient(dashboard_app(config=config, authorizer=TokenScopes(), timeout=5.0)) as client:
        for home, name in sorted(names.items()):
            done = client.post(
                "/schedules", headers=OPERATE, data={"name": name, "every": "1h"}, follow_redirects=False
            )
            assert done.status_code == 303, done.text
            assert done.headers["location"].startswith(f"/schedules/{home}/{name}?")
            assert held(name) == [(home, 1)]
            edited = client.post(
                f"/schedules/{home}/{name}/edit",
                headers=OPERATE,
                data={"max_active_runs": "5"},
                follow_redirects=False,
            )
            assert edited.status_code == 303 and held(name) == [(home, 5)]
