"""The runs list's bulk reset (GET/POST /ui/workflows/bulk, action reset): offered to an admin on
a list of RUNNING runs, not on a list of FAILED ones (terminal: a reset refuses them); the count,
the confirmation with the point and the bad deploy's time (a 400 without it), and the act, a run
reset once (docs/dashboard.md, "Acting on many runs"; docs/operations.md, "Resetting many runs")."""

from __future__ import annotations

import urllib.parse
from datetime import UTC

from operator_helpers import failed_run, runs_across_a_deploy
from web_helpers import api_client


def test_the_dashboard_resets_the_running_runs_a_filter_lists(db, conn) -> None:
    runs, deploy = runs_across_a_deploy(conn, "ship_order", ["o-0", "o-1"])
    failed_run(conn, "ship_order", "f-1")
    with api_client(db) as ui:
        failed_list = ui.get("/ui/workflows", params={"workflow_name": "ship_order", "status": "FAILED"})
        assert failed_list.status_code == 200, failed_list.text
        assert 'value="reset"' not in failed_list.text  # (no action takes a FAILED run)
        page = ui.get("/ui/workflows", params={"workflow_name": "ship_order", "status": "RUNNING"})
        assert 'name="action" value="reset"' in page.text and 'value="pause"' in page.text
        count = ui.get("/ui/workflows/bulk", params={"action": "reset", "workflow_name": "ship_order"})
        assert count.status_code == 200, count.text
        assert '<input type="hidden" name="expected" value="2">' in count.text
        assert 'name="reset_to"' in count.text and 'name="before"' in count.text
        assert "blank for the first workflow task" in count.text  # (the time is before_time's, not its)
        assert all(r in count.text for r in runs)
        assert count.text.count("no time given: before_time needs the bad deploy&#39;s time") == 2, count.text
        assert 'id="bulk-points-form"' in count.text
        pointed = ui.get(
            "/ui/workflows/bulk",
            params={"action": "reset", "workflow_name": "ship_order", "before": deploy.isoformat()},
        )
        assert pointed.status_code == 200, pointed.text
        sample = pointed.text.split('id="bulk-sample"')[1].split("</ul>")[0]
        assert sample.count("</a>: event ") == 2 and "no time given" not in sample, sample
        assert f'value="{deploy.isoformat()}"' in pointed.text  # (the time goes on to the act's form)
        refused = ui.get(
            "/ui/workflows/bulk",
            params={"action": "reset", "workflow_name": "ship_order", "status": "FAILED"},
        )
        assert refused.status_code == 400 and "RUNNING ones reset" in refused.text, refused.text
        form = {
            "action": "reset",
            "filters": urllib.parse.urlencode({"workflow_name": "ship_order"}),
            "reason": "incident 72",
            "reset_to": "before_time",
            "before": deploy.isoformat(),
            "limit": "1",
        }
        no_time = ui.post("/ui/workflows/bulk", data={**form, "before": ""})
        assert no_time.status_code == 400 and "before_time needs a time" in no_time.text, no_time.text
        bad = ui.post("/ui/workflows/bulk", data={**form, "reset_to": "before_failure"})
        assert bad.status_code == 400 and "reset_to" in bad.text
        done = ui.post("/ui/workflows/bulk", data=form)
        assert done.status_code == 200, done.text
        assert 'id="bulk-summary"' in done.text and "<strong>2</strong> reset" in done.text, done.text
        assert '<strong id="bulk-forks-kept">0</strong> forks kept' in done.text, done.text
        # The same form again, a new batch: the forks' point is their fork boundary, kept and said.
        anew = ui.post("/ui/workflows/bulk", data=form)
        assert anew.status_code == 200, anew.text
        assert "<strong>0</strong> reset" in anew.text, anew.text
        assert '<strong id="bulk-forks-kept">2</strong> forks kept' in anew.text, anew.text
        assert '<th class="num">Forks kept</th>' in anew.text
    statuses = conn.execute(
        "SELECT status, count(*) FROM harvest.executions GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert statuses == [("FAILED", 1), ("RUNNING", 2), ("TERMINATED", 2)]
    forks = conn.execute(
        "SELECT count(*) FROM harvest.events WHERE event_type = 'WorkflowResetFork'"
    ).fetchone()[0]
    assert forks == 2


def test_the_dashboard_reads_the_bad_deploys_time_as_its_other_time_fields(db, conn) -> None:
    """The time is checked before anything is written (a 400 naming before, not the database's cast
    error), and a time without an offset is UTC, as the list's created_after."""
    _, deploy = runs_across_a_deploy(conn, "ship_order", ["o-0"])
    form = {
        "action": "reset",
        "filters": urllib.parse.urlencode({"workflow_name": "ship_order"}),
        "reason": "incident 72",
        "reset_to": "before_time",
        "limit": "1",
    }
    with api_client(db) as ui:
        bad = ui.post("/ui/workflows/bulk", data={**form, "before": "yesterday"})
        assert bad.status_code == 400 and "before" in bad.text and "not a date or time" in bad.text, bad.text
        naive = deploy.astimezone(UTC).replace(tzinfo=None).isoformat()
        done = ui.post("/ui/workflows/bulk", data={**form, "before": naive})
        assert done.status_code == 200, done.text
        assert "<strong>1</strong> reset" in done.text, done.text
    before = conn.execute(
        "SELECT (details ->> 'before')::timestamptz FROM harvest.audit_log"
        " WHERE operation = 'workflow.bulk_reset'"
    ).fetchone()[0]
    assert before == deploy
