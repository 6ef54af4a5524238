"""A support engineer's walk through the dashboard over HTTP (fast suite): a run found by the
workflow ID a customer gives, every page's headings in order (one h1, no level skipped:
a screen reader's outline of the page), and a misspelt parameter in a pasted link refused."""

from __future__ import annotations

import html
import re
import urllib.parse
from collections.abc import Iterator
from uuid import uuid4

import pytest
from dashboard_demo import Demo, demo_pages
from dashboard_helpers import TokenScopes
from starlette.testclient import TestClient

from harvest.web.ui import dashboard_app

ADMIN = {"Authorization": "Bearer admin-token"}


@pytest.fixture
def ui(demo: Demo) -> Iterator[TestClient]:
    app = dashboard_app(dsn=demo.dsn, authorizer=TokenScopes(), timeout=3.0)
    with TestClient(app, base_url="http://testserver") as client:
        yield client


def _outline_faults(page: str) -> list[str]:
    levels = [int(n) for n in re.findall(r"<h([1-6])[\s>]", page)]
    faults = [f"{levels.count(1)} h1"] if levels.count(1) != 1 else []
    faults += [f"h{a} then h{b}" for a, b in zip([0, *levels], levels, strict=False) if b > a + 1]
    return faults


def test_every_page_has_one_h1_and_skips_no_heading_level(ui: TestClient, demo: Demo) -> None:
    """The schedules page went from its h1 to the New schedule form's h3, a DAG run's page from
    its h1 to the Retry form's h3, and the concurrency page had two h1s (Usage)."""
    faults = {}
    for path in demo_pages(demo):
        page = ui.get(path, headers=ADMIN)
        assert page.status_code == 200, (path, page.status_code)
        if found := _outline_faults(page.text):
            faults[path] = found
    assert faults == {}


def _own_queries(path: str, page: str) -> set[str]:
    """The addresses with a query that the page at ``path`` links to and its GET forms send (a
    form's fields given empty): each is one the page's route must take."""
    hrefs = re.findall(r'href="([/?][^"#]*\?[^"#]+|\?[^"#]+)', page)
    found = {urllib.parse.urljoin(path, html.unescape(h)) for h in hrefs}
    for attrs, body in re.findall(r'<form([^>]*method="get"[^>]*)>(.*?)</form>', page, re.S):
        action = html.unescape(re.search(r'action="([^"]*)"', attrs).group(1))
        names = dict.fromkeys(re.findall(r'name="([^"]+)"', body))
        found.add(f"{action}?{urllib.parse.urlencode(dict.fromkeys(names, ''))}")
    return found


def test_every_page_refuses_a_query_parameter_it_does_not_take(ui: TestClient, demo: Demo) -> None:
    """Only the Workflows page answered a parameter it does not take (?stauts=) with a 400 naming
    it; every other page drew itself as if it were not given: /dead-letters?activty_name=charge
    listed every dead letter, a run's ?payload=full redacted them without a word. Each page still
    takes every parameter its own links and forms send."""
    for path in demo_pages(demo):
        if path == "/login":  # (not a page of the runs: its ?next= is where signing in goes)
            continue
        joined = "&" if "?" in path else "?"
        misspelt = f"{path}{joined}stauts=RUNNING"
        refused = ui.get(misspelt, headers=ADMIN)
        assert refused.status_code == 400, (misspelt, refused.status_code)
        assert "stauts: unknown query parameter; the parameters are" in html.unescape(refused.text), path
        for reached in _own_queries(path, ui.get(f"{path}{joined}refresh=30", headers=ADMIN).text):
            answer = ui.get(reached, headers=ADMIN, follow_redirects=False)
            assert "unknown query parameter" not in html.unescape(answer.text), (path, reached)


