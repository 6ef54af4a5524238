"""POST /workflows/reset: the batch reset by filter over HTTP (admin) of the RUNNING runs a bad
deploy's workflow code wrote to, its body's reset_to, before and signal_reapply, a 400 naming
the field for a missing reason or time, a run reset once (docs/http-api.md, "Acting on many
runs"; docs/operations.md, "Resetting many runs")."""

from __future__ import annotations

from operator_helpers import failed_run, runs_across_a_deploy
from web_helpers import api_client


def test_the_route_resets_the_running_runs_to_before_the_deploy_once_and_needs_admin(db, conn) -> None:
    runs, deploy = runs_across_a_deploy(conn, "ship_order", [f"o-{i}" for i in range(3)])
    failed = failed_run(conn, "ship_order", "f-1")  # FAILED: terminal, never selected
    operate = conn.execute("SELECT secret FROM harvest.create_api_token('t-op', 'operate')").fetchone()[0]
    body = {"workflow_name": "ship_order", "reason": "incident 72", "before": deploy.isoformat()}
    with api_client(db, profile="production") as api:
        denied = api.post("/workflows/reset", headers={"Authorization": f"Bearer {operate}"}, json=body)
        assert denied.status_code == 403
    with api_client(db) as api:
        for bad, field in (
            ({"reason": None}, "reason"),
            ({"before": None}, "before"),
            ({"reset_to": "first_workflow_task"}, "before"),
            ({"reset_to": "before_failure"}, "reset_to"),
            ({"state": "FAILED"}, None),
        ):
            refused = api.post("/workflows/reset", json={k: v for k, v in {**body, **bad}.items() if v})
            assert refused.status_code == 400, (bad, refused.text)
            assert field is None or refused.json()["error"]["field"] == field, (bad, refused.text)
        preview = api.post("/workflows/reset", json={**body, "reason": None, "dry_run": True}).json()
        assert preview["matched"] == 3 and sorted(preview["execution_ids"]) == sorted(runs)
        assert sorted(p["execution_id"] for p in preview["points"]) == sorted(runs)
        assert all(
            p["event_id"] and p["at"] and p["why"] is None and p["shard_id"] == 0 for p in preview["points"]
        )
        step = api.post("/workflows/reset", json={**body, "workflow_id": "o-0"}).json()
        assert (step["action"], step["acted"], step["failed"]) == ("reset", 1, 0)
        rest = api.post("/workflows/reset", json={**body, "batch_id": step["batch_id"]}).json()
        assert (rest["acted"], rest["unchanged"]) == (2, 1)  # (o-0's fork: this batch's)
        assert rest["forks_kept"] == 0  # (this batch's own fork: not a fork kept at its boundary)
        # A new batch (no batch id): each fork's point is its fork boundary again, kept, and said.
        anew = api.post("/workflows/reset", json=body).json()
        assert (anew["acted"], anew["unchanged"], anew["forks_kept"]) == (0, 3, 3), anew
        assert [r["forks_kept"] for r in anew["shards"]] == [3]
        cancel = api.post("/workflows/cancel", json={"workflow_name": "none", "reason": "x"}).json()
        assert "forks_kept" not in cancel and all("forks_kept" not in r for r in cancel["shards"])
        spec = api.get("/openapi.json").json()["paths"]["/workflows/reset"]["post"]
        props = spec["requestBody"]["content"]["application/json"]["schema"]["properties"]
        assert props["reset_to"]["enum"] == ["before_time", "first_workflow_task"]
        assert props["before"]["format"] == "date-time"
        answer = spec["responses"]["200"]["content"]["application/json"]["schema"]
        assert answer["properties"]["forks_kept"]["type"] == "integer"
        assert answer["properties"]["points"]["items"]["properties"]["event_id"]["type"] == [
            "integer",
            "null",
        ]
        assert "forks_kept" not in answer["required"]  # (a reset's only)
    statuses = conn.execute(
        "SELECT status, count(*) FROM harvest.executions GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert statuses == [("FAILED", 1), ("RUNNING", 3), ("TERMINATED", 3)]  # each source and its fork
    assert (
        conn.execute("SELECT status FROM harvest.executions WHERE id = %s", (failed,)).fetchone()[0]
        == "FAILED"
    )
    forks = conn.execute(
        "SELECT count(*) FROM harvest.events WHERE event_type = 'WorkflowResetFork'"
        " AND event_data ->> 'batch_id' = %s",
        (step["batch_id"],),
    ).fetchone()[0]
    assert forks == 3
