"""What an integrator driving the management API with curl alone met (docs/http-api.md, auth.md,
event-streams.md): a misspelt query parameter answered as no filter, a 401 that named no scheme, a
bad resume position that named no field, a request body over the limit that said neither the
limit nor what to do."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from web_helpers import api_client

from harvest.web.routes import MAX_BODY_BYTES


def error_of(response) -> dict:
    return response.json()["error"]


def test_an_unknown_query_parameter_is_a_400_naming_it_and_the_known_ones(db: str) -> None:
    """?workflow_id= (no such filter then) listed every run as if unfiltered; a body's unknown
    field was already a 400 naming it. A misspelt filter is the case now."""
    with api_client(db) as api:
        for path in (
            "/workflows?workflowid=order-1",
            "/dead-letters?execution_id=x",
            "/workflows/count?statuss=RUNNING",
        ):
            answer = api.get(path)
            assert answer.status_code == 400, (path, answer.text)
            error = error_of(answer)
            name = path.split("?")[1].split("=")[0]
            assert error["code"] == "invalid_argument" and error["field"] == name
            assert error["message"].startswith(f"{name}: unknown query parameter; the parameters are ")
        listed = error_of(api.get("/workflows?workflowid=order-1"))["message"]
        assert "workflow_name" in listed and "page_size" in listed
        # A route with no query parameter says so; the declared ones still answer.
        assert error_of(api.get("/health/ready?verbose=1"))["message"].endswith("the parameters are none")
        assert api.get("/workflows?workflow_name=nope&page_size=5").status_code == 200
        assert api.get("/workflows?workflow_name=").status_code == 200  # (an empty value is absent)
        twice = error_of(api.get("/workflows?state=RUNNING&state=PAUSED"))
        assert (twice["field"], twice["message"]) == ("state", "state: given more than once: pass it once")


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
            assert error_of(answer)["message"].startswith(f"{field} "), answer.text  # (not the header's name)


@pytest.mark.timeout(120)
def test_a_streams_unknown_query_parameter_is_a_400_naming_it(db: str) -> None:
    """The streams declare last_event_id as the other routes declare theirs: a misspelt one
    (?last_event=, ?lastEventId=) streamed from now, the events after the position the caller
    meant to resume from silently skipped. The declared one still resumes. (The timeout: a
    /stream the check lets through is a live stream, which would hold the test.)"""
    run = str(uuid.uuid4())
    with api_client(db) as api:
        accept = {"Accept": "text/event-stream"}
        # (the run's stream first: an unknown run's is a 404 before the check, not a live stream)
        for path in (
            f"/workflows/{run}/events/stream?from=1",
            "/stream?last_event=5",
            "/stream/durable?lastEventId=5",
        ):
            answer = api.get(path, headers=accept)
            assert answer.status_code == 400, (path, answer.text)
            error = error_of(answer)
            assert error["code"] == "invalid_argument" and error["field"] == path.split("?")[1].split("=")[0]
            assert error["message"].endswith("unknown query parameter; the parameters are last_event_id")
        # The declared parameter passes the check (an unknown run's stream: its 404, not a 400).
        assert api.get(f"/workflows/{run}/events/stream?last_event_id=1", headers=accept).status_code == 404


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


def _filled(path: str, parameters: list[dict]) -> str:
    """``path`` with each path parameter given a value of its type that names nothing."""
    for p in parameters:
        if p["in"] == "path":
            schema = p["schema"]
            value = (
                str(uuid.uuid4())
                if schema.get("format") == "uuid" or p["name"] == "execution_id"
                else "7"
                if schema.get("type") == "integer"
                else "no-such-thing"
            )
            path = path.replace("{" + p["name"] + "}", value)
    return path


def test_walking_the_served_openapi_document_every_status_a_route_answers_is_listed(
    db: str, tokens: dict[str, str]
) -> None:
    """Each operation of /openapi.json, called as an integrator's first mistakes call it: no
    token (401), a read token on a route above read (403), a misspelt parameter (400), and a
    GET of what its path names that does not exist. Each answer's status is one the operation
    lists itself, not only under "default" (a generated client types none of those)."""
    from harvest.web.metrics import METRICS
    from harvest.web.streams import STREAMS

    mounted = {route.path for route in (METRICS, *STREAMS)}
    with api_client(db, profile="production") as api:
        doc = api.get("/openapi.json").json()
        checked = 0
        for template, operations in doc["paths"].items():
            for method, op in operations.items():
                if "x-harvest-scope" not in op:  # (the probes and this document: no token, nothing to refuse)
                    continue
                path = _filled(template, op.get("parameters", []))
                listed = set(op["responses"]) - {"default"}
                send = {"json": {}} if "requestBody" in op else {}
                calls = [("no token", api.request(method, path, **send))]
                bearer = {"Authorization": f"Bearer {tokens['read']}"}
                if op["x-harvest-scope"] != "read":
                    calls.append(("a read token", api.request(method, path, headers=bearer, **send)))
                if template not in mounted:
                    admin = {"Authorization": f"Bearer {tokens['admin']}"}
                    misspelt = api.request(method, f"{path}?no_such_parameter=1", headers=admin, **send)
                    assert error_of(misspelt)["field"] == "no_such_parameter", (method, path, misspelt.text)
                    calls.append(("a misspelt parameter", misspelt))
                    if method == "get" and "{" in template:
                        calls.append(("what it names missing", api.request(method, path, headers=admin)))
                for what, answer in calls:
                    assert str(answer.status_code) in listed, (
                        method,
                        template,
                        what,
                        answer.status_code,
                        listed,
                    )
                    assert answer.headers["content-type"].startswith("application/json"), (
                        method,
                        template,
                        what,
                    )
                    checked += 1
        assert checked > 200


def test_an_empty_workflow_id_or_handler_name_is_a_400_naming_its_field(db: str) -> None:
    """The SQL's refusals ('workflow_id is empty', 'signal name is empty') came with no field."""
    run = str(uuid.uuid4())
    with api_client(db) as api:
        for path, sent, field in (
            ("/workflows/greet/start", {"workflow_id": ""}, "workflow_id"),
            ("/workflows/greet/signal-with-start", {"workflow_id": "", "signal_name": "go"}, "workflow_id"),
            ("/workflows/greet/signal-with-start", {"workflow_id": "w", "signal_name": ""}, "signal_name"),
            ("/workflows/greet/update-with-start", {"workflow_id": "w", "update_name": ""}, "update_name"),
            (f"/workflows/{run}/signal", {"signal_name": ""}, "signal_name"),
            (f"/workflows/{run}/query", {"query_name": ""}, "query_name"),
            (f"/workflows/{run}/update", {"update_name": ""}, "update_name"),
        ):
            answer = api.post(path, json=sent)
            assert answer.status_code == 400, (path, answer.text)
            assert error_of(answer)["field"] == field
            assert error_of(answer)["message"].startswith(f"{field}: is empty: pass a non-empty value")
        doc = api.get("/openapi.json").json()
        start = doc["paths"]["/workflows/{name}/start"]["post"]["requestBody"]["content"]["application/json"]
        assert start["schema"]["properties"]["workflow_id"] == {"type": "string", "minLength": 1}


def test_a_bad_wait_names_its_parameter_once(db: str) -> None:
    with api_client(db) as api:
        error = error_of(api.get(f"/workflows/{uuid.uuid4()}/result?wait=abc"))
        assert error["field"] == "wait"
        assert error["message"].startswith("wait: cannot parse 'abc'; use a number of seconds")


def test_a_compressed_body_is_a_415_saying_to_send_it_uncompressed(db: str) -> None:
    """A gzip body was answered 'body: is not valid JSON', as if the client's JSON were bad."""
    import gzip

    with api_client(db) as api:
        answer = api.post(
            "/workflows/greet/start",
            content=gzip.compress(b'{"input": 1}'),
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
        assert answer.status_code == 415
        assert error_of(answer) == {
            "code": "unsupported_media_type",
            "message": "a body with Content-Encoding gzip is not read here: send it uncompressed",
        }
