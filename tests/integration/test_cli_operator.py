"""The operator CLI, run as a real `harvest` process against a real database: output and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid

import psycopg
import pytest
from operator_helpers import REPO, harvest, park, start


@pytest.fixture
def conn(db: str):
    with psycopg.connect(db, autocommit=True) as c:
        yield c


def one_error_line(result) -> str:
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_workflow_list_filters_and_pages(db: str, conn) -> None:
    ids = [
        start(
            conn,
            "onboarding",
            f"u{i}",
            search_attributes={"tenant": "acme" if i % 2 else "other", "amount": i * 10},
        )
        for i in range(5)
    ]
    other = start(conn, "billing", "b1", search_attributes={"tenant": "acme"})
    conn.execute("SELECT harvest.terminate_workflow(%s, 'x')", (ids[0],))

    r = harvest(
        db,
        "workflow",
        "list",
        "--state",
        "RUNNING",
        "--workflow-name",
        "onboarding",
        "--search-attr",
        "tenant=acme",
        "--output",
        "json",
    )
    assert r.returncode == 0, r.stderr
    got = {e["execution_id"] for e in json.loads(r.stdout)["executions"]}
    assert got == {ids[1], ids[3]}

    r = harvest(db, "workflow", "list", "--search-attr", "amount>=20", "--output", "json")
    assert {e["execution_id"] for e in json.loads(r.stdout)["executions"]} == {ids[2], ids[3], ids[4]}

    # A filter expression with OR (docs/http-api.md, "Filter expressions"), ANDed with the rest.
    r = harvest(
        db,
        "workflow",
        "list",
        "--state",
        "RUNNING",
        "--filter",
        "amount >= 40 OR workflow_name = billing",
        "--output",
        "json",
    )
    assert r.returncode == 0, r.stderr
    assert {e["execution_id"] for e in json.loads(r.stdout)["executions"]} == {ids[4], other}

    # Keyset pages of 2 over 6 runs: 2 + 2 + 2, every run once, newest first.
    seen, cursor, pages = [], None, 0
    while True:
        args = ["workflow", "list", "--page-size", "2", "--output", "json"] + (
            ["--cursor", cursor] if cursor else []
        )
        page = json.loads(harvest(db, *args).stdout)
        seen += [e["execution_id"] for e in page["executions"]]
        pages += 1
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert pages == 3 and sorted(seen) == sorted([*ids, other]) and len(set(seen)) == 6

    table = harvest(db, "workflow", "list", "--workflow-name", "billing")
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split()[:4] == ["EXECUTION_ID", "WORKFLOW", "WORKFLOW_ID", "STATUS"]
    assert other in table.stdout and "1 execution(s)" in table.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--state", "RUNNNG"], 'unknown state "RUNNNG"'),
        (["--search-attr", "tenant"], 'search attribute filter "tenant" is malformed'),
        (["--cursor", "not-a-cursor"], "cursor"),
        (["--page-size", "5000"], "page size 5000 is out of range"),
        (["--filter", "status = RUNNING OR tenant = acme"], "each side of an OR must test"),
    ],
)
def test_workflow_list_rejects_bad_filters(db: str, args: list[str], needle: str) -> None:
    r = harvest(db, "workflow", "list", *args)
    assert r.returncode == 2
    assert needle in one_error_line(r)


def test_workflow_get_signal_cancel_stack_terminate_history(db: str, conn, tmp_path) -> None:
    execution_id, _ = park(conn, "k1")
    r = harvest(db, "workflow", "get", execution_id, "--output", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "RUNNING"
    assert "RUNNING" in harvest(db, "workflow", "get", execution_id).stdout

    r = harvest(db, "workflow", "signal", execution_id, "approved", "--payload-json", '{"ok": true}')
    assert r.returncode == 0 and "signalled" in r.stdout
    r = harvest(db, "workflow", "signal", execution_id, "note", "--payload-file", "-", stdin='{"n": 1}')
    assert r.returncode == 0, r.stderr
    r = harvest(db, "workflow", "signal", execution_id, "bad", "--input-json", "{nope")
    assert r.returncode == 2 and "--input-json: not valid JSON" in one_error_line(r)
    r = harvest(db, "workflow", "signal", execution_id, "bad", "--input-file", "-", stdin="{nope")
    assert r.returncode == 2 and "--input-file -: not valid JSON" in one_error_line(r)

    stack = json.loads(harvest(db, "workflow", "stack", execution_id, "--output", "json").stdout)
    assert stack["signals_since_last_task"] == 2
    assert [s["name"] for s in stack["signals"]] == ["approved", "note"] and stack["totals"]["signals"] == 2
    shown = harvest(db, "workflow", "stack", execution_id).stdout
    assert "signals:" in shown and "approved" in shown and "note" in shown, shown
    [activity] = stack["pending_activities"]
    assert activity["status"] == "dead_lettered" and activity["name"] == "act"
    assert (
        stack["last_event_id"]
        == conn.execute(
            "SELECT last_event_id FROM harvest.executions WHERE id = %s", (execution_id,)
        ).fetchone()[0]
    )
    assert "dead_lettered" in shown and "LEASE_EXPIRES_AT" in shown, shown
    # Why the activity is parked (or retried) is on the table too, not only in the JSON.
    assert f"seq 1 last failure: {activity['last_failure']['error_type']}" in shown, shown

    r = harvest(db, "workflow", "cancel", execution_id, "--reason", "operator request")
    assert r.returncode == 0 and "cancel requested" in r.stdout

    redacted = json.loads(harvest(db, "workflow", "history", execution_id, "--output", "json").stdout)
    scheduled = next(e for e in redacted["events"] if e["event_type"] == "ActivityScheduled")
    assert scheduled["event_data"]["input"] == {"redacted": True, "bytes": len(b'["secret-input"]')}
    assert "secret-input" not in json.dumps(redacted)
    full = json.loads(harvest(db, "workflow", "history", execution_id, "--full", "--output", "json").stdout)
    assert "secret-input" in json.dumps(full)
    out = tmp_path / "h.json"
    r = harvest(db, "history", "export", execution_id, "--file", str(out))
    assert r.returncode == 0 and json.loads(out.read_text())["redacted"] is True
    assert "WorkflowCancelRequested" in harvest(db, "workflow", "history", execution_id).stdout

    r = harvest(db, "workflow", "terminate", execution_id, "--reason", "done")
    assert r.returncode == 0 and "terminated" in r.stdout
    r = harvest(db, "workflow", "terminate", execution_id)
    assert r.returncode == 1 and "already TERMINATED" in one_error_line(r)
    r = harvest(db, "workflow", "get", str(uuid.uuid4()))
    assert r.returncode == 1 and "does not exist" in one_error_line(r)


def test_workflow_stack_lists_at_most_limit_entries_and_counts_the_rest(db: str, conn) -> None:
    """A fan-out's stack listed every open child (and activity, and timer): `--limit` bounds
    each list (100 by default) and a line says how many it left out."""
    parent, _ = park(conn, "wide")
    conn.execute(
        "INSERT INTO harvest.executions"
        " (id, workflow_name, workflow_id, status, created_at, parent_id, parent_seq)"
        " SELECT gen_random_uuid(), 'kid', 'wide-kid-' || g, 'RUNNING', now(), %s, g"
        " FROM generate_series(1, 3) AS g",
        (parent,),
    )
    stack = json.loads(harvest(db, "workflow", "stack", parent, "--limit", "2", "--output", "json").stdout)
    assert [c["seq"] for c in stack["children"]] == [1, 2] and stack["totals"]["children"] == 3
    text = harvest(db, "workflow", "stack", parent, "--limit", "2").stdout
    assert "... and 1 more (--limit up to 10000)" in text, text
    assert "more (--limit" not in harvest(db, "workflow", "stack", parent).stdout
    r = harvest(db, "workflow", "stack", parent, "--limit", "0")
    assert r.returncode == 2 and "--limit" in one_error_line(r)


def test_workflow_stack_shows_a_mutex_it_waits_for_and_its_holder(db: str, conn) -> None:
    """A run queued behind another for a ctx.mutex key has no activity, timer, child or workflow
    task open: its stack said "waiting on: nothing". It names the key, the wait and the holder."""
    key = "invoice:7"
    holder, waiter = (start(conn, "settle", f"mx-{n}", queue="mxq") for n in (1, 2))
    conn.execute(
        "SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1, %s)"
        " FROM harvest.claim_tasks('w', ARRAY['mxq'], 10) AS c",
        (json.dumps([{"type": "record_marker", "seq": 1, "kind": "mutex_acquire", "value": {"key": key}}]),),
    )
    stack = json.loads(harvest(db, "workflow", "stack", waiter, "--output", "json").stdout)
    [mutex] = stack["mutexes"]
    assert (mutex["key"], mutex["status"], mutex["holder_execution_id"]) == (key, "waiting", holder)
    text = harvest(db, "workflow", "stack", waiter).stdout
    assert "mutexes:" in text and "waiting" in text and holder in text, text
    assert "waiting on: nothing" not in text, text
    held = harvest(db, "workflow", "stack", holder).stdout
    assert "invoice:7" in held and "held" in held, held


def test_workflow_stack_says_a_run_with_nothing_open_awaits_a_client_or_has_ended(db: str, conn) -> None:
    """A run parked in ctx.wait_for_signal (docs/workflows.md's lease_machine) has no activity,
    timer, child or task open: its stack said "waiting on: nothing (signals, or a terminal run)",
    the same words as for a run that had ended. Each now says which it is."""
    execution_id = start(conn, "approval", "st-1", queue="stq")
    conn.execute(
        "SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1, '[]')"
        " FROM harvest.claim_tasks('w', ARRAY['stq'], 10) AS c"
    )
    waiting = harvest(db, "workflow", "stack", execution_id).stdout
    assert "waiting on: a signal, an update or a cancel" in waiting, waiting
    assert "waiting on: nothing" not in waiting, waiting
    assert harvest(db, "workflow", "terminate", execution_id).returncode == 0
    ended = harvest(db, "workflow", "stack", execution_id).stdout
    assert "waiting on: nothing (the run has ended: TERMINATED)" in ended, ended


def test_workflow_stack_shows_the_run_s_own_dead_letter_not_a_nameless_activity(db: str, conn) -> None:
    """A run's own dead letter (kind 'workflow') was listed under activities: seq and name
    blank, status dead_lettered. The stack shows it as the run's, with its id to read it."""
    execution_id = start(conn, "approval", "own-dl-1", queue="stq")
    conn.execute(
        "INSERT INTO harvest.dead_letters (execution_id, workflow_name, queue, attempts, failure,"
        " scheduled_at, failed_at, kind) VALUES (%s, 'approval', 'stq', 1, %s, now(), now(), 'workflow')",
        (execution_id, json.dumps({"error_type": "HistoryLimitExceeded", "message": "over the cap"})),
    )
    (id_,) = conn.execute("SELECT max(id) FROM harvest.dead_letters").fetchone()
    shown = harvest(db, "workflow", "stack", execution_id).stdout
    assert f"dead letter {id_}: HistoryLimitExceeded: over the cap (harvest dlq get {id_})" in shown, shown
    assert "activities:" not in shown and "dead_lettered" not in shown, shown


def test_result_query_and_update_of_an_unknown_run_give_no_python_advice(db: str) -> None:
    """`harvest workflow result/query/update` of an id no run has ended with the Python client's
    hint, "get_handle(workflow_id='...')", at a shell prompt; `get`, `signal` and the HTTP API's
    404 give the database's own. Each is now the one line every other command prints."""
    missing = str(uuid.uuid4())
    expected = one_error_line(harvest(db, "workflow", "get", missing))
    assert "does not exist" in expected, expected
    for args in (["result", missing], ["query", missing, "total"], ["update", missing, "spend"]):
        r = harvest(db, "workflow", *args)
        assert (r.returncode, one_error_line(r)) == (1, expected), args


def test_a_result_wait_with_no_timeout_says_once_why_the_run_has_not_ended(db: str, conn) -> None:
    """getting-started.md's `harvest workflow result <id>` with no worker running (the usual first
    slip) waited for ever in silence. A wait with no --timeout now says once, on stderr, what a
    timed-out one would (here: no live worker polls the queue), and waits on until the run ends."""
    execution_id = start(conn, "nobody_runs", "rn-1", queue="rnq")
    env = {**os.environ, "HARVEST_DATABASE_URL": db}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "harvest_py"), env.get("PYTHONPATH")) if p)
    code = "import harvest.cli.workflow as w; w.RESULT_NOTE_AFTER = 0.2; from harvest.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "workflow", "result", execution_id],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    guard = threading.Timer(30, proc.kill)  # (a wait that never notes would hang the readline)
    guard.start()
    try:
        note = proc.stderr.readline()
        assert note.startswith(f"note: workflow {execution_id} is still running after"), note
        assert "no live worker polls queue 'rnq'" in note and "still waiting" in note, note
        assert proc.poll() is None, "the note ended the wait"
        conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (execution_id,))
        out, err = proc.communicate(timeout=60)
    finally:
        guard.cancel()
    assert (proc.returncode, out) == (1, ""), err
    assert err.splitlines() == [f"error: workflow {execution_id} was terminated: done"], err


