"""A token made with ``payloads: false`` (docs/security.md, "Tokens that see no payloads") sees
states and metadata through every read of the management API, the event streams and the
dashboard, and never a payload. The proof walks every GET route /openapi.json declares (each
enum parameter through each of its values), every dashboard page, and the routes whose answer
is a payload, against a database whose runs carry a unique secret in each kind of payload:
input, result, signal, update, query answer, failure details, dead letter, schedule input, DAG
conf. A route added later that leaks one fails it."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.types.json import Jsonb
from web_helpers import api_client, authorizer_for, serve

from harvest import ActivityFailure, App, activity, query, update, workflow
from harvest.config import load_config
from harvest.declare.dags import Dag
from harvest.web.app import management_app

# One secret per kind of payload, letters and digits only (no escaping in JSON or HTML hides it).
SECRETS = {
    kind: f"Zq{kind}{uuid.uuid4().hex}"
    for kind in (
        "input",
        "result",
        "signal",
        "updatein",
        "updateout",
        "query",
        "details",
        "dead",
        "schedule",
        "conf",
        "taskfail",
        "heartbeat",
    )
}


@activity
async def np_leak(ctx, secret: str) -> None:
    raise ActivityFailure("Leak", "refused", non_retryable=True, details={"held": secret})


@activity
async def np_step(ctx, conf: dict) -> None:
    return None


@workflow
async def np_vault(ctx, secret: str) -> dict:
    ctx.state.update(held=secret)
    signalled = await ctx.wait_for_signal("go")
    await ctx.wait_for_signal("finish")
    await ctx.drain_admitted_updates()
    return {"kept": SECRETS["result"], "signalled": signalled == SECRETS["signal"]}


@query(workflow="np_vault")
def peek(ctx) -> str:
    return SECRETS["query"]


@update(workflow="np_vault")
async def put(ctx, value: str) -> str:
    return SECRETS["updateout"] if value == SECRETS["updatein"] else "?"


@workflow
async def np_fails(ctx) -> None:
    raise ActivityFailure(
        "Refused", "the run gives up", non_retryable=True, details={"why": SECRETS["details"]}
    )


@workflow(activities=[np_leak])
async def np_parks(ctx) -> None:
    await ctx.execute_activity(np_leak, SECRETS["dead"])


NP_DAG = Dag("np_dag")
NP_DAG.task("only", np_step)
APP = App(
    workflows=[np_vault, np_fails, np_parks],
    activities=[np_leak, np_step],
    queries=[peek],
    updates=[put],
    dags=[NP_DAG],
)


def _until(check, what: str, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not reached: {what}"
        time.sleep(0.1)


@pytest.fixture
def secret_world(db: str, start_worker) -> dict[str, Any]:
    """Runs, a dead letter, a schedule and a DAG run, each payload holding its secret; their ids."""
    start_worker(APP)
    with api_client(db, app=APP) as api:
        vault = api.post("/workflows/np_vault/start", json={"input": SECRETS["input"]}).json()["execution_id"]
        _until(
            lambda: api.post(f"/workflows/{vault}/query", json={"query_name": "peek"}).status_code == 200,
            "the vault's first task",
        )
        sent = api.post(
            f"/workflows/{vault}/signal", json={"signal_name": "go", "payload": SECRETS["signal"]}
        )
        assert sent.status_code == 200, sent.text
        updated = api.post(
            f"/workflows/{vault}/update", json={"update_name": "put", "input": SECRETS["updatein"]}
        )
        assert updated.json()["result"] == SECRETS["updateout"], updated.text
        api.post(f"/workflows/{vault}/signal", json={"signal_name": "finish"})
        done = api.get(f"/workflows/{vault}/result", params={"wait": "30s"}).json()
        assert done["output"]["kept"] == SECRETS["result"], done
        fails = api.post("/workflows/np_fails/start", json={}).json()["execution_id"]
        failed = api.get(f"/workflows/{fails}/result", params={"wait": "30s"}).json()
        assert SECRETS["details"] in str(failed), failed
        parks = api.post("/workflows/np_parks/start", json={}).json()["execution_id"]
        dead = _until(lambda: api.get("/dead-letters").json()["dead_letters"], "the dead letter")
        assert SECRETS["dead"] in str(api.get(f"/dead-letters/{dead[0]['id']}").json())
        made = api.post(
            "/admin/schedules/workflow",
            json={
                "name": "np-schedule",
                "every": "1h",
                "workflow_name": "np_vault",
                "input": SECRETS["schedule"],
                "paused": True,
            },
        )
        assert made.status_code == 201, made.text
        dag_run = api.post("/dags/np_dag/trigger", json={"conf": {"c": SECRETS["conf"]}})
        assert dag_run.status_code in (200, 201), dag_run.text
        dag_run_id = dag_run.json()["execution_id"]
        workers = api.get("/workers").json()["workers"]
    stuck = _stuck_run(db)
    return {
        "execution_id": vault,
        "failed_id": fails,
        "parked_id": parks,
        "stuck_id": stuck,
        "dag_run_id": dag_run_id,
        "workflow_name": "np_vault",
        "name": "np-schedule",
        "dead_letter_id": dead[0]["id"],
        "worker_id": workers[0]["worker_id"],
        "activity_name": "np_leak",
        "dag_name": "np_dag",
        "shard_id": 0,
        "from": "24h",  # (/admin/usage's window)
    }


def _stuck_run(db: str) -> str:
    """A run on a queue no worker polls, its workflow task failing (the failure's details and
    traceback hold a secret) and an activity running whose last heartbeat's details hold
    another: what its stack shows (written in SQL, as a worker would have)."""
    failure = {
        "error_type": "Stuck",
        "message": "the workflow task fails",
        "details": {"why": SECRETS["taskfail"]},
        "traceback": f"Traceback (most recent call last):\n  {SECRETS['taskfail']}\nStuck",
        "failing_since": "2030-01-02T03:04:05+00:00",
    }
    with psycopg.connect(db, autocommit=True) as conn:
        (stuck,) = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('np_stuck', '[]', 'np-stuck', 'np_nobody')"
        ).fetchone()
        conn.execute(
            "UPDATE harvest.tasks SET last_failure = %s, attempt = 2"
            " WHERE execution_id = %s AND kind = 'workflow'",
            (Jsonb(failure), stuck),
        )
        conn.execute(
            "INSERT INTO harvest.tasks (execution_id, kind, queue, status, due_at, scheduled_at, seq,"
            " activity_name, attempt, started_at, heartbeat_at, heartbeat_details)"
            " VALUES (%s, 'activity', 'np_nobody', 'running', now(), now(), 1, 'np_crawl', 1,"
            " now(), now(), %s)",
            (stuck, Jsonb({"page": SECRETS["heartbeat"]})),
        )
    return str(stuck)


def _token(db: str, name: str, scope: str, payloads: bool) -> str:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT secret FROM harvest.create_api_token(%s, %s, p_payloads => %s)", (name, scope, payloads)
        ).fetchone()[0]


def _leaked(response_text: str, headers: httpx.Headers) -> list[str]:
    said = response_text + "\n" + "\n".join(f"{k}: {v}" for k, v in headers.items())
    return [kind for kind, secret in SECRETS.items() if secret in said]


async def _read_stream(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], events: int
) -> tuple[int, str, httpx.Headers]:
    """A stream's opening and its first ``events`` events (an error answer whole)."""
    lines: list[str] = []

    async def read() -> tuple[int, httpx.Headers]:
        async with client.stream("GET", url, headers=headers) as response:
            if response.status_code != 200:
                lines.append((await response.aread()).decode())
                return response.status_code, response.headers
            seen = 0
            async for line in response.aiter_lines():
                lines.append(line)
                seen += line.startswith("data:")
                if seen >= events:
                    break
            return response.status_code, response.headers

    try:  # (a bound on a read that would otherwise wait for events forever, not a timing check)
        status, got = await asyncio.wait_for(read(), 20.0)
    except TimeoutError:
        raise AssertionError(f"{url} sent fewer than {events} events: {lines}") from None
    return status, "\n".join(lines), got