def test_a_run_is_found_by_the_workflow_id_a_customer_gives(ui: TestClient, demo: Demo) -> None:
    """ "My order order-7 is stuck": the Workflows page's Go to a run takes the workflow ID (or an
    execution ID) and lands on its current run's page; typed into the address, a workflow ID goes
    there too. Before, nothing searched by workflow ID and /workflows/order-7 was a 404 that
    said only "'order-7' is not an execution id"."""
    read = {"Authorization": "Bearer read-token"}
    listing = ui.get("/workflows", headers=read)
    assert re.search(r'<form[^>]*id="find-form"[^>]*action="/workflows/find"', listing.text)
    assert re.search(r"<label>Go to a run <input name=\"id\"", listing.text)

    approval = f"/workflows/{demo.ids['approval']}"
    for path in ("/workflows/find?id=order-7", "/workflows/find?id=+order-7+", "/workflows/order-7"):
        found = ui.get(path, headers=read, follow_redirects=False)
        assert (found.status_code, found.headers["location"]) == (303, approval), path
    by_execution = ui.get(f"/workflows/find?id={demo.ids['approval']}", headers=read, follow_redirects=False)
    assert (by_execution.status_code, by_execution.headers["location"]) == (303, approval)
    named = ui.get("/workflows/find?id=order-7&workflow_name=approval", headers=read, follow_redirects=False)
    assert named.headers["location"] == approval
    assert ui.get(approval.replace("/workflows/", "/workflows/find?id="), headers=read).status_code == 200

    unknown = ui.get("/workflows/find?id=order-8812", headers=read)
    assert unknown.status_code == 404
    assert "no run has workflow ID &#39;order-8812&#39;" in unknown.text
    assert "Search attribute" in unknown.text
    assert ui.get("/workflows/order-8812", headers=read).status_code == 404
    empty = ui.get("/workflows/find?id=", headers=read)
    assert empty.status_code == 400 and "id: give the workflow ID" in empty.text
    assert ui.get("/workflows/find?id=order-7").status_code == 401  # a read page like the others


def test_a_dag_runs_conf_and_a_schedules_input_say_their_size_to_a_read_principal(
    ui: TestClient, demo: Demo
) -> None:
    """A read principal saw the size marker itself there (`{"redacted":true,"bytes":22}`), where
    a run's page says `redacted (22 bytes)`; the operator still sees the value."""
    read, operate = ({"Authorization": f"Bearer {s}-token"} for s in ("read", "operate"))
    for page in (f"/dags/nightly_etl/runs/{demo.ids['dag']}", "/schedules/0/greet-yearly"):
        shown = ui.get(page, headers=read).text
        assert re.search(r'<span class="muted">redacted \(\d+ bytes\)</span>', shown), page
        assert "&#34;redacted&#34;" not in shown and '"redacted"' not in shown, page
        assert "redacted (" not in ui.get(page, headers=operate).text, page


def test_a_runs_whole_history_is_exported_from_its_page(ui: TestClient, demo: Demo) -> None:
    """A support engineer attaches a run's history to the ticket: the run's page links to its
    export (the document `harvest history export` writes), every event of it, not the page's 500;
    before, the page named the CLI command only, and only past 500 events."""
    import json

    import psycopg

    read, operate = ({"Authorization": f"Bearer {s}-token"} for s in ("read", "operate"))
    run = demo.ids["approval"]
    with psycopg.connect(demo.dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT count(harvest.signal_workflow(%s, 'ping', to_jsonb(g))) FROM generate_series(1, 600) g",
            (run,),
        )
        (events,) = conn.execute(
            "SELECT count(*) FROM harvest.events WHERE execution_id = %s", (run,)
        ).fetchone()
    page = ui.get(f"/workflows/{run}", headers=read).text
    assert f'id="export-history" href="/workflows/{run}/history/export"' in page

    exported = ui.get(f"/workflows/{run}/history/export", headers=read)
    assert exported.status_code == 200
    assert exported.headers["content-disposition"] == f'attachment; filename="history-{run}.json"'
    document = json.loads(exported.text)
    assert document["redacted"] is True and str(document["execution"]["id"]) == run
    ids = [e["event_id"] for e in document["events"]]  # (the worker may add a task's events since)
    assert ids == list(range(1, len(ids) + 1)) and len(ids) >= events > 600
    assert document["execution"]["input"]["redacted"] is True  # (the input is ["order-7"])
    # ?payloads=full is an operator's, as on the run's page; a read token's export stays redacted
    assert json.loads(ui.get(f"/workflows/{run}/history/export?payloads=full", headers=read).text)["redacted"]
    full = ui.get(f"/workflows/{run}/history/export?payloads=full", headers=operate)
    assert json.loads(full.text)["redacted"] is False
    assert json.loads(full.text)["execution"]["input"] == ["order-7"]
    assert (
        'href="/workflows/' + run + '/history/export?payloads=full"'
        in ui.get(f"/workflows/{run}?payloads=full", headers=operate).text
    )
    assert ui.get(f"/workflows/{uuid4()}/history/export", headers=read).status_code == 404
    assert ui.get(f"/workflows/{run}/history/export").status_code == 401
