"""A page of the audit log of one operation, read in its index's order.

harvest.list_audit_log pages newest first by (at DESC, id DESC) (migration 0089). Filtered by an
operation it read audit_log_operation_at (operation, at DESC), which has no id: every page
sorted the rows of each `at` it read (an Incremental Sort), so a burst of rows at one instant
(one statement's now: a retention run, a bulk replay audited per row) was read and sorted whole
for each page. audit_log_operation_newest (operation, at DESC, id DESC) holds the order
(migration 0094).
"""

from __future__ import annotations

import psycopg
import pytest
from test_generic_plans import Statement, nodes, plain_sql

PAGE = Statement(
    "list_audit_log",
    r"SELECT \* FROM harvest\.audit_log AS a",
    {"p_operation": "text", "p_before_at": "timestamptz", "p_before_id": "bigint", "p_limit": "integer"},
)
BURST = 100  # rows of the rare operation at one instant


@pytest.fixture
def bursts(conn: psycopg.Connection) -> psycopg.Connection:
    """20,000 rows of a frequent operation (one an instant) and 1,000 of a rare one, in bursts
    of BURST at one instant (a bulk action audited per row)."""
    conn.execute(
        "INSERT INTO harvest.audit_log (at, actor, operation, target)"
        " SELECT '2030-01-01 00:00:00+00'::timestamptz + g * interval '1 second', 'ann', 'often', 't' || g"
        " FROM generate_series(1, 20000) AS g"
    )
    conn.execute(
        "INSERT INTO harvest.audit_log (at, actor, operation, target)"
        " SELECT '2030-01-01 00:00:00+00'::timestamptz + (g / %s) * interval '1 hour', 'ann', 'rare',"
        " 'r' || g"
        " FROM generate_series(1, 1000) AS g",
        (BURST,),
    )
    conn.execute("VACUUM ANALYZE harvest.audit_log")
    return conn


def test_a_page_of_one_operation_is_read_in_its_index_order_without_a_sort(
    bursts: psycopg.Connection,
) -> None:
    """The first page and a page from inside a burst, of one operation: no sort, and the rows
    read are the page's (the custom plan: the values known, as PL/pgSQL's first five calls
    plan it)."""
    conn = bursts
    everything = conn.execute(
        "SELECT at, id FROM harvest.audit_log WHERE operation = 'rare' ORDER BY at DESC, id DESC"
    ).fetchall()
    sql = plain_sql(conn, PAGE)
    conn.execute("SET plan_cache_mode = force_custom_plan")
    conn.execute(f"PREPARE page ({', '.join(PAGE.params.values())}) AS {sql}")
    # (EXECUTE takes no bound parameters: the values are written into it)
    client = psycopg.ClientCursor(conn)
    execute = "EXECUTE page ('rare', %s::timestamptz, %s::bigint, 20)"
    try:
        for before in (None, everything[BURST // 2]):
            at, last = before or (None, None)
            got = [(r[1], r[0]) for r in client.execute(execute, (at, last)).fetchall()]
            start = everything.index(before) + 1 if before else 0
            assert got == everything[start : start + 20]
            (explained,) = client.execute(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + execute, (at, last)
            ).fetchone()
            plan = explained[0]["Plan"]
            kinds = [n["Node Type"] for n in nodes(plan)]
            assert "Sort" not in kinds and "Incremental Sort" not in kinds, (before, kinds)
            scans = [n for n in nodes(plan) if n.get("Relation Name") == "audit_log"]
            assert scans and all(n["Actual Rows"] <= 20 for n in scans), (before, plan)
    finally:
        conn.execute("DEALLOCATE page")
