"""Bad input to the workflow list's and a batch by filter's filters is a 400 naming the field
(security review sec68): never a 503, never a 400 that names nothing, and never an unbounded
query (every search attribute filter is a test of it)."""

from __future__ import annotations

import base64
import urllib.parse

import pytest
from operator_helpers import start
from web_helpers import api_client

from harvest.client.batch import encode_cursor


def _sql_cursor(scope: str) -> str:
    """A batch's SQL cursor (harvest._encode_cursor's form) made under ``scope``."""
    at = "2030-01-01T00:00:00.000000Z"
    return base64.b64encode(f"{at}|00000000-0000-4000-8000-000000000000|{at}|{scope}".encode()).decode()


def _field(answer) -> str | None:
    assert answer.status_code == 400, answer.text
    return answer.json()["error"].get("field")


@pytest.mark.parametrize("action", ["cancel", "signal"])
def test_a_batch_names_the_field_of_each_bad_filter(db, conn, action) -> None:
    start(conn, "send_digest", "b-1")
    extra = {"signal_name": "go"} if action == "signal" else {}
    cases = [
        # A number among the text items reached the SQL as a smallint[]: a 503 schema_mismatch.
        ({"search_attributes": [1]}, "search_attributes"),
        ({"search_attributes": ["k=\u0000"]}, "search_attributes"),
        # 20,000 filters were 8 s of a backend's CPU for one step, 200 OK.
        ({"search_attributes": [f"k=v{i}" for i in range(101)]}, "search_attributes"),
        ({"search_attributes": ["k>1e999999"]}, "search_attributes"),
        ({"search_attributes": ["nocolon"]}, "search_attributes"),
        ({"workflow_name": "send_digest", "filter": "amount > 1e999999"}, "filter"),
        ({"workflow_name": "send_digest", "state": "BOGUS"}, "state"),
        # A position this route made of a cursor the SQL did not, and one of another filter's batch.
        ({"workflow_name": "send_digest", "cursor": encode_cursor("b", {0: "garbage"})}, "cursor"),
        ({"workflow_name": "send_digest", "cursor": encode_cursor("b", {0: _sql_cursor("x")})}, "cursor"),
    ]
    with api_client(db) as api:
        for body, field in cases:
            for dry_run in (True, False):
                answer = api.post(f"/workflows/{action}", json={**body, **extra, "dry_run": dry_run})
                assert _field(answer) == field, (body, answer.text)
        spec = api.get("/openapi.json").json()["paths"][f"/workflows/{action}"]["post"]
        schema = spec["requestBody"]["content"]["application/json"]["schema"]
        assert schema["properties"]["search_attributes"]["maxItems"] == 100
    ended = conn.execute("SELECT count(*) FROM harvest.executions WHERE status <> 'RUNNING'").fetchone()[0]
    assert ended == 0


def test_the_list_names_the_field_of_a_number_out_of_range_and_too_many_filters(db) -> None:
    many = "&".join(f"search_attr=k:v{i}" for i in range(101))
    with api_client(db) as api:
        for route in ("/workflows", "/workflows/count"):
            assert _field(api.get(f"{route}?filter=amount%20%3E%201e999999")) == "filter"
            assert _field(api.get(f"{route}?search_attr_filter=amount:gt:1e999999")) == "search_attr"
            assert _field(api.get(f"{route}?{many}")) == "search_attr"
            assert _field(api.get(f"{route}?state=BOGUS")) == "state"
        assert _field(api.get("/workflows?cursor=garbage")) == "cursor"
        # A number numeric holds is still a number (2,000 digits).
        assert api.get("/workflows?search_attr_filter=amount:gt:" + "9" * 2000).status_code == 200


