"""Reset by filter from the CLI and the Client (`harvest workflow bulk-reset`,
Client.reset_workflows; docs/operations.md, "Resetting many runs"): the RUNNING runs a bad
deploy's workflow code wrote to, each to before the deploy; a FAILED run is terminal and refused
(the spec: "Terminal workflows ... are rejected"). The drill with real workers is
tests/chaos/test_chaos_bad_deploy.py."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from operator_helpers import failed_run, harvest, runs_across_a_deploy

from harvest import Client
from harvest.core.errors import InvalidArgument

CARRIED = [
    "WorkflowStarted",
    "WorkflowTaskCompleted",
    "ActivityScheduled",
    "ActivityCompleted",
    "WorkflowResetFork",
]


def test_bulk_reset_takes_the_running_runs_to_before_the_deploy_once(db, conn) -> None:
    runs, deploy = runs_across_a_deploy(conn, "ship_order", [f"o-{i}" for i in range(3)])
    failed = failed_run(conn, "ship_order", "f-1")
    base = ("workflow", "bulk-reset", "--workflow-name", "ship_order")
    before = ("--before", deploy.isoformat())
    dry = harvest(db, *base, *before, "--reason", "incident 72", "--dry-run", "--output", "json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["matched"] == 3  # (the FAILED run is not selected)
    points = json.loads(dry.stdout)["points"]  # (each selected run's point: the same in each)
    assert sorted(p["execution_id"] for p in points) == sorted(runs)
    seen = {(p["event_id"] > 0, datetime.fromisoformat(p["at"]) < deploy, p["why"]) for p in points}
    assert seen == {(True, True, None)}
    untimed = harvest(
        db, *base, "--reason", "x", "--dry-run"
    )  # (no --before: a count, each run saying why no point)
    assert untimed.returncode == 0 and "EVENT_ID" in untimed.stdout, untimed.stderr
    assert untimed.stdout.count("no time given: before_time needs the bad deploy's time") == 3, untimed.stdout
    unasked = harvest(db, *base, *before, "--reason", "incident 72")  # (no terminal, no --yes)
    assert unasked.returncode == 2 and "pass --yes" in unasked.stderr, unasked.stderr
    for bad, said in (
        ((), "before_time needs a time"),
        (("--to", "first_workflow_task", *before), "only for the reset point before_time"),
        (("--to", "before_failure", *before), "before_failure"),
        (("--state", "FAILED", *before), "only running runs can be"),
        (("--signal-reapply", "keep", *before), "keep"),
    ):
        refused = harvest(db, *base, "--reason", "x", "--yes", *bad)
        assert refused.returncode == 2 and said in refused.stderr, (bad, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    done = harvest(db, *base, *before, "--reason", "incident 72", "--yes", "--batch", "2", "--output", "json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    # (--batch 2: the second step's scan meets the first's two forks too, and leaves them)
    assert (summary["matched"], summary["acted"], summary["unchanged"], summary["failed"]) == (5, 3, 2, 0)
    again = harvest(
        db,
        *base,
        *before,
        "--reason",
        "incident 72",
        "--yes",
        "--batch-id",
        summary["batch_id"],
        "-o",
        "json",
    )
    assert (json.loads(again.stdout)["acted"], json.loads(again.stdout)["unchanged"]) == (0, 3)  # its forks
    # The same command without its batch id (a new batch: a timeout, a second terminal): the
    # forks' point is their fork boundary again, so they keep what they did since.
    rerun = harvest(db, *base, *before, "--reason", "incident 72", "--yes", "-o", "json")
    assert rerun.returncode == 0, rerun.stderr
    redone = json.loads(rerun.stdout)
    assert redone["batch_id"] != summary["batch_id"]
    assert (redone["acted"], redone["unchanged"], redone["failed"]) == (0, 3, 0)
    assert redone["forks_kept"] == 3 and summary["forks_kept"] == 0  # (its own forks: not "kept")
    assert [r["forks_kept"] for r in redone["shards"]] == [3]
    said = harvest(db, *base, *before, "--reason", "incident 72", "--yes")  # (text: a third batch)
    assert said.returncode == 0 and "3 unchanged (3 fork(s) kept at their fork boundary)" in said.stdout, (
        said.stdout
    )
    forks = conn.execute(
        "SELECT f.event_data ->> 'source_execution_id', array_agg(ev.event_type ORDER BY ev.event_id)"
        " FROM harvest.events AS f JOIN harvest.events AS ev ON ev.execution_id = f.execution_id"
        " WHERE f.event_type = 'WorkflowResetFork' GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert forks == [(run, CARRIED) for run in sorted(runs)]  # (none of the bad code's ship_v2)
    statuses = dict(conn.execute("SELECT id::text, status FROM harvest.executions").fetchall())
    assert [statuses[r] for r in runs] == ["TERMINATED"] * 3 and statuses[failed] == "FAILED"
    audit = conn.execute(
        "SELECT details ->> 'reset_to', (details ->> 'acted')::int FROM harvest.audit_log"
        " WHERE operation = 'workflow.bulk_reset' ORDER BY id"
    ).fetchall()
    assert [a[0] for a in audit] == ["before_time"] * len(audit) and sum(a[1] for a in audit) == 3


def test_the_client_resets_by_filter_and_a_failed_run_is_refused(db, conn) -> None:
    runs, deploy = runs_across_a_deploy(conn, "ship_order", ["c-1"])
    failed = failed_run(conn, "ship_order", "h-1")
    with Client(db) as client:
        with pytest.raises(InvalidArgument, match="before_time needs a time"):
            client.reset_workflows(reason="incident 72", workflow_id="c-1")
        dry = client.reset_workflows(reason=None, workflow_id="c-1", before=deploy, dry_run=True)
        assert [(p["execution_id"], p["why"]) for p in dry["points"]] == [(runs[0], None)], dry
        summary = client.reset_workflows(reason="incident 72", workflow_id="c-1", before=deploy)
        assert (summary["action"], summary["acted"]) == ("reset", 1)
        assert summary["forks_kept"] == 0
        kept = client.reset_workflows(reason="incident 72", workflow_id="c-1", before=deploy)
        assert (kept["acted"], kept["unchanged"], kept["forks_kept"]) == (0, 1, 1)  # (its fork, kept)
        assert "forks_kept" not in client.cancel_workflows(reason="x", workflow_id="none")
        none = client.reset_workflows(reason="incident 72", workflow_id="h-1", before=deploy)
        assert none["matched"] == 0  # (FAILED: not selected)
    one = harvest(db, "workflow", "reset", failed, "--to-event", "1", "--reason", "by hand")
    assert one.returncode != 0 and "the run is FAILED; only running runs can be reset" in one.stderr, (
        one.stderr
    )
    statuses = dict(conn.execute("SELECT id::text, status FROM harvest.executions").fetchall())
    assert (statuses[runs[0]], statuses[failed]) == ("TERMINATED", "FAILED")
    assert sorted(statuses.values()) == ["FAILED", "RUNNING", "TERMINATED"]