def _events(db: str, execution_id: str | None) -> int:
    """How many events a stream of one run (or of every run) has to send at least."""
    with psycopg.connect(db) as conn:
        if execution_id is None:
            return conn.execute("SELECT count(*) FROM harvest.events").fetchone()[0]
        return conn.execute(
            "SELECT count(*) FROM harvest.events WHERE execution_id = %s", (execution_id,)
        ).fetchone()[0]


def _fill(path: str, ids: dict[str, Any]) -> str:
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: str(ids[m.group(1)]), path)


def _variants(operation: dict[str, Any], ids: dict[str, Any]) -> list[dict[str, Any]]:
    """The query parameters a walk sends a route: none, then each enum through each value (a
    required parameter from ``ids`` each time)."""
    base: dict[str, Any] = {}
    enums: list[tuple[str, list[str]]] = []
    for param in operation.get("parameters", []):
        if param["in"] != "query":
            continue
        schema = param.get("schema", {})
        if param.get("required"):
            base[param["name"]] = ids.get(param["name"], schema.get("enum", ["x"])[0])
        if "enum" in schema:
            enums.append((param["name"], schema["enum"]))
        elif schema.get("type") == "array" and "enum" in schema.get("items", {}):
            enums.append((param["name"], schema["items"]["enum"]))
    out = [base]
    out += [{**base, name: value} for name, values in enums for value in values]
    return out