def test_workflow_stack_says_no_live_worker_polls_the_queue_of_its_workflow_task(db: str, conn) -> None:
    """A child sent to a queue no worker polls (workflows.md: queue="email") waited with a
    pending workflow task and no word why; the stack names the queue and says nobody polls it."""
    execution_id = start(conn, "notify_subscribers", "lonely", queue="nobody-polls-this")
    stack = json.loads(harvest(db, "workflow", "stack", execution_id, "--output", "json").stdout)
    assert stack["workflow_task"]["queue"] == "nobody-polls-this"
    assert stack["workflow_task"]["live_workers"] == 0
    text = harvest(db, "workflow", "stack", execution_id).stdout
    assert "no live worker polls queue 'nobody-polls-this'" in text, text
    r = harvest(db, "workflow", "result", execution_id, "--timeout", "1")
    assert r.returncode == 3 and "no live worker polls queue 'nobody-polls-this'" in one_error_line(r)


def test_dlq_list_aggregate_bulk_replay_and_discard(db: str, conn) -> None:
    runs = [park(conn, f"s{i}", activity="send_email", error_type="Timeout") for i in range(3)]
    park(conn, "c1", workflow="billing", activity="charge_card")
    # One parked row whose run has ended: replaying it is a per-row failure, not an abort.
    conn.execute("SELECT harvest.terminate_workflow(%s, 'gone')", (runs[0][0],))

    listed = json.loads(harvest(db, "dlq", "list", "--output", "json").stdout)
    assert len(listed["dead_letters"]) == 4 and listed["status"] == "complete"
    assert listed["unavailable_shards"] == [] and listed["next_cursor"] is None
    assert "send_email" in harvest(db, "dlq", "list", "--activity-name", "send_email").stdout
    agg = json.loads(harvest(db, "dlq", "count", "--by", "activity", "--output", "json").stdout)
    assert {(a["activity_name"], a["dead_letters"]) for a in agg["groups"]} == {
        ("send_email", 3),
        ("charge_card", 1),
    }

    r = harvest(db, "dlq", "bulk-replay", "--limit", "10")
    assert r.returncode == 2 and "at least one of --activity-name" in one_error_line(r)
    r = harvest(db, "dlq", "bulk-replay", "--activity-name", "send_email", "--limit", "5000")
    assert r.returncode == 2

    dry = json.loads(
        harvest(
            db, "dlq", "bulk-replay", "--activity-name", "send_email", "--dry-run", "--output", "json"
        ).stdout
    )
    assert dry["dry_run"] is True and dry["matched"] == 3 and dry["acted_on"] == 0
    assert sorted(dry["ids"]) == sorted(d for _, d in runs[1:])
    assert [f["id"] for f in dry["failures"]] == [runs[0][1]]
    assert conn.execute("SELECT count(*) FROM harvest.dead_letters").fetchone()[0] == 4  # nothing written

    r = harvest(db, "dlq", "bulk-replay", "--activity-name", "send_email", "--limit", "2", "--batch", "1")
    assert r.returncode == 0, r.stderr
    assert "3 matched, 1 replayed, 1 failed" in r.stdout  # limit 2: the ended run's row and one more
    r = harvest(db, "dlq", "bulk-replay", "--activity-name", "send_email", "--output", "json")
    result = json.loads(r.stdout)
    assert result["matched"] == 2 and result["acted_on"] == 1 and len(result["failures"]) == 1
    assert result["failures"][0]["sqlstate"] == "HR005"
    assert (
        conn.execute("SELECT count(*) FROM harvest.tasks WHERE activity_name = 'send_email'").fetchone()[0]
        == 2
    )

    r = harvest(db, "dlq", "bulk-discard", "--workflow-name", "billing", "--output", "json")
    assert json.loads(r.stdout)["acted_on"] == 1
    audit = conn.execute("SELECT operation FROM harvest.audit_log ORDER BY id").fetchall()
    assert ("dead_letters.bulk_discard",) in audit and ("dead_letters.bulk_replay",) in audit


