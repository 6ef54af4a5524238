"""What a caller learns of a database it cannot reach (docs/security.md, "What an outage tells a
caller"): a 503 with a stable code, Retry-After and a request id, never what the connect met (a
refused login names the login, a server its host), since the token check needs the database
too and the caller may be anyone; the server's log has the detail under the request id. A
shard's reason in a partial read is an admin token's to read."""

from __future__ import annotations

import logging
import re
import socket
from typing import Any

import pytest
from psycopg import conninfo
from starlette.testclient import TestClient
from web_helpers import api_client

from harvest.config import load_config
from harvest.web.app import management_app
from harvest.web.errors import OutageLog
from harvest.web.ui.app import dashboard_app

LOGIN = "login_of_the_api_x7"  # a login the server does not know: its refusal names it


def _refused_login(db: str) -> str:
    return conninfo.make_conninfo(db, user=LOGIN)


def _where(db: str) -> list[str]:
    """What of ``db``'s connection a leak would show: the login, the port, the database name."""
    params = conninfo.conninfo_to_dict(db)
    return [LOGIN, str(params["port"]), str(params["dbname"])]


def _logged(caplog: pytest.LogCaptureFixture, request_id: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if request_id in r.getMessage()]


def test_an_unauthenticated_caller_learns_nothing_of_the_connect(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="harvest.web")
    with api_client(_refused_login(db), profile="production") as api:
        answers = {
            "no token": api.get("/workflows"),
            "a token": api.get("/workflows", headers={"Authorization": "Bearer hvt_" + "0" * 64}),
            "a write": api.post("/workflows/wf/start", json={}),
            "the probe": api.get("/health/ready"),
        }
    for what, answer in answers.items():
        assert answer.status_code == 503, (what, answer.text)
        assert answer.headers["Retry-After"], what
        for secret in _where(db):
            assert secret not in answer.text, (what, secret, answer.text)
    for what in ("no token", "a token", "a write"):
        error = answers[what].json()["error"]
        assert error["code"] == "database_unavailable", error
        assert "detail" not in error, error
        request_id = error["request_id"]
        assert re.fullmatch(r"[0-9a-f]{16}", request_id) and request_id in error["message"], error
        # The detail is in the log, in the line that begins the request's outage (the request
        # id's first 8 characters: one cause, one first line, OutageLog).
        (line,) = [line for line in _logged(caplog, request_id[:8]) if " begins " in line]
        assert LOGIN in line, line
    first = answers["no token"].json()["error"]["request_id"]
    assert _logged(caplog, first), "the first request of an outage is logged by its whole id"


def test_a_refused_login_says_to_check_the_servers_database_url_not_to_retry(db: str) -> None:
    """The 503 of a login the database refuses said "the database could not be reached; retry",
    where no retry helps; the hint to check the configuration was in the log only. The answer
    says what to check, and still nothing of the connect (the login, the port, the database);
    a server that is not there is still the outage a retry may pass."""
    with api_client(_refused_login(db), profile="production") as api:
        refused = api.get("/workflows").json()["error"]
    assert refused["code"] == "database_unavailable", refused
    assert refused["message"].startswith("the database refused this server's connection"), refused
    assert "which retrying will not change" in refused["message"]
    assert "check its database URL (user, password, database name)" in refused["message"]
    for secret in _where(db):
        assert secret not in refused["message"], secret
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        nobody = conninfo.make_conninfo(db, host="127.0.0.1", port=free.getsockname()[1])
    with api_client(nobody, profile="production") as api:
        down = api.get("/workflows").json()["error"]
    assert down["message"].startswith("the database could not be reached; retry"), down


def test_the_dashboard_says_no_more(db: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="harvest.web")
    app = dashboard_app(dsn=_refused_login(db), profile="production", timeout=1.0)
    with TestClient(app, raise_server_exceptions=False) as client:
        page = client.get("/workers", headers={"Authorization": "Bearer hvt_" + "0" * 64})
    assert page.status_code == 503 and "retrying will not change" in page.text, page.text
    assert page.headers["Retry-After"] == "1", page.headers  # as the API's 503
    for secret in _where(db):
        assert secret not in page.text, secret
    (request_id,) = re.findall(r"request ([0-9a-f]{16})", page.text)
    (line,) = _logged(caplog, request_id)
    assert LOGIN in line, line


