"""What a page of a run's direct children costs once the run has many.

GET /workflows/{id}/children answers a page (50 by default) and the CLI reads every page; each
shard is asked for page_size + 1 rows after the cursor's position (sqlapi.LIST_CHILDREN_PAGE).
harvest.list_children read and sorted every child of the run to answer those rows: a run with
100,000 children paid that for each page. A page of direct children now reads a page in the
database: harvest.list_children takes the position and the page size, and walks
executions_parent_created (parent_id, created_at DESC, id) from the position (migration 0094).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from test_generic_plans import Statement, nodes, plain_sql

from harvest.db import sqlapi

CHILDREN = 20_000  # direct children of the parent
BURST = 200  # the last BURST share one created_at (what one decision's starts leave)
OTHERS = 2_000  # another parent's children at the burst's instant
PAGE = 51  # the route's default page and the row that says whether there is a next one


@pytest.fixture(scope="module")
def children_db(module_db: str) -> tuple[str, str]:
    """(DSN, parent): a parent with CHILDREN children, one in ten COMPLETED, the newest BURST at
    one instant; and another parent's children beside them, nine in ten COMPLETED, OTHERS of
    them at that instant too (children started by one transaction that completed both parents'
    workflow tasks). Once for the module: its tests only read them."""
    with psycopg.connect(module_db, autocommit=True) as conn:
        return module_db, _fill(conn)


@pytest.fixture
def many_children(children_db: tuple[str, str]) -> Iterator[tuple[psycopg.Connection, str]]:
    dsn, parent = children_db
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn, parent


def _fill(conn: psycopg.Connection) -> str:
    parent = str(uuid.uuid4())
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, created_at)"
        " VALUES (%s, 'parent', 'p', '2030-01-01 00:00:00+00')",
        (parent,),
    )
    conn.execute(
        "INSERT INTO harvest.executions"
        " (id, workflow_name, workflow_id, status, created_at, parent_id, parent_seq)"
        " SELECT gen_random_uuid(), 'kid', 'kid-' || g,"
        " CASE WHEN g %% 10 = 0 THEN 'COMPLETED' ELSE 'RUNNING' END,"
        " '2030-01-01 00:00:00+00'::timestamptz + least(g, %(n)s - %(burst)s) * interval '1 second',"
        " %(parent)s, g FROM generate_series(1, %(n)s) AS g",
        {"n": CHILDREN, "burst": BURST, "parent": parent},
    )
    other = str(uuid.uuid4())
    conn.execute(
        "INSERT INTO harvest.executions"
        " (id, workflow_name, workflow_id, status, created_at, parent_id, parent_seq)"
        " SELECT gen_random_uuid(), 'kid', 'other-' || g,"
        " CASE WHEN g %% 10 = 0 THEN 'RUNNING' ELSE 'COMPLETED' END,"
        " '2030-01-01 00:00:00+00'::timestamptz + least(g, %(n)s - %(burst)s) * interval '1 second',"
        " %(other)s, g"
        " FROM generate_series(1, %(n)s - %(burst)s + %(others)s) AS g",
        {"n": CHILDREN, "burst": BURST, "others": OTHERS, "other": other},
    )
    conn.execute("VACUUM ANALYZE harvest.executions")
    return parent


def _page_sql(
    parent: str, after: tuple[Any, str] | None, status: str | None = None
) -> tuple[str, dict[str, Any]]:
    """The statement a shard runs for a page (the web route's, and the CLI's over HTTP)."""
    return sqlapi.LIST_CHILDREN_PAGE, sqlapi.list_children_page(parent, status, after, PAGE)


def _position(row: tuple[Any, ...]) -> tuple[Any, str]:
    return row[5], str(row[0])  # (created_at, execution_id)


def _whole(conn: psycopg.Connection, parent: str, status: str | None = None) -> list[tuple[Any, ...]]:
    return conn.execute(sqlapi.LIST_CHILDREN, sqlapi.list_children(parent, status, 1)).fetchall()


# With a status too: the route's pages of a status read that status's children down
# executions_parent_status_created (migration 0095), not through the run's children of other
# statuses (one in ten here is COMPLETED: a page of them read ten times the page).
@pytest.mark.parametrize("status", [None, "COMPLETED", "running"])
def test_a_page_of_direct_children_reads_a_page_of_them(
    many_children: tuple[psycopg.Connection, str], status: str | None
) -> None:
    """The first page, a page from inside the burst of children that share one created_at, and
    a page from far down the list each touch a few index and heap pages, not every child (the
    old function: thousands of buffers for 20,000 children, per page). Each page is asked for
    six times first: PL/pgSQL may keep a generic plan of a statement after five calls.
    """
    conn, parent = many_children
    whole = _whole(conn, parent, status)
    for start in (0, BURST // 2, len(whole) * 3 // 4):
        after = _position(whole[start - 1]) if start else None
        sql, params = _page_sql(parent, after, status)
        for _ in range(6):
            rows = conn.execute(sql, params).fetchall()
            assert rows == whole[start : start + PAGE], (status, start)
        (explained,) = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).fetchone()
        plan = explained[0]["Plan"]
        buffers = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
        assert buffers <= 3 * PAGE, f"{buffers} buffers for a page of {PAGE} at {start} ({status}): {plan}"


def test_the_pages_of_the_children_join_up_to_the_whole_list(
    many_children: tuple[psycopg.Connection, str],
) -> None:
    """Page after page from each page's last row, ties in created_at included, gives the whole
    list in its order, each child once."""
    conn, parent = many_children
    for status in (None, "COMPLETED", "running"):
        whole = _whole(conn, parent, status)
        seen: list[tuple[Any, ...]] = []
        after = None
        while True:
            rows = conn.execute(*_page_sql(parent, after, status)).fetchall()
            seen += rows
            if len(rows) < PAGE:
                break
            after = _position(rows[-1])
        assert seen == whole and len({r[0] for r in seen}) == len(whole), status


# The first page's statement (the tree walk's each level too, a run's children whole: p_limit
# NULL). The next pages' is planned with its values at each call (EXECUTE), so the test above
# reads it as the function runs it.
FIRST_PAGE = Statement(
    "list_children",
    r"SELECT e\.id, e\.parent_id[^;]*?FROM harvest\.executions AS e\s+WHERE e\.parent_id = p_execution_id",
    {"p_execution_id": "uuid", "v_status": "text", "p_limit": "integer"},
)
# The first page of one status.
FIRST_PAGE_OF_A_STATUS = Statement(
    "list_children",
    r"SELECT e\.id, e\.parent_id[^;]*?FROM harvest\.executions AS e\s+WHERE e\.parent_id = p_execution_id"
    r" AND e\.status = v_status",
    {"p_execution_id": "uuid", "v_status": "text", "p_limit": "integer"},
)


@pytest.mark.parametrize("status", [None, "COMPLETED"])
@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
def test_the_first_page_reads_a_page_under_either_plan(
    many_children: tuple[psycopg.Connection, str], plan_cache_mode: str, status: str | None
) -> None:
    """PL/pgSQL keeps a generic plan after five calls: the first page, planned with or without
    its values, reads its rows down an index in the list's order (no sort of the run's
    children), of one status down the index that holds them by status."""
    conn, parent = many_children
    whole = _whole(conn, parent, status)
    statement = FIRST_PAGE if status is None else FIRST_PAGE_OF_A_STATUS
    conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
    conn.execute(f"PREPARE page (uuid, text, integer) AS {plain_sql(conn, statement)}")
    # (EXECUTE takes no bound parameters: the values are written into it)
    client = psycopg.ClientCursor(conn)
    execute = "EXECUTE page (%s::uuid, %s::text, %s::integer)"
    try:
        rows = client.execute(execute, (parent, status, PAGE)).fetchall()
        assert rows == [(*row[:8], 1) for row in whole[:PAGE]]
        (explained,) = client.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + execute, (parent, status, PAGE)
        ).fetchone()
    finally:
        conn.execute("DEALLOCATE page")
    plan = explained[0]["Plan"]
    kinds = [node["Node Type"] for node in nodes(plan)]
    assert "Sort" not in kinds and "Incremental Sort" not in kinds, plan
    scans = [n.get("Index Name") for n in nodes(plan) if n.get("Relation Name") == "executions"]
    index = "executions_parent_created" if status is None else "executions_parent_status_created"
    assert scans == [index], plan
    buffers = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert buffers <= 3 * PAGE, f"{buffers} buffers: {plan}"
