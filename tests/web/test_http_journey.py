"""What an integrator driving the management API with curl alone met (docs/http-api.md, auth.md,
event-streams.md): a misspelt query parameter answered as no filter, a 401 that named no scheme, a
bad resume position that named no field, a request body over the limit that said neither the
limit nor what to do."""

from __future__ import annotations

import psycopg
from web_helpers import api_client

from harvest.web.routes import MAX_BODY_BYTES


def error_of(response) -> dict:
    return response.json()["error"]


def test_an_unknown_query_parameter_is_a_400_naming_it_and_the_known_ones(db: str) -> None:
    """?workflow_id= (no such filter) listed every run as if unfiltered; a body's unknown field
    was already a 400 naming it."""
    with api_client(db) as api:
        for path in (
            "/workflows?workflow_id=order-1",
            "/dead-letters?execution_id=x",
            "/workflows/count?statuss=RUNNING",
        ):
            answer = api.get(path)
            assert answer.status_code == 400, (path, answer.text)
            error = error_of(answer)
            name = path.split("?")[1].split("=")[0]
            assert error["code"] == "invalid_argument" and error["field"] == name
            assert error["message"].startswith(f"{name}: unknown query parameter; the parameters are ")
        listed = error_of(api.get("/workflows?workflow_id=order-1"))["message"]
        assert "workflow_name" in listed and "page_size" in listed
        # A route with no query parameter says so; the declared ones still answer.
        assert error_of(api.get("/health/ready?verbose=1"))["message"].endswith("the parameters are none")
        assert api.get("/workflows?workflow_name=nope&page_size=5").status_code == 200
        assert api.get("/workflows?workflow_name=").status_code == 200  # (an empty value is absent)


def test_a_401_names_the_bearer_scheme(db: str) -> None:
    """RFC 9110 15.5.2: a 401 carries WWW-Authenticate; a client library that waits for it
    before it sends its credentials (or says why it was refused) had none to read."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.create_api_token('j-read', 'read')")
    with api_client(db, profile="production") as api:
        for headers in ({}, {"Authorization": "Bearer hvt_nope"}, {"Authorization": "Basic eDp5"}):
            answer = api.get("/workflows", headers=headers)
            assert answer.status_code == 401 and error_of(answer)["code"] == "unauthenticated"
            assert answer.headers["WWW-Authenticate"] == 'Bearer realm="harvest"'
        assert "WWW-Authenticate" not in api.get("/health").headers


def test_a_bad_last_event_id_is_a_400_naming_where_it_came(db: str) -> None:
    with api_client(db) as api:
        accept = {"Accept": "text/event-stream"}
        for headers, query, field in (
            ({"Last-Event-ID": "abc"}, "", "Last-Event-ID"),
            ({"Last-Event-ID": "-5"}, "", "Last-Event-ID"),
            ({}, "?last_event_id=x", "last_event_id"),
        ):
            answer = api.get(f"/stream{query}", headers=accept | headers)
            assert answer.status_code == 400, answer.text
            assert error_of(answer)["code"] == "invalid_argument" and error_of(answer)["field"] == field


def test_a_request_body_over_the_limit_says_its_size_the_limit_and_what_to_do(db: str) -> None:
    with api_client(db) as api:
        answer = api.post(
            "/workflows/greet/start",
            content=b"{}",
            headers={"Content-Type": "application/json", "Content-Length": str(MAX_BODY_BYTES + 1)},
        )
        assert answer.status_code == 413
        error = error_of(answer)
        assert error["code"] == "payload_too_large" and error["what"] == "the request body"
        assert (error["bytes"], error["limit"]) == (MAX_BODY_BYTES + 1, MAX_BODY_BYTES)
        assert "docs/payloads.md" in error["message"]


def test_harvest_serve_answers_a_path_outside_its_mount_as_json_naming_the_mount(db: str) -> None:
    """The host's root, or /health without /api/harvest (a probe pointed at the wrong path), was
    Starlette's text/plain "Not Found": the page says every answer is JSON."""
    from starlette.testclient import TestClient

    from harvest.cli.serve import MOUNT, served_app
    from harvest.web.app import management_app

    app = served_app(management_app(dsn=db, profile="dev"))
    with TestClient(app) as client:
        for path in ("/", "/health", "/api/other"):
            answer = client.get(path)
            assert answer.status_code == 404 and answer.headers["content-type"] == "application/json"
            assert error_of(answer) == {
                "code": "not_found",
                "message": f"no route {path}: the management API is under {MOUNT} ({MOUNT}/openapi.json)",
            }
        assert client.get(f"{MOUNT}/health").json() == {"status": "ok"}
