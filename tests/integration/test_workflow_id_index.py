"""One index by workflow id on harvest.executions (migration 0136): each run's insert and close
wrote an entry into two, (workflow_name, workflow_id, created_at DESC) and (workflow_id); one
led by the id, then the name, serves the lookups of both (docs/performance.md, "Index entries
per run, counted")."""

from __future__ import annotations

import psycopg

INDEXES_WITH_WORKFLOW_ID = """
SELECT i.relname, pg_catalog.pg_get_indexdef(x.indexrelid)
FROM pg_catalog.pg_index AS x
JOIN pg_catalog.pg_class AS i ON i.oid = x.indexrelid
WHERE x.indrelid = 'harvest.executions'::regclass AND x.indpred IS NULL
  AND pg_catalog.pg_get_indexdef(x.indexrelid) LIKE '%workflow_id%'
"""


def index_names(node: dict) -> list[str]:
    return [node.get("Index Name", "")] + [i for child in node.get("Plans", []) for i in index_names(child)]


def test_a_runs_row_is_in_one_index_by_workflow_id(conn: psycopg.Connection) -> None:
    """Only the unique index of live keys (partial) and executions_workflow_id_runs name the
    workflow id: a run's insert and its close (not HOT: it sets status) write one entry for it."""
    rows = conn.execute(INDEXES_WITH_WORKFLOW_ID).fetchall()
    assert [name for name, _ in rows] == ["executions_workflow_id_runs"], rows
    assert rows[0][1].endswith("(workflow_id, workflow_name, created_at DESC)"), rows


def test_a_business_keys_newest_run_reads_the_index_by_workflow_id(conn: psycopg.Connection) -> None:
    """At 100,000 runs of 100 workflows, a key's runs newest first (get_execution_by_workflow_id
    with a name, a chain's current run) read executions_workflow_id_runs, both columns in its
    condition, no sort; and the id alone (the workflow list's filter) reads it too."""
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at)"
        " SELECT gen_random_uuid(), 'wf-' || (g % 100), 'order-' || (g % 20000), 'COMPLETED',"
        " now() - g * interval '1 second'"
        " FROM generate_series(1, 100000) AS g"
    )
    conn.execute("ANALYZE harvest.executions")
    for where, order in (
        ("e.workflow_name = 'wf-5' AND e.workflow_id = 'order-105'", "e.created_at DESC"),
        ("e.workflow_id = 'order-105'", "e.created_at DESC, e.id DESC"),
    ):
        (plan,) = conn.execute(
            f"EXPLAIN (FORMAT JSON) SELECT e.id FROM harvest.executions AS e WHERE {where}"
            f" ORDER BY {order} LIMIT 1"
        ).fetchone()
        assert "executions_workflow_id_runs" in index_names(plan[0]["Plan"]), (where, plan)
    (found,) = conn.execute(
        "SELECT workflow_id FROM harvest.get_execution_by_workflow_id('order-105', 'wf-5')"
    ).fetchone()
    assert found == "order-105"
