"""Finding a run by its workflow id over HTTP (GET /workflows/current), and the edges of the API's
input an integrator met: NaN and 1e999 in a body, an empty queue, a trailing slash and the bare
base URL (docs/http-api.md). Before, an HTTP client had no way to find a run by the id it keeps
(the start's idempotency key): no filter, a 404 hint naming a SQL function, a 202 naming nothing."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from web_helpers import api_client

from harvest import Client
from harvest.core.errors import InvalidArgument


def error_of(response) -> dict:
    return response.json()["error"]


def _start(dsn: str, workflow_id: str, name: str = "wf") -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow("
            "%s, '[]', %s, 'q', 'allow_duplicate_failed_only')",
            (name, workflow_id),
        ).fetchone()
    return str(row[0])  # type: ignore[index]


def _terminate(dsn: str, execution_id: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (execution_id,))


def test_the_current_run_of_a_workflow_id_is_found_over_http(db: str) -> None:
    first = _start(db, "order-1")
    _terminate(db, first)
    second = _start(db, "order-1")  # the id reused once the first ended: the RUNNING one is current
    with api_client(db) as api:
        found = api.get("/workflows/current", params={"workflow_id": "order-1"})
        assert found.status_code == 200, found.text
        body = found.json()
        assert (body["execution_id"], body["state"], body["workflow_name"]) == (second, "RUNNING", "wf")
        assert body["execution"]["id"] == second and body["status"] == "complete"
        _terminate(db, second)
        newest = api.get("/workflows/current", params={"workflow_id": "order-1", "workflow_name": "wf"})
        assert newest.json()["execution_id"] == second and newest.json()["state"] == "TERMINATED"
        missing = api.get("/workflows/current", params={"workflow_id": "order-2"})
        assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
        assert "no run has workflow_id order-2" in error_of(missing)["message"]
        other = api.get("/workflows/current", params={"workflow_id": "order-1", "workflow_name": "other"})
        assert other.status_code == 404
        counted = api.get("/workflows/count", params={"workflow_id": "order-1"}).json()
        assert [(r["status"], r["executions"]) for r in counted["counts"]] == [("TERMINATED", 2)]
        none = api.get("/workflows/current")
        assert none.status_code == 400 and error_of(none)["field"] == "workflow_id"
        _start(db, "order-1", "refund")  # two workflows share the id: name the workflow
        shared = api.get("/workflows/current", params={"workflow_id": "order-1"})
        assert shared.status_code == 400 and error_of(shared)["field"] == "workflow_name", shared.text
        doc = api.get("/openapi.json").json()
        assert "/workflows/current" in doc["paths"]


def test_the_current_run_is_found_on_whichever_shard_holds_it(two_shards) -> None:
    """A run on either shard (a pinned start's is not on its id's hashed shard), by a fan-out;
    the same id under two names on two shards is ambiguous, as on one database."""
    on_one = _start(two_shards[1], "cart-9")
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in two_shards.items()},
    }
    with api_client(None, env=env) as api:
        found = api.get("/workflows/current", params={"workflow_id": "cart-9"})
        assert found.status_code == 200, found.text
        assert found.json()["execution_id"] == on_one and found.json()["shard_id"] == 1
        assert found.json()["unavailable_shards"] == []
        started = api.post("/workflows/wf/start", json={"workflow_id": "cart-10", "queue": "q"}).json()
        again = api.get("/workflows/current", params={"workflow_id": "cart-10", "workflow_name": "wf"})
        assert again.json()["execution_id"] == started["execution_id"]
        _start(two_shards[0], "cart-9", "refund")
        shared = api.get("/workflows/current", params={"workflow_id": "cart-9"})
        assert shared.status_code == 400 and error_of(shared)["field"] == "workflow_name", shared.text
        named = api.get("/workflows/current", params={"workflow_id": "cart-9", "workflow_name": "wf"})
        assert named.json()["execution_id"] == on_one
        assert api.get("/workflows/current", params={"workflow_id": "nope"}).status_code == 404
    # The CLI over SQL asks each shard the same way (harvest.shard.fanout.current_run).
    from click.testing import CliRunner

    from harvest.cli.main import main

    found_by_cli = CliRunner().invoke(
        main, ["workflow", "current", "cart-9", "--workflow", "wf", "--output", "json"], env=env
    )
    assert found_by_cli.exit_code == 0, found_by_cli.output
    assert json.loads(found_by_cli.stdout)["id"] == on_one


def test_a_run_not_found_by_its_execution_id_names_the_http_lookup(db: str) -> None:
    """The 404's hint named harvest.get_execution_by_workflow_id(), which no HTTP client can call."""
    run = str(uuid.uuid4())
    with api_client(db) as api:
        error = error_of(api.get(f"/workflows/{run}"))
    assert "get_execution_by_workflow_id" not in error["message"]
    assert f"GET /workflows/current?workflow_id={run} finds a run by it" in error["message"]


