"""The runs that may replay a gate's DEFAULT_VERSION branch, counted (harvest.count_versions'
p_history_before, `harvest version-usage --history-before`, GET /admin/version-gates/usage?history_before=):
the active runs that recorded no marker of the gate and whose history began before it was deployed,
as version -1. Before, version-usage saw only the runs that recorded a marker, so it said "no active
run" while such runs existed, and the docs gave a hand-written query instead."""

from __future__ import annotations

import json

import psycopg
from served_cli import served, transports


def _decide(conn: psycopg.Connection, queue: str, commands: list[dict]) -> None:
    [(task, token)] = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('w', ARRAY[%s], 1)", (queue,)
    ).fetchall()
    conn.execute(
        "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)", (task, token, json.dumps(commands))
    )


def _runs_around_a_deploy(db: str) -> tuple[str, str, str]:
    """A run begun before the gate's deploy (no marker), the deploy's time, a run begun after it
    that recorded version 1."""
    with psycopg.connect(db, autocommit=True) as conn:
        (old,) = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('notify', '[]', 'old', 'vq')"
        ).fetchone()
        _decide(conn, "vq", [])  # (its first task: it waits, past where the gate goes)
        (deployed,) = conn.execute("SELECT clock_timestamp()").fetchone()
        (new,) = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('notify', '[]', 'new', 'vq')"
        ).fetchone()
        marker = {"change_id": "use-sms", "version": 1}
        _decide(conn, "vq", [{"type": "record_marker", "seq": 1, "kind": "version", "value": marker}])
    return str(old), deployed.isoformat(), str(new)


def _guard(deployed: str) -> tuple[str, ...]:
    """The release gate of a gate's DEFAULT_VERSION branch deployed at ``deployed``."""
    return (
        "version-usage",
        "--change-id",
        "use-sms",
        "--version",
        "-1",
        "--history-before",
        deployed,
        "--guard",
    )


def test_version_usage_counts_the_unmarked_runs_begun_before_the_deploy(db: str, monkeypatch) -> None:
    old, deployed, new = _runs_around_a_deploy(db)
    with served(db, monkeypatch):
        every = transports(
            db, "version-usage", "--change-id", "use-sms", "--history-before", deployed, "-o", "json"
        )
        text = transports(db, "version-usage", "--change-id", "use-sms", "--history-before", deployed)
        guard = transports(db, *_guard(deployed))
        plain = transports(db, "version-usage", "--change-id", "use-sms", "-o", "json")
        refused = transports(db, "version-usage", "--change-id", "use-sms", "--version", "-1")
    for how, r in every.items():
        assert r.exit_code == 0, (how, r.output)
        usage = [
            (u["version"], u["executions"], u["sample_execution_ids"]) for u in json.loads(r.stdout)["usage"]
        ]
        assert usage == [(-1, 1, [old]), (1, 1, [new])], how
    for how, r in text.items():
        assert r.exit_code == 0 and "use-sms no marker (DEFAULT_VERSION)  active" in r.output, (how, r.output)
    for how, r in guard.items():
        assert r.exit_code == 1 and "guard: 1 active run(s) still use" in r.stderr, (how, r.output)
    for how, r in plain.items():  # (without the time, the marked runs only, as before)
        assert r.exit_code == 0 and [u["version"] for u in json.loads(r.stdout)["usage"]] == [1], (
            how,
            r.output,
        )
    for how, r in refused.items():
        assert r.exit_code == 2 and "--history-before" in r.output, (how, r.output)
    # Once the old run ends, nothing needs the DEFAULT_VERSION branch: the guard passes.
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (old,))
    with served(db, monkeypatch):
        passed = transports(db, *_guard(deployed))
    for how, r in passed.items():
        assert r.exit_code == 0, (how, r.output)