async def _walk(db: str, token: str, ids: dict[str, Any]) -> dict[str, tuple[int, list[str]]]:
    """Every read the token can make: {request: (status, the secrets its answer said)}."""
    authorizer = authorizer_for(db)
    app = management_app(dsn=db, config=load_config(env={}), authorizer=authorizer, app=APP)
    answers: dict[str, tuple[int, list[str]]] = {}
    auth = {"Authorization": f"Bearer {token}"}
    try:
        async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            doc = (await client.get("/openapi.json", headers=auth)).json()
            for template, operations in doc["paths"].items():
                for method, operation in operations.items():
                    if method != "get":
                        continue
                    run = ids["dag_run_id"] if template.startswith("/dag-runs/") else ids["execution_id"]
                    path = _fill(template, {**ids, "execution_id": run})
                    media = list(operation["responses"].get("200", {}).get("content", {}))
                    if media == ["text/event-stream"]:
                        # One run's stream from its first event; every event's from the first.
                        one = "{execution_id}" in template
                        resume = {} if one else {"Last-Event-ID": "0"}
                        count = _events(db, ids["execution_id"] if one else None)
                        status, text, got = await _read_stream(client, path, {**auth, **resume}, count)
                        answers[f"GET {path} {resume}"] = (status, _leaked(text, got))
                        continue
                    for params in _variants(operation, ids):
                        response = await client.get(path, params=params, headers=auth)
                        answers[f"GET {path} {params}"] = (
                            response.status_code,
                            _leaked(response.text, response.headers),
                        )
            # The runs' other pages: the failed run and the parked one, each route of a run.
            for template in [p for p in doc["paths"] if p.startswith("/workflows/{execution_id}")]:
                if "get" not in doc["paths"][template] or template.endswith("/events/stream"):
                    continue
                for other in ("failed_id", "parked_id", "dag_run_id", "stuck_id"):
                    path = _fill(template, {**ids, "execution_id": ids[other]})
                    for params in _variants(doc["paths"][template]["get"], ids):
                        response = await client.get(path, params=params, headers=auth)
                        answers[f"GET {path} {params}"] = (
                            response.status_code,
                            _leaked(response.text, response.headers),
                        )
            # The routes whose answer is a payload (a query's, an update's).
            vault = ids["execution_id"]
            for path, body in (
                (f"/workflows/{vault}/query", {"query_name": "peek"}),
                (f"/workflows/{vault}/update", {"update_name": "put", "input": SECRETS["updatein"]}),
            ):
                response = await client.post(path, json=body, headers=auth)
                answers[f"POST {path}"] = (response.status_code, _leaked(response.text, response.headers))
            # The dashboard's pages, and the run's page asked for its payloads in full.
            ui_paths = [
                "/ui/",
                "/ui/workflows",
                f"/ui/workflows/{vault}",
                f"/ui/workflows/{vault}?payloads=full",
                f"/ui/workflows/{ids['failed_id']}?payloads=full",
                f"/ui/workflows/{ids['parked_id']}?payloads=full",
                f"/ui/workflows/{ids['stuck_id']}",
                f"/ui/workflows/{ids['stuck_id']}?payloads=full",
                "/ui/schedules",
                "/ui/schedules/0/np-schedule",
                "/ui/dags",
                "/ui/dags/np_dag",
                f"/ui/dags/np_dag/runs/{ids['dag_run_id']}",
                "/ui/dead-letters",
                "/ui/workers",
                f"/ui/workers/{ids['worker_id']}",
                "/ui/concurrency",
                "/ui/shards",
            ]
            for path in ui_paths:
                response = await client.get(path, headers=auth)
                answers[f"GET {path}"] = (response.status_code, _leaked(response.text, response.headers))
    finally:
        await app.state.harvest.close()
        await app.state.streams.aclose()
        await authorizer.aclose()
    return answers


