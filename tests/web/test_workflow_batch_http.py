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
        rest = api.post(
            "/workflows/signal",
            json={"workflow_name": "send_digest", "signal_name": "go", "cursor": step["next_cursor"]},
        ).json()
        assert rest["acted"] == 1 and rest["next_cursor"] is None and rest["batch_id"] == step["batch_id"]
    assert _count(db, "SELECT count(*) FROM harvest.events WHERE event_type = 'SignalReceived'") == 3


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
