"""The management API through its ASGI app on a real Postgres: every status code the spec names
(docs/http-api.md), the error shape, the scopes and the role each request runs as."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from operator_helpers import park, start
from psycopg.types.json import Jsonb
from starlette.requests import Request
from web_helpers import api_client, rows_read

from harvest import App, RateLimit, Throttle, activity, query, update, workflow
from harvest.db import SCHEMA_VERSION
from harvest.web.metrics import METRICS
from harvest.web.principal import Principal
from harvest.web.streams import STREAMS


@activity
async def shout(ctx, word: str) -> str:
    return word.upper()


@activity(rate_limit=RateLimit(rps=5, burst=1))
async def charge(ctx, n: int) -> int:
    return n


@activity(rate_limit=RateLimit(rps=5, key="input.tenant"))
async def per_tenant(ctx, job: dict) -> dict:
    return job


@workflow(activities=[shout], children=["missing_child"])
async def greet(ctx, name: str) -> str:
    return await ctx.execute_activity(shout, f"hello {name}")


@workflow
async def ledger(ctx, owner: str) -> dict:
    ctx.state.update(owner=owner, total=0)
    await ctx.wait_for_signal("close")
    await ctx.drain_admitted_updates()
    return {"total": ctx.state["total"]}


@query(workflow="ledger")
def total(ctx) -> int:
    return ctx.state["total"]


@query(workflow="ledger")
def broken(ctx) -> int:
    raise RuntimeError("this query is broken")


@update(workflow="ledger")
async def add(ctx, amount: int) -> int:
    ctx.state["total"] += amount
    return ctx.state["total"]


@workflow
async def kid(ctx, n: int) -> int:
    return n


@workflow
async def parent(ctx) -> list:
    return [await ctx.execute_child_workflow(kid, n) for n in range(3)]


@workflow(queue="billing")
async def invoice(ctx, n: int) -> int:
    return n


@workflow(throttle=Throttle(rps=0.01, burst=1))
async def paced(ctx, n: int) -> int:
    return n


APP = App(
    workflows=[greet, ledger, paced, invoice, kid, parent],
    activities=[shout, charge, per_tenant],
    queries=[total, broken],
    updates=[add],
)


def error_of(response) -> dict:
    body = response.json()
    assert set(body["error"]) >= {"code", "message"}, body
    return body["error"]


@pytest.fixture
def api(db: str):
    with api_client(db, app=APP) as client:
        yield client


# -- health and the error shape -----------------------------------------------------------------
def test_health_probes_and_json_errors_for_unknown_routes(api) -> None:
    assert api.get("/health").json() == {"status": "ok"}
    assert api.get("/health/live").status_code == 200
    ready = api.get("/health/ready")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    missing = api.get("/no/such/route")
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    wrong = api.delete("/workflows")
    assert wrong.status_code == 405 and error_of(wrong)["code"] == "method_not_allowed"
    # Under /ui, the dashboard's own error page (with its navigation); the API's stay JSON.
    page = api.get("/ui/no/such/page")
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert 'aria-label="pages"' in page.text


def test_ready_is_not_ready_while_the_last_migrate_run_has_not_applied_the_functions(db: str) -> None:
    """A `harvest migrate run` stopped after its migrations leaves the newest schema version
    under the older release's functions (which answer the older functions_version())."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION harvest.functions_version() RETURNS text"
            " LANGUAGE sql IMMUTABLE AS $$ SELECT '0001'::text $$"
        )
    with api_client(db, app=APP) as api:
        ready = api.get("/health/ready")
    assert ready.status_code == 503, ready.json()
    assert ready.json()["status"] == "not_ready" and ready.json()["unfinished_migration"] == ["0"]
    # What differs is named: the functions_version() found beside the one this process needs.
    assert (ready.json()["functions"], ready.json()["functions_version"]) == ({"0": "0001"}, SCHEMA_VERSION)
    message = error_of(ready)["message"]
    assert f"schema version {SCHEMA_VERSION} but its SQL functions are those of 0001" in message, message


@pytest.mark.parametrize("ahead", [True, False])
def test_ready_names_the_schema_version_that_differs_and_the_remedy_for_its_direction(
    db: str, ahead: bool
) -> None:
    """A database on another schema version than this process is not ready. The answer said
    "not migrated: harvest migrate" whichever way it differed: for a database a newer release
    migrated (this process is the one behind) the remedy is to upgrade Harvest, which the
    worker's refusal says (db.migrate.version_mismatch, the one judgement for both now)."""
    found = "9999" if ahead else "0001"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION harvest.schema_version() RETURNS text"
            f" LANGUAGE sql STABLE AS $$ SELECT '{found}'::text $$"
        )
    with api_client(db, app=APP) as api:
        ready = api.get("/health/ready")
    assert ready.status_code == 503, ready.json()
    body, message = ready.json(), error_of(ready)["message"]
    assert (body["shards"], body["schema_version"]) == ({"0": found}, SCHEMA_VERSION), body
    assert body["differences"] == {"0": message}
    if ahead:
        assert f"the database is ahead of this Harvest: it has schema version {found}" in message
        assert "Upgrade Harvest" in message and "not migrated" not in message, message
    else:
        assert f"has schema version {found}, this web process needs {SCHEMA_VERSION}" in message, message
        assert "harvest migrate run" in message
    assert "unfinished_migration" not in body and "postgres" not in message.lower()


def test_bad_input_is_a_400_naming_the_field(api) -> None:
    not_an_id = api.get("/workflows/not-a-uuid")
    assert not_an_id.status_code == 400 and error_of(not_an_id)["field"] == "execution_id"
    assert api.get("/workflows", params={"state": "BOGUS"}).status_code == 400
    assert error_of(api.get("/workflows", params={"search_attr": "nocolon"}))["field"] == "search_attr"
    assert error_of(api.get("/workflows", params={"search_attr_filter": "a:like:b"}))["field"] == (
        "search_attr_filter"
    )
    assert error_of(api.get("/workflows", params={"page_size": "0"}))["field"] == "page_size"
    assert error_of(api.get("/workflows", params={"page_size": "x"}))["field"] == "page_size"
    assert api.get("/workflows", params={"cursor": "garbage"}).status_code == 400
    assert error_of(api.get("/workflows", params={"started_after": "yesterday"}))["field"] == "started_after"
    bad_json = api.post(
        "/workflows/greet/start", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert bad_json.status_code == 400 and error_of(bad_json)["field"] == "body"
    unknown_field = api.post("/workflows/greet/start", json={"wokflow_id": "typo"})
    assert unknown_field.status_code == 400 and error_of(unknown_field)["field"] == "wokflow_id"
    wrong_type = api.post("/workflows/greet/start", json={"priority": "high"})
    assert wrong_type.status_code == 400 and error_of(wrong_type)["field"] == "priority"
    huge = api.post("/workflows/greet/start", content=b" " * 10, headers={"Content-Length": str(2**40)})
    assert huge.status_code == 413 and error_of(huge)["code"] == "payload_too_large"
    missing = api.get("/workflows/" + str(uuid.uuid4()))
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    # The Python client's hint that an id may be a workflow id (get_handle(workflow_id=...)) is
    # not the API's to give: a signal, cancel or pause of no run is a plain 404.
    for route in ("signal", "cancel", "pause"):
        body = {"signal_name": "s"} if route == "signal" else {}
        gone = api.post(f"/workflows/{uuid.uuid4()}/{route}", json=body)
        assert gone.status_code == 404 and "get_handle" not in error_of(gone)["message"], gone.text


def test_the_start_routes_priority_is_check_prioritys_range_and_its_openapi_says_so(api) -> None:
    """One priority range (PRIORITY_RANGE): the SQL and the Python client take up to a million
    either way, and the route refused beyond 1000 while its OpenAPI said so."""
    from harvest.declare.definitions import PRIORITY_RANGE

    low, high = PRIORITY_RANGE
    schema = api.get("/openapi.json").json()["paths"]["/workflows/{name}/start"]["post"]["requestBody"]
    priority = schema["content"]["application/json"]["schema"]["properties"]["priority"]
    assert (priority["minimum"], priority["maximum"]) == (low, high)
    for value in (high, low):
        started = api.post("/workflows/greet/start", json={"priority": value, "input": ["p"]})
        assert started.status_code == 201, started.text
    for value in (high + 1, low - 1):
        refused = api.post("/workflows/greet/start", json={"priority": value})
        assert refused.status_code == 400 and error_of(refused)["field"] == "priority", refused.text


def test_a_body_nested_deeper_than_the_parser_goes_is_a_400_not_a_500(api) -> None:
    """A body nested 100k deep (200 KB, far under MAX_BODY_BYTES) makes the JSON parser raise
    RecursionError, not ValueError: it is the caller's bad body, a 400 naming it."""
    deep = "[" * 100_000 + "]" * 100_000
    answer = api.post(
        f"/workflows/{uuid.uuid4()}/signal",
        content='{"signal_name": "s", "payload": ' + deep + "}",
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 400, (answer.status_code, answer.text[:200])
    assert error_of(answer)["field"] == "body"


def test_a_write_another_site_s_page_sends_is_refused_and_a_body_must_be_json(api, db: str) -> None:
    """The dev profile serves every caller as admin, and localhost is reachable from any page
    the developer's browser opens: a cross-site "simple" POST (text/plain, no preflight) must
    not act. A write whose Origin or Sec-Fetch-Site says another site is a 403, whatever its
    body; a body not declared JSON is a 415. The run is left as it was."""
    with psycopg.connect(db, autocommit=True) as conn:
        execution_id = start(conn, "wf", "csrf-api")
    cancel = f"/workflows/{execution_id}/cancel"
    plain = {"Content-Type": "text/plain;charset=UTF-8"}
    body = json.dumps({"reason": "evil page"})
    others = ({"Origin": "https://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"})
    for sent_from in others:
        refused = api.post(cancel, content=body, headers={**plain, **sent_from})
        assert refused.status_code == 403, (sent_from, refused.text[:200])
        assert error_of(refused)["code"] == "permission_denied"
        refused = api.post(cancel, json={"reason": "evil page"}, headers=sent_from)
        assert refused.status_code == 403, sent_from
    not_json = api.post(cancel, content=body, headers=plain)
    assert not_json.status_code == 415 and error_of(not_json)["code"] == "unsupported_media_type"
    assert api.post(cancel, content=body).status_code == 415  # no Content-Type at all
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute("SELECT cancel_requested FROM harvest.executions WHERE id = %s", (execution_id,))
        assert row.fetchone()[0] is False
    ours = {"Host": "localhost:8080", "Origin": "http://localhost:8080", "Sec-Fetch-Site": "same-origin"}
    answer = api.post(cancel, content=body, headers={**ours, "Content-Type": "application/json"})
    assert answer.status_code == 202, answer.text


def test_the_dev_profile_serves_a_browser_only_at_a_loopback_host(api, db: str) -> None:
    """DNS rebinding: a page of another site whose name now points at 127.0.0.1 sends requests
    whose Origin and Host agree (to the browser it is that site's own page). The dev profile,
    which serves anyone as admin, refuses a browser's request naming a host that is not this
    machine's loopback, a read as much as a write; a client that is no browser is not judged."""
    with psycopg.connect(db, autocommit=True) as conn:
        execution_id = start(conn, "wf", "rebound")
    rebound = {
        "Host": "evil.example:8000",
        "Origin": "http://evil.example:8000",
        "Sec-Fetch-Site": "same-origin",
    }
    cancel = f"/workflows/{execution_id}/cancel"
    refused = api.post(cancel, json={"reason": "evil"}, headers=rebound)
    assert refused.status_code == 403 and "only at localhost" in error_of(refused)["message"], refused.text
    read = api.get(
        f"/workflows/{execution_id}", headers={"Host": "evil.example", "Sec-Fetch-Site": "same-origin"}
    )
    assert read.status_code == 403
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute("SELECT cancel_requested FROM harvest.executions WHERE id = %s", (execution_id,))
        assert row.fetchone()[0] is False
    for host in ("localhost:8080", "127.0.0.1:8080", "[::1]:8080", "app.localhost"):
        ours = {"Host": host, "Sec-Fetch-Site": "same-origin"}
        assert api.get(f"/workflows/{execution_id}", headers=ours).status_code == 200, host
    assert (
        api.get(f"/workflows/{execution_id}", headers={"Host": "evil.example"}).status_code == 200
    )  # (curl)


# -- starts: 201, 200, 409, 400 -------------------------------------------------------------------
def test_start_answers_201_then_200_then_409_and_400_for_an_unknown_policy(api) -> None:
    first = api.post("/workflows/greet/start", json={"workflow_id": "order-42", "input": ["ann"]})
    assert first.status_code == 201, first.text
    started = first.json()
    assert "started_fresh" not in started and "shard_id" not in started  # only when asked for
    again = api.post(
        "/workflows/greet/start", json={"workflow_id": "order-42", "conflict_policy": "use_existing"}
    )
    assert again.status_code == 200
    assert again.json() == {**started, "started_fresh": False}
    rejected = api.post(
        "/workflows/greet/start", json={"workflow_id": "order-42", "reuse_policy": "reject_duplicate"}
    )
    assert rejected.status_code == 409
    assert rejected.json()["existing_execution_id"] == started["execution_id"]
    assert rejected.json()["existing_state"] == "RUNNING"
    assert error_of(rejected)["code"] == "workflow_already_exists"
    bogus = api.post("/workflows/greet/start", json={"reuse_policy": "sometimes"})
    assert bogus.status_code == 400 and "sometimes" in error_of(bogus)["message"]
    both = api.post("/workflows/greet/start", json={"shard_id": 0, "residency_key": "eu"})
    assert both.status_code == 400 and error_of(both)["field"] == "residency_key"
    declared = api.post("/workflows/invoice/start", json={"input": 1}).json()["execution_id"]
    assert api.get(f"/workflows/{declared}").json()["execution"]["queue"] == "billing"  # the App's queue
    pinned = api.post("/workflows/greet/start", json={"shard_id": 0, "workflow_id": "pinned"})
    assert pinned.status_code == 201 and pinned.json()["shard_id"] == 0


def test_a_start_a_throttle_defers_is_a_202_without_an_execution(api, conn) -> None:
    from psycopg.types.json import Jsonb

    conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
    assert api.post("/workflows/paced/start", json={"input": 1}).status_code == 201
    deferred = api.post("/workflows/paced/start", json={"input": 2, "workflow_id": "later"})
    assert deferred.status_code == 202, deferred.text
    assert deferred.json() == {"execution_id": None, "workflow_id": "later", "deferred": True}
    # What to follow it by: the run of its workflow id, once the throttle releases it (none yet).
    assert deferred.headers["location"] == "/workflows/current?workflow_id=later&workflow_name=paced"
    pending = api.get(deferred.headers["location"])
    assert pending.status_code == 404 and "a deferred start has no run until" in error_of(pending)["message"]
    mixed = api.post("/workflows/paced/start", json={"input": 3, "conflict_policy": "use_existing"})
    assert mixed.status_code == 400, mixed.text  # a deferred start has no active prior to resolve


def test_a_pin_to_a_shard_without_a_pool_is_a_503(db: str) -> None:
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        "HARVEST_SHARDS__URLS__0": db,
    }
    with api_client(None, env=env) as api:
        refused = api.post("/workflows/greet/start", json={"shard_id": 1})
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] and error_of(refused)["code"] == "shard_unavailable"
        unknown = api.post("/workflows/greet/start", json={"residency_key": "nowhere"})
        assert unknown.status_code == 400
        started = api.post("/workflows/greet/start", json={"shard_id": 0})
        assert started.status_code == 201
        run = started.json()["execution_id"]
        assert api.get(f"/workflows/{run}").json()["execution"]["status"] == "RUNNING"  # routed by id
        assert api.post(f"/workflows/{run}/cancel", json={}).status_code == 202
        listed = api.get("/workflows").json()
        assert listed["status"] == "partial" and listed["unavailable_shards"] == [1]
        config = api.get("/admin/config").json()
        topology = config["shard_topology"]
        assert topology["readable_shards"] == [0, 1] and topology["writable_shards"] == [0, 1]
        # A worker on auto polls the shards it has a url for: shard 1 has none here, so the
        # resolved list the guide checks coverage with must not claim it.
        assert config["worker"]["shard_assignments"] == [0], config["worker"]


