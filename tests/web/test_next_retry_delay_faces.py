"""A failure's next_retry_delay (a Retry-After: docs/activities.md) reaches every face that fails
an activity by its task token, checked alike: Client.fail_activity and harvest.fail_activity_by_token
took it, but POST /activities/fail refused the field (400 "unknown field"), `harvest activity fail`
had no option for it, and the CLI's HTTP transport dropped it."""

from __future__ import annotations

import psycopg
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient
from web_helpers import api_client, claimed_activity

from harvest.cli import http as cli_http
from harvest.cli.main import main
from harvest.config import load_config
from harvest.web.app import management_app

POLICY = {"retry": {"max_attempts": 3, "initial_interval": 1, "max_interval": 5}}
ENV = {"HARVEST_DATABASE_URL": None, "HARVEST_URL": None, "HARVEST_TOKEN": None, "HARVEST_CONFIG": None}


def _wait(db: str, token: str) -> float:
    """Seconds from now until the retry is due of the activity failed with the message token[-12:]."""
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "SELECT extract(epoch FROM t.due_at - harvest.now())::float8 FROM harvest.tasks AS t"
            " WHERE t.kind = 'activity' AND t.status = 'pending' AND t.last_failure ->> 'message' = %s",
            (token[-12:],),
        ).fetchone()
    assert row is not None, token
    return row[0]


def test_post_activities_fail_takes_next_retry_delay_and_refuses_one_out_of_range(db: str) -> None:
    with api_client(db) as api:
        for i, bad in enumerate((-1, 4e9, 1e-310, "30s")):
            token = claimed_activity(db, POLICY, f"http-bad-{i}")
            refused = api.post("/activities/fail", json={"task_token": token, "next_retry_delay": bad})
            assert refused.status_code == 400, (bad, refused.text)
            assert refused.json()["error"]["field"] == "next_retry_delay", refused.text
        token = claimed_activity(db, POLICY, "http")
        failed = api.post(
            "/activities/fail", json={"task_token": token, "message": token[-12:], "next_retry_delay": 3600}
        )
        assert failed.status_code == 200 and failed.json()["outcome"] == "retry_scheduled", failed.text
    assert 3500 < _wait(db, token) <= 3600


@pytest.mark.parametrize("transport", ["sql", "http"])
def test_harvest_activity_fail_next_retry_delay(db: str, transport: str, monkeypatch) -> None:
    token = claimed_activity(db, POLICY, f"cli-{transport}")
    args = ["activity", "fail", token, "--message", token[-12:], "--next-retry-delay", "1h"]
    if transport == "sql":
        ran = CliRunner().invoke(main, [*args, "--database-url", db], env=ENV, catch_exceptions=False)
    else:
        with TestClient(management_app(dsn=db, config=load_config(env={}), profile="dev")) as served:
            monkeypatch.setattr(cli_http, "TRANSPORT", served._transport)
            ran = CliRunner().invoke(
                main, ["--base-url", "http://testserver", *args], env=ENV, catch_exceptions=False
            )
    assert (ran.exit_code, ran.stdout) == (0, "retry_scheduled\n"), ran.stderr
    assert 3500 < _wait(db, token) <= 3600
    bad = CliRunner().invoke(
        main, ["activity", "fail", token, "--next-retry-delay", "soon", "--database-url", db], env=ENV
    )
    assert bad.exit_code != 0 and "--next-retry-delay" in bad.stderr and "Traceback" not in bad.stderr
