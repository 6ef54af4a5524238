"""POST /workflows/cancel, /terminate, /signal: a batch by filter, a bounded step a request on
every shard, continued by next_cursor (harvest.client.batch; docs/http-api.md)."""

from __future__ import annotations

import psycopg
from operator_helpers import start
from web_helpers import api_client


def _runs(conn: psycopg.Connection, name: str, n: int, prefix: str) -> list[str]:
    return [start(conn, name, f"{prefix}-{i}") for i in range(n)]


def _count(dsn: str, sql: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return int(conn.execute(sql).fetchone()[0])


def test_the_route_steps_with_a_cursor_and_refuses_an_empty_filter(db, conn) -> None:
    runs = _runs(conn, "send_digest", 3, "h")
    with api_client(db) as api:
        empty = api.post("/workflows/cancel", json={"state": "RUNNING"})
        assert empty.status_code == 400 and empty.json()["error"]["field"] == "workflow_name"
        bad = api.post("/workflows/cancel", json={"workflow_name": "send_digest", "cursor": "nope"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "cursor"
        preview = api.post(
            "/workflows/terminate", json={"workflow_name": "send_digest", "dry_run": True}
        ).json()
        assert preview["matched"] == 3 and sorted(preview["execution_ids"]) == sorted(runs)
        step = api.post(
            "/workflows/signal", json={"workflow_name": "send_digest", "signal_name": "go", "limit": 2}
        ).json()
        assert step["acted"] == 2 and step["next_cursor"]
        # The cursor goes on under the action and the filter that made it, not another's.
        for action, body in (
            ("signal", {"workflow_name": "other", "signal_name": "go"}),
            ("cancel", {"workflow_name": "send_digest"}),
        ):
            other = api.post(f"/workflows/{action}", json={**body, "cursor": step["next_cursor"]})
            assert other.status_code == 400 and "another action or filter" in other.json()["error"]["message"]
        rest = api.post(
            "/workflows/signal",
            json={"workflow_name": "send_digest", "signal_name": "go", "cursor": step["next_cursor"]},
        ).json()
        assert rest["acted"] == 1 and rest["next_cursor"] is None and rest["batch_id"] == step["batch_id"]
    assert _count(db, "SELECT count(*) FROM harvest.events WHERE event_type = 'SignalReceived'") == 3


def test_a_signal_dry_run_counts_without_a_name_as_the_sql_does(db, conn) -> None:
    """signal_workflows' dry run sends nothing and needs no name; the route used to refuse it."""
    runs = _runs(conn, "send_digest", 2, "n")
    with api_client(db) as api:
        preview = api.post("/workflows/signal", json={"workflow_name": "send_digest", "dry_run": True})
        assert preview.status_code == 200, preview.text
        assert preview.json()["matched"] == 2 and sorted(preview.json()["execution_ids"]) == sorted(runs)
        for name in ({}, {"signal_name": "  "}):
            real = api.post("/workflows/signal", json={"workflow_name": "send_digest", **name})
            assert real.status_code == 400 and real.json()["error"]["field"] == "signal_name", real.text
        spec = api.get("/openapi.json").json()["paths"]["/workflows/signal"]["post"]
        name = spec["requestBody"]["content"]["application/json"]["schema"]["properties"]["signal_name"]
        assert "unless dry_run" in name["description"] and "unless dry_run" in spec["summary"]
    assert _count(db, "SELECT count(*) FROM harvest.events WHERE event_type = 'SignalReceived'") == 0


def test_the_route_needs_the_role_of_its_action(db, conn) -> None:
    _runs(conn, "send_digest", 1, "t")
    tokens = {
        scope: conn.execute(
            "SELECT secret FROM harvest.create_api_token(%s, %s)", (f"t-{scope}", scope)
        ).fetchone()[0]
        for scope in ("read", "operate")
    }
    body = {"workflow_name": "send_digest", "dry_run": True}
    with api_client(db, profile="production") as api:
        read = {"Authorization": f"Bearer {tokens['read']}"}
        operate = {"Authorization": f"Bearer {tokens['operate']}"}
        assert api.post("/workflows/cancel", headers=read, json=body).status_code == 403
        assert api.post("/workflows/cancel", headers=operate, json=body).status_code == 200
        assert api.post("/workflows/terminate", headers=operate, json=body).status_code == 403


def test_on_two_shards_the_route_steps_every_shard_and_acts_on_a_moved_run_where_it_lives(two_shards) -> None:
    from test_workflow_batch import _move, _quiescent

    runs = [_quiescent(two_shards[s], "send_digest", f"h{s}-{i}") for s in (0, 1) for i in range(2)]
    moved = _quiescent(two_shards[0], "send_digest", "h-moved")
    _move(two_shards, moved)
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in two_shards.items()},
    }
    acted, requests, cursor = 0, 0, None
    with api_client(None, env=env) as api:
        while True:
            body = {"workflow_name": "send_digest", "reason": "r", "limit": 1, "cursor": cursor}
            answer = api.post("/workflows/terminate", json=body).json()
            acted += answer["acted"]
            requests += 1
            assert answer["status"] == "complete" and answer["failed"] == 0, answer
            cursor = answer["next_cursor"]
            if cursor is None:
                break
    assert acted == 5 and requests == 3  # shard 0: 2 runs, shard 1: 3 (its live copy of the moved one)
    for run in runs:
        shard = 0 if run in runs[:2] else 1
        assert (
            _count(
                two_shards[shard],
                f"SELECT count(*) FROM harvest.executions WHERE id = '{run}' AND status = 'TERMINATED'",
            )
            == 1
        )
    assert (
        _count(
            two_shards[1],
            f"SELECT count(*) FROM harvest.executions WHERE id = '{moved}' AND status = 'TERMINATED'",
        )
        == 1
    )
    assert (
        _count(
            two_shards[0],
            f"SELECT count(*) FROM harvest.executions WHERE id = '{moved}' AND status = 'MIGRATED'",
        )
        == 1
    )


def test_the_cli_over_http_goes_on_with_the_cursor_until_done(db, conn, monkeypatch) -> None:
    import json

    from click.testing import CliRunner
    from starlette.testclient import TestClient

    from harvest.cli import http as cli_http
    from harvest.cli.main import main
    from harvest.config import load_config
    from harvest.web.app import management_app

    runs = _runs(conn, "send_digest", 3, "c")
    env = {"HARVEST_DATABASE_URL": None, "HARVEST_URL": None, "HARVEST_TOKEN": None, "HARVEST_CONFIG": None}
    app = management_app(dsn=db, config=load_config(env={}), profile="dev")
    with TestClient(app, base_url="http://testserver") as client:
        monkeypatch.setattr(cli_http, "TRANSPORT", client._transport)
        base = ["--base-url", "http://testserver", "workflow"]
        shown = CliRunner().invoke(
            main,
            [*base, "bulk-terminate", "--workflow-name", "send_digest", "--dry-run", "--output", "json"],
            env=env,
        )
        assert shown.exit_code == 0, shown.output
        assert sorted(json.loads(shown.stdout)["execution_ids"]) == sorted(runs)
        refused = CliRunner().invoke(main, [*base, "bulk-cancel", "--state", "RUNNING"], env=env)
        assert refused.exit_code == 2 and "needs a filter" in refused.stderr
        done = CliRunner().invoke(
            main,
            [*base, "bulk-cancel", "--workflow-name", "send_digest", "--batch", "1", "--output", "json"],
            env=env,
        )
        assert done.exit_code == 0, done.output
        summary = json.loads(done.stdout)
    assert (summary["matched"], summary["acted"], summary["failed"]) == (3, 3, 0)
    assert _count(db, "SELECT count(*) FROM harvest.executions WHERE cancel_requested") == 3
    assert (
        _count(
            db,
            "SELECT count(DISTINCT details ->> 'batch_id') FROM harvest.audit_log"
            " WHERE operation = 'workflow.bulk_cancel'",
        )
        == 1
    )


def test_a_cursor_naming_a_shard_this_deployment_does_not_read_is_refused(db, conn) -> None:
    """The route's cursor is the caller's text: a position for a shard the deployment does not
    read is refused as a bad cursor, not run again on the one database once per key."""
    from harvest.client.batch import encode_cursor

    _runs(conn, "send_digest", 1, "k")
    forged = encode_cursor("b-forged", dict.fromkeys(range(3)))
    with api_client(db) as api:
        answer = api.post(
            "/workflows/signal", json={"workflow_name": "send_digest", "signal_name": "go", "cursor": forged}
        )
    assert answer.status_code == 400 and answer.json()["error"]["field"] == "cursor", answer.json()
    assert _count(db, "SELECT count(*) FROM harvest.audit_log WHERE operation = 'workflow.bulk_signal'") == 0


def test_openapi_declares_every_field_the_batch_routes_answer(db, conn) -> None:
    """/openapi.json's answer schema of POST /workflows/{action} names each field a step and a dry
    run answer (dry_run, shard_errors, a dry run's execution_ids too)."""
    _runs(conn, "send_digest", 1, "o")
    with api_client(db) as api:
        schema = api.get("/openapi.json").json()["paths"]["/workflows/cancel"]["post"]["responses"]["200"]
        declared = set(schema["content"]["application/json"]["schema"]["properties"])
        for dry_run in (True, False):
            answer = api.post("/workflows/cancel", json={"workflow_name": "send_digest", "dry_run": dry_run})
            assert answer.status_code == 200
            assert set(answer.json()) <= declared, set(answer.json()) - declared


def test_pause_and_resume_by_filter_need_operate_and_step_with_a_cursor_no_cancel_cursor_goes_on(
    db, conn
) -> None:
    """POST /workflows/pause and /resume: a read token refused (403, nothing paused), an operate
    token allowed; steps continued by next_cursor; a /workflows/cancel cursor refused (400)."""
    runs = _runs(conn, "send_digest", 3, "p")
    tokens = {
        scope: conn.execute(
            "SELECT secret FROM harvest.create_api_token(%s, %s)", (f"p-{scope}", scope)
        ).fetchone()[0]
        for scope in ("read", "operate")
    }
    read = {"Authorization": f"Bearer {tokens['read']}"}
    operate = {"Authorization": f"Bearer {tokens['operate']}"}
    body = {"workflow_name": "send_digest", "reason": "outage", "limit": 2}
    paused = "SELECT count(*) FROM harvest.executions WHERE status = 'PAUSED'"
    with api_client(db, profile="production") as api:
        for action in ("pause", "resume"):
            assert api.post(f"/workflows/{action}", headers=read, json=body).status_code == 403
        assert _count(db, paused) == 0
        cancel = api.post("/workflows/cancel", headers=operate, json={**body, "dry_run": False}).json()
        assert cancel["next_cursor"]
        refused = api.post(
            "/workflows/pause", headers=operate, json={**body, "cursor": cancel["next_cursor"]}
        )
        assert refused.status_code == 400 and "another action or filter" in refused.json()["error"]["message"]
        assert _count(db, paused) == 0
        step = api.post("/workflows/pause", headers=operate, json=body)
        assert step.status_code == 200, step.text
        assert step.json()["acted"] == 2 and step.json()["next_cursor"]
        rest = api.post(
            "/workflows/pause", headers=operate, json={**body, "cursor": step.json()["next_cursor"]}
        )
        assert (rest.json()["acted"], rest.json()["next_cursor"]) == (1, None)
        assert _count(db, paused) == 3
        resumed = api.post("/workflows/resume", headers=operate, json={**body, "limit": 10}).json()
        assert (resumed["acted"], resumed["unchanged"]) == (3, 0)
    assert _count(db, paused) == 0
    assert _count(db, "SELECT count(*) FROM harvest.audit_log WHERE operation = 'workflow.bulk_pause'") == 2
    assert runs