def test_a_batch_s_reason_is_bounded_as_a_signal_s_payload(db, conn) -> None:
    """A reason is written into each run's history: one step over 1000 runs wrote 1000 copies of
    whatever came (the API's body may be 64 MiB). Past the payload limit it is a 413, nothing done."""
    runs = [start(conn, "send_digest", f"r-{i}") for i in range(2)]
    conn.execute("UPDATE harvest.engine_settings SET max_payload_bytes = 1000")
    with api_client(db) as api:
        for action in ("cancel", "terminate"):
            answer = api.post(
                f"/workflows/{action}", json={"workflow_name": "send_digest", "reason": "x" * 1000}
            )
            assert answer.status_code == 413, answer.text
            assert f"the reason of a batch {action} is 1002 bytes" in answer.json()["error"]["message"]
        # (a dry run writes no reason)
        dry = {"workflow_name": "send_digest", "reason": "x" * 1000, "dry_run": True}
        assert api.post("/workflows/cancel", json=dry).status_code == 200
        done = api.post("/workflows/cancel", json={"workflow_name": "send_digest", "reason": "x" * 900})
        assert done.status_code == 200 and done.json()["acted"] == 2
    requested = conn.execute(
        "SELECT count(*) FROM harvest.executions WHERE id = ANY(%s::uuid[]) AND cancel_requested", (runs,)
    ).fetchone()[0]
    assert requested == 2


def test_one_run_s_reason_is_bounded_as_a_batch_s(db, conn) -> None:
    """A cancel's, a terminate's, a pause's or a resume's reason of one run is written into its
    history: it took any size (a 64 MiB body) while a batch's was bounded. Past the payload limit
    it is a 413 naming it, nothing done; under it, done."""
    run = start(conn, "send_digest", "one")
    conn.execute("UPDATE harvest.engine_settings SET max_payload_bytes = 1000")
    with api_client(db) as api:
        for action in ("pause", "resume", "cancel", "terminate"):
            answer = api.post(f"/workflows/{run}/{action}", json={"reason": "x" * 1000})
            assert answer.status_code == 413, (action, answer.text)
            assert f"the reason of a {action} is 1002 bytes" in answer.json()["error"]["message"]
        assert api.post(f"/workflows/{run}/cancel", json={"reason": "x" * 900}).status_code == 202
    row = conn.execute(
        "SELECT status, cancel_requested FROM harvest.executions WHERE id = %s", (run,)
    ).fetchone()
    assert tuple(row) == ("RUNNING", True)
    assert (
        conn.execute(
            "SELECT count(*) FROM harvest.events WHERE execution_id = %s AND event_type IN "
            "('WorkflowPaused', 'WorkflowResumed', 'WorkflowTerminated')",
            (run,),
        ).fetchone()[0]
        == 0
    )


def test_the_dashboard_refuses_too_many_filters_and_too_long_a_reason(db, conn) -> None:
    """The dashboard's list and its "Act on these runs" go through the same SQL: 101 `attr`
    filters are a 400 page, a reason past the payload limit a 413, and nothing is done."""
    from starlette.testclient import TestClient

    from harvest.web.ui import dashboard_app

    runs = [start(conn, "send_digest", f"d-{i}") for i in range(2)]
    conn.execute("UPDATE harvest.engine_settings SET max_payload_bytes = 1000")
    many = urllib.parse.urlencode(
        [("workflow_name", "send_digest")] + [("attr", f"k=v{i}") for i in range(101)]
    )
    ours = {"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}
    with TestClient(dashboard_app(dsn=db, profile="dev"), base_url="http://127.0.0.1:8080") as ui:
        listed = ui.get(f"/workflows?{many}")
        assert listed.status_code == 400 and "over 100" in listed.text
        for filters, reason, status in ((many, "r", 400), ("workflow_name=send_digest", "x" * 1000, 413)):
            form = {"action": "cancel", "filters": filters, "reason": reason}
            assert ui.post("/workflows/bulk", data=form, headers=ours).status_code == status
    requested = conn.execute(
        "SELECT count(*) FROM harvest.executions WHERE id = ANY(%s::uuid[]) AND cancel_requested", (runs,)
    ).fetchone()[0]
    assert requested == 0
