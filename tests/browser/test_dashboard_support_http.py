"""A support engineer's walk through the dashboard over HTTP (fast suite): a run found by the
workflow ID a customer gives, and every page's headings in order (one h1, no level skipped:
a screen reader's outline of the page)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from dashboard_demo import Demo
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
    with demo.client.sql() as sql:
        (dead,) = sql.list_dead_letters(1)
    pages = [
        "/workflows",
        f"/workflows/{demo.ids['approval']}",
        f"/workflows/{demo.ids['dag']}",
        "/workflows/bulk?action=cancel&workflow_name=greet",
        "/schedules",
        "/schedules/0/greet-yearly",
        "/dags",
        "/dags/nightly_etl",
        f"/dags/nightly_etl/runs/{demo.ids['dag']}",
        "/dead-letters",
        f"/dead-letters/0/{dead['id']}",
        "/workers",
        "/workers/worker-a",
        "/concurrency",
        "/shards",
        "/login",
    ]
    faults = {}
    for path in pages:
        page = ui.get(path, headers=ADMIN)
        assert page.status_code == 200, (path, page.status_code)
        if found := _outline_faults(page.text):
            faults[path] = found
    assert faults == {}
