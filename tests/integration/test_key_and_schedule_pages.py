"""What a page of concurrency keys, or of schedules, costs once a fleet has many tenants.

GET /admin/concurrency, `harvest concurrency status` and the dashboard's concurrency page read
harvest.list_concurrency_keys, which counted every keyed live run and activity task and answered
every key: 100,000 tenants were 100,000 keys in each answer, every keyed row read for each. A
page of keys now reads its keys in key order down tasks_activity_concurrency_key and
executions_live_concurrency_key and counts only theirs (migration 0100). GET /admin/schedules
and the schedules page read harvest.list_schedules, every schedule of the database for each
answer: a page now reads its schedules by name down schedules_name_key from the cursor's.
"""

from __future__ import annotations

import psycopg
import pytest

from harvest.db import sqlapi

KEYS = 20_000  # tenants, each with a live run and a pending activity on its key
PAGE = 51  # the route's page and the key that says whether there is a next one


@pytest.fixture
def many_keys(conn: psycopg.Connection) -> psycopg.Connection:
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, concurrency_key, created_at)"
        " SELECT gen_random_uuid(), 'tenant_job', 'job-' || g, 'RUNNING', 'tenant:' || lpad(g::text, 6, '0'),"
        " '2030-01-01 00:00:00+00'::timestamptz + g * interval '1 second'"
        " FROM generate_series(1, %s) AS g",
        (KEYS,),
    )
    conn.execute(
        "INSERT INTO harvest.tasks (execution_id, kind, queue, status, due_at, scheduled_at, seq,"
        " activity_name, concurrency_key, concurrency_limit)"
        " SELECT e.id, 'activity', 'default', 'pending', e.created_at, e.created_at, 1, 'charge',"
        " e.concurrency_key, 2 FROM harvest.executions AS e WHERE e.workflow_name = 'tenant_job'"
    )
    conn.execute("VACUUM ANALYZE harvest.executions")
    conn.execute("VACUUM ANALYZE harvest.tasks")
    return conn


def _steady_buffers(conn: psycopg.Connection, sql: str, params: dict[str, object]) -> tuple[list[tuple], int]:
    """The rows ``sql`` answers and the fewest shared buffers it touched over three EXPLAIN
    ANALYZE runs after six plain calls (PL/pgSQL may keep a generic plan after five). The
    fewest, not the last: a call that met a catalog cache reset (other databases of the
    suite's server are created and dropped meanwhile) or a replan after autovacuum's analyze
    counts those catalog reads too, and CI's load made that the whole difference once."""
    for _ in range(6):
        rows = conn.execute(sql, params).fetchall()
    fewest = None
    for _ in range(3):
        (explained,) = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).fetchone()
        plan = explained[0]["Plan"]
        touched = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
        fewest = touched if fewest is None else min(fewest, touched)
    assert fewest is not None
    return rows, fewest


def test_a_page_of_concurrency_keys_reads_a_page_of_them(many_keys: psycopg.Connection) -> None:
    """The first page and a page from far down the keys each touch a few buffers a key, not
    every keyed row (every key read and grouped: thousands of buffers for 20,000 tenants)."""
    conn = many_keys
    whole = conn.execute(sqlapi.CONCURRENCY_STATUS, sqlapi.list_concurrency_keys()).fetchall()
    assert len(whole) == 2 * KEYS
    for after in (None, "tenant:015000"):
        params = sqlapi.list_concurrency_keys(None, after, PAGE)
        rows, buffers = _steady_buffers(conn, sqlapi.CONCURRENCY_STATUS, params)
        start = 0 if after is None else next(i for i, r in enumerate(whole) if r[0] > after)
        assert rows == whole[start : start + 2 * PAGE]
        assert buffers <= 12 * PAGE, f"{buffers} buffers for a page of {PAGE} keys after {after}"


def _rows_read(conn: psycopg.Connection, table: str) -> int:
    """Rows this transaction read from ``table``: its sequential scans' rows and the entries its
    indexes returned."""
    (n,) = conn.execute(
        "SELECT pg_stat_get_xact_tuples_returned(%(t)s::regclass)"
        " + coalesce((SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid))"
        "   FROM pg_index AS i WHERE i.indrelid = %(t)s::regclass), 0)",
        {"t": table},
    ).fetchone()
    return int(n)