def test_a_token_without_payloads_reads_every_route_and_sees_no_payload(db: str, secret_world) -> None:
    token = _token(db, "status-page", "admin", payloads=False)
    answers = asyncio.run(_walk(db, token, secret_world))
    leaks = {request: kinds for request, (_, kinds) in answers.items() if kinds}
    assert not leaks, "\n".join(f"{request}: {kinds}" for request, kinds in leaks.items())
    statuses = {request: status for request, (status, _) in answers.items()}
    # It still reads: the runs, their histories, the streams and the pages answer.
    vault = secret_world["execution_id"]
    assert statuses[f"GET /workflows/{vault} {{}}"] == 200
    assert statuses[f"GET /workflows/{vault}/result {{}}"] == 200
    assert statuses[f"GET /workflows/{vault}/history {{}}"] == 200
    assert statuses[f"GET /workflows/{vault}/events/stream {{}}"] == 200
    assert statuses[f"GET /ui/workflows/{vault}"] == 200
    stuck = secret_world["stuck_id"]  # (its failing task's and heartbeat's details on its page)
    assert statuses[f"GET /ui/workflows/{stuck}"] == statuses[f"GET /workflows/{stuck}/stack {{}}"] == 200
    # What only a payload answers is refused, naming the token's payloads: false.
    assert statuses[f"POST /workflows/{vault}/query"] == 403
    assert statuses[f"POST /workflows/{vault}/update"] == 403
    assert statuses[f"GET /workflows/{vault}/history {{'payload_policy': 'full'}}"] == 403
    assert (
        sum(1 for request in answers if request.startswith("GET /") and not request.startswith("GET /ui"))
        > 60
    )


def test_a_token_with_payloads_still_sees_them(db: str, secret_world) -> None:
    """The walk itself finds the secrets when the token may see payloads (so the test above
    would fail on a route that answers them)."""
    token = _token(db, "support", "admin", payloads=True)
    answers = asyncio.run(_walk(db, token, secret_world))
    seen = {kind for _, kinds in answers.values() for kind in kinds}
    assert seen == set(SECRETS), set(SECRETS) - seen