@pytest.mark.parametrize(
    ("sent", "field", "said"),
    [
        ('{"input": [NaN]}', "input[0]", "NaN is not JSON"),
        ('{"input": {"a": [1, Infinity]}}', "input.a[1]", "Infinity is not JSON"),
        ('{"input": [1e999]}', "input[0]", "1e999 is past a float's range"),
        ("-Infinity", "body", "-Infinity is not JSON"),
    ],
)
def test_a_number_json_cannot_hold_is_refused_at_the_parser_naming_its_field(
    db: str, sent: str, field: str, said: str
) -> None:
    """NaN and Infinity (not JSON) were taken, and 1e999 read as infinity, then refused as a
    payload_error naming no field."""
    with api_client(db) as api:
        answer = api.post(
            "/workflows/greet/start", content=sent, headers={"Content-Type": "application/json"}
        )
    assert answer.status_code == 400, answer.text
    error = error_of(answer)
    assert (error["code"], error["field"]) == ("invalid_argument", field)
    assert error["message"].startswith(f"{field}: {said}: send a finite number, or a string")


def test_an_empty_queue_is_refused_naming_it_as_the_sql_refuses_it(db: str) -> None:
    """queue "" meant the default queue over HTTP and in Python, while the SQL's start refused it."""
    with api_client(db) as api:
        for path, sent in (
            ("/workflows/greet/start", {"queue": ""}),
            ("/workflows/greet/start", {"queue": "  "}),
            ("/workflows/greet/signal-with-start", {"workflow_id": "w", "signal_name": "s", "queue": ""}),
            ("/workflows/greet/update-with-start", {"workflow_id": "w", "update_name": "u", "queue": ""}),
        ):
            answer = api.post(path, json=sent)
            assert answer.status_code == 400, (path, answer.text)
            assert error_of(answer)["field"] == "queue"
        assert api.get("/workflows").json()["executions"] == []
    with Client(db) as client:
        for queue in ("", " "):
            with pytest.raises(InvalidArgument, match="is empty"):
                client.start_workflow("greet", queue=queue)
    with psycopg.connect(db) as conn, pytest.raises(psycopg.Error, match="task queue is empty"):
        conn.execute("SELECT harvest.start_workflow('greet', '[]', NULL, '')")


def test_a_trailing_slash_is_a_json_404_naming_the_route_and_the_base_url_answers(db: str) -> None:
    """/workflows/ was a 307 with an empty body, and the base URL a 404 "no route"."""
    from starlette.testclient import TestClient

    from harvest.cli.serve import MOUNT, served_app
    from harvest.web.app import management_app

    app = served_app(management_app(dsn=db, profile="dev"))
    with TestClient(app, follow_redirects=False) as client:
        for path in (f"{MOUNT}/workflows/", f"{MOUNT}/health/ready/"):
            answer = client.get(path)
            assert answer.status_code == 404 and answer.headers["content-type"] == "application/json"
            assert error_of(answer) == {
                "code": "not_found",
                "message": f"no route {path}: the route is {path[:-1]}, without the trailing slash",
            }
        unknown = client.get(f"{MOUNT}/nothing/")
        assert error_of(unknown)["message"] == (
            f"no route {MOUNT}/nothing/: see {MOUNT}/openapi.json for the routes"
        )
        for base in (MOUNT, f"{MOUNT}/"):
            index = client.get(base)
            assert index.status_code == 200, (base, index.text)
            assert index.json()["openapi"] == f"{MOUNT}/openapi.json"
        dashboard = client.get(f"{MOUNT}/ui")  # the dashboard keeps its redirect to its own root
        assert dashboard.status_code == 307 and dashboard.headers["location"].endswith(f"{MOUNT}/ui/")
        home = client.get(f"{MOUNT}/ui/")  # (the dashboard's own routing, as before)
        assert home.status_code == 307 and home.headers["location"].startswith(f"{MOUNT}/ui/"), home.headers


