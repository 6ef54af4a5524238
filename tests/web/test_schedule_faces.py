"""The schedule faces agree with each other: the HTTP API's answers name the HTTP way, `schedule
list --paused` over both transports, one spelling of a schedule's timing (`schedule list`, `dag
list`)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from web_helpers import api_client

from harvest import App, Schedule, workflow
from harvest.cli import http as cli_http
from harvest.cli.main import main
from harvest.declare.schedules import describe_row

BASE = "http://testserver"
CLEAN = {"HARVEST_DATABASE_URL": None, "HARVEST_URL": None, "HARVEST_TOKEN": None, "HARVEST_CONFIG": None}


@workflow
async def report(ctx, region: str) -> str:
    return region


APP = App(workflows=[report])


@pytest.fixture
def api(db: str):
    with api_client(db, app=APP) as client:
        yield client


def cli(*args: str):
    return CliRunner().invoke(main, list(args), env=CLEAN, catch_exceptions=False)


def test_a_taken_name_over_http_names_patch_or_delete_not_a_cli_command(api) -> None:
    """The 409 said `update it (harvest schedule update), or delete it first`: an HTTP caller
    has no such command. Likewise a 404 of a schedule names the list route."""
    body = {"name": "a/b", "workflow_name": "report", "every": "1h", "input": "eu"}
    assert api.post("/admin/schedules/workflow", json=body).status_code == 201
    taken = api.post("/admin/schedules/workflow", json=body)
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "schedule_already_exists"
    said = taken.json()["error"]["message"]
    assert "PATCH /admin/schedules/a%2Fb" in said and "DELETE /admin/schedules/a%2Fb" in said, said
    assert "harvest schedule" not in said
    gone = api.post("/admin/schedules/nope/pause", json={})
    assert gone.status_code == 404 and "GET /admin/schedules" in gone.json()["error"]["message"]
    assert "harvest schedule" not in gone.json()["error"]["message"]


def test_schedule_list_takes_paused_or_running_over_sql_and_http(db: str, api, monkeypatch) -> None:
    """The API had paused=; `schedule list` had no option for it."""
    for name in ("p1", "r1", "p2"):
        assert (
            api.post(
                "/admin/schedules/workflow",
                json={"name": name, "workflow_name": "report", "every": "1h", "paused": name[0] == "p"},
            ).status_code
            == 201
        )
    monkeypatch.setattr(cli_http, "TRANSPORT", api._transport)
    for before, after in (([], ["--database-url", db]), (["--base-url", BASE], [])):
        for flag, names in (("--paused", ["p1", "p2"]), ("--running", ["r1"]), (None, ["p1", "p2", "r1"])):
            done = cli(*before, "schedule", "list", "-o", "json", *after, *([flag] if flag else []))
            assert done.exit_code == 0, done.output
            assert [r["name"] for r in json.loads(done.stdout)["schedules"]] == names, (before, flag)


def test_one_spelling_of_a_schedules_timing() -> None:
    """`dag list`'s SCHEDULE (a DAG's Schedule.describe(), stored at registration) said `every 20
    s` and `cron '0 3 * * *' in UTC` where `schedule list`'s WHEN said `every 20s`."""
    assert Schedule.every(20).describe() == describe_row({"interval_secs": 20}) == "every 20s"
    paris = Schedule.cron("0 3 * * *", tz="Europe/Paris")
    assert paris.describe() == describe_row({"cron": "0 3 * * *", "timezone": "Europe/Paris"})
    assert paris.describe() == "cron 0 3 * * * Europe/Paris"