def test_a_page_of_concurrency_keys_reads_the_slots_of_its_runs_only(many_keys: psycopg.Connection) -> None:
    """Every tenant's run admitted (20,000 slots): a page of 100 keys looks up its runs' slots,
    where the in-flight rule's LEFT JOIN (harvest._live_keyed_runs) hashed every slot of the
    database for each page (20,000 slot rows)."""
    conn = many_keys
    conn.execute(
        "INSERT INTO harvest.workflow_slots (execution_id, concurrency_key, workflow_name, admitted_at)"
        " SELECT e.id, e.concurrency_key, e.workflow_name, e.created_at FROM harvest.executions AS e"
    )
    conn.execute("VACUUM ANALYZE harvest.workflow_slots")
    page = 100
    for after in (None, "tenant:015000"):
        with conn.transaction():
            before = _rows_read(conn, "harvest.workflow_slots")
            params = sqlapi.list_concurrency_keys(None, after, page)
            rows = conn.execute(sqlapi.CONCURRENCY_STATUS, params).fetchall()
            read = _rows_read(conn, "harvest.workflow_slots") - before
        first = 1 if after is None else 15_001
        workflow_rows = [r for r in rows if r[1] == "workflow"]
        assert [(r[0], r[3], r[4]) for r in workflow_rows] == [
            (f"tenant:{g:06d}", 1, 0) for g in range(first, first + page)
        ]
        assert read <= 2 * page + 10, f"{read} slot rows read for a page of {page} keys after {after}"


def test_a_page_of_schedules_reads_a_page_of_them(conn: psycopg.Connection) -> None:
    """The first page, a page far down the names and a page of paused ones each touch a few
    buffers a schedule, not every schedule."""
    conn.execute(
        "INSERT INTO harvest.schedules (name, workflow_name, interval_secs, paused, anchor_at,"
        " created_at, updated_at)"
        " SELECT 'tenant-' || lpad(g::text, 6, '0'), 'report', 3600, g %% 2 = 0, now(), now(), now()"
        " FROM generate_series(1, %s) AS g",
        (KEYS,),
    )
    conn.execute("VACUUM ANALYZE harvest.schedules")
    sql = "SELECT * FROM harvest.list_schedules(%(kind)s, %(after_name)s, %(limit)s, %(paused)s)"
    whole = conn.execute(sql, sqlapi.list_schedules()).fetchall()
    assert len(whole) == KEYS
    _, whole_buffers = _steady_buffers(conn, sql, sqlapi.list_schedules(None, None, 10_000, None))
    for after, paused in ((None, None), ("tenant-015000", None), ("tenant-015000", True)):
        rows, buffers = _steady_buffers(conn, sql, sqlapi.list_schedules(None, after, PAGE, paused))
        expect = [r for r in whole if (after is None or r[0] > after) and paused in (None, r[9])]
        # (the last column is the engine's now, each call's own)
        assert [r[:-1] for r in rows] == [r[:-1] for r in expect[:PAGE]]
        # (about 9 a schedule: its row, its live runs' probe and the registration check's two
        # index probes, harvest._workflow_registered), a small part of a read of 10,000 of them
        assert buffers <= 12 * PAGE and buffers * 20 < whole_buffers, (
            f"{buffers} buffers for a page of {PAGE} after {after}; 10,000: {whole_buffers}"
        )


def test_a_page_of_revoked_tokens_reads_a_page_of_them(conn: psycopg.Connection) -> None:
    """GET /admin/tokens?include_revoked=true read every token, revoked ones kept for good: a
    page far into the revoked ones touches a few buffers a token, down api_tokens_revoked_name."""
    conn.execute(
        "INSERT INTO harvest.api_tokens (name, scope, secret_hash, created_at, created_by, revoked_at)"
        " SELECT 'tenant-' || lpad((g %% 1000)::text, 4, '0'), 'read', sha256(g::text::bytea), now(), 't',"
        " CASE WHEN g >= 1000 THEN now() END FROM generate_series(0, %s) AS g",
        (KEYS - 1,),
    )
    conn.execute("VACUUM ANALYZE harvest.api_tokens")

    whole = conn.execute(sqlapi.LIST_API_TOKENS, sqlapi.list_api_tokens(True)).fetchall()
    assert len(whole) == KEYS
    for start in (0, 990, KEYS * 3 // 4):
        last = whole[start - 1] if start else None
        after = None if last is None else (last[5] is not None, last[1], last[0])
        rows, buffers = _steady_buffers(
            conn, sqlapi.LIST_API_TOKENS, sqlapi.list_api_tokens(True, after, PAGE)
        )
        assert rows == whole[start : start + PAGE]
        assert buffers <= 4 * PAGE, f"{buffers} buffers for a page of {PAGE} at {start}"