def test_a_shard_not_read_is_a_503_unless_a_live_run_was_found(db: str) -> None:
    """The run the shard not read holds may be the current one: an ended run elsewhere, or none,
    is not the answer (a 404 would tell a client to start it again)."""
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        "HARVEST_SHARDS__URLS__0": db,  # shard 1 has no pool here
    }
    live = _start(db, "live-1")
    _terminate(db, _start(db, "ended-1"))
    with api_client(None, env=env) as api:
        found = api.get("/workflows/current", params={"workflow_id": "live-1"})
        assert found.status_code == 200, found.text
        assert found.json()["execution_id"] == live
        assert (found.json()["status"], found.json()["unavailable_shards"]) == ("partial", [1])
        for workflow_id in ("ended-1", "nope"):
            answer = api.get("/workflows/current", params={"workflow_id": workflow_id})
            assert answer.status_code == 503 and answer.headers["Retry-After"], answer.text
            assert "shard(s) 1 could not be read" in error_of(answer)["message"]


def test_a_workflow_id_selects_the_count_and_a_batch_and_an_empty_one_is_a_400(db: str) -> None:
    """The count and the batch actions by filter took no workflow_id (the list did, stop 70), and
    GET /workflows?workflow_id= (empty) listed every run: a 400 naming the field now."""
    runs = [_start(db, "order-7"), _start(db, "order-8"), _start(db, "order-7", "refund")]
    with api_client(db) as api:
        for route in ("/workflows", "/workflows/count"):
            empty = api.get(route, params={"workflow_id": ""})
            assert empty.status_code == 400 and error_of(empty)["field"] == "workflow_id", (route, empty.text)
        counted = api.get("/workflows/count", params={"workflow_id": "order-7", "group_by": "workflow_name"})
        assert {r["workflow_name"]: r["executions"] for r in counted.json()["counts"]} == {
            "wf": 1,
            "refund": 1,
        }
        dry = api.post("/workflows/cancel", json={"workflow_id": "order-7", "dry_run": True}).json()
        assert dry["matched"] == 2 and sorted(dry["execution_ids"]) == sorted([runs[0], runs[2]])
        blank = api.post("/workflows/cancel", json={"workflow_id": ""})
        assert blank.status_code == 400 and error_of(blank)["field"] == "workflow_id", blank.text
        done = api.post("/workflows/terminate", json={"workflow_id": "order-7", "workflow_name": "wf"}).json()
        assert done["acted"] == 1
    with psycopg.connect(db, autocommit=True) as conn:
        states = dict(conn.execute("SELECT id::text, status FROM harvest.executions").fetchall())
    assert [states[r] for r in runs] == ["TERMINATED", "RUNNING", "RUNNING"]
    from click.testing import CliRunner

    from harvest.cli.main import main

    env = {"HARVEST_DATABASE_URL": db}
    count = CliRunner().invoke(
        main, ["workflow", "count", "--workflow-id", "order-7", "--output", "json"], env=env
    )
    assert count.exit_code == 0, count.output
    assert sum(r["executions"] for r in json.loads(count.stdout)["counts"]) == 2
    empty = CliRunner().invoke(main, ["workflow", "count", "--workflow-id", ""], env=env)
    assert empty.exit_code == 2 and "workflow_id is empty" in empty.output
    paused = CliRunner().invoke(
        main, ["workflow", "bulk-pause", "--workflow-id", "order-8", "--output", "json"], env=env
    )
    assert paused.exit_code == 0, paused.output
    assert json.loads(paused.stdout)["acted"] == 1
    with Client(db) as client:
        cancelled = client.act_on_workflows("cancel", workflow_id="order-7")
    assert cancelled["acted"] == 1  # the refund's run: the wf one was terminated above


def test_the_count_by_workflow_id_asks_every_shard(two_shards) -> None:
    _start(two_shards[0], "cart-3")
    _start(two_shards[1], "cart-3", "refund")
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in two_shards.items()},
    }
    with api_client(None, env=env) as api:
        counted = api.get("/workflows/count", params={"workflow_id": "cart-3"}).json()
        assert counted["total"] == 2 and counted["unavailable_shards"] == [], counted