def test_what_a_shards_connect_met_is_an_admins_to_read(db: str, tokens: dict[str, str]) -> None:
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0",
        "HARVEST_SHARDS__URLS__0": db,
        "HARVEST_SHARDS__URLS__1": _refused_login(db),
    }
    on_shard_1 = "00010000-0000-7000-8000-000000000001"
    with api_client(db, env=env, profile="production") as api:
        seen = {
            scope: api.get("/workflows", headers={"Authorization": f"Bearer {tokens[scope]}"})
            for scope in ("read", "operate", "admin")
        }
        routed = {
            scope: api.get(f"/workflows/{on_shard_1}", headers={"Authorization": f"Bearer {tokens[scope]}"})
            for scope in ("read", "admin")
        }
    for scope, answer in routed.items():  # a call routed to the shard: its 503
        error = answer.json()["error"]
        assert answer.status_code == 503 and answer.headers["Retry-After"], answer.text
        assert error["code"] == "shard_unavailable" and error["shard_id"] == 1, error
        assert error["message"].startswith("shard 1's database refused this server's connection"), error
        assert LOGIN not in error["message"] and error["request_id"] in error["message"], error
        if scope == "admin":
            assert LOGIN in error["detail"], error
        else:
            assert "detail" not in error and LOGIN not in answer.text, error
    for scope, answer in seen.items():
        listed = answer.json()
        assert answer.status_code == 200 and listed["status"] == "partial", (scope, answer.text)
        assert listed["unavailable_shards"] == [1], listed
        reason = listed["unavailable_reasons"]["1"]
        if scope == "admin":
            assert LOGIN in reason, reason
        else:
            assert reason == "cannot be reached now (the server's log has the cause)", (scope, reason)
            for secret in _where(db):
                assert secret not in answer.text, (scope, secret)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _down_app(caplog: pytest.LogCaptureFixture, profile: str | None = None) -> tuple[Any, _Clock]:
    """The management API over a port nothing listens on (each request's connect is refused),
    its outage log on the test's clock, and harvest.web's warnings captured."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = management_app(
        dsn=f"postgresql://harvest@127.0.0.1:{port}/harvest", config=load_config(env={}), profile=profile
    )
    clock = _Clock()
    app.state.harvest_outages = OutageLog(clock=clock)
    caplog.set_level(logging.WARNING, logger="harvest.web")
    return app, clock


def test_an_outages_requests_are_counted_not_each_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A few hundred requests a second meeting one database down were as many WARNING lines:
    the log flooded when it was needed. Now the outage's first request is logged whole, the rest
    counted in a line per 10 s at most, and their ids start with the outage's, which the lines
    name (docs/security.md, "What an outage tells a caller"). The app's own OutageLog, with the
    test's clock: no time is compared."""
    app, clock = _down_app(caplog)
    ids = []
    with TestClient(app, headers={"Accept": "application/json"}) as api:
        for _ in range(40):
            answer = api.get("/workflows")
            assert answer.status_code == 503 and answer.headers["Retry-After"], answer.text
            ids.append(answer.json()["error"]["request_id"])
            clock.now += 0.5  # 40 requests over 20 s
        clock.now += 10
        assert api.get("/health/live").status_code == 200  # a later answer: the outage is over
        said = [r.getMessage() for r in caplog.records if r.name == "harvest.web"]
    lines = [line for line in said if "at startup" not in line]  # (the boot's own warning)
    assert len(lines) <= 4, lines  # the first, a count per 10 s, the end: not 40 lines
    assert {request_id[:8] for request_id in ids} == {ids[0][:8]}, ids
    assert all(ids[0][:8] in line and line.endswith("(Connection refused)") for line in lines), lines
    assert f"request {ids[0]}: outage {ids[0][:8]} begins" in lines[0], lines
    counted = sum(int(n) for line in lines for n in re.findall(r": (\d+) more requests", line))
    assert counted == 39 and "is over" in lines[-1] and "40 in all" in lines[-1], lines


@pytest.mark.parametrize("profile", ["production", "dev"])
def test_the_api_and_its_dashboard_log_one_outage_once(
    profile: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The dashboard mounted at /ui was an app of its own with an outage log of its own: one
    database down logged a begins line from each, and a count line from each. They share the
    API's now (harvest.web.errors.app_outages): one outage, one begins line, both faces' requests
    counted in it, their ids all under its 8 characters. Met by the token check (production:
    the same call on both faces) or past it (dev: a route's connect, and a page that could read
    no shard, which says what the connect met in a fan-out's words)."""
    app, clock = _down_app(caplog, profile)
    ids = []
    with TestClient(app, headers={"Authorization": "Bearer hvt_test"}) as client:
        for _ in range(5):
            api = client.get("/workflows", headers={"Accept": "application/json"})
            page = client.get("/ui/workflows")
            assert api.status_code == 503 and page.status_code == 503, (api.text, page.text)
            ids.append(api.json()["error"]["request_id"])
            clock.now += 0.5
        clock.now += 10
        assert client.get("/health/live").status_code == 200  # a later answer: the outage is over
    said = [r.getMessage() for r in caplog.records if r.name == "harvest.web" and "outage" in r.getMessage()]
    begins = [line for line in said if " begins " in line]
    assert len(begins) == 1 and begins[0].startswith(f"harvest: request {ids[0]}"), said
    assert {i[:8] for i in ids} == {ids[0][:8]} and all(ids[0][:8] in line for line in said), said
    assert "is over" in said[-1] and "10 in all" in said[-1], said  # the dashboard's five counted too
