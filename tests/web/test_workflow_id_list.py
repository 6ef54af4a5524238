"""The runs of one workflow id, listed (GET /workflows?workflow_id=, `harvest workflow list
--workflow-id`, harvest.list_executions' p_workflow_id). Before, a client that kept a workflow id
found its current run (GET /workflows/current) but could not list its runs: a continue-as-new
chain, a reset's forks, the earlier runs of a reused id."""

from __future__ import annotations

import json

import psycopg
import pytest
from served_cli import served, transports
from web_helpers import api_client

from harvest.core.errors import InvalidArgument
from harvest.db.sqlapi import SqlApi


def _start(dsn: str, workflow_id: str, name: str = "wf", *, end: bool = False) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        (run,) = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow("
            "%s, '[]', %s, 'q', 'allow_duplicate_failed_only')",
            (name, workflow_id),
        ).fetchone()
        if end:
            conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (run,))
    return str(run)


def _runs_of_order_1(dsn: str) -> list[str]:
    """Three runs of order-1 (two of wf, one ended, and one of refund) and one of order-2; the
    ids of order-1's, newest first."""
    first = _start(dsn, "order-1", end=True)
    second = _start(dsn, "order-1")
    other = _start(dsn, "order-1", "refund")
    _start(dsn, "order-2")
    return [other, second, first]


def test_the_runs_of_a_workflow_id_are_listed_over_sql_and_http(db: str) -> None:
    runs = _runs_of_order_1(db)
    with psycopg.connect(db, autocommit=True) as conn:
        api = SqlApi(conn)
        assert [str(r["execution_id"]) for r in api.list_executions(workflow_id="order-1")] == runs
        named = api.list_executions(workflow_id="order-1", workflow_name="wf", order="asc")
        assert [str(r["execution_id"]) for r in named] == runs[:0:-1]
        assert api.list_executions(workflow_id="order-3") == []
        with pytest.raises(InvalidArgument, match="workflow_id is empty"):
            api.list_executions(workflow_id="")
    with api_client(db) as http:
        listed = http.get("/workflows", params={"workflow_id": "order-1", "page_size": 2})
        assert listed.status_code == 200, listed.text
        page = listed.json()
        assert [r["execution_id"] for r in page["executions"]] == runs[:2]
        rest = http.get(
            "/workflows", params={"workflow_id": "order-1", "page_size": 2, "cursor": page["next_cursor"]}
        ).json()
        assert [r["execution_id"] for r in rest["executions"]] == runs[2:] and rest["next_cursor"] is None
        # A cursor is its filters': another id's list refuses it.
        other = http.get("/workflows", params={"workflow_id": "order-2", "cursor": page["next_cursor"]})
        assert other.status_code == 400 and other.json()["error"]["field"] == "cursor", other.text
        doc = http.get("/openapi.json").json()
        names = [p["name"] for p in doc["paths"]["/workflows"]["get"]["parameters"]]
        assert "workflow_id" in names


def test_the_cli_lists_a_workflow_ids_runs_over_both_transports(db: str, monkeypatch) -> None:
    runs = _runs_of_order_1(db)
    with served(db, monkeypatch):
        done = transports(db, "workflow", "list", "--workflow-id", "order-1", "--output", "json")
    for how, result in done.items():
        assert result.exit_code == 0, (how, result.output)
        assert [r["execution_id"] for r in json.loads(result.stdout)["executions"]] == runs, how
    # An empty id is refused on both (a query's empty parameter is an absent one to the API).
    with served(db, monkeypatch):
        empty = transports(db, "workflow", "list", "--workflow-id", "")
    for how, result in empty.items():
        assert result.exit_code == 2 and "workflow_id is empty" in result.output, (how, result.output)


def test_a_workflow_ids_runs_are_listed_from_every_shard(two_shards) -> None:
    """A pinned start's run is not on the id's hashed shard: the list asks every shard, as the
    current run's lookup does."""
    on_one = _start(two_shards[1], "cart-9")
    on_zero = _start(two_shards[0], "cart-9", end=True)
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in two_shards.items()},
    }
    with api_client(None, env=env) as api:
        found = api.get("/workflows", params={"workflow_id": "cart-9"}).json()
    assert {(r["execution_id"], r["shard_id"]) for r in found["executions"]} == {(on_one, 1), (on_zero, 0)}
    assert found["status"] == "complete"


def test_the_list_of_a_workflow_ids_runs_reads_an_index_of_workflow_ids(conn: psycopg.Connection) -> None:
    """At 100,000 runs of 100 workflows the statement list_executions builds for a workflow id
    reads an index led by workflow ids, 4 buffers (executions_workflow_id_runs; an index led by
    the name read the whole of it, 650 buffers)."""
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at)"
        " SELECT gen_random_uuid(), 'wf-' || (g % 100), 'order-' || g, 'COMPLETED',"
        " now() - g * interval '1 second'"
        " FROM generate_series(1, 100000) AS g"
    )
    conn.execute("ANALYZE harvest.executions")
    # (the statement harvest.list_executions runs for p_workflow_id alone: functions/executions.sql)
    (plan,) = conn.execute(
        "EXPLAIN (FORMAT JSON) SELECT e.id FROM harvest.executions AS e"
        " WHERE true AND e.workflow_id = 'order-500' AND true"
        " ORDER BY e.created_at DESC, e.id DESC LIMIT 51"
    ).fetchone()

    def indexes(node: dict) -> list[str]:
        return [node.get("Index Name", "")] + [i for child in node.get("Plans", []) for i in indexes(child)]

    assert "executions_workflow_id_runs" in indexes(plan[0]["Plan"]), plan
    with conn.transaction():
        rows = SqlApi(conn).list_executions(workflow_id="order-500")
    assert [r["workflow_id"] for r in rows] == ["order-500"]
