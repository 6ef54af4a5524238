"""Reset by filter from the CLI and the Client (`harvest workflow bulk-reset`,
Client.reset_workflows; docs/operations.md, "Resetting many runs"), and `workflow reset` of a
FAILED run. The drill with real workers is tests/chaos/test_chaos_bad_deploy.py."""

from __future__ import annotations

import json

from operator_helpers import failed_run, harvest

from harvest import Client


def test_bulk_reset_counts_asks_and_resets_each_failed_run_once(db, conn) -> None:
    failed = sorted(failed_run(conn, "ship_order", f"o-{i}") for i in range(3))
    base = ("workflow", "bulk-reset", "--workflow-name", "ship_order")
    dry = harvest(db, *base, "--reason", "incident 72", "--dry-run", "--output", "json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["matched"] == 3
    unasked = harvest(db, *base, "--reason", "incident 72")  # (no terminal, no --yes)
    assert unasked.returncode == 2 and "pass --yes" in unasked.stderr, unasked.stderr
    for bad, said in (
        (("--to", "latest"), "latest"),
        (("--state", "COMPLETED"), "only running and failed runs can be"),
        (("--signal-reapply", "keep"), "keep"),
    ):
        refused = harvest(db, *base, "--reason", "x", "--yes", *bad)
        assert refused.returncode == 2 and said in refused.stderr, (bad, refused.stderr)
    no_reason = harvest(db, *base, "--yes")
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr
    done = harvest(db, *base, "--reason", "incident 72", "--yes", "--batch", "2", "--output", "json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["matched"], summary["acted"], summary["failed"]) == (3, 3, 0)
    again = harvest(
        db, *base, "--reason", "incident 72", "--yes", "--batch-id", summary["batch_id"], "-o", "json"
    )
    assert (json.loads(again.stdout)["acted"], json.loads(again.stdout)["unchanged"]) == (0, 3)
    sources = conn.execute(
        "SELECT event_data ->> 'source_execution_id' FROM harvest.events"
        " WHERE event_type = 'WorkflowResetFork' ORDER BY 1"
    ).fetchall()
    assert [s[0] for s in sources] == failed
    audit = conn.execute(
        "SELECT details ->> 'reset_to', (details ->> 'acted')::int FROM harvest.audit_log"
        " WHERE operation = 'workflow.bulk_reset' ORDER BY id"
    ).fetchall()
    assert [a[0] for a in audit] == ["before_failure"] * len(audit) and sum(a[1] for a in audit) == 3


def test_the_client_resets_by_filter_and_workflow_reset_takes_a_failed_run(db, conn) -> None:
    by_client = failed_run(conn, "ship_order", "c-1")
    by_hand = failed_run(conn, "ship_order", "h-1")
    with Client(db) as client:
        summary = client.reset_workflows(
            reason="incident 72", workflow_id="c-1", reset_to="first_workflow_task"
        )
    assert (summary["action"], summary["acted"]) == ("reset", 1)
    one = harvest(db, "workflow", "reset", by_hand, "--to-event", "1", "--reason", "by hand", "-o", "json")
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["new_execution_id"]
    twice = harvest(db, "workflow", "reset", by_hand, "--to-event", "1", "--reason", "again")
    assert twice.returncode != 0 and "started after this one" in twice.stderr, twice.stderr
    statuses = dict(conn.execute("SELECT id::text, status FROM harvest.executions").fetchall())
    assert statuses[by_client] == statuses[by_hand] == "FAILED"
    assert sorted(statuses.values()) == ["FAILED", "FAILED", "RUNNING", "RUNNING"]