def test_a_fan_out_that_reaches_no_shard_is_a_503_not_an_empty_answer(db: str) -> None:
    """docs/http-api.md: "no shard answering is a 503". Every route that reads or writes each
    shard says so when none answered, rather than a 200 with nothing in it (the audit log, the
    rate limit and throttle reads, retention, the drain preview), a confident 404 for a worker
    it could not look for, or a drain "not_found" that drained nothing."""
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        "HARVEST_SHARDS__URLS__2": db,  # shards 0 and 1 have no pool here: neither answers
    }
    with api_client(None, env=env) as api:
        for route in (
            "/admin/audit",
            "/admin/rate-limits/charge",
            "/admin/start-throttles/paced",
            "/admin/retention",
            "/workers/drain-preview",
            "/workers/w-1",
        ):
            answer = api.get(route)
            assert answer.status_code == 503, (route, answer.text)
            assert error_of(answer)["code"] == "database_unavailable" and answer.headers["Retry-After"]
        drain = api.post("/workers/w-1/drain", json={})
        assert drain.status_code == 503 and error_of(drain)["code"] == "database_unavailable", drain.text


# -- results, messages, ending a run --------------------------------------------------------------
def test_result_is_204_with_retry_after_while_running_then_the_terminal_body(api, start_worker) -> None:
    run = api.post("/workflows/greet/start", json={"input": "bob"}).json()["execution_id"]
    running = api.get(f"/workflows/{run}/result", params={"wait": "0.2s"})
    assert running.status_code == 204 and running.headers["Retry-After"] == "1" and not running.content
    assert api.get(f"/workflows/{run}/result", params={"wait": "an hour"}).status_code == 400
    assert api.get(f"/workflows/{run}/result", params={"wait": "301s"}).status_code == 400
    start_worker(APP)
    done = api.get(f"/workflows/{run}/result", params={"wait": "20s"})
    assert done.status_code == 200, done.text
    assert done.json()["state"] == "COMPLETED" and done.json()["output"] == "HELLO BOB"
    assert done.json()["completed_at"]


def test_a_paused_runs_result_is_waited_for_not_answered_as_ended(api, db: str) -> None:
    """A PAUSED run has not ended: its result is a 204 after the wait, as a running one's, not
    a body with no output; and the wait's mark is dropped, as for a running run."""
    run = api.post("/workflows/greet/start", json={"input": "bob"}).json()["execution_id"]
    assert api.post(f"/workflows/{run}/pause", json={"reason": "inspect"}).status_code == 200
    paused = api.get(f"/workflows/{run}/result", params={"wait": "0.3s"})
    assert paused.status_code == 204, paused.text
    with psycopg.connect(db, autocommit=True) as conn:
        marks = conn.execute("SELECT count(*) FROM harvest.result_waiters WHERE execution_id = %s", (run,))
        assert marks.fetchone() == (0,)


def _decide(conn: psycopg.Connection, queue: str, command: dict) -> None:
    """The next workflow task of ``queue`` decided with ``command``, having seen the whole history."""
    task_id, token, seen = conn.execute(
        "SELECT c.task_id, c.fencing_token, e.last_event_id FROM harvest.claim_tasks('decider', %s, 1) AS c"
        " JOIN harvest.executions AS e ON e.id = c.execution_id",
        ([queue],),
    ).fetchone()
    conn.execute(
        "SELECT * FROM harvest.complete_workflow_task(%s, %s, %s, %s)",
        (task_id, token, seen, Jsonb([command])),
    )


def test_a_chain_longer_than_one_request_walks_is_polled_on_not_refused(api, db: str) -> None:
    """docs/http-api.md ("Result"), docs/workflows.md ("Continue-as-new"): one request follows at most
    100 rotations of a continue-as-new chain. Past that, GET /result answered 400 ("continued as
    new more than 100 times") to a valid request, with nothing to do next, while the SQL client
    follows a chain to its end; now it answers 204 naming the run it reached, where the next poll
    goes on (the CLI over HTTP does). A signal by the chain's first id past 100 rotations is a 409
    that names the workflow_id to use: it said "get a handle by workflow_id" without naming it."""
    with psycopg.connect(db, autocommit=True) as conn:
        runs = [start(conn, "rotating", "entity-7", queue="rotq")]
        for _ in range(150):
            _decide(conn, "rotq", {"type": "continue_as_new", "input": []})
            runs.append(
                conn.execute(
                    "SELECT output ->> 'continued_as_new' FROM harvest.executions WHERE id = %s", (runs[-1],)
                ).fetchone()[0]
            )
    signal = api.post(f"/workflows/{runs[0]}/signal", json={"signal_name": "poke"})
    assert signal.status_code == 409 and error_of(signal)["code"] == "workflow_not_running", signal.text
    refused = error_of(signal)["message"]
    assert "more than 100 times" in refused and "workflow_id 'entity-7'" in refused, refused
    assert api.post(f"/workflows/{runs[100]}/signal", json={"signal_name": "poke"}).status_code == 200
    polled, asked = [], runs[0]
    while (answer := api.get(f"/workflows/{asked}/result")).status_code == 204:
        asked = answer.headers["X-Harvest-Execution-Id"]
        polled.append(asked)
        if asked == runs[-1]:
            break
    assert answer.status_code == 204, answer.text
    assert polled == [runs[100], runs[-1]], "100 rotations a request, then the run still running"
    with psycopg.connect(db, autocommit=True) as conn:
        _decide(conn, "rotq", {"type": "complete_workflow", "result": "settled"})
    done = api.get(f"/workflows/{runs[100]}/result")
    assert done.status_code == 200 and done.json()["output"] == "settled", done.text


def test_signal_query_update_cancel_terminate_and_their_errors(api, start_worker) -> None:
    start_worker(APP)
    run = api.post("/workflows/ledger/start", json={"input": "ann"}).json()["execution_id"]
    deadline = time.monotonic() + 20
    while True:  # the first workflow task must have run for the handlers to exist
        answer = api.post(f"/workflows/{run}/query", json={"query_name": "total"})
        if answer.status_code == 200 or time.monotonic() > deadline:
            break
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"] == 0
    broken_query = api.post(f"/workflows/{run}/query", json={"query_name": "broken"})
    assert broken_query.status_code == 422 and error_of(broken_query)["code"] == "query_failed"
    updated = api.post(f"/workflows/{run}/update", json={"update_name": "add", "input": 5})
    assert updated.status_code == 200 and updated.json()["result"] == 5
    assert updated.json()["update_id"], "a completed update names its id as an accepted one does"
    named = api.post(f"/workflows/{run}/update", json={"update_name": "add", "input": 0, "update_id": "u-1"})
    assert named.status_code == 200 and named.json()["update_id"] == "u-1", named.text
    accepted = api.post(
        f"/workflows/{run}/update", json={"update_name": "add", "input": 1, "wait": "accepted"}
    )
    assert accepted.status_code == 202 and accepted.json()["update_id"]
    assert api.post(f"/workflows/{run}/signal", json={"payload": 1}).status_code == 400  # no signal_name
    cancel = api.post(f"/workflows/{run}/cancel", json={"reason": "operator request"})
    assert cancel.status_code == 202 and cancel.json()["first_request"] is True
    other = api.post("/workflows/ledger/start", json={"input": "bo"}).json()["execution_id"]
    assert api.post(f"/workflows/{other}/terminate", json={"reason": "done"}).status_code == 200
    late = api.post(f"/workflows/{other}/signal", json={"signal_name": "close"})
    assert late.status_code == 409 and error_of(late)["code"] == "workflow_not_running"
    result = api.get(f"/workflows/{other}/result").json()
    assert result["state"] == "TERMINATED" and result["error"]


def test_signal_with_start_and_update_with_start(api, start_worker) -> None:
    created = api.post(
        "/workflows/ledger/signal-with-start",
        json={"workflow_id": "acct-1", "signal_name": "noop", "input": "x"},
    )
    assert created.status_code == 201 and created.json()["started_fresh"] is True
    again = api.post(
        "/workflows/ledger/signal-with-start", json={"workflow_id": "acct-1", "signal_name": "noop"}
    )
    assert again.status_code == 200 and again.json()["execution_id"] == created.json()["execution_id"]
    assert api.post("/workflows/ledger/signal-with-start", json={"signal_name": "x"}).status_code == 400
    start_worker(APP)
    both = api.post(
        "/workflows/ledger/update-with-start",
        json={"workflow_id": "acct-2", "update_name": "add", "update_input": 7, "input": "y"},
    )
    assert both.status_code == 201, both.text
    assert both.json()["update"]["result"] == 7 and both.json()["update"]["update_id"]


def test_reads_of_one_run_and_reset_dry_run(api, conn) -> None:
    run = start(conn, "greet", "reads-1", input=["secret"])
    got = api.get(f"/workflows/{run}").json()
    assert got["parent_id"] is None and got["execution"]["workflow_id"] == "reads-1"
    assert got["history"][0]["event_type"] == "WorkflowStarted"
    history = api.get(f"/workflows/{run}/history").json()
    assert history["redacted"] is True and history["events"][0]["event_data"]["input"]["redacted"] is True
    full = api.get(f"/workflows/{run}/history", params={"payload_policy": "full"}).json()
    assert full["events"][0]["event_data"]["input"] == ["secret"]
    assert api.get(f"/workflows/{run}/stack").json()["last_event_id"] == 1
    children = api.get(f"/workflows/{run}/children").json()
    assert children == {
        "items": [],
        "status": "complete",
        "unavailable_shards": [],
        "next_cursor": None,
        "truncated": False,
        "sharded": False,
    }
    assert api.get(f"/workflows/{run}/children", params={"status": "nope"}).status_code == 400
    assert api.get(f"/workflows/{run}/tree").json()["tree"]["children"] == []
    plan = api.post(f"/workflows/{run}/reset", json={"to_event": 1, "reason": "drill", "dry_run": True})
    assert plan.status_code == 200 and plan.json()["dry_run"] is True and "valid" in plan.json()
    assert api.post(f"/workflows/{run}/reset", json={"reason": "no boundary"}).status_code == 400


