"""The dashboard by workflow ID (fast suite, over HTTP): the Workflows page's list of one
workflow ID's runs, its refusal of a parameter it does not take, Go to a run's workflow field,
and a workflow ID with a "/" typed into the address."""

from __future__ import annotations

import html
import re
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
    assert 'id="workflow-id-runs"' in page.text
    assert '<input name="workflow_id" value="order-7"' in page.text
    one = client.get("/workflows?workflow_id=order-7&workflow_name=refund", headers=READ).text
    assert ids["refund"] in one and ids["second"] not in one


def test_the_counts_and_a_bulk_action_select_by_workflow_id(
    runs: tuple[TestClient, dict[str, str]], db: str
) -> None:
    """The page drew no counts by workflow ID and refused a bulk action with one (the count and
    the batch took no workflow_id then); they select by it now, as the list does."""
    client, ids = runs
    page = client.get("/workflows?workflow_id=order-7", headers=OPERATE)
    assert 'aria-label="counts by status"' in page.text, page.text
    # order-7: checkout's, TERMINATED, and refund's, RUNNING; order-8's not counted.
    chips = page.text.split('aria-label="counts by status"')[1].split("</div>")[0]
    assert "all 2</span>" in chips and 'data-status="RUNNING"' in chips, chips
    assert 'id="bulk-runs-count"' in page.text and "does not select by workflow ID" not in page.text
    confirm = client.get("/workflows/bulk?action=cancel&workflow_id=order-7", headers=OPERATE)
    assert confirm.status_code == 200, confirm.text
    assert ids["refund"] in confirm.text and "Cancel 1 run?" in confirm.text, confirm.text
    assert ids["other"] not in confirm.text and "workflow ID" in confirm.text
    done = client.post(
        "/workflows/bulk",
        data={"action": "cancel", "filters": "workflow_id=order-7", "reason": "duplicate order"},
        headers=OPERATE,
    )
    assert done.status_code == 200, done.text
    with psycopg.connect(db) as conn:
        asked = dict(conn.execute("SELECT id::text, cancel_requested FROM harvest.executions").fetchall())
    assert asked[ids["refund"]] and not asked[ids["other"]]


def test_the_pages_bulk_form_carries_the_workflow_id(runs: tuple[TestClient, dict[str, str]]) -> None:
    """The bulk form's hidden filters named every list filter but workflow_id: from the page of
    order-7's checkout runs, "Cancel these runs..." counted (and would have cancelled) every
    checkout run, order-8's too. The form is submitted here as the page draws it."""
    client, ids = runs
    page = client.get("/workflows?workflow_name=checkout&workflow_id=order-7", headers=OPERATE)
    form = page.text.split('id="bulk-runs-count"')[1].split("</form>")[0]
    hidden = [
        (html.unescape(k), html.unescape(v))
        for k, v in re.findall(r'<input type="hidden" name="([^"]*)" value="([^"]*)">', form)
    ]
    assert ("workflow_id", "order-7") in hidden, hidden
    confirm = client.get("/workflows/bulk", params=[*hidden, ("action", "cancel")], headers=OPERATE)
    assert confirm.status_code == 200, confirm.text
    # (order-7's checkout runs have ended; order-8's is live, and was the one counted)
    assert "Cancel 0 runs?" in confirm.text and ids["other"] not in confirm.text, confirm.text


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


def test_go_to_a_run_names_the_workflow_when_two_used_the_id(runs: tuple[TestClient, dict[str, str]]) -> None:
    """Its 400 said to name the workflow, but the form had no field for it: only a hand-made
    &workflow_name= in the address told checkout's order-7 from refund's."""
    client, ids = runs
    listing = client.get("/workflows", headers=READ).text
    form = listing.split('id="find-form"')[1].split("</form>")[0]
    assert '<input name="id"' in form and '<input name="workflow_name"' in form
    both = client.get("/workflows/find?id=order-7&workflow_name=", headers=READ)
    assert both.status_code == 400
    assert "used by several workflows (checkout, refund)" in both.text
    assert "Go to a run&#39;s &#34;of workflow&#34; field" in both.text, both.text
    for name, run in (("checkout", "second"), ("refund", "refund")):
        found = client.get(
            f"/workflows/find?id=order-7&workflow_name={name}", headers=READ, follow_redirects=False
        )
        assert (found.status_code, found.headers["location"]) == (303, f"/workflows/{ids[run]}"), name
    typed = client.get("/workflows/order-7?workflow_name=refund", headers=READ, follow_redirects=False)
    assert typed.headers["location"] == f"/workflows/{ids['refund']}"


def test_a_workflow_id_with_a_slash_typed_into_the_address_goes_to_its_run(db: str) -> None:
    """A child's workflow ID (its parent's, "/" and its seq: order-parent-3/1) typed into the
    address was a 404: the route took one segment. A run's own pages and actions keep theirs."""
    with psycopg.connect(db, autocommit=True) as conn:
        parent = _start(conn, "checkout", "order-parent-3")
        ids = {
            wid: _start(conn, "checkout", wid)
            for wid in ("order-parent-3/1", f"{parent}/2", "order-9/signal")
        }
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        for wid, run in ids.items():
            for typed in (wid, wid.replace("/", "%2F")):
                found = client.get(f"/workflows/{typed}", headers=READ, follow_redirects=False)
                assert (found.status_code, found.headers.get("location")) == (303, f"/workflows/{run}"), typed
        assert client.get(f"/workflows/{parent}", headers=READ).status_code == 200
        assert client.get(f"/workflows/{parent}/history/export", headers=READ).status_code == 200
        assert client.get(f"/workflows/{parent}/signal", headers=READ).status_code == 405
        missing = client.get("/workflows/order-parent-3/7", headers=READ)
        assert (
            missing.status_code == 404 and "no run has workflow ID &#39;order-parent-3/7&#39;" in missing.text
        )
