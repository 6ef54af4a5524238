"""POST /workflows/reset: the batch reset by filter over HTTP (admin), its body's reset_to and
signal_reapply, a reason required unless dry_run, a run reset once (docs/http-api.md,
"Acting on many runs"; docs/operations.md, "Resetting many runs")."""

from __future__ import annotations

from operator_helpers import failed_run, start
from web_helpers import api_client


def test_the_route_resets_the_failed_runs_once_and_needs_admin(db, conn) -> None:
    failed = [failed_run(conn, "ship_order", f"o-{i}") for i in range(3)]
    start(conn, "ship_order", "live-1")  # RUNNING: not selected by default
    operate = conn.execute("SELECT secret FROM harvest.create_api_token('t-op', 'operate')").fetchone()[0]
    body = {"workflow_name": "ship_order", "reason": "incident 72"}
    with api_client(db, profile="production") as api:
        denied = api.post("/workflows/reset", headers={"Authorization": f"Bearer {operate}"}, json=body)
        assert denied.status_code == 403
    with api_client(db) as api:
        no_reason = api.post("/workflows/reset", json={"workflow_name": "ship_order"})
        assert no_reason.status_code == 400 and no_reason.json()["error"]["field"] == "reason"
        bad = api.post("/workflows/reset", json={**body, "reset_to": "latest"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "reset_to", bad.text
        preview = api.post("/workflows/reset", json={"workflow_name": "ship_order", "dry_run": True}).json()
        assert preview["matched"] == 3 and sorted(preview["execution_ids"]) == sorted(failed)
        step = api.post("/workflows/reset", json={**body, "limit": 2}).json()
        assert (step["action"], step["acted"], step["failed"]) == ("reset", 2, 0) and step["next_cursor"]
        rest = api.post("/workflows/reset", json={**body, "cursor": step["next_cursor"]}).json()
        assert rest["acted"] == 1 and rest["next_cursor"] is None
        again = api.post("/workflows/reset", json={**body, "batch_id": step["batch_id"]}).json()
        assert (again["acted"], again["unchanged"]) == (0, 3)
        spec = api.get("/openapi.json").json()["paths"]["/workflows/reset"]["post"]
        props = spec["requestBody"]["content"]["application/json"]["schema"]["properties"]
        assert props["reset_to"]["enum"] == ["before_failure", "first_workflow_task"]
    statuses = conn.execute(
        "SELECT status, count(*) FROM harvest.executions GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert statuses == [("FAILED", 3), ("RUNNING", 4)]  # each failed run and its fork, the live one
    forks = conn.execute(
        "SELECT count(*) FROM harvest.events WHERE event_type = 'WorkflowResetFork'"
        " AND event_data ->> 'batch_id' = %s",
        (step["batch_id"],),
    ).fetchone()[0]
    assert forks == 3
