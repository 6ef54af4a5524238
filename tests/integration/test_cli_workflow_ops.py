"""`harvest workflow query|update|reset|handlers` and `harvest concurrency status`, run as real
`harvest` processes against a real database (a real worker answers queries and updates)."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from operator_helpers import harvest, park, start
from psycopg.types.json import Jsonb
from test_queries_updates import app, budget, settled

from harvest import Client
from harvest.declare.messages import describe_handlers


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


def test_handlers_prints_the_describe_handlers_shape(db: str) -> None:
    r = harvest(
        None, "workflow", "handlers", "--app", "test_queries_updates:app", "budget", "--output", "json"
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == describe_handlers(app, "budget")
    assert {q["name"] for q in json.loads(r.stdout)["queries"]} == {
        "total",
        "owner",
        "greeting",
        "broken",
        "rotate_in_query",
        "escape_in_query",
    }
    r = harvest(None, "workflow", "handlers", "--app", "test_queries_updates:app", "budget")
    assert r.returncode == 0
    assert "queries:" in r.stdout and "spend" in r.stdout and "HAS_VALIDATOR" in r.stdout
    r = harvest(None, "workflow", "handlers", "--app", "test_queries_updates:app", "nope")
    assert r.returncode == 1 and "no workflow named 'nope' is registered" in one_error_line(r)
    r = harvest(None, "workflow", "handlers", "--app", "no_such_module:app", "budget")
    assert r.returncode == 1 and "cannot import 'no_such_module'" in one_error_line(r)


def test_query_and_update_through_the_cli(db: str, start_worker, client: Client) -> None:
    start_worker(app)
    handle = client.start_workflow(budget, "ann")
    settled(handle)
    eid = handle.execution_id

    r = harvest(db, "workflow", "query", eid, "owner", "--input-json", "true", "--output", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"execution_id": eid, "query": "owner", "result": "ANN"}
    r = harvest(db, "workflow", "query", eid, "total")
    assert r.returncode == 0 and r.stdout.strip() == "0"
    r = harvest(db, "workflow", "query", eid, "owner", "--input-file", "-", stdin="false")
    assert r.returncode == 0 and r.stdout.strip() == '"ann"'
    r = harvest(db, "workflow", "query", eid, "broken")
    assert r.returncode == 1 and "this query is broken" in one_error_line(r)
    r = harvest(db, "workflow", "query", eid, "owner", "--input-json", "{nope")
    assert r.returncode == 2 and "--input-json: not valid JSON" in one_error_line(r)

    r = harvest(db, "workflow", "update", eid, "spend", "--input-json", "30", "--output", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["status"] == "completed" and out["result"] == {"total": 30, "receipt": "booked 30"}
    r = harvest(
        db,
        "workflow",
        "update",
        eid,
        "spend",
        "--input-json",
        "5",
        "--wait",
        "accepted",
        "--update-id",
        "u-5",
        "--output",
        "json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["update_id"] == "u-5" and json.loads(r.stdout)["status"] in ("accepted",)
    r = harvest(db, "workflow", "update", eid, "spend", "--input-json", "-1")
    assert r.returncode == 1 and "rejected" in one_error_line(r) and "amount must be positive" in r.stderr
    r = harvest(db, "workflow", "update", eid, "spend", "--input-json", "1", "--wait", "sometime")
    assert r.returncode == 2  # click refuses the choice

    r = harvest(db, "workflow", "query", eid, "total", "--output", "json")
    assert json.loads(r.stdout)["result"] in (30, 35)
    handle.signal("close")
    assert handle.result(timeout=20)["total"] == 35


def test_query_without_a_worker_times_out_naming_why(db: str, conn) -> None:
    eid = start(conn, "budget", "lonely", queue="nobody-polls")
    r = harvest(db, "workflow", "query", eid, "total", "--timeout", "0.5")
    assert r.returncode == 1 and "no live worker polls task queue 'nobody-polls'" in one_error_line(r)


def test_reset_dry_run_plan_then_reset(db: str, conn) -> None:
    eid, _ = park(conn, "r1")
    r = harvest(db, "workflow", "reset", eid, "--to-event", "999", "--reason", "x", "--dry-run")
    assert r.returncode == 1
    assert "valid" in r.stdout and "problems:" in r.stdout and "event 999 is outside the history" in r.stdout
    r = harvest(db, "workflow", "reset", eid, "--to-event", "999", "--reason", "x", "--dry-run", "-o", "json")
    assert r.returncode == 1 and json.loads(r.stdout)["valid"] is False

    r = harvest(
        db,
        "workflow",
        "reset",
        eid,
        "--to-event",
        "1",
        "--reason",
        "bad deploy",
        "--dry-run",
        "--output",
        "json",
    )
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["valid"] and plan["dry_run"] and plan["new_execution_id"] is None and plan["problems"] == []
    status = conn.execute("SELECT status FROM harvest.executions WHERE id = %s", (eid,)).fetchone()[0]
    assert status == "RUNNING"  # the dry run wrote nothing

    r = harvest(
        db,
        "workflow",
        "reset",
        eid,
        "--to-event",
        "1",
        "--reason",
        "bad deploy",
        "--operator-id",
        "oncall",
        "--signal-reapply",
        "buffer",
    )
    assert r.returncode == 0, r.stderr
    fork = next(line.split()[-1] for line in r.stdout.splitlines() if line.startswith("new_execution_id"))
    assert uuid.UUID(fork)
    rows = conn.execute(
        "SELECT id::text, status FROM harvest.executions WHERE workflow_id = 'r1' ORDER BY created_at"
    )
    assert rows.fetchall() == [(eid, "TERMINATED"), (fork, "RUNNING")]

    r = harvest(db, "workflow", "reset", eid, "--to-event", "1", "--reason", "again")
    assert r.returncode == 1 and "TERMINATED" in one_error_line(r)
    r = harvest(db, "workflow", "reset", fork, "--to-event", "1")
    assert r.returncode == 2 and "--reason" in r.stderr  # required
    r = harvest(db, "workflow", "reset", fork, "--to-event", "1", "--reason", " ")
    assert r.returncode == 2 and "a reset needs a reason" in one_error_line(r)


def test_concurrency_status(db: str, conn) -> None:
    r = harvest(db, "concurrency", "status", "--output", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["keys"] == []
    conn.execute(
        "SELECT harvest.declare_flow_policies(%s)",
        (Jsonb({"workflows": {"wf_defer": {"concurrency": {"key": "input.t", "limit": 1}}}}),),
    )
    for n in (1, 2):
        conn.execute(
            "SELECT harvest.start_workflow('wf_defer', %s, %s, 'dq')", (Jsonb([{"t": "a"}]), f"d{n}")
        )
    conn.execute("SELECT * FROM harvest.claim_tasks('w', ARRAY['dq'], 10)")

    r = harvest(db, "concurrency", "status", "--output", "json")
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)["keys"]
    assert {k: row[k] for k in ("key", "max_concurrent", "in_flight", "pending")} == {
        "key": "a",
        "max_concurrent": 1,
        "in_flight": 1,
        "pending": 1,
    }
    r = harvest(db, "concurrency", "status")
    assert r.returncode == 0
    assert r.stdout.splitlines()[0].split() == ["KEY", "TASK_TYPE", "MAX_CONCURRENT", "IN_FLIGHT", "PENDING"]
    assert r.stdout.splitlines()[1].split() == ["a", "workflow", "1", "1", "1"] and "1 key(s)" in r.stdout
    assert json.loads(harvest(db, "concurrency", "status", "--key", "zzz", "-o", "json").stdout)["keys"] == []
    r = harvest(None, "concurrency", "status")
    assert r.returncode == 1 and "HARVEST_DATABASE_URL" in one_error_line(r)


def test_concurrency_status_shows_a_page_of_keys_and_how_to_ask_for_the_next(db: str, conn) -> None:
    """`harvest concurrency status` printed every key with live work (100,000 tenants: 100,000
    lines): a page of --limit keys (1000 by default) in key order, the footer naming the next
    page's --cursor."""
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, concurrency_key, created_at)"
        " SELECT gen_random_uuid(), 'wf', 'keyed-' || g, 'RUNNING', 'k' || g, now()"
        " FROM generate_series(1, 3) AS g"
    )
    first = json.loads(harvest(db, "concurrency", "status", "--limit", "2", "-o", "json").stdout)
    assert [r["key"] for r in first["keys"]] == ["k1", "k2"] and first["next_cursor"]
    text = harvest(db, "concurrency", "status", "--limit", "2").stdout
    assert f"2 key(s); next page: --cursor {first['next_cursor']}" in text, text
    rest = harvest(
        db, "concurrency", "status", "--limit", "2", "--cursor", first["next_cursor"], "-o", "json"
    )
    assert [r["key"] for r in json.loads(rest.stdout)["keys"]] == ["k3"]
    assert json.loads(rest.stdout).get("next_cursor") is None
    r = harvest(db, "concurrency", "status", "--limit", "0")
    assert r.returncode == 2 and "--limit" in one_error_line(r)


def test_worker_list_shows_the_first_limit_workers_and_how_many_match(db: str, conn) -> None:
    """`harvest worker list` printed every registered worker: the first --limit (200 by
    default) and, when it left some out, how many matched."""
    conn.execute(
        "INSERT INTO harvest.workers (id, queues, hostname, pid, status, started_at, last_heartbeat_at)"
        " SELECT 'pod-' || g, ARRAY['default'], 'h', g, 'stopped', now(), now()"
        " FROM generate_series(1, 3) AS g"
    )
    listed = json.loads(harvest(db, "worker", "list", "--limit", "2", "-o", "json").stdout)
    assert [w["worker_id"] for w in listed["workers"]] == ["pod-1", "pod-2"]
    assert listed["total"] == 3 and listed["truncated"] is True
    assert "2 of 3 (--limit up to 10000) worker(s)" in harvest(db, "worker", "list", "--limit", "2").stdout
    assert harvest(db, "worker", "list").stdout.rstrip().endswith("\n3 worker(s)")
