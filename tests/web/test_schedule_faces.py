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
                json={
                    "name": name,
                    "workflow_name": "report",
                    "every": "1h",
                    "input": "eu",
                    "paused": name[0] == "p",
                },
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


# The fields of a schedule's answer a client edits and sends back (args: the run's arguments, as
# a write's args takes them; its input is the one argument).
EDITABLE = (
    "workflow_name",
    "args",
    "queue",
    "cron",
    "timezone",
    "interval_secs",
    "max_active_runs",
    "overlap",
    "catchup",
    "catchup_window_secs",
    "jitter_secs",
)


def test_what_a_get_answers_can_be_edited_and_patched_back(api) -> None:
    """A write took tz, every, catchup_window and jitter; an answer says timezone, interval_secs,
    catchup_window_secs and jitter_secs: a client that PATCHed back what it read got a 400
    (unknown field). A write takes the answer's names too (the old ones still)."""
    made = api.post(
        "/admin/schedules/workflow",
        json={
            "name": "n",
            "workflow_name": "report",
            "cron": "0 3 * * *",
            "timezone": "Europe/Paris",
            "catchup_window_secs": 3600,
            "jitter_secs": 1.5,
            "input": "eu",
        },
    )
    assert made.status_code == 201, made.text
    got = api.get("/admin/schedules/n").json()
    assert (got["timezone"], got["catchup"], got["catchup_window_secs"], got["jitter_secs"]) == (
        "Europe/Paris",
        True,
        3600,
        1.5,
    )
    edited = {k: got[k] for k in EDITABLE} | {"cron": "0 4 * * *"}
    patched = api.patch("/admin/schedules/n", json=edited)
    assert patched.status_code == 200, patched.text
    after = patched.json()
    assert {k: after[k] for k in EDITABLE} == edited
    # An interval schedule's answer: timezone UTC beside no cron, sent back as read.
    edited = {k: after[k] for k in EDITABLE} | {"cron": None, "interval_secs": 900, "timezone": "UTC"}
    patched = api.patch("/admin/schedules/n", json=edited)
    assert patched.status_code == 200, patched.text
    assert (patched.json()["interval_secs"], patched.json()["cron"]) == (900, None)
    again = {k: patched.json()[k] for k in EDITABLE}
    assert api.patch("/admin/schedules/n", json=again).status_code == 200
    # One field both ways: a 400 naming it.
    both = api.patch("/admin/schedules/n", json={"every": "1h", "interval_secs": 60})
    assert both.status_code == 400 and both.json()["error"]["field"] == "interval_secs"
    assert api.patch("/admin/schedules/n", json={"jitter": "1s"}).json()["jitter_secs"] == 1


def test_a_create_over_http_is_checked_against_the_served_app_and_the_registered_workflows(
    db: str, api, conn, monkeypatch
) -> None:
    """A schedule of a workflow that needs an argument, made without `input`, failed every
    firing; one whose workflow its queue's workers did not register too. The API checks the
    first against its served App (a 400 naming input) and the second as a start does (a 400
    unknown_workflow naming `allow_unregistered`, not the SQL's or the CLI's spelling)."""
    bare = api.post("/admin/schedules/workflow", json={"name": "r", "workflow_name": "report", "every": "1h"})
    assert bare.status_code == 400 and bare.json()["error"]["field"] == "input", bare.text
    assert "region" in bare.json()["error"]["message"]
    assert (
        api.post(
            "/admin/schedules/workflow",
            json={"name": "r", "workflow_name": "report", "every": "1h", "input": "eu"},
        ).status_code
        == 201
    )
    cleared = api.patch("/admin/schedules/r", json={"args": None})
    assert cleared.status_code == 400 and cleared.json()["error"]["field"] == "args"
    conn.execute("SELECT harvest.register_workflows(ARRAY['default'], ARRAY['report'])")
    typo = api.post("/admin/schedules/workflow", json={"name": "t", "workflow_name": "reprot", "every": "1h"})
    assert typo.status_code == 400 and typo.json()["error"]["code"] == "unknown_workflow", typo.text
    said = typo.json()["error"]["message"]
    assert 'workflow "reprot" is not registered on queue "default"' in said
    assert 'send "allow_unregistered": true' in said and "p_allow_unregistered" not in said
    assert typo.json()["error"]["registered"] == ["report"]
    kept = api.post(
        "/admin/schedules/workflow",
        json={"name": "t", "workflow_name": "reprot", "every": "1h", "allow_unregistered": True},
    )
    assert kept.status_code == 201, kept.text
    moved = api.patch("/admin/schedules/r", json={"workflow_name": "reprot"})
    assert moved.status_code == 400 and moved.json()["error"]["code"] == "unknown_workflow"
    assert (
        api.patch(
            "/admin/schedules/r", json={"workflow_name": "reprot", "allow_unregistered": True}
        ).status_code
        == 200
    )
    # The CLI over HTTP says its own flag.
    monkeypatch.setattr(cli_http, "TRANSPORT", api._transport)
    done = cli("--base-url", BASE, "schedule", "create-workflow", "--name", "u", "--workflow", "reprot",
               "--every", "1h")  # fmt: skip
    assert done.exit_code == 2 and "pass --allow-unregistered" in done.output, done.output