def _signalled(conn, run: str, n: int) -> None:
    """``n`` signals on ``run``, in one statement: a history of n + 1 events."""
    conn.execute(
        "SELECT harvest.signal_workflow(%s, 'sig-' || g, to_jsonb(g)) FROM generate_series(1, %s) AS g",
        (run, n),
    )


def test_a_long_history_pages_by_cursor_and_a_page_reads_a_page(api, conn, history_rows) -> None:
    """GET /workflows/{id}/history answered the whole history in one body, read whole into
    memory: a run of 100,000 events was one giant answer. It answers `limit` events (default
    500) and a next_cursor to continue, reading limit + 1 rows a request."""
    run = start(conn, "ledger", "long-1", input=["me"])
    _signalled(conn, run, 600)  # 601 events
    first = api.get(f"/workflows/{run}/history").json()
    assert [e["event_id"] for e in first["events"]] == list(range(1, 501))
    assert first["next_cursor"] and first["redacted"] is True
    assert max(history_rows) <= 501, history_rows
    rest = api.get(f"/workflows/{run}/history", params={"cursor": first["next_cursor"]}).json()
    assert [e["event_id"] for e in rest["events"]] == list(range(501, 602)) and rest["next_cursor"] is None

    history_rows.clear()
    seen, cursor = [], None
    while True:
        params = {"limit": 250, "payload_policy": "full", **({"cursor": cursor} if cursor else {})}
        page = api.get(f"/workflows/{run}/history", params=params).json()
        assert len(page["events"]) <= 250
        seen += [e["event_id"] for e in page["events"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(range(1, 602)) and max(history_rows) <= 251, history_rows
    assert page["events"][-1]["event_data"]["payload"] == 600  # full: as stored
    after = api.get(f"/workflows/{run}/history", params={"after_event_id": 599, "limit": 1}).json()
    assert [e["event_id"] for e in after["events"]] == [600] and after["next_cursor"]

    for params in ({"limit": 0}, {"limit": 1001}, {"cursor": "nope"}, {"cursor": "ev1.x", "limit": 5}):
        assert error_of(api.get(f"/workflows/{run}/history", params=params))["field"] in ("limit", "cursor")
    other = start(conn, "ledger", "long-2", input=["me"])
    refused = api.get(f"/workflows/{other}/history", params={"cursor": first["next_cursor"]})
    assert refused.status_code == 400 and error_of(refused)["field"] == "cursor", refused.text
    both = api.get(f"/workflows/{run}/history", params={"cursor": first["next_cursor"], "after_event_id": 3})
    assert error_of(both)["field"] == "cursor"
    # A hand-made cursor past a bigint reached the database as numeric: a 500 (42883), not a 400.
    body = json.dumps({"x": run, "e": 2**63}, separators=(",", ":")).encode()
    edited = "ev1." + base64.urlsafe_b64encode(body).decode().rstrip("=")
    assert error_of(api.get(f"/workflows/{run}/history", params={"cursor": edited}))["field"] == "cursor"


def test_one_run_carries_the_first_page_of_its_history(api, conn, history_rows) -> None:
    """GET /workflows/{id} carried the run's whole history (the spec's "execution/history"
    payload): a long run's row cost its every event. It carries the history's first page
    (history_limit, default 500, as /history) and history_next_cursor, /history's cursor."""
    run = start(conn, "ledger", "long-3", input=["me"])
    _signalled(conn, run, 600)
    got = api.get(f"/workflows/{run}").json()
    assert got["execution"]["workflow_id"] == "long-3" and got["parent_id"] is None
    assert [e["event_id"] for e in got["history"]] == list(range(1, 501))
    assert max(history_rows) <= 501, history_rows
    rest = api.get(f"/workflows/{run}/history", params={"cursor": got["history_next_cursor"]}).json()
    assert rest["events"][0]["event_id"] == 501
    bare = api.get(f"/workflows/{run}", params={"history_limit": 0}).json()
    assert bare["history"] == [] and bare["history_next_cursor"]
    nxt = api.get(f"/workflows/{run}/history", params={"cursor": bare["history_next_cursor"], "limit": 2})
    assert [e["event_id"] for e in nxt.json()["events"]] == [1, 2]
    short = start(conn, "ledger", "short-1", input=["me"])
    whole = api.get(f"/workflows/{short}").json()
    assert len(whole["history"]) == 1 and whole["history_next_cursor"] is None
    assert error_of(api.get(f"/workflows/{run}", params={"history_limit": 1001}))["field"] == "history_limit"


def test_children_page_with_a_cursor(api, start_worker) -> None:
    start_worker(APP)
    started = api.post("/workflows/parent/start", json={})
    assert started.status_code == 201, started.text
    run = started.json()["execution_id"]
    assert api.get(f"/workflows/{run}/result", params={"wait": "20s"}).json()["output"] == [0, 1, 2]
    first = api.get(f"/workflows/{run}/children", params={"page_size": 2}).json()
    assert len(first["items"]) == 2 and first["next_cursor"]
    rest = api.get(
        f"/workflows/{run}/children", params={"page_size": 2, "cursor": first["next_cursor"]}
    ).json()
    assert len(rest["items"]) == 1 and rest["next_cursor"] is None
    every = api.get(f"/workflows/{run}/children").json()["items"]
    assert [c["exec_id"] for c in first["items"] + rest["items"]] == [c["exec_id"] for c in every]
    assert {c["workflow_name"] for c in every} == {"kid"} and all(c["started_at"] for c in every)
    # The entry the spec names, each field present; a child's own GET carries its parent_id.
    spec_fields = {"exec_id", "workflow_name", "status", "started_at", "completed_at", "error_summary"}
    assert all(spec_fields | {"shard_id", "depth"} <= set(c) for c in every), every
    assert {(c["status"], c["depth"], c["shard_id"], c["error_summary"]) for c in every} == {
        ("COMPLETED", 1, 0, None)
    }
    assert all(c["completed_at"] for c in every)
    assert api.get(f"/workflows/{every[0]['exec_id']}").json()["parent_id"] == run
    assert error_of(api.get(f"/workflows/{run}/children", params={"cursor": "x"}))["field"] == "cursor"
    tree = api.get(f"/workflows/{run}/tree").json()["tree"]
    assert len(tree["children"]) == 3


def adopt(conn, parent_id: str, n: int) -> list[str]:
    """Start ``n`` runs and make them children of ``parent_id`` (what a fan-out of ``n``
    child workflows leaves on the parent's shard), without a worker."""
    kids = [start(conn, "kid", f"{parent_id}-kid-{i}") for i in range(n)]
    conn.execute("UPDATE harvest.executions SET parent_id = %s WHERE id = ANY(%s::uuid[])", (parent_id, kids))
    return kids


def test_children_filter_on_every_state_a_child_can_be_in(api, conn) -> None:
    """`workflow children ID --status S` answered the same over SQL and HTTP but for PAUSED (and a
    moved child's MIGRATING, MIGRATED): the route's own list of states lacked them, so a paused
    child could not be asked for over HTTP (400, exit 2) though SQL listed it. The route takes
    the states the read takes, in any case (the spec's `--status Failed`)."""
    run = start(conn, "parent", "paused-kids")
    kids = adopt(conn, run, 2)
    assert api.post(f"/workflows/{kids[0]}/pause", json={"reason": "inspect"}).status_code == 200
    for state in ("PAUSED", "paused", "Paused"):
        paused = api.get(f"/workflows/{run}/children", params={"status": state})
        assert paused.status_code == 200, paused.text
        assert [c["exec_id"] for c in paused.json()["items"]] == [kids[0]]
    assert [
        c["exec_id"]
        for c in api.get(f"/workflows/{run}/children", params={"status": "Running"}).json()["items"]
    ] == [kids[1]]
    for state in ("MIGRATING", "MIGRATED"):
        moved = api.get(f"/workflows/{run}/children", params={"status": state})
        assert moved.status_code == 200 and moved.json()["items"] == [], moved.text


def test_children_without_page_size_answer_a_page_and_the_cursor_of_the_rest(api, conn) -> None:
    """Without page_size the route answered every child in one JSON (a run with 100,000
    children, one huge answer): it answers the default page, as GET /workflows does, and
    next_cursor continues it; page_size stays capped at 1000."""
    from harvest.web.routes import workflows

    run = start(conn, "parent", "many-kids")
    kids = adopt(conn, run, workflows.CHILDREN_PAGE + 3)
    first = api.get(f"/workflows/{run}/children").json()
    assert len(first["items"]) == workflows.CHILDREN_PAGE and first["next_cursor"], len(first["items"])
    rest = api.get(f"/workflows/{run}/children", params={"cursor": first["next_cursor"]}).json()
    assert len(rest["items"]) == 3 and rest["next_cursor"] is None
    seen = [c["exec_id"] for c in first["items"] + rest["items"]]
    assert sorted(seen) == sorted(kids) and len(set(seen)) == len(kids)
    big = api.get(f"/workflows/{run}/children", params={"page_size": workflows.CHILDREN_PAGE_MAX + 1})
    assert error_of(big)["field"] == "page_size"


def test_a_page_of_children_reads_a_page_from_the_database(api, conn, monkeypatch) -> None:
    """Each page of /children read every child of the run into the server (a run of 100,000
    children: 100,000 rows for each page of 50, and the CLI asks for every page): a page of
    direct children now reads page_size + 1 rows a shard, after the cursor, in the database."""
    fetched = rows_read(monkeypatch, "list_children", "list_children_of", "list_children_page")
    run = start(conn, "parent", "paged-kids")
    kids = adopt(conn, run, 12)
    # Siblings a decision starts share their created_at: the cursor's id breaks the ties.
    conn.execute(
        "UPDATE harvest.executions SET created_at = (SELECT max(created_at) FROM harvest.executions)"
        " WHERE id = ANY(%s::uuid[])",
        (kids[:8],),
    )
    seen, cursor = [], None
    while True:
        fetched.clear()
        params = {"page_size": 5, **({"cursor": cursor} if cursor else {})}
        page = api.get(f"/workflows/{run}/children", params=params).json()
        assert fetched and max(fetched) <= 6, fetched
        seen += [c["exec_id"] for c in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    whole = api.get(f"/workflows/{run}/children", params={"page_size": 1000}).json()["items"]
    assert seen == [c["exec_id"] for c in whole] and sorted(seen) == sorted(kids)
    failed = api.get(f"/workflows/{run}/children", params={"status": "FAILED", "page_size": 5}).json()
    assert failed["items"] == [] and failed["next_cursor"] is None


def test_a_deeper_page_of_children_reads_at_most_max_nodes(api, conn, monkeypatch) -> None:
    """A page of /children with depth above 1 walked every descendant on every shard to answer
    page_size of them (a run with 100,000 grandchildren: all of them read for each page of 50).
    It walks at most max_nodes (default CHILDREN_WALK), breadth first, as /tree does, and says
    truncated when it cut; its pages join up to the walk's runs, each once."""
    from harvest.shard import fanout

    monkeypatch.setattr(fanout, "CHILDREN_WALK", 10)
    fetched = rows_read(monkeypatch, "list_children", "list_children_of", "list_children_page")
    run = start(conn, "parent", "deep-kids")
    kids = adopt(conn, run, 6)
    for kid in kids:
        adopt(conn, kid, 5)  # 36 descendants
    seen, cursor = [], None
    for _ in range(10):
        fetched.clear()
        params = {"depth": 2, "page_size": 3, **({"cursor": cursor} if cursor else {})}
        page = api.get(f"/workflows/{run}/children", params=params).json()
        assert sum(fetched) <= 10 + 2, fetched  # what the walk may keep, plus one a level
        assert page["truncated"] is True
        seen += [c["exec_id"] for c in page["items"]]
        if (cursor := page["next_cursor"]) is None:
            break
    assert len(seen) == len(set(seen)) == 10 and set(kids) <= set(seen)
    fetched.clear()
    whole = api.get(
        f"/workflows/{run}/children", params={"depth": 2, "max_nodes": 100, "page_size": 5}
    ).json()
    assert whole["truncated"] is False and sum(fetched) == 36 and len(whole["items"]) == 5
    direct = api.get(f"/workflows/{run}/children", params={"page_size": 5}).json()
    assert direct["truncated"] is False
    assert (
        error_of(api.get(f"/workflows/{run}/children", params={"max_nodes": 10_001}))["field"] == "max_nodes"
    )
    other = api.get(f"/workflows/{run}/children", params={"cursor": whole["next_cursor"]})
    assert error_of(other)["field"] == "cursor"  # a cursor of other filters


def test_a_tree_answers_at_most_max_nodes_and_reads_no_more(api, conn, monkeypatch) -> None:
    """GET /tree answered every descendant of the run in one JSON, read whole from every shard
    (a run with 100,000 children: 100,000 rows read and sent each call, and the dashboard's run
    page asks for its tree on each view). It answers at most ``max_nodes`` (default 1000),
    breadth first, says ``truncated`` when it cut, and asks each shard for no more than it can
    keep."""
    from harvest.web.routes import workflows

    fetched = rows_read(monkeypatch, "list_children_of")
    monkeypatch.setattr(workflows, "TREE_NODES", 7)
    run = start(conn, "parent", "big-tree")
    kids = adopt(conn, run, 6)
    grandkids = adopt(conn, kids[0], 4)

    def nodes(tree: dict) -> list[str]:
        return [c["execution_id"] for c in tree["children"]] + [n for c in tree["children"] for n in nodes(c)]

    whole = api.get(f"/workflows/{run}/tree", params={"max_nodes": 100}).json()["tree"]
    assert sorted(nodes(whole)) == sorted(kids + grandkids) and whole["truncated"] is False
    fetched.clear()
    cut = api.get(f"/workflows/{run}/tree").json()["tree"]  # the default, patched to 7
    assert len(nodes(cut)) == 7 and cut["truncated"] is True
    assert set(kids) <= set(nodes(cut))  # breadth first: the children before any grandchild
    assert fetched and max(fetched) <= 8, fetched
    fetched.clear()
    small = api.get(f"/workflows/{run}/tree", params={"max_nodes": 2}).json()["tree"]
    assert len(nodes(small)) == 2 and small["truncated"] is True and set(nodes(small)) <= set(kids)
    assert max(fetched) <= 3, fetched
    exact = api.get(f"/workflows/{run}/tree", params={"max_nodes": 10}).json()["tree"]
    assert len(nodes(exact)) == 10 and exact["truncated"] is False
    for bad in (0, workflows.TREE_NODES_MAX + 1):
        assert error_of(api.get(f"/workflows/{run}/tree", params={"max_nodes": bad}))["field"] == "max_nodes"


def test_a_stack_lists_at_most_limit_entries_a_list_with_each_lists_total(api, conn, monkeypatch) -> None:
    """GET /stack listed every open activity, timer and running child of the run (a fan-out of
    20,000 activities: one answer of 20,000 entries): at most ``limit`` a list (default 100),
    with ``totals``."""
    from harvest.web.routes import workflows

    monkeypatch.setattr(workflows, "STACK_LIMIT", 2)
    run = start(conn, "parent", "wide-stack")
    adopt(conn, run, 3)
    default = api.get(f"/workflows/{run}/stack").json()
    assert len(default["children"]) == 2 and default["totals"] == {
        "children": 3,
        "pending_activities": 0,
        "timers": 0,
        "signals": 0,
        "mutexes": 0,
        "awaited_signals": 0,
    }
    assert len(api.get(f"/workflows/{run}/stack", params={"limit": 10}).json()["children"]) == 3
    for bad in (0, workflows.STACK_LIMIT_MAX + 1):
        assert error_of(api.get(f"/workflows/{run}/stack", params={"limit": bad}))["field"] == "limit"


def test_list_pages_with_a_cursor_and_count_rolls_the_tail_into_other(api, conn) -> None:
    for i in range(3):
        start(conn, "greet", f"page-{i}", search_attributes={"tenant": "acme", "n": i})
    start(conn, "ledger", "other-1")
    first = api.get("/workflows", params={"workflow_name": "greet", "page_size": 2}).json()
    assert len(first["executions"]) == 2 and first["next_cursor"]
    second = api.get(
        "/workflows", params={"workflow_name": "greet", "page_size": 2, "cursor": first["next_cursor"]}
    ).json()
    assert len(second["executions"]) == 1 and second["next_cursor"] is None
    seen = {r["workflow_id"] for r in first["executions"] + second["executions"]}
    assert seen == {"page-0", "page-1", "page-2"}
    tenant = api.get("/workflows", params=[("search_attr", "tenant:acme"), ("search_attr_filter", "n:gte:1")])
    assert {r["workflow_id"] for r in tenant.json()["executions"]} == {"page-1", "page-2"}
    counted = api.get("/workflows/count", params={"group_by": "workflow_name", "top": 1}).json()
    assert counted["counts"] == [{"status": None, "workflow_name": "greet", "executions": 3, "capped": False}]
    assert counted["other"] == {"groups": 1, "executions": 1} and counted["total"] == 4
    assert counted["capped"] is False
    # limit: each status counted up to it (what the dashboard's chips show as "2+").
    bounded = api.get("/workflows/count", params={"workflow_name": "greet", "limit": 2}).json()
    capped = {"status": "RUNNING", "workflow_name": None, "executions": 2, "capped": True}
    assert bounded["counts"] == [capped]
    assert bounded["total"] == 2 and bounded["capped"] is True
    refused = api.get("/workflows/count", params={"group_by": "workflow_name", "limit": 2})
    assert refused.status_code == 400, refused.text


def test_list_and_count_take_a_filter_expression_with_or(api, conn) -> None:
    runs = {
        key: start(conn, "greet", key, search_attributes=attrs)
        for key, attrs in {
            "acme-big": {"tenant": "acme", "amount": 500},
            "acme-small": {"tenant": "acme", "amount": 5},
            "other-big": {"tenant": "other", "amount": 900},
            "other-small": {"tenant": "other", "amount": 1},
        }.items()
    }
    ledger = start(conn, "ledger", "books")
    expression = "(tenant = acme AND amount >= 100) OR tenant IN (nobody, 'other') AND amount < 10"
    listed = api.get("/workflows", params={"filter": expression, "order": "asc"})
    assert listed.status_code == 200, listed.text
    assert [r["workflow_id"] for r in listed.json()["executions"]] == ["acme-big", "other-small"]
    either = api.get("/workflows", params={"filter": "amount > 800 OR workflow_name = ledger"}).json()
    assert {r["execution_id"] for r in either["executions"]} == {runs["other-big"], ledger}
    # ANDed with the other filters, and paged with the same filter.
    page = api.get(
        "/workflows", params={"filter": "tenant = acme OR tenant = other", "page_size": 3, "state": "RUNNING"}
    ).json()
    assert len(page["executions"]) == 3 and page["next_cursor"]
    rest = api.get(
        "/workflows",
        params={
            "filter": "tenant = acme OR tenant = other",
            "page_size": 3,
            "state": "RUNNING",
            "cursor": page["next_cursor"],
        },
    ).json()
    assert len(rest["executions"]) == 1 and rest["next_cursor"] is None
    changed = api.get("/workflows", params={"filter": "tenant = acme", "cursor": page["next_cursor"]})
    assert changed.status_code == 400  # a cursor is for the filters it was issued with
    counted = api.get("/workflows/count", params={"filter": "tenant = acme OR amount > 800"}).json()
    assert counted["total"] == 3
    # Bad expressions are a 400 naming the filter, never a match against nothing or a 500.
    for bad in (
        "status = RUNNING OR tenant = acme",
        "(tenant = acme",
        "tenant ~ x",
        'tenant = "x\') OR 1=1 --"',
    ):
        answer = api.get("/workflows", params={"filter": bad})
        if bad.startswith('tenant = "'):  # a quoted value is a value: it matches nothing, it runs nothing
            assert answer.status_code == 200 and answer.json()["executions"] == []
            continue
        assert answer.status_code == 400, (bad, answer.text)
        assert error_of(answer)["field"] == "filter" and error_of(answer)["message"].startswith("filter: ")


def test_concurrent_query_and_update_waits_share_one_listen_connection(db: str, conn) -> None:
    """N waits held at once by one API process use one LISTEN connection (the hub) and at most
    the pool's connections, not one connection per wait."""
    waits, pool_size = 12, 3
    run = start(conn, "ledger", "nobody-answers")  # no worker: every wait runs to its timeout
    with api_client(db, app=APP, pool_size=pool_size) as api:

        def ask(i: int):
            if i % 2:
                return api.post(f"/workflows/{run}/query", json={"query_name": "total", "timeout_secs": 2})
            return api.post(
                f"/workflows/{run}/update", json={"update_name": "add", "input": i, "timeout_secs": 2}
            )

        with ThreadPoolExecutor(waits) as threads:
            answers = [threads.submit(ask, i) for i in range(waits)]
            state = api.app.state.harvest
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # until every wait is registered with the hub
                hub = state.hubs.get((0, "harvest_query_answers"))
                if hub is not None and hub.waiters == waits:
                    break
                time.sleep(0.02)
            assert hub is not None and hub.waiters == waits
            listening, backends = conn.execute(
                "SELECT count(*) FILTER (WHERE query LIKE 'LISTEN %%'), count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            codes = [a.result().status_code for a in answers]
    assert listening == 1, f"{listening} LISTEN connections for {waits} waits"
    assert backends <= pool_size + 1, f"{backends} connections for {waits} waits"
    assert codes == [504] * waits


def test_history_export_batch_is_the_clis_document(api, conn) -> None:
    runs = [start(conn, "greet", f"batch-{i}", input=[f"secret-{i}"]) for i in range(3)]
    start(conn, "ledger", "not-in-the-batch")
    batch = api.get(
        "/history/export-batch", params={"workflow_name": "greet", "state_group": "running", "limit": 2}
    )
    assert batch.status_code == 200, batch.text
    doc = batch.json()
    assert doc["schema"] == "harvest.history_export_batch" and doc["status"] == "complete"
    assert doc["shard_coverage"] == {"read": [0], "unavailable": []} and doc["failures"] == []
    assert len(doc["exports"]) == 2 and {e["execution_id"] for e in doc["exports"]} <= set(runs)
    first = doc["exports"][0]["events"][0]
    assert first["event_type"] == "WorkflowStarted" and first["event_data"]["input"]["redacted"] is True
    full = api.get(
        "/history/export-batch",
        params={"workflow_name": "greet", "state_group": "all", "payload_policy": "full"},
    ).json()
    assert sorted(e["events"][0]["event_data"]["input"][0] for e in full["exports"]) == [
        "secret-0",
        "secret-1",
        "secret-2",
    ]
    none = api.get("/history/export-batch").json()  # terminal runs only by default: none ended
    assert none["exports"] == [] and none["status"] == "complete"
    assert error_of(api.get("/history/export-batch", params={"limit": 0}))["field"] == "limit"
    assert error_of(api.get("/history/export-batch", params={"state_group": "x"}))["field"] == "state_group"


def test_history_export_batch_streams_its_histories_a_page_at_a_time(db, conn, monkeypatch) -> None:
    """The batch route read every export's whole history (up to 10,000 runs) into memory and
    sent nothing before the last one: it streams, each history from a server-side cursor, so at
    each chunk it sends it has read no more than a page and the read-ahead beyond what it sent.
    (Observed at the ASGI send, not through the test client, which buffers the body.)"""
    from starlette.testclient import TestClient

    from harvest.config import load_config
    from harvest.db.sqlapi import AsyncSqlApi
    from harvest.web.app import management_app
    from harvest.web.routes import history

    page = 2
    monkeypatch.setattr(history, "EXPORT_PAGE_SIZE", page)
    read = [0]  # history events fetched from the database so far
    whole, streamed = AsyncSqlApi.get_history, AsyncSqlApi.iter_history

    async def counted_whole(self, *args, **kwargs):
        rows = await whole(self, *args, **kwargs)
        read[0] += len(rows)
        return rows

    async def counted_stream(self, *args, **kwargs):
        async for row in streamed(self, *args, **kwargs):
            read[0] += 1
            yield row

    monkeypatch.setattr(AsyncSqlApi, "get_history", counted_whole)
    monkeypatch.setattr(AsyncSqlApi, "iter_history", counted_stream)
    runs = [start(conn, "greet", f"streamed-{i}", input=[f"secret-{i}"]) for i in range(3)]
    for run in runs:
        conn.execute(
            "SELECT harvest.signal_workflow(%s, 'sig-' || g, to_jsonb(g)) FROM generate_series(1, 30) AS g",
            (run,),
        )
    total = 3 * 31  # each run: WorkflowStarted and 30 signals
    read_at_send: list[int] = []

    app = management_app(dsn=db, config=load_config(env={}), profile="dev", app=APP)

    async def spying(scope, receive, send):
        async def spy(message):
            if message["type"] == "http.response.body" and message.get("body"):
                read_at_send.append(read[0])
            await send(message)

        await app(scope, receive, spy)

    with TestClient(spying) as client:
        for policy in ("redacted", "full"):
            read[0], read_at_send[:] = 0, []
            answer = client.get(
                "/history/export-batch", params={"state_group": "all", "payload_policy": policy}
            )
            assert answer.status_code == 200, answer.text
            doc = answer.json()
            assert sorted(len(e["events"]) for e in doc["exports"]) == [31, 31, 31]
            assert read[0] == total
            ahead = 2 * page + history._READ_AHEAD  # a cursor page fetched, a page yielded, the queue
            assert read_at_send[0] <= ahead, (policy, read_at_send[:3])
            assert all(n <= i + ahead for i, n in enumerate(read_at_send)), (policy, read_at_send)


def test_a_batch_run_that_cannot_be_exported_is_a_failure_and_the_rest_stream(api, conn, monkeypatch) -> None:
    """A run picked for the batch whose export fails before its first byte (here: gone) is
    listed under failures, and the document around it stays whole."""
    from harvest.core.errors import NotFound
    from harvest.db.sqlapi import AsyncSqlApi

    runs = [start(conn, "greet", f"gone-{i}", input=[i]) for i in range(3)]
    read = AsyncSqlApi.get_execution

    async def gone(self, execution_id, *args, **kwargs):
        if str(execution_id) == runs[1]:
            raise NotFound(f"execution {execution_id} does not exist")
        return await read(self, execution_id, *args, **kwargs)

    monkeypatch.setattr(AsyncSqlApi, "get_execution", gone)
    doc = api.get("/history/export-batch", params={"state_group": "all"}).json()
    assert sorted(e["execution_id"] for e in doc["exports"]) == sorted([runs[0], runs[2]])
    assert [(f["execution_id"], f["shard_id"]) for f in doc["failures"]] == [(runs[1], 0)]
    assert "does not exist" in doc["failures"][0]["error"] and doc["status"] == "complete"


def test_handlers_and_registered_types_with_declared_dependencies(api) -> None:
    handlers = api.get("/workflows/types/ledger/handlers").json()
    assert [q["name"] for q in handlers["queries"]] == ["broken", "total"]
    assert [u["name"] for u in handlers["updates"]] == ["add"]
    assert api.get("/workflows/types/nope/handlers").status_code == 404
    registered = {w["workflow_name"]: w for w in api.get("/workflows/registered").json()["workflows"]}
    assert registered["greet"]["declared_activities"] == ["shout"]
    assert registered["greet"]["declared_children"] == ["missing_child"]
    assert registered["ledger"]["declared_activities"] is None


# -- dead letters ----------------------------------------------------------------------------------
def test_dead_letters_list_get_aggregate_and_bulk_with_dry_run(api, conn) -> None:
    _, dead = park(conn, "dl1", activity="send_email")
    listed = api.get("/dead-letters").json()
    assert [d["id"] for d in listed["dead_letters"]] == [dead]
    assert api.get(f"/dead-letters/{dead}").json()["activity_name"] == "send_email"
    assert api.get("/dead-letters/999999").status_code == 404
    assert api.get("/dead-letters/0").status_code == 400
    groups = api.get("/dead-letters/aggregate", params={"group_by": "activity"}).json()["groups"]
    assert groups[0]["dead_letters"] == 1
    no_filter = api.post("/dead-letters/replay", json={"dry_run": True})
    assert no_filter.status_code == 400 and error_of(no_filter)["field"] == "activity_name"
    assert api.post("/dead-letters/replay", json={"activity_name": "x", "limit": 5000}).status_code == 400
    preview = api.post("/dead-letters/replay", json={"activity_name": "send_email", "dry_run": True}).json()
    assert preview["matched"] == 1 and preview["ids"] == [dead]
    assert api.get(f"/dead-letters/{dead}").status_code == 200  # a dry run wrote nothing
    done = api.post("/dead-letters/replay", json={"activity_name": "send_email"}).json()
    assert done["acted_on"] == 1
    assert api.post(f"/dead-letters/{dead}/replay").status_code == 404  # replayed: gone


def test_dead_letters_page_through_with_the_next_cursor_over_http(api, conn) -> None:
    # Three dead letters, two a page: the cursor carries the second page's start, each row comes
    # once, newest failure first, and the last page says there is no more (next_cursor null).
    dead = [park(conn, f"dlp{n}", activity="send_email")[1] for n in range(3)]
    first = api.get("/dead-letters", params={"limit": 2})
    assert first.status_code == 200, first.text
    page = first.json()
    assert len(page["dead_letters"]) == 2 and page["next_cursor"]
    second = api.get("/dead-letters", params={"limit": 2, "cursor": page["next_cursor"]}).json()
    assert second["next_cursor"] is None and second["status"] == "complete"
    walked = [d["id"] for d in page["dead_letters"] + second["dead_letters"]]
    assert walked == sorted(dead, reverse=True)  # one failure time per statement: ties by id
    # The cursor is for the filters it was issued with.
    other = api.get("/dead-letters", params={"cursor": page["next_cursor"], "activity_name": "other"})
    assert other.status_code == 400 and error_of(other)["code"] == "invalid_argument", other.text


def _walk(api, route: str, key: str, **params) -> tuple[list[dict], int]:
    """Every row of a paged list route, following next_cursor: (the rows, the pages)."""
    rows: list[dict] = []
    pages, cursor = 0, None
    while True:
        answer = api.get(route, params={**params, **({"cursor": cursor} if cursor else {})})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert "next_cursor" in body and len(body[key]) <= params["limit"], body
        rows += body[key]
        pages += 1
        if (cursor := body["next_cursor"]) is None:
            return rows, pages
        assert pages < 10, "the cursor does not move on"


def test_the_audit_log_and_a_dags_runs_page_with_the_next_cursor_over_http(api, conn) -> None:
    """GET /admin/audit and GET /dags/{name}/runs answered their newest `limit` rows and no
    more: past the first page nothing could be read. They page by cursor as the dead letters
    do: each row once, newest first, next_cursor null on the last page."""
    for n in range(5):
        conn.execute("SELECT harvest._audit('worker.drain', %s, 'ops', '{}')", (f"w{n}",))
    rows, pages = _walk(api, "/admin/audit", "entries", limit=2, operation="worker.drain")
    assert [r["target"] for r in rows] == [f"w{n}" for n in reversed(range(5))] and pages == 3
    conn.execute(
        "SELECT harvest.register_dags(%s::jsonb)",
        (json.dumps([{"dag_name": "paged_dag", "queue": "paged_q", "tasks": [], "max_active_runs": 10}]),),
    )
    made = [
        str(conn.execute("SELECT execution_id FROM harvest.trigger_dag('paged_dag')").fetchone()[0])
        for _ in range(5)
    ]
    rows, pages = _walk(api, "/dags/paged_dag/runs", "runs", limit=2)
    assert sorted(r["execution_id"] for r in rows) == sorted(made) and len(rows) == 5 and pages == 3
    assert [(r["created_at"], r["execution_id"]) for r in rows] == sorted(
        ((r["created_at"], r["execution_id"]) for r in rows), reverse=True
    )
    # A cursor of one list is not one of the other, nor of other filters: 400.
    first = api.get("/admin/audit", params={"limit": 2}).json()["next_cursor"]
    for route, params in (
        ("/dags/paged_dag/runs", {"cursor": first}),
        ("/admin/audit", {"cursor": first, "operation": "worker.drain"}),
        ("/admin/audit", {"cursor": "au1.nonsense"}),
    ):
        refused = api.get(route, params=params)
        assert refused.status_code == 400 and error_of(refused)["code"] == "invalid_argument", refused.text


def test_refused_dead_letter_calls_answer_the_documented_error_over_http(api, conn) -> None:
    # A cursor that is not one, or one of another listing: 400 invalid_argument naming the
    # cursor, and no rows.
    for cursor in ("not-a-cursor", "dl2.e30"):
        bad = api.get("/dead-letters", params={"cursor": cursor})
        assert bad.status_code == 400, bad.text
        error = error_of(bad)
        assert error["code"] == "invalid_argument" and "cursor" in error["message"], error
        assert "dead_letters" not in bad.json()
    # A dead letter of a run that ended: replay is refused (409 workflow_not_running) and the
    # dead letter stays to discard.
    execution_id, dead = park(conn, "dlr", activity="send_email")
    conn.execute("SELECT harvest.terminate_workflow(%s, 'done with it')", (execution_id,))
    refused = api.post(f"/dead-letters/{dead}/replay")
    assert refused.status_code == 409, refused.text
    error = error_of(refused)
    assert error["code"] == "workflow_not_running" and "task_id" not in refused.json(), error
    assert api.get(f"/dead-letters/{dead}").status_code == 200
    # An id of no dead letter: 404 not_found, in the same shape.
    gone = api.post("/dead-letters/999999/replay")
    assert gone.status_code == 404 and error_of(gone)["code"] == "not_found", gone.text


# -- workers ---------------------------------------------------------------------------------------
def test_worker_routes_and_their_400s(api, start_worker) -> None:
    assert error_of(api.get("/workers", params={"status": "sleepy"}))["field"] == "status"
    assert error_of(api.get("/workers", params={"health": "meh"}))["field"] == "health"
    assert api.get("/workers", params={"shard_id": "7"}).status_code == 400
    assert api.get("/workers/nobody").status_code == 404
    assert api.post("/workers/nobody/drain", json={}).json()["outcome"] == "not_found"
    assert api.post("/workers/nobody/drain", json={"deadline_at": "soon"}).status_code == 400
    running = start_worker(APP)
    worker_id = running.worker.worker_id
    deadline = time.monotonic() + 10
    while not api.get("/workers").json()["workers"] and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = api.get("/workers", params={"queue": "default"}).json()["workers"]
    assert [w["worker_id"] for w in workers] == [worker_id] and workers[0]["shard_id"] == 0
    assert api.get(f"/workers/{worker_id}").json()["worker_id"] == worker_id
    assert api.get("/workers/health").json()["healthy"] == 1
    preview = api.get("/workers/drain-preview", params={"queue": "default"}).json()
    assert [w["worker_id"] for w in preview["workers"]] == [worker_id]
    drained = api.post(f"/workers/{worker_id}/drain", json={"deadline_at": "2099-01-01T00:00:00Z"}).json()
    assert drained["outcome"] == "accepted" and drained["shards"] == [0]
    audit = api.get("/admin/audit", params={"operation": "worker.drain"}).json()["entries"]
    assert audit and audit[0]["source"] == "api" and audit[0]["operator_id"] == "dev"


# -- admin -----------------------------------------------------------------------------------------
def test_admin_reads(api, conn) -> None:
    config = api.get("/admin/config").json()
    assert (
        config["shard_topology"]["residency_map"] == {} and config["auth"]["unauthenticated_access"] is True
    )
    assert config["worker"]["declared_queues"] == ["billing", "default"]
    assert config["worker"]["shard_assignments"] == [0]
    assert config["retention"]["audit_max_age"] is None  # unset: the janitor never prunes the audit log
    # The worker's rebalance-resume scanner, as the sharding guide's /admin/config shows it.
    assert {k: config["worker"][k] for k in config["worker"] if k.startswith("rebalance_")} == {
        "rebalance_resume_enabled": True,
        "rebalance_resume_interval_ms": 5000,
        "rebalance_stall_after_ms": 30000,
    }
    assert api.get("/admin/concurrency").json() == []
    usage = api.get("/admin/usage", params={"from": "24h"}).json()
    assert usage["status"] == "complete" and usage["group_by"] == "workflow_name"
    assert error_of(api.get("/admin/usage"))["field"] == "from"
    assert error_of(api.get("/admin/usage", params={"from": "last week"}))["field"] == "from"
    assert api.get("/admin/usage", params={"from": "2000-01-01T00:00:00Z"}).status_code == 400  # window
    assert api.get("/admin/version-gates/usage").status_code == 400
    for asked, field in (
        ({"recorded_version": -1}, "recorded_version"),  # (-1 needs history_before)
        ({"recorded_version": -2, "history_before": "2026-01-01T00:00:00Z"}, "recorded_version"),
        ({"state_group": "terminal", "history_before": "2026-01-01T00:00:00Z"}, "history_before"),
    ):
        refused = api.get("/admin/version-gates/usage", params={"change_id": "v2", **asked})
        assert error_of(refused)["field"] == field, refused.text
    gates = api.get("/admin/version-gates/usage", params={"change_id": "v2"}).json()
    assert gates["status"] == "no_matches"
    coverage = api.get("/admin/queue-coverage").json()
    assert coverage["unpolled_declared_queues"] == ["billing", "default"]
    assert coverage["declared_source"] == "app" and coverage["sharded"] is False
    asked = api.get("/admin/queue-coverage", params={"queue": ["default", "default"]}).json()
    assert asked["declared_queues"] == ["default"] and asked["declared_source"] == "request"
    assert asked["unpolled_declared_queues"] == ["default"]
    health = api.get("/admin/shards/health").json()
    assert health["readiness"] in ("ready", "degraded") and health["shards"][0]["shard_id"] == 0
    preflight = api.get("/admin/preflight").json()
    checks = {c["name"]: c for c in preflight["checks"]}
    assert checks["admin_auth_boundary"]["details"]["unauthenticated_access"] is True
    assert checks["catalog_consistency"]["status"] == "fail"  # greet declares a missing child
    assert preflight["overall_status"] == "fail"


def test_concurrency_keys_come_a_page_at_a_time(api, conn, monkeypatch) -> None:
    """GET /admin/concurrency answered every key with live work in one array, each shard's
    every key read (100,000 tenants: 100,000 keys a call, and the dashboard's concurrency page
    drew them all): it answers at most limit keys (default 1000) in key order, each shard asked
    for limit + 1 keys after the cursor, and X-Harvest-Next-Cursor names the next page."""

    fetched = rows_read(monkeypatch, "list_concurrency_keys")
    keys = 1_500
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, concurrency_key, created_at)"
        " SELECT gen_random_uuid(), 'greet', 'tenant-' || g, 'RUNNING',"
        " 'tenant:' || lpad(g::text, 5, '0'), now()"
        " FROM generate_series(1, %s) AS g",
        (keys,),
    )
    # Activity keys too, one of them shared with a workflow key (two rows, one key).
    run = conn.execute("SELECT id FROM harvest.executions WHERE workflow_id = 'tenant-1'").fetchone()[0]
    conn.execute(
        "INSERT INTO harvest.tasks (execution_id, kind, queue, status, due_at, scheduled_at, seq,"
        " activity_name, concurrency_key, concurrency_limit)"
        " SELECT %s, 'activity', 'default', 'pending', now(), now(), g, 'shout',"
        " 'tenant:' || lpad(g::text, 5, '0'), 2 FROM generate_series(1, 3) AS g",
        (run,),
    )
    first = api.get("/admin/concurrency")
    assert first.status_code == 200
    assert len({r["key"] for r in first.json()}) == 1000 and max(fetched) <= 1001 + 3, (
        fetched
    )  # (3 keys have an activity row too)
    assert first.headers["X-Harvest-Next-Cursor"]
    seen: list[tuple[str, str]] = []
    cursor = None
    while True:
        fetched.clear()
        page = api.get("/admin/concurrency", params={"limit": 400, **({"cursor": cursor} if cursor else {})})
        assert page.status_code == 200 and max(fetched) <= 401 + 3, fetched
        seen += [(r["key"], r["task_type"]) for r in page.json()]
        cursor = page.headers.get("X-Harvest-Next-Cursor")
        if not cursor:
            break
    assert len({k for k, _ in seen}) == keys and len(seen) == keys + 3 and seen == sorted(seen)
    one = api.get("/admin/concurrency", params={"key": "tenant:00002"}).json()
    assert [(r["key"], r["task_type"], r["pending"]) for r in one] == [
        ("tenant:00002", "activity", 1),
        ("tenant:00002", "workflow", 1),
    ]
    assert (
        "X-Harvest-Next-Cursor" not in api.get("/admin/concurrency", params={"key": "tenant:00002"}).headers
    )
    other = api.get(
        "/admin/concurrency",
        params={"key": "tenant:00002", "cursor": cursor or first.headers["X-Harvest-Next-Cursor"]},
    )
    assert other.status_code == 400  # a cursor of another filter
    assert api.get("/admin/concurrency", params={"limit": 10_001}).status_code == 400


def test_schedules_come_a_page_at_a_time(api, conn, monkeypatch) -> None:
    """GET /admin/schedules answered every schedule of every shard in one list (a schedule a
    tenant: 100,000 schedules a call, each read whole): it answers at most limit (default 100)
    by name, each shard asked for limit + 1 after the cursor's, and next_cursor the rest."""

    fetched = rows_read(monkeypatch, "list_schedules")
    many = 450
    conn.execute(
        "INSERT INTO harvest.schedules (name, kind, workflow_name, interval_secs, paused, anchor_at,"
        " created_at, updated_at)"
        " SELECT 'tenant-' || lpad(g::text, 4, '0'), CASE WHEN g %% 3 = 0 THEN 'dag' ELSE 'workflow' END,"
        " 'greet', 3600, g %% 2 = 0, now(), now(), now() FROM generate_series(1, %s) AS g",
        (many,),
    )
    first = api.get("/admin/schedules").json()
    assert len(first["schedules"]) == 100 and max(fetched) <= 101, fetched
    assert first["next_cursor"]
    for filters, expect in (
        ({}, [f"tenant-{g:04}" for g in range(1, many + 1)]),
        ({"kind": "dag"}, [f"tenant-{g:04}" for g in range(3, many + 1, 3)]),
        ({"paused": "true"}, [f"tenant-{g:04}" for g in range(2, many + 1, 2)]),
    ):
        seen: list[str] = []
        cursor = None
        while True:
            fetched.clear()
            page = api.get("/admin/schedules", params={**filters, "limit": 40, "cursor": cursor}).json()
            assert max(fetched) <= 41, fetched
            seen += [r["name"] for r in page["schedules"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == expect, filters
    assert (
        api.get("/admin/schedules", params={"kind": "dag", "cursor": first["next_cursor"]}).status_code == 400
    )
    assert api.get("/admin/schedules", params={"limit": 1001}).status_code == 400


def test_the_worker_list_answers_at_most_limit_workers_and_their_total(api, conn, monkeypatch) -> None:
    """GET /workers answered every registered worker of every shard (an autoscaled fleet that
    churns pods leaves a row per pod until retention: tens of thousands a week): at most limit
    (default 200) in the list's order, each shard asked for limit, with the total matched and
    truncated when it left some out."""

    fetched = rows_read(monkeypatch, "list_workers")
    conn.execute(
        "INSERT INTO harvest.workers (id, queues, hostname, pid, status, started_at, last_heartbeat_at)"
        " SELECT 'pod-' || lpad(g::text, 4, '0'), ARRAY['default'], 'h', g,"
        " CASE WHEN g % 10 = 0 THEN 'active' ELSE 'stopped' END, now(), now()"
        " FROM generate_series(1, 500) AS g"
    )
    everyone = api.get("/workers").json()
    assert len(everyone["workers"]) == 200 and max(fetched) <= 200, fetched
    assert everyone["total"] == 500 and everyone["truncated"] is True
    # The list's order: the active ones first (stale first, then by id), then the stopped.
    assert [w["worker_id"] for w in everyone["workers"][:50]] == [f"pod-{g:04}" for g in range(10, 501, 10)]
    few = api.get("/workers", params={"limit": 5, "status": "active"}).json()
    assert [w["worker_id"] for w in few["workers"]] == [
        "pod-0010",
        "pod-0020",
        "pod-0030",
        "pod-0040",
        "pod-0050",
    ]
    assert few["total"] == 50 and few["truncated"] is True
    small = api.get("/workers", params={"status": "active"}).json()
    assert len(small["workers"]) == 50 and small["total"] == 50 and small["truncated"] is False
    assert api.get("/workers", params={"limit": 10_001}).status_code == 400


def test_api_tokens_come_a_page_at_a_time(api, conn) -> None:
    """GET /admin/tokens answered every token, revoked ones too with include_revoked (a token a
    tenant, rotated: revoked rows pile up for good): a page of at most limit (default 100),
    live ones first by name, then revoked ones by name and id, and next_cursor the rest."""
    conn.execute(
        "INSERT INTO harvest.api_tokens (name, scope, secret_hash, created_at, created_by, revoked_at)"
        " SELECT 'tenant-' || lpad((g % 150)::text, 3, '0'), 'read', sha256(g::text::bytea), now(), 'test',"
        " CASE WHEN g >= 150 THEN now() END FROM generate_series(0, 449) AS g"
    )
    first = api.get("/admin/tokens").json()
    assert len(first["tokens"]) == 100 and first["next_cursor"]
    for include_revoked, expect in ((False, 150), (True, 450)):
        seen: list[tuple[bool, str, int]] = []
        cursor = None
        while True:
            page = api.get(
                "/admin/tokens", params={"include_revoked": include_revoked, "limit": 40, "cursor": cursor}
            ).json()
            assert len(page["tokens"]) <= 40
            seen += [(t["revoked_at"] is not None, t["name"], t["token_id"]) for t in page["tokens"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert len(seen) == expect and seen == sorted(seen) and len(set(seen)) == expect
    other = api.get("/admin/tokens", params={"include_revoked": True, "cursor": first["next_cursor"]})
    assert other.status_code == 400
    assert api.get("/admin/tokens", params={"limit": 1001}).status_code == 400


def test_rate_limit_overrides_on_every_shard_audited_and_their_refusals(api, conn) -> None:
    from psycopg.types.json import Jsonb

    conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
    applied = api.post("/admin/rate-limits/charge/override", json={"rps": 50, "ttl_secs": 60})
    assert applied.status_code == 200, applied.text
    assert applied.json()["shard_errors"] == [] and set(applied.json()["shards"]) == {"0"}
    assert api.get("/admin/rate-limits/charge").json()["shards"]["0"]
    audit = api.get("/admin/audit", params={"operation": "rate_limit.override"}).json()["entries"]
    assert audit and audit[0]["source"] == "api"
    assert api.delete("/admin/rate-limits/charge/override").status_code == 200
    per_key = api.post("/admin/rate-limits/per_tenant/override", json={"rps": 5})
    assert per_key.status_code == 409 and error_of(per_key)["code"] == "policy_conflict"
    undeclared = api.post("/admin/rate-limits/shout/override", json={"rps": 5})
    assert undeclared.status_code in (400, 404), undeclared.text
    assert api.post("/admin/rate-limits/charge/override", json={"rps": -1}).status_code == 400
    assert api.post("/admin/rate-limits/charge/override", json={}).status_code == 400


def test_admin_config_reports_the_polled_and_declared_queues_and_their_source(db: str) -> None:
    with api_client(db, app=APP) as api:
        worker = api.get("/admin/config").json()["worker"]
        assert worker["queues"] == worker["declared_queues"] == ["billing", "default"]
        assert worker["queue_source"] == "code"
        assert worker["runs_here"] is True
    with api_client(db, app=APP, env={"HARVEST_ROLE": "worker", "HARVEST_WORKER__QUEUES": "billing"}) as api:
        worker = api.get("/admin/config").json()["worker"]
        assert (worker["queues"], worker["runs_here"]) == (["billing"], True)
        assert worker["declared_queues"] == ["billing", "default"]  # the API keeps them all
        assert worker["queue_source"] == "explicit (HARVEST_WORKER__QUEUES)"
    # A web replica polls nothing: it reported the configured worker.queues as if it polled them.
    with api_client(db, app=APP, env={"HARVEST_ROLE": "web", "HARVEST_WORKER__QUEUES": "billing"}) as api:
        config = api.get("/admin/config").json()
        assert config["worker"] == {
            "runs_here": False,
            "drained": None,  # (no worker here to drain)
            "queues": [],
            "declared_queues": ["billing", "default"],  # the served App's, whoever polls them
            "queue_source": "no worker in this process: worker.enabled=false (source: role web)",
            "shard_assignments": [],
            "shard_assignments_source": "no worker in this process: worker.enabled=false (source: role web)",
        }
        assert config["role"] == "web"
        assert config["runtimes"]["worker.enabled"] == {"value": False, "source": "role web"}
        assert config["retention"] == {"run_on": "scheduler", "runs_here": False, "audit_max_age": None}
    # The janitor's age for the audit log, as configured (retention.audit_max_age).
    with api_client(db, app=APP, env={"HARVEST_RETENTION__AUDIT_MAX_AGE": "400 days"}) as api:
        assert api.get("/admin/config").json()["retention"]["audit_max_age"] == "400 days"


def test_retention_on_a_web_replica_is_placed_elsewhere_and_run_now_is_503(db: str) -> None:
    with api_client(db, env={"HARVEST_ROLE": "web"}) as web:
        status = web.get("/admin/retention").json()
        assert status["placed_elsewhere"] is True and status["shards"] == []
        refused = web.post("/admin/retention/run-now", json={})
        assert refused.status_code == 503 and 'run_on = "all"' in error_of(refused)["message"]
    with api_client(db, env={"HARVEST_ROLE": "web", "HARVEST_RETENTION__RUN_ON": "all"}) as anywhere:
        assert anywhere.get("/admin/retention").json()["placed_elsewhere"] is False
        swept = anywhere.post("/admin/retention/run-now", json={"max_age": "30 days", "max_batches": 1})
        assert swept.status_code == 200, swept.text
        assert swept.json()["deleted"] == 0


def test_run_now_over_http_totals_what_the_cli_over_sql_totals(db: str) -> None:
    """The route's answer summed the executions alone (``deleted``): the worker rows it deleted,
    its batches, what remains and the cutoff were only in each shard's row, where the CLI over
    SQL prints them as its totals. One sweep, one figure: harvest.db.prunes.sweep_totals."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.register_worker('gone', ARRAY['default'], 'h', 1, 5)")
        conn.execute("SELECT harvest.stop_worker('gone')")
        conn.execute(
            "UPDATE harvest.workers SET last_heartbeat_at = now() - interval '30 days' WHERE id = 'gone'"
        )
    with api_client(db, env={"HARVEST_RETENTION__RUN_ON": "all"}) as api:
        swept = api.post("/admin/retention/run-now", json={"max_age": "30 days"})
        assert swept.status_code == 200, swept.text
        body = swept.json()
    (shard,) = body["shards"]
    assert body["workers_deleted"] == shard["workers_deleted"] == 1, body
    assert (body["deleted"], body["batches"], body["remaining"]) == (0, 1, 0), body
    assert body["cutoff"] == shard["cutoff"] is not None


def test_run_now_sweeps_as_many_batches_by_default_over_http_as_the_cli() -> None:
    from harvest.cli.retention import run_now
    from harvest.db.prunes import MAX_BATCHES

    (option,) = [p for p in run_now.params if p.name == "max_batches"]
    assert option.default == MAX_BATCHES


def test_run_now_where_retention_is_switched_off_names_the_switch_not_run_on(db: str) -> None:
    """retention.enabled = false is not a placement: the 503 blamed run_on = "scheduler" and
    told the operator to set run_on = "all", which changes nothing while the switch is off."""
    env = {
        "HARVEST_ROLE": "worker",
        "HARVEST_RETENTION__ENABLED": "false",
        "HARVEST_RETENTION__RUN_ON": "all",
    }
    with api_client(db, env=env) as api:
        assert api.get("/admin/retention").json()["placed_elsewhere"] is True
        refused = api.post("/admin/retention/run-now", json={})
        assert refused.status_code == 503
        message = error_of(refused)["message"]
        assert "retention.enabled=false (from HARVEST_RETENTION__ENABLED)" in message, message
        assert "run_on" not in message


def test_retention_settings_write_both_ages_or_neither(db: str) -> None:
    with api_client(db) as api:
        refused = api.post("/admin/retention/settings", json={"max_age": "30 days", "worker_max_age": "soon"})
        assert refused.status_code == 400, refused.text
        shard = api.get("/admin/retention/settings").json()["shards"][0]
        assert shard["max_age"] is None and shard["worker_max_age"] == "7 days", shard
        both = api.post("/admin/retention/settings", json={"max_age": "30 days", "worker_max_age": "off"})
        assert both.status_code == 200, both.text
        assert (both.json()["shards"][0]["max_age"], both.json()["shards"][0]["worker_max_age"]) == (
            "30 days",
            None,
        )


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/admin/retention/settings", {"max_age": "bogus"}, "max_age"),
        ("/admin/retention/settings", {"worker_max_age": "30 dayz"}, "worker_max_age"),
        ("/admin/retention/run-now", {"max_age": "bogus"}, "max_age"),
        ("/admin/audit/prune", {"older_than": "bogus"}, "older_than"),
    ],
)
def test_an_age_that_is_no_interval_is_a_400_naming_its_field(
    db: str, path: str, body: dict[str, str], field: str
) -> None:
    """The database's "invalid input syntax for type interval" named no field."""
    with api_client(db) as api:
        refused = api.post(path, json=body)
    assert refused.status_code == 400, refused.text
    assert error_of(refused)["field"] == field, refused.text
    assert "is not a PostgreSQL interval" in refused.text, refused.text


# -- authorization and roles -----------------------------------------------------------------------
class Refusing:
    """An authorizer that refuses with Starlette's own HTTPException."""

    async def authorize(self, request: Request, needed: str) -> Principal:
        from starlette.exceptions import HTTPException

        raise HTTPException(401, "no token", headers={"WWW-Authenticate": "Bearer"})


class Fixed:
    """An authorizer that grants one scope and refuses more (403), or lies (``lie``)."""

    def __init__(self, scope: str, lie: bool = False):
        self.scope, self.lie = scope, lie

    async def authorize(self, request: Request, needed: str) -> Principal:
        from harvest.core.errors import PermissionDenied

        principal = Principal(actor="tester", scope=self.scope)  # type: ignore[arg-type]
        if not self.lie and not principal.allows(needed):  # type: ignore[arg-type]
            raise PermissionDenied(f"scope {self.scope} does not allow {needed}")
        return principal


def test_no_authorizer_outside_dev_fails_closed(db: str) -> None:
    with api_client(db, profile="production") as api:
        for route in ("/workflows", "/admin/config", "/admin/preflight", "/dead-letters"):
            refused = api.get(route)
            assert refused.status_code == 401 and error_of(refused)["code"] == "unauthenticated"
        assert api.post("/workflows/greet/start", json={}).status_code == 401
        assert api.get("/health").status_code == 200  # probes carry no data


def test_an_authorizer_may_refuse_with_starlettes_http_exception(db: str) -> None:
    with api_client(db, authorizer=Refusing()) as api:
        refused = api.get("/workflows")
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == "Bearer"
        assert error_of(refused) == {"code": "unauthenticated", "message": "no token"}


def test_scopes_are_checked_by_the_route_and_again_by_the_database(db: str) -> None:
    with api_client(db, authorizer=Fixed("read")) as reader:
        assert reader.get("/workflows").status_code == 200
        assert reader.post("/workflows/greet/start", json={}).status_code == 403
        assert reader.get("/admin/config").status_code == 403
    with api_client(db, authorizer=Fixed("operate")) as operator:
        assert operator.post("/workflows/greet/start", json={"workflow_id": "a"}).status_code == 201
        # A start that can cancel a live run needs admin; attaching to one does not.
        refused = operator.post(
            "/workflows/greet/start", json={"workflow_id": "a", "conflict_policy": "terminate_existing"}
        )
        assert refused.status_code == 403
        attach = operator.post(
            "/workflows/greet/start",
            json={
                "workflow_id": "a",
                "reuse_policy": "terminate_if_running",
                "conflict_policy": "use_existing",
            },
        )
        assert attach.status_code == 200
        # reuse_policy terminate_if_running with conflict_policy omitted resolves to terminate:
        # admin; with conflict_policy fail it resolves to a 409, which needs no admin.
        replace = operator.post(
            "/workflows/greet/start", json={"workflow_id": "a", "reuse_policy": "terminate_if_running"}
        )
        assert replace.status_code == 403, replace.text
        failing = operator.post(
            "/workflows/greet/start",
            json={"workflow_id": "a", "reuse_policy": "terminate_if_running", "conflict_policy": "fail"},
        )
        assert failing.status_code == 409, failing.text
        assert error_of(failing)["code"] == "workflow_already_exists"
    # An authorizer that lets a reader through: the database refuses the write on its own role.
    with api_client(db, authorizer=Fixed("read", lie=True)) as lying:
        refused = lying.post("/workflows/greet/start", json={})
        assert refused.status_code == 403 and error_of(refused)["code"] == "permission_denied"
        assert lying.get("/workflows").status_code == 200


def test_mounted_under_a_prefix_opens_its_pools_on_the_first_request(db: str) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.testclient import TestClient

    from harvest.config import load_config
    from harvest.web.app import management_app

    api = management_app(dsn=db, config=load_config(env={}), profile="dev")
    outer = Starlette(routes=[Mount("/api/harvest", app=api)])
    with TestClient(outer) as client:
        assert client.get("/api/harvest/workflows").json()["executions"] == []
        assert client.get("/api/harvest/openapi.json").json()["servers"] == [{"url": "/api/harvest"}]
        assert client.get("/api/harvest/health/ready").status_code == 200
        assert api.state.harvest.opened
        client.portal.call(api.state.harvest.close)  # the host app's shutdown closes the pools
    assert not api.state.harvest.opened


def test_openapi_lists_every_route_with_its_scope(api) -> None:
    doc = api.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    for endpoint in api.app.state.endpoints:
        operation = doc["paths"][endpoint.path][endpoint.method.lower()]
        assert operation.get("x-harvest-scope") == endpoint.scope
        if endpoint.scope is not None:  # what a token that sees no payloads gets (docs/http-api.md)
            assert operation["x-harvest-payloads"] == endpoint.payloads
        assert "default" in operation["responses"]
        if endpoint.method != "GET":  # (the guards: another site's write, a body not sent as JSON)
            assert "403" in operation["responses"], endpoint.path
        if endpoint.body is not None:
            assert "415" in operation["responses"], endpoint.path
    assert doc["paths"]["/workflows/{name}/start"]["post"]["x-harvest-scope"] == "operate"
    assert doc["paths"]["/admin/preflight"]["get"]["x-harvest-scope"] == "read"  # the spec: a read token
    assert doc["paths"]["/workflows/{execution_id}/query"]["post"]["x-harvest-payloads"] == "whole"
    # The routes mounted beside the declared ones, from their own declarations (openapi.Mounted).
    for route in (METRICS, *STREAMS):
        operation = doc["paths"][route.path]["get"]
        assert operation["operationId"] == route.operation_id and operation["x-harvest-scope"] == "read"
        assert list(operation["responses"]["200"]["content"]) == [route.media_type]
    for route in STREAMS:  # a database that cannot be reached when a stream is asked for
        assert "503" in doc["paths"][route.path]["get"]["responses"], route.path
    assert {route.path for route in STREAMS} == {
        "/workflows/{execution_id}/events/stream",
        "/stream",
        "/stream/durable",
    }
    served = {(r.path, m) for r in api.app.routes if hasattr(r, "methods") for m in r.methods or ()}
    assert ("/workflows/{execution_id:uuid}/events/stream", "GET") in served  # the route it documents


def test_a_not_ready_probe_answers_the_error_shape_with_retry_after(fresh_db: str) -> None:
    """/health/ready's 503 is an error like any other (docs/http-api.md, "Answers and errors";
    /openapi.json declares its 503 as {error: {code, message}}): the probe's status, the error
    with its code, and Retry-After, as every retryable 503 carries. On a database not migrated
    yet, preflight and shard health answer their reports (they were a 500: opening the API read
    the payload limit from the schema that is not there)."""
    with api_client(fresh_db) as api:  # a database without this Harvest's schema
        ready = api.get("/health/ready")
        assert ready.status_code == 503 and ready.json()["status"] == "not_ready"
        assert error_of(ready)["code"] == "not_ready", ready.text
        assert "schema" in error_of(ready)["message"]
        assert ready.headers["Retry-After"] == "1"
        # The deploy gate answers on a database not migrated yet: its checks, not a 500.
        gate = api.get("/admin/preflight")
        assert gate.status_code == 200, gate.text
        assert gate.json()["overall_status"] == "fail"
        assert {c["name"]: c["status"] for c in gate.json()["checks"]}["migrations"] == "fail"
        assert api.get("/admin/shards/health").json()["readiness"] != "ready"
    gated = {"HARVEST_READINESS__REQUIRE_SHARD_READINESS": "true"}
    with api_client(fresh_db, env=gated) as api:  # /health as the readiness gate
        for probe in ("/health", "/health/ready"):
            answer = api.get(probe)
            assert answer.status_code == 503 and answer.json()["readiness"] != "ready", answer.text
            assert error_of(answer)["code"] == "not_ready" and answer.headers["Retry-After"] == "1"


def test_the_shard_readiness_probe_reads_none_of_a_polled_backlog(conn, db: str, monkeypatch) -> None:
    """/health/ready with readiness.require_shard_readiness built the whole shard report on
    every probe: its per-queue counts read every task (0.43 s of CPU a probe over 2M tasks, a
    probe every 10 s per replica). The probe reads what its readiness gates on
    (get_shard_readiness: index probes, tests/integration/test_background_reads.py counts them);
    GET /admin/shards/health still counts the work, and a queue no live worker polls still
    fails the probe."""
    from harvest.db.sqlapi import SqlApi

    reports: list[str] = []
    full = SqlApi.get_shard_health

    def counted(self, *args, **kwargs):
        reports.append("get_shard_health")
        return full(self, *args, **kwargs)

    monkeypatch.setattr(SqlApi, "get_shard_health", counted)
    run = conn.execute("SELECT execution_id FROM harvest.start_workflow('w')").fetchone()[0]
    conn.execute(
        "INSERT INTO harvest.tasks (execution_id, kind, queue, priority, due_at, scheduled_at, seq,"
        " activity_name) SELECT %s, 'activity', 'default', 0, harvest.now() - interval '1 minute',"
        " harvest.now(), g, 'a' FROM generate_series(1, 3000) AS g",
        [run],
    )
    conn.execute("SELECT harvest.register_worker('w-1', ARRAY['default'], 'host', 1, 60, '{}')")
    gated = {"HARVEST_READINESS__REQUIRE_SHARD_READINESS": "true"}
    with api_client(db, env=gated) as api:
        for probe in ("/health/ready", "/health"):
            ready = api.get(probe)
            assert ready.status_code == 200 and ready.json()["readiness"] == "ready", ready.text
        assert reports == [], "a readiness probe built the whole shard report"
        shard = api.get("/admin/shards/health").json()["shards"][0]
        assert shard["pressure"]["claimable"] == 3001 and shard["readiness"] == "ready"
        assert reports == ["get_shard_health"]
        conn.execute("UPDATE harvest.workers SET last_heartbeat_at = harvest.now() - interval '1 hour'")
        probe = api.get("/health/ready")
        assert probe.status_code == 503 and probe.json()["readiness"] == "degraded", probe.text


def test_a_database_behind_this_harvest_is_a_503_not_a_500(api, conn) -> None:
    """A function this Harvest calls that the database lacks (a binary deployed ahead of its
    migration) is the spec's 503 on every route, with Retry-After: schema_mismatch, the
    server's own line, never a 500."""
    conn.execute("DROP FUNCTION harvest.list_dead_letters")
    behind = api.get("/dead-letters")
    assert behind.status_code == 503, behind.text
    assert error_of(behind)["code"] == "schema_mismatch" and behind.headers["Retry-After"] == "1"


def test_a_role_the_cluster_lacks_is_a_schema_mismatch(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cluster Harvest was never migrated on, SET ROLE harvest_reader fails with 22023 (class
    22), which every route answered as a 400 invalid_argument; it is the 503 schema_mismatch."""
    import asyncio

    import psycopg

    from harvest.core.errors import SchemaMismatch
    from harvest.db import connection

    monkeypatch.setattr(connection, "FACE_ROLES", connection.FACE_ROLES | {"harvest_nobody"})

    async def lower() -> None:
        conn = await psycopg.AsyncConnection.connect(db, autocommit=True)
        try:
            async with connection.set_role(conn, "harvest_nobody"):
                pass
        finally:
            await conn.close()

    with pytest.raises(SchemaMismatch, match=r"role harvest_nobody does not exist.*migrate run") as caught:
        asyncio.run(lower())
    assert caught.value.http_status == 503


def test_a_database_down_at_boot_is_a_503_not_a_dead_server(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import harvest.web.app

    # Each open (the lifespan's, then each request's) waits OPEN_SECS for the pool: three opens
    # at the default 5 s made this the slowest test of the suite.
    monkeypatch.setattr(harvest.web.app, "OPEN_SECS", 0.5)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with api_client(f"postgresql://harvest@127.0.0.1:{port}/harvest?connect_timeout=1") as api:
        assert api.get("/health/live").status_code == 200
        ready = api.get("/health/ready")
        assert ready.status_code == 503 and ready.json()["status"] == "not_ready"
        assert error_of(ready)["code"] == "not_ready" and ready.headers["Retry-After"]
        down = api.get("/workflows")
        assert down.status_code == 503 and down.headers["Retry-After"]
        assert error_of(down)["code"] == "database_unavailable"


class Minimal:
    """An authorizer that grants exactly the scope a route asks for (as a token of admin scope
    whose authorizer answers the asked scope would)."""

    async def authorize(self, request: Request, needed: str) -> Principal:
        return Principal(actor="minimal", scope=needed)  # type: ignore[arg-type]


def test_a_higher_scope_asked_mid_request_runs_the_rest_of_it_in_that_role(db: str) -> None:
    import asyncio

    from harvest.web.routes import Call

    with api_client(db, authorizer=Minimal()) as api:
        first = api.post("/workflows/greet/start", json={"workflow_id": "x"}).json()["execution_id"]
        replaced = api.post(
            "/workflows/greet/start", json={"workflow_id": "x", "conflict_policy": "terminate_existing"}
        )
        assert replaced.status_code == 201 and replaced.json()["execution_id"] != first
        assert api.get(f"/workflows/{first}").json()["execution"]["status"] == "TERMINATED"
        call = Call(None, api.app.state.harvest, Principal(actor="minimal", scope="operate"), None)  # type: ignore[arg-type]
        assert call._sql.pool.role == "harvest_operator"
        asyncio.run(call.require("admin"))
        assert call.principal.scope == "admin" and call._sql.pool.role == "harvest_admin"


def test_outside_dev_the_app_checks_api_tokens_and_serves_the_dashboard_and_streams(
    db: str, tokens: dict[str, str]
) -> None:
    """With no authorizer given, a production app reads API tokens from its database (a
    TokenAuthorizer), and its dashboard (/ui) and event streams share that authorizer."""
    with api_client(db, profile="production") as api:
        assert api.get("/workflows").status_code == 401
        bearer = {"Authorization": f"Bearer {tokens['read']}"}
        assert api.get("/workflows", headers=bearer).status_code == 200
        refused = api.post("/workers/nobody/drain", headers=bearer, json={})
        assert refused.status_code == 403 and error_of(refused)["code"] == "permission_denied"
        assert api.get("/ui/workers", headers=bearer).status_code == 200
        assert api.get("/ui/workers").status_code in (303, 401)  # the sign-in page, or refused
        assert api.get("/stream", headers={"Last-Event-ID": "x", **bearer}).status_code == 400
        assert api.get("/stream").status_code == 401


def test_an_operators_call_is_audited_with_the_tokens_name_and_the_route(
    db: str, tokens: dict[str, str]
) -> None:
    import psycopg

    with api_client(db, profile="production") as api:
        operate = {"Authorization": f"Bearer {tokens['operate']}"}
        run = api.post("/workflows/greet/start", headers=operate, json={}).json()["execution_id"]
        signal = {"signal_name": "nudge", "payload": {"card": "4111"}}
        assert api.post(f"/workflows/{run}/signal", headers=operate, json=signal).status_code == 200
        assert api.post(f"/workflows/{run}/cancel", headers=operate, json={}).status_code == 202
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT operation, target, actor, source, route, details::text FROM harvest.audit_log"
            " WHERE operation LIKE 'workflow.%' ORDER BY id"
        ).fetchall()
        start(conn, "greet", "from-the-library")  # application traffic: the history is its record
        audited = "SELECT count(*) FROM harvest.audit_log WHERE operation LIKE 'workflow.%'"
        assert conn.execute(audited).fetchone()[0] == len(rows)
    # Starts and signals through the API are audited too (functions/audit.sql, _audit_asserted).
    assert [r[:5] for r in rows] == [
        ("workflow.start", run, "t-operate", "api", "POST /workflows/{name}/start"),
        ("workflow.signal", run, "t-operate", "api", "POST /workflows/{execution_id}/signal"),
        ("workflow.cancel", run, "t-operate", "api", "POST /workflows/{execution_id}/cancel"),
    ]
    assert "4111" not in " ".join(r[5] for r in rows)  # no payload in the audit log


def test_a_read_token_runs_preflight_and_every_check_can_read(db: str) -> None:
    """The spec's deploy gate: `harvest preflight` with a read-scoped token (its checks are
    read-only, so the reader role runs all of them: none fails for a permission)."""
    with api_client(db, authorizer=Fixed("read")) as reader:
        answer = reader.get("/admin/preflight")
        assert answer.status_code == 200, answer.text
        checks = answer.json()["checks"]
        assert checks and not [c for c in checks if "permission" in str(c).lower()], checks
        assert reader.get("/admin/config").status_code == 403  # the rest of /admin stays admin


@pytest.mark.parametrize("sharded", [False, True], ids=["one-database", "shards"])
def test_a_web_process_warns_at_boot_of_pending_migrations_and_applies_none(
    db: str, sharded: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Spec 002, Migrations: outside the dev profile (`harvest dev`) "pending migrations are
    reported as warnings and not applied". A web process on a database one migration behind said
    nothing at boot (it warned only when the schema was missing altogether, and never per shard):
    the first sign of a forgotten `harvest migrate run` was a readiness probe stuck at 503."""
    with psycopg.connect(db, autocommit=True) as conn:
        latest, previous = (
            row[0]
            for row in conn.execute(
                "SELECT version FROM harvest.schema_migrations WHERE set_name = 'harvest' "
                "ORDER BY version DESC LIMIT 2"
            )
        )
        conn.execute(
            "DELETE FROM harvest.schema_migrations WHERE set_name = 'harvest' AND version = %s", (latest,)
        )
    env = {"HARVEST_SHARDS__URLS__0": db} if sharded else {}
    caplog.set_level(logging.WARNING, logger="harvest.web")
    with api_client(None if sharded else db, env=env, profile="production", authorizer=Fixed("read")) as api:
        assert api.get("/health/ready").status_code == 503
    warned = [r.getMessage() for r in caplog.records if r.name == "harvest.web"]
    pending = [m for m in warned if f"schema version {previous}" in m]
    assert len(pending) == 1, warned
    assert latest in pending[0] and "harvest migrate run" in pending[0] and "does not apply" in pending[0]
    if sharded:
        assert "shard 0" in pending[0]
    with psycopg.connect(db) as conn:  # warned, not applied
        assert conn.execute("SELECT harvest.schema_version()").fetchone()[0] == previous


def test_a_web_process_on_a_migrated_database_warns_of_no_migration(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="harvest.web")
    with api_client(db) as api:
        assert api.get("/health/ready").status_code == 200
    assert not [r for r in caplog.records if r.name == "harvest.web" and "migrat" in r.getMessage()]


def test_a_chain_whose_current_run_is_gone_is_a_404_naming_its_last_run(api, db: str) -> None:
    """The chain's last run continued as new and its successor was erased by hand (or purged): a
    signal, a cancel and a result by the chain's first id are 404 not_found naming the chain's last
    run and why (they named the erased run, which the caller never asked about, and the signal's
    hinted that the id given might be a workflow id)."""
    with psycopg.connect(db, autocommit=True) as conn:
        runs = [start(conn, "rotating", "entity-gone", queue="goneq")]
        for _ in range(2):
            _decide(conn, "goneq", {"type": "continue_as_new", "input": []})
            runs.append(
                conn.execute(
                    "SELECT output ->> 'continued_as_new' FROM harvest.executions WHERE id = %s", (runs[-1],)
                ).fetchone()[0]
            )
        conn.execute("DELETE FROM harvest.executions WHERE id = %s", (runs[2],))
    said = (
        f"chain ends at run {runs[1]}, which continued as new as run {runs[2]}, and that run does not exist"
    )
    for answer in (
        api.post(f"/workflows/{runs[0]}/signal", json={"signal_name": "poke"}),
        api.post(f"/workflows/{runs[0]}/cancel", json={}),
        api.get(f"/workflows/{runs[0]}/result"),
        api.get(f"/workflows/{runs[0]}/result", params={"wait": "1s"}),
    ):
        assert answer.status_code == 404 and error_of(answer)["code"] == "not_found", answer.text
        message = error_of(answer)["message"]
        assert said in message and "(erased or purged)" in message and "workflow id" not in message, message


@pytest.mark.timeout(60)
def test_ready_answers_503_in_bounded_time_when_the_database_does_not_answer(db: str, monkeypatch) -> None:
    """A database gone silent (a failover, a stopped server) held /health/ready for the pool's
    30-second connect wait, and probes piled up behind it: the probe gives up after
    PROBE_WAIT_SECS and answers 503 with the error shape."""
    from harvest.web.routes import health

    async def silent(state):
        await asyncio.Event().wait()  # the versions' read never answers

    monkeypatch.setattr(health, "_schema", silent)
    monkeypatch.setattr(health, "PROBE_WAIT_SECS", 0.2, raising=False)
    with api_client(db) as api:
        ready = api.get("/health/ready")
        assert ready.status_code == 503 and ready.json()["reason"] == "timeout", ready.text
        assert error_of(ready)["code"] == "not_ready" and "did not answer" in error_of(ready)["message"]
        assert ready.headers["Retry-After"] == "1"
        assert api.get("/health/live").status_code == 200  # liveness reads no database


@pytest.mark.timeout(60)
def test_shard_ready_answers_503_in_bounded_time_when_a_shard_does_not_answer(db: str, monkeypatch) -> None:
    """With readiness.require_shard_readiness, /health/ready waited for the shard report as
    long as its reads took (a frozen shard: without bound); it gives up after PROBE_WAIT_SECS as
    the one-database branch does."""
    from harvest.web.routes import health

    async def silent(state, candidate=None, *, pressure=True):
        await asyncio.Event().wait()  # the shards' health never answers

    monkeypatch.setattr(health, "shard_readiness", silent)
    monkeypatch.setattr(health, "PROBE_WAIT_SECS", 0.2, raising=False)
    with api_client(db, env={"HARVEST_READINESS__REQUIRE_SHARD_READINESS": "true"}) as api:
        for path in ("/health/ready", "/health"):
            ready = api.get(path)
            assert ready.status_code == 503 and ready.json()["reason"] == "timeout", ready.text
            assert error_of(ready)["code"] == "not_ready" and "did not answer" in error_of(ready)["message"]