def test_worker_fleet_commands_and_drain(db: str, conn) -> None:
    # w-live beats every 300 s, so it stays healthy however slow the CLI calls below are on a
    # loaded machine (at 5 s it went stale after 10 s of them).
    conn.execute("SELECT harvest.register_worker('w-live', ARRAY['email', 'default'], 'h1', 1, 300)")
    conn.execute("SELECT harvest.register_worker('w-stale', ARRAY['email'], 'h2', 2, 5)")
    conn.execute(
        "UPDATE harvest.workers SET last_heartbeat_at = now() - interval '1 minute' WHERE id = 'w-stale'"
    )
    conn.execute("SELECT harvest.register_worker('w-gone', ARRAY['email'], 'h3', 3, 5)")
    conn.execute("SELECT harvest.stop_worker('w-gone')")

    rows = json.loads(harvest(db, "worker", "list", "--output", "json").stdout)
    assert {r["worker_id"]: r["health"] for r in rows["workers"]} == {
        "w-live": "healthy",
        "w-stale": "stale",
        "w-gone": "stopped",
    }
    stale = json.loads(
        harvest(db, "worker", "list", "--status", "active", "--health", "stale", "--output", "json").stdout
    )
    assert [r["worker_id"] for r in stale["workers"]] == ["w-stale"]
    r = harvest(db, "worker", "list", "--status", "sleepy")
    assert r.returncode == 2 and 'unknown worker status "sleepy"' in one_error_line(r)
    assert "w-live" in harvest(db, "worker", "list").stdout

    got = json.loads(harvest(db, "worker", "get", "w-live", "--output", "json").stdout)
    assert got["claimed_task_ids"] == [] and got["queues"] == ["email", "default"]
    # The hint names the command (it named only the SQL function, over HTTP too).
    nobody = harvest(db, "worker", "get", "nobody")
    assert nobody.returncode == 1 and one_error_line(nobody) == (
        "error: worker nobody is not registered: list workers with harvest worker list"
        " (GET /workers, or harvest.list_workers() in SQL)"
    )
    health = json.loads(harvest(db, "worker", "health", "--output", "json").stdout)
    # by_queue counts every worker that is not stopped (the spec's 4 healthy + 1 stale = 5); the
    # health split is by_queue_health (issue 12 item 19).
    assert (
        health["healthy"] == 1 and health["stale"] == 1 and health["by_queue"] == {"email": 2, "default": 1}
    )
    assert health["by_queue_health"]["email"] == {"healthy": 1, "draining": 0, "stale": 1}
    assert health["by_shard"] == {"0": 2}
    assert health["status"] == "complete" and health["unavailable_shards"] == []

    preview = json.loads(
        harvest(db, "worker", "drain-preview", "--queue", "email", "--output", "json").stdout
    )
    assert {p["worker_id"]: p["outcome"] for p in preview} == {
        "w-live": "accepted",
        "w-stale": "stale_worker",
    }
    assert conn.execute("SELECT status FROM harvest.workers WHERE id = 'w-live'").fetchone()[0] == "active"

    outcomes = {}
    for worker_id in ("w-live", "w-live", "w-stale", "w-gone", "w-none"):
        r = harvest(
            db,
            "worker",
            "drain",
            worker_id,
            "--deadline",
            "2099-01-01T00:00:00Z",
            "--operator-id",
            "alice",
            "--output",
            "json",
        )
        outcomes.setdefault(worker_id, []).append((json.loads(r.stdout)["outcome"], r.returncode))
    assert outcomes == {
        "w-live": [("accepted", 0), ("already_draining", 0)],
        "w-stale": [("stale_worker", 0)],
        "w-gone": [("already_stopped", 0)],
        "w-none": [("not_found", 1)],
    }
    audit = conn.execute(
        "SELECT operator_id, operation, target, details ->> 'outcome' FROM harvest.audit_log ORDER BY id"
    ).fetchall()
    assert audit[0] == ("alice", "worker.drain", "w-live", "accepted") and len(audit) == 5


