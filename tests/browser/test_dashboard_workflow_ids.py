"""The dashboard by workflow ID (fast suite, over HTTP): the Workflows page's list of one
workflow ID's runs, its refusal of a parameter it does not take, Go to a run's workflow field,
and a workflow ID with a "/" typed into the address."""

from __future__ import annotations

import html
from collections.abc import Iterator

import psycopg
import pytest
from dashboard_helpers import TokenScopes
from starlette.testclient import TestClient

from harvest.web.ui import dashboard_app

READ = {"Authorization": "Bearer read-token"}
OPERATE = {"Authorization": "Bearer operate-token"}


def _start(conn: psycopg.Connection, name: str, workflow_id: str) -> str:
    started = "SELECT execution_id FROM harvest.start_workflow(%s, p_workflow_id => %s, p_queue => 'nobody')"
    return str(conn.execute(started, (name, workflow_id)).fetchone()[0])


@pytest.fixture
def runs(db: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """Two runs of workflow ID order-7 (the first terminated, then started again), another
    workflow's run of that ID, and a run of order-8."""
    with psycopg.connect(db, autocommit=True) as conn:
        first = _start(conn, "checkout", "order-7")
        conn.execute("SELECT harvest.terminate_workflow(%s, 'again')", (first,))
        ids = {
            "first": first,
            "second": _start(conn, "checkout", "order-7"),
            "refund": _start(conn, "refund", "order-7"),
            "other": _start(conn, "checkout", "order-8"),
        }
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        yield client, ids


def test_the_workflows_page_lists_one_workflow_ids_runs(runs: tuple[TestClient, dict[str, str]]) -> None:
    """The page had no workflow ID filter (GET /workflows?workflow_id= has one): ?workflow_id=
    was dropped and every run listed."""
    client, ids = runs
    page = client.get("/workflows?workflow_id=order-7", headers=OPERATE)
    assert page.status_code == 200, page.text
    for run in ("first", "second", "refund"):
        assert ids[run] in page.text, run
    assert ids["other"] not in page.text
    assert 'id="workflow-id-runs"' in page.text and 'aria-label="counts by status"' not in page.text
    assert '<input name="workflow_id" value="order-7"' in page.text
    # No bulk action: it would select by the other filters alone, more than the runs listed.
    assert 'id="bulk-runs-count"' not in page.text and "does not select by workflow ID" in page.text
    one = client.get("/workflows?workflow_id=order-7&workflow_name=refund", headers=READ).text
    assert ids["refund"] in one and ids["second"] not in one
    refused = client.get(
        "/workflows/bulk?action=cancel&workflow_name=checkout&workflow_id=order-7", headers=OPERATE
    )
    assert refused.status_code == 400 and "workflow_id: a bulk action does not select" in refused.text


def test_the_workflows_page_refuses_a_parameter_it_does_not_take(
    runs: tuple[TestClient, dict[str, str]],
) -> None:
    """A misspelt filter (?workflow_ids=, ?stauts=) listed every run as if unfiltered; the API
    answers it with a 400 naming it, and so does the page now."""
    client, ids = runs
    for misspelt in ("workflow_ids=order-7", "stauts=RUNNING"):
        page = client.get(f"/workflows?{misspelt}", headers=READ)
        assert page.status_code == 400, misspelt
        name = misspelt.split("=")[0]
        assert f"{name}: unknown query parameter" in html.unescape(page.text), page.text
        assert ids["other"] not in page.text
    kept = "/workflows?status=RUNNING&workflow_name=checkout&attr=&created_after=&created_before=&limit=5"
    assert client.get(f"{kept}&order=asc&refresh=30&msg=x&msg_sig=y&cursor=", headers=READ).status_code == 200
