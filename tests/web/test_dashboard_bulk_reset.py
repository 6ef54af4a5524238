"""The runs list's bulk reset (GET/POST /ui/workflows/bulk, action reset): offered to an admin on
a list of FAILED runs, where the other bulk actions (live runs only) are not; the count, the
confirmation with the point, and the act, a run reset once (docs/dashboard.md, "Acting on many
runs"; docs/operations.md, "Resetting many runs")."""

from __future__ import annotations

import urllib.parse

from operator_helpers import failed_run, start
from web_helpers import api_client


def test_the_dashboard_resets_the_failed_runs_a_filter_lists(db, conn) -> None:
    failed = [failed_run(conn, "ship_order", f"o-{i}") for i in range(2)]
    start(conn, "ship_order", "live-1")
    with api_client(db) as ui:
        page = ui.get("/ui/workflows", params={"workflow_name": "ship_order", "status": "FAILED"})
        assert page.status_code == 200, page.text
        assert 'name="action" value="reset"' in page.text
        assert 'value="cancel"' not in page.text and 'value="pause"' not in page.text  # (live runs only)
        count = ui.get("/ui/workflows/bulk", params={"action": "reset", "workflow_name": "ship_order"})
        assert count.status_code == 200, count.text
        assert (
            '<input type="hidden" name="expected" value="2">' in count.text
            and 'name="reset_to"' in count.text
        )
        assert all(f in count.text for f in failed)
        refused = ui.get(
            "/ui/workflows/bulk",
            params={"action": "cancel", "workflow_name": "ship_order", "status": "FAILED"},
        )
        assert refused.status_code == 400 and "a cancel takes" in refused.text
        form = {
            "action": "reset",
            "filters": urllib.parse.urlencode({"workflow_name": "ship_order", "status": "FAILED"}),
            "reason": "incident 72",
            "reset_to": "before_failure",
            "limit": "1",
        }
        done = ui.post("/ui/workflows/bulk", data=form)
        assert done.status_code == 200, done.text
        assert 'id="bulk-summary"' in done.text and "<strong>2</strong> reset" in done.text, done.text
        bad = ui.post("/ui/workflows/bulk", data={**form, "reset_to": "latest"})
        assert bad.status_code == 400 and "reset_to" in bad.text
        again = ui.post("/ui/workflows/bulk", data=form)
        assert (
            "<strong>0</strong> reset" in again.text
            and "<strong>2</strong> unchanged (reset already)" in again.text
        )
    forks = conn.execute(
        "SELECT count(*) FROM harvest.events WHERE event_type = 'WorkflowResetFork'"
    ).fetchone()[0]
    assert forks == 2