def test_tokens_that_see_no_payloads_are_made_by_the_cli_and_the_api_and_listed(
    db: str, tokens: dict
) -> None:
    from operator_helpers import harvest

    made = harvest(db, "token", "create", "dash", "--scope", "read", "--no-payloads", "--output", "json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["payloads"] is False
    authorizer = authorizer_for(db)
    app = management_app(dsn=db, config=load_config(env={}), authorizer=authorizer)

    async def main() -> dict[str, Any]:
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            created = await client.post(
                "/admin/tokens", json={"name": "board", "scope": "operate", "payloads": False}, headers=admin
            )
            normal = await client.post(
                "/admin/tokens", json={"name": "plain", "scope": "operate"}, headers=admin
            )
            listed = await client.get("/admin/tokens", headers=admin)
            board = {"Authorization": f"Bearer {created.json()['secret']}"}
            started = await client.post(
                "/workflows/np_vault/start", json={"input": SECRETS["input"]}, headers=board
            )
            run = started.json()["execution_id"]
            return {
                "created": created.json(),
                "normal": normal.json(),
                "listed": {t["name"]: t["payloads"] for t in listed.json()["tokens"]},
                "started": started,
                "read": (await client.get(f"/workflows/{run}", headers=board)).json(),
                "query": await client.post(
                    f"/workflows/{run}/query", json={"query_name": "peek"}, headers=board
                ),
            }

    async def closed() -> dict[str, Any]:
        try:
            return await main()
        finally:
            await app.state.harvest.close()
            await authorizer.aclose()

    answers = asyncio.run(closed())
    assert answers["created"]["payloads"] is False and answers["normal"]["payloads"] is True
    assert answers["listed"] == {
        "board": False,
        "dash": False,
        "plain": True,
        "t-admin": True,
        "t-operate": True,
        "t-read": True,
    }
    listed = harvest(db, "token", "list", "--output", "json")
    assert {t["name"]: t["payloads"] for t in json.loads(listed.stdout)["tokens"]}["dash"] is False
    # It writes what its scope lets it (its own input goes in), and reads it back redacted.
    assert answers["started"].status_code == 201, answers["started"].text
    assert SECRETS["input"] not in answers["started"].text
    read = answers["read"]
    assert read["redacted"] is True and read["execution"]["status"] == "RUNNING"
    assert read["execution"]["input"]["redacted"] is True and SECRETS["input"] not in json.dumps(read)
    refused = answers["query"]
    assert refused.status_code == 403
    assert refused.json()["error"] == {
        "code": "permission_denied",
        "message": "token 'board' was made with payloads: false: it sees no payload, and POST "
        "/workflows/{execution_id}/query answers only a payload; use a token made without --no-payloads",
        "needs": "payloads",
    }


def test_a_route_that_answers_past_the_filter_is_refused_to_a_token_without_payloads(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: a route added later that streams (or otherwise answers other than JSON) is
    refused to such a token unless it declares its answer redacted or payload free."""
    from starlette.responses import Response

    from harvest.web import app as web_app
    from harvest.web.principal import Principal
    from harvest.web.routes import Endpoint

    async def leak(call, args, data) -> Response:
        return Response(SECRETS["input"], media_type="text/plain")

    declared = web_app.endpoints
    monkeypatch.setattr(
        web_app, "endpoints", lambda: [*declared(), Endpoint("GET", "/leak", "read", leak, "A leak.")]
    )

    class Fixed:
        def __init__(self, payloads: bool):
            self.payloads = payloads

        async def authorize(self, request, needed) -> Principal:
            return Principal(actor="fixed", scope="read", payloads=self.payloads)

    for payloads, status in ((True, 200), (False, 403)):
        app = management_app(dsn=db, config=load_config(env={}), authorizer=Fixed(payloads))

        async def get(app=app) -> httpx.Response:
            try:
                async with httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://t"
                ) as client:
                    return await client.get("/leak")
            finally:
                await app.state.harvest.close()

        answer = asyncio.run(get())
        assert answer.status_code == status, answer.text
        assert (SECRETS["input"] in answer.text) is payloads


def test_a_token_without_payloads_sees_each_payloads_size_as_a_token_with_them_does(db: str) -> None:
    """A history page's redacted payload says its own size to a token made with payloads:
    false, as to one that sees payloads and asks for the redacted page: the route redacted the
    page and the filter redacted its answer again, so each payload read as the size of its
    redaction marker (`{"redacted": true, "bytes": 169}` said 32 bytes)."""
    with api_client(db, app=APP, authorizer=authorizer_for(db)) as api:
        full = {"Authorization": f"Bearer {_token(db, 'sizes-full', 'admin', payloads=True)}"}
        none = {"Authorization": f"Bearer {_token(db, 'sizes-none', 'read', payloads=False)}"}
        started = api.post("/workflows/np_vault/start", json={"input": "x" * 500}, headers=full)
        assert started.status_code in (200, 201), started.text
        run = started.json()["execution_id"]
        seen = {}
        for name, auth in (("full", full), ("none", none)):
            page = api.get(f"/workflows/{run}/history", headers=auth)
            assert page.status_code == 200, page.text
            seen[name] = page.json()["events"][0]["event_data"]["input"]
    assert seen["full"] == {"redacted": True, "bytes": len(json.dumps(["x" * 500]))}, seen
    assert seen["none"] == seen["full"], seen


def test_a_refusal_for_a_token_without_payloads_says_so_not_that_a_scope_is_missing(db: str) -> None:
    """`harvest workflow history --full` over HTTP with a read token made with --no-payloads
    said `this call needs a token with the read scope`, which it has: the API's 403 now says
    `"needs": "payloads"`, and the CLI gives the API's words alone."""
    from harvest.cli.http import error_from_answer

    with api_client(db, app=APP, authorizer=authorizer_for(db)) as api:
        full = {"Authorization": f"Bearer {_token(db, 'refused-full', 'admin', payloads=True)}"}
        none = {"Authorization": f"Bearer {_token(db, 'refused-none', 'read', payloads=False)}"}
        started = api.post("/workflows/np_vault/start", json={"input": "x"}, headers=full)
        run = started.json()["execution_id"]
        refused = api.get(f"/workflows/{run}/history", params={"payload_policy": "full"}, headers=none)
        scoped = api.post(f"/workflows/{run}/terminate", json={"reason": "r"}, headers=none)
    assert refused.status_code == 403 and refused.json()["error"]["needs"] == "payloads", refused.text
    said = str(error_from_answer(403, refused.json(), "read"))
    assert "use a token made without --no-payloads (HTTP 403)" in said and "scope" not in said, said
    # A scope too low still gets the scope's hint.
    assert scoped.status_code == 403 and "needs" not in scoped.json()["error"], scoped.text
    assert "needs a token with the operate scope" in str(error_from_answer(403, scoped.json(), "operate"))
    # The OpenAPI document's error schema names the key (and a 400's field), as http-api.md does.
    from harvest.web.openapi import ERROR_SCHEMA

    keys = ERROR_SCHEMA["properties"]["error"]["properties"]
    assert keys["needs"]["enum"] == ["payloads"] and "field" in keys, keys
