"""Operator actions made through the CLI are audited with source cli (issue 12, item 17)."""

from __future__ import annotations

import json

from operator_helpers import harvest, park, start


def test_cli_actions_are_audited_with_source_cli(db: str, conn) -> None:
    doomed = start(conn, "wf", "doomed")
    r = harvest(db, "workflow", "terminate", doomed, "--reason", "stuck")
    assert r.returncode == 0, r.stderr
    _, dead_letter = park(conn, "dl")
    r = harvest(db, "dlq", "discard", str(dead_letter))
    assert r.returncode == 0, r.stderr
    rows = conn.execute(
        "SELECT operation, target, actor = session_user, source, details FROM harvest.audit_log ORDER BY id"
    ).fetchall()
    assert [row[:4] for row in rows] == [
        ("workflow.terminate", doomed, True, "cli"),
        ("dead_letter.discard", str(dead_letter), True, "cli"),
    ]
    # The CLI named its connections (harvest-cli): no unknown application name is kept.
    assert all("application_name" not in row[4] for row in rows)
    assert rows[0][4] == {"reason": "stuck", "workflow_name": "wf"}

    listed = json.loads(harvest(db, "audit", "list", "--output", "json").stdout)
    assert listed["next_cursor"] is None and listed["status"] == "complete"
    assert [(row["operation"], row["source"]) for row in listed["audit_log"]] == [
        ("dead_letter.discard", "cli"),
        ("workflow.terminate", "cli"),
    ]
    assert "SOURCE" in harvest(db, "audit", "list").stdout


def test_an_unnamed_client_is_recorded_as_cli_with_its_application_name(db: str, conn) -> None:
    run = start(conn, "wf", "other")
    conn.execute("SET application_name = 'nightly-script'")
    conn.execute("SELECT harvest.cancel_workflow(%s, 'cleanup')", (run,))
    [(source, details)] = conn.execute("SELECT source, details FROM harvest.audit_log").fetchall()
    assert source == "cli" and details["application_name"] == "nightly-script"


def test_audit_list_pages_with_the_next_cursor(db: str, conn) -> None:
    """`harvest audit list` had only --limit: past the newest 1,000 rows nothing could be read.
    It pages by --cursor as `harvest dlq list` does: each row once, newest first, and a last
    page whose next_cursor is null."""
    for n in range(5):
        conn.execute("SELECT harvest._audit('worker.drain', %s, 'ops', '{}')", (f"w{n}",))
    seen: list[str] = []
    cursor: list[str] = []
    pages = 0
    while True:
        out = harvest(db, "audit", "list", "--limit", "2", *cursor, "--output", "json")
        assert out.returncode == 0, out.stderr
        page = json.loads(out.stdout)
        assert len(page["audit_log"]) <= 2
        seen += [row["target"] for row in page["audit_log"]]
        pages += 1
        if page["next_cursor"] is None:
            break
        cursor = ["--cursor", page["next_cursor"]]
    assert seen == [f"w{n}" for n in reversed(range(5))] and pages == 3
    # The table says how to ask for the next page too (it printed no cursor at all).
    first = harvest(db, "audit", "list", "--limit", "2")
    assert first.returncode == 0 and "next page: --cursor au1." in first.stdout, first.stdout
    last = harvest(db, "audit", "list", "--limit", "10")
    assert "next page" not in last.stdout, last.stdout
    other = harvest(db, "audit", "list", "--operation", "workflow.terminate", *cursor)
    assert (other.returncode, "other filters" in other.stderr) == (2, True), other.stderr