def test_retention_status_and_run_now(db: str, conn) -> None:
    old = start(conn, "wf", "old")
    conn.execute("SELECT harvest.terminate_workflow(%s, 'x')", (old,))
    conn.execute(
        "UPDATE harvest.executions SET completed_at = now() - interval '40 days' WHERE id = %s", (old,)
    )
    running = start(conn, "wf", "running")
    conn.execute(
        "UPDATE harvest.executions SET created_at = now() - interval '90 days' WHERE id = %s", (running,)
    )

    status = json.loads(harvest(db, "retention", "status", "--output", "json").stdout)
    assert status["configured"] is False
    r = harvest(db, "retention", "run-now")
    # The fix names the CLI's command (the SQL one follows it, for a psql session's same error).
    assert r.returncode == 2 and one_error_line(r) == (
        "error: retention is not configured: no max age: harvest retention set --max-age '30 days' "
        "(SQL: SELECT harvest.set_retention('30 days')), or pass a max age (run-now --max-age)"
    )
    assert harvest(db, "retention", "set", "--max-age", "30 days").returncode == 0
    status = json.loads(harvest(db, "retention", "status", "--output", "json").stdout)
    assert status["configured"] is True and status["eligible"] == 1
    r = harvest(db, "retention", "run-now", "--output", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["deleted"] == 1
    left = {str(x[0]) for x in conn.execute("SELECT id FROM harvest.executions").fetchall()}
    assert left == {running}
    assert (
        conn.execute("SELECT count(*) FROM harvest.events WHERE execution_id = %s", (old,)).fetchone()[0] == 0
    )


def test_retention_deletes_stopped_and_long_stale_worker_rows(db: str, conn) -> None:
    """Issue 12 item 20: crashed workers' rows do not pile up forever; live and recent ones stay."""
    for worker_id in ("crashed", "stopped", "recent", "live"):
        conn.execute("SELECT harvest.register_worker(%s, ARRAY['default'], 'h', 1, 5)", (worker_id,))
    conn.execute("SELECT harvest.stop_worker('stopped')")
    conn.execute(
        "UPDATE harvest.workers SET last_heartbeat_at = now() - interval '30 days'"
        " WHERE id IN ('crashed', 'stopped')"
    )
    conn.execute(
        "UPDATE harvest.workers SET last_heartbeat_at = now() - interval '1 hour' WHERE id = 'recent'"
    )
    status = json.loads(harvest(db, "retention", "status", "--output", "json").stdout)
    assert status["worker_max_age"] == "7 days" and status["workers_eligible"] == 2
    r = harvest(db, "retention", "run-now", "--output", "json")
    assert r.returncode == 2 and "retention is not configured" in one_error_line(r)  # executions: opt-in
    assert {x[0] for x in conn.execute("SELECT id FROM harvest.workers")} == {"recent", "live"}
    r = harvest(db, "retention", "set", "--worker-max-age", "30 minutes", "--output", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["worker_max_age"] == "00:30:00", r.stderr
    assert harvest(db, "retention", "set", "--max-age", "30 days").returncode == 0
    r = harvest(db, "retention", "run-now", "--output", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["workers_deleted"] == 1, r.stdout + r.stderr
    assert {x[0] for x in conn.execute("SELECT id FROM harvest.workers")} == {"live"}


def test_retention_set_writes_both_ages_or_neither(db: str, conn) -> None:
    """Both ages go in one transaction: a refused worker age leaves the run age as it was."""
    r = harvest(db, "retention", "set", "--max-age", "30 days", "--worker-max-age", "soon")
    assert r.returncode != 0 and "soon" in one_error_line(r), r.stdout + r.stderr
    status = json.loads(harvest(db, "retention", "status", "--output", "json").stdout)
    assert status["max_age"] is None and status["worker_max_age"] == "7 days", status
    r = harvest(
        db,
        "retention",
        "set",
        "--max-age",
        "30 days",
        "--batch-size",
        "50",
        "--worker-max-age",
        "off",
        "--output",
        "json",
    )
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    assert (status["max_age"], status["batch_size"], status["worker_max_age"]) == ("30 days", 50, None)


def test_preflight_pass_warn_and_fail(db: str, conn, fresh_db: str, tmp_path, monkeypatch) -> None:
    # Other function files may have changed since the template was migrated: bring it current.
    assert harvest(db, "migrate", "run").returncode == 0
    r = harvest(db, "preflight")
    assert r.returncode == 2, r.stdout + r.stderr  # retention not configured: warn
    assert r.stdout.startswith("overall_status: warn")
    assert "retention" in r.stdout and "remediation:" in r.stdout
    conn.execute("SELECT harvest.set_retention('30 days')")
    app_module = tmp_path / "pf_app.py"
    app_module.write_text(
        "from harvest import App, activity, workflow\n"
        "@activity(queue='email')\nasync def send(ctx): return 1\n"
        "@workflow\nasync def flow(ctx): return 1\n"
        "app = App(workflows=[flow], activities=[send])\n"
    )
    monkeypatch.chdir(tmp_path)
    r = harvest(db, "preflight", "--app", "pf_app:app", "--output", "json")
    assert r.stdout.startswith("{"), r.stderr
    report = json.loads(r.stdout)
    coverage = next(c for c in report["checks"] if c["name"] == "queue_coverage")
    assert coverage["status"] == "warn" and set(coverage["details"]["uncovered"]) == {"default", "email"}
    assert r.returncode == 2
    conn.execute("SELECT harvest.register_worker('w1', ARRAY['email', 'default'], 'h', 1, 5)")
    r = harvest(db, "preflight", "--app", "pf_app:app")
    assert r.returncode == 0, r.stdout
    assert r.stdout.startswith("overall_status: pass")
    r = harvest(fresh_db, "preflight", "--output", "json")
    assert r.returncode == 1
    failed = {c["name"] for c in json.loads(r.stdout)["checks"] if c["status"] == "fail"}
    assert {"migrations", "schema_version"} <= failed
    r = harvest("postgresql://nobody@127.0.0.1:1/none", "preflight")
    assert r.returncode == 1 and "database" in r.stdout


def test_preflight_resolves_dotted_registered_names(db: str, conn, tmp_path, monkeypatch) -> None:
    # A registered name may hold dots: `charge` registered as `billing.charge` resolves as written.
    assert harvest(db, "migrate", "run").returncode == 0
    conn.execute("SELECT harvest.set_retention('30 days')")
    conn.execute("SELECT harvest.register_worker('w1', ARRAY['default'], 'h', 1, 5)")
    (tmp_path / "pf_dotted.py").write_text(
        "from harvest import App, activity, workflow\n"
        "@activity(name='billing.charge')\nasync def charge(ctx): return 1\n"
        "@workflow(name='billing.refund')\nasync def refund(ctx): return 1\n"
        "@workflow(activities=[charge, 'billing.charge'], children=[refund, 'billing.refund'])\n"
        "async def flow(ctx): return 1\n"
        "app = App(workflows=[flow, refund], activities=[charge])\n"
    )
    monkeypatch.chdir(tmp_path)
    r = harvest(db, "preflight", "--app", "pf_dotted:app", "--output", "json")
    check = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "catalog_consistency")
    assert check["status"] == "pass", check
    assert r.returncode == 0, r.stdout


def test_preflight_coverage_reads_the_fleet_without_app(db: str, conn) -> None:
    assert harvest(db, "migrate", "run").returncode == 0
    conn.execute("SELECT harvest.set_retention('30 days')")

    def coverage():
        r = harvest(db, "preflight", "--output", "json")
        report = json.loads(r.stdout)
        return r.returncode, next(c for c in report["checks"] if c["name"] == "queue_coverage")

    # No worker at all: coverage is unknown, and the gate does not pass silently.
    code, check = coverage()
    assert (code, check["status"]) == (2, "warn"), check
    assert check["details"]["uncovered"] is None and "no worker has registered" in check["summary"]
    text = harvest(db, "preflight")
    assert text.returncode == 2 and "queue_coverage (warn)" in text.stdout
    # The queues the fleet registered, each with a live worker: not a pass, since a queue no
    # worker ever registered is not seen without --app (the declared queues are unknown).
    conn.execute("SELECT harvest.register_worker('w1', ARRAY['email', 'default'], 'h', 1, 5)")
    code, check = coverage()
    assert (code, check["status"]) == (0, "skip"), check
    assert check["details"] == {"source": "fleet", "declared": ["default", "email"], "uncovered": []}
    assert "--app" in check["remediation"]
    # Every worker of those queues stopped: each registered queue is reported uncovered.
    conn.execute("SELECT harvest.stop_worker('w1')")
    code, check = coverage()
    assert (code, check["status"]) == (2, "warn"), check
    assert check["details"]["uncovered"] == ["default", "email"]


def test_preflight_names_every_unregistered_dependency(db: str, conn, tmp_path, monkeypatch) -> None:
    assert harvest(db, "migrate", "run").returncode == 0
    conn.execute("SELECT harvest.set_retention('30 days')")
    conn.execute("SELECT harvest.register_worker('w1', ARRAY['default'], 'h', 1, 5)")
    (tmp_path / "pf_deps.py").write_text(
        "from harvest import App, activity, workflow\n"
        "@activity\nasync def send(ctx): return 1\n"
        "@workflow\nasync def child(ctx): return 1\n"
        "@workflow(activities=[send, 'charge_card'], children=[child, 'generate_report'])\n"
        "async def flow(ctx): return 1\n"
        "broken = App(workflows=[flow, child], activities=[send])\n"
    )
    monkeypatch.chdir(tmp_path)
    r = harvest(db, "preflight", "--app", "pf_deps:broken", "--output", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    check = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "catalog_consistency")
    assert check["status"] == "fail"
    assert check["details"]["failures"] == [
        "workflow 'flow' references unregistered activity 'charge_card'",
        "workflow 'flow' references unregistered child workflow 'generate_report'",
    ]
