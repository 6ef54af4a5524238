"""The runs whose workflow task is failing, found on every face of the workflow list (harvest.list_executions'
and count_executions' p_failing, GET /workflows?failing=true, `harvest workflow list/count --failing`, the
fan-out reads) and marked with the failing task: its error type, attempt and since when. Before, such a run
(a non-determinism error after a deploy, a WorkflowCallError, an unknown workflow) stayed RUNNING, retried
every 5 s, and only a raw query on harvest.tasks found it."""

from __future__ import annotations

import asyncio
import json
import time

import psycopg
from served_cli import over, served, transports
from web_helpers import api_client

from harvest import App, Client, workflow
from harvest.db.sqlapi import SqlApi
from harvest.shard.fanout import ShardReads


@workflow
async def stalls(ctx) -> str:
    await asyncio.sleep(0.01)  # not replayable: IllegalWorkflowOperation fails each workflow task
    return "never"


@workflow
async def waits(ctx) -> bool:
    return await ctx.wait_for_signal("go")


def _one_failing_run(db: str, start_worker) -> tuple[str, str]:
    """A run whose workflow task fails on a real worker, and a healthy run beside it."""
    start_worker(App(workflows=[stalls, waits]))
    with psycopg.connect(db, autocommit=True) as conn:
        api = SqlApi(conn)
        bad, good = (
            str(
                conn.execute(
                    "SELECT execution_id FROM harvest.start_workflow(%s, '[]', %s, 'default')", (name, wid)
                ).fetchone()[0]
            )
            for name, wid in (("stalls", "bad"), ("waits", "good"))
        )
        deadline = time.monotonic() + 20
        while not api.list_executions(failing=True):
            assert time.monotonic() < deadline, "the workflow task never failed"
            time.sleep(0.05)
    return bad, good


def test_a_failing_run_is_listed_counted_and_marked_over_sql(db: str, start_worker) -> None:
    bad, good = _one_failing_run(db, start_worker)
    with psycopg.connect(db, autocommit=True) as conn:
        api = SqlApi(conn)
        (row,) = api.list_executions(failing=True)
        assert str(row["execution_id"]) == bad and row["status"] == "RUNNING"
        assert row["task_error_type"] == "IllegalWorkflowOperation"
        assert row["task_attempt"] >= 1 and row["task_failing_since"] is not None
        others = {str(r["execution_id"]): r for r in api.list_executions(failing=False)}
        assert bad not in others and good in others and others[good]["task_error_type"] is None
        # Without the filter the run is marked all the same.
        marked = {str(r["execution_id"]): r["task_error_type"] for r in api.list_executions()}
        assert marked == {bad: "IllegalWorkflowOperation", good: None}
        assert [(r["status"], r["executions"]) for r in api.count_executions(failing=True)] == [
            ("RUNNING", 1)
        ]
        # The fan-out reads (the client's and the CLI's over SQL) pass it to each shard.
        merged = ShardReads({0: api}).list_workflows(failing=True)
        assert [str(r["execution_id"]) for r in merged.value] == [bad]
        # A batch by filter selects the same runs (the list's filter code).
        step = api.act_on_workflows("cancel", failing=True, dry_run=True)
        assert (step["matched"], [str(i) for i in step["execution_ids"]]) == (1, [bad])
    with Client(db) as client:
        planned = client.terminate_workflows(failing=True, dry_run=True)
        assert planned["matched"] == 1, planned
        assert client.terminate_workflows(failing=False, workflow_name="stalls", dry_run=True)["matched"] == 0


def test_a_failing_run_is_found_over_http_and_the_cli(db: str, start_worker, monkeypatch) -> None:
    bad, _good = _one_failing_run(db, start_worker)
    with api_client(db) as http:
        listed = http.get("/workflows", params={"failing": "true"})
        assert listed.status_code == 200, listed.text
        (row,) = listed.json()["executions"]
        assert row["execution_id"] == bad and row["task_error_type"] == "IllegalWorkflowOperation"
        assert row["task_attempt"] >= 1 and row["task_failing_since"]
        counted = http.get("/workflows/count", params={"failing": "true"}).json()
        assert counted["total"] == 1, counted
        refused = http.get("/workflows", params={"failing": "sometimes"})
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "failing", refused.text
        doc = http.get("/openapi.json").json()
        assert "failing" in [p["name"] for p in doc["paths"]["/workflows"]["get"]["parameters"]]
    with served(db, monkeypatch):
        done = transports(db, "workflow", "list", "--failing", "--output", "json")
        table = transports(db, "workflow", "list")
        count = transports(db, "workflow", "count", "--failing", "--output", "json")
    for how, result in done.items():
        assert result.exit_code == 0, (how, result.output)
        assert [r["execution_id"] for r in json.loads(result.stdout)["executions"]] == [bad], how
    for how, result in table.items():
        assert result.exit_code == 0 and "IllegalWorkflowOperation (attempt" in result.output, (
            how,
            result.output,
        )
    for how, result in count.items():
        assert result.exit_code == 0, (how, result.output)
        assert [c["executions"] for c in json.loads(result.stdout)["counts"]] == [1], how
    with served(db, monkeypatch):
        dry = transports(db, "workflow", "bulk-cancel", "--failing", "--dry-run", "--output", "json")
    for how, result in dry.items():
        assert result.exit_code == 0 and json.loads(result.stdout)["matched"] == 1, (how, result.output)
    ended = over("sql", db, "workflow", "bulk-terminate", "--failing", "--yes", "--reason", "bad deploy")
    assert ended.exit_code == 0, ended.output
    with psycopg.connect(db) as conn:
        statuses = dict(
            conn.execute(
                "SELECT workflow_id, status FROM harvest.executions WHERE workflow_id IN ('bad', 'good')"
            )
        )
    assert statuses == {"bad": "TERMINATED", "good": "RUNNING"}


def test_the_dashboard_filters_and_marks_a_failing_run(db: str, start_worker) -> None:
    bad, good = _one_failing_run(db, start_worker)
    with api_client(db) as http:
        page = http.get("/ui/workflows", params={"failing": "true"})
        assert page.status_code == 200, page.text
        assert bad[-12:] in page.text and good[-12:] not in page.text
        assert "task failing: IllegalWorkflowOperation · attempt " in page.text
        assert '<option value="true" selected>failing</option>' in page.text
        # A bulk action selects by it: the form carries it, and the count names it.
        assert (
            'id="bulk-runs-count"' in page.text
            and '<input type="hidden" name="failing" value="true">' in page.text
        )
        confirm = http.get("/ui/workflows/bulk", params={"action": "cancel", "failing": "true"})
        assert confirm.status_code == 200, confirm.text
        assert '<input type="hidden" name="expected" value="1">' in confirm.text
        assert bad in confirm.text and good not in confirm.text
        # Unfiltered, the failing run is marked and the healthy one is not.
        everything = http.get("/ui/workflows").text
        assert everything.count("task failing: ") == 1 and good[-12:] in everything
        others = http.get("/ui/workflows", params={"failing": "false"}).text
        assert bad[-12:] not in others and good[-12:] in others
        assert http.get("/ui/workflows", params={"failing": "sometimes"}).status_code == 400
        run = http.get(f"/ui/workflows/{bad}")
        assert run.status_code == 200, run.text
        assert 'id="task-failing"' in run.text and "failing since " in run.text
        assert 'id="task-failing"' not in http.get(f"/ui/workflows/{good}").text
