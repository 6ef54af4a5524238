"""Execution ids as harvest._new_execution_id mints them: the shard in the first two bytes, then
the minting transaction's clock, so the runs a later transaction starts sort after an earlier
one's (docs/internals.md, "Executions"; docs/performance.md, "SQL path, tenth cut")."""

from __future__ import annotations

import itertools
import json
import uuid

import psycopg

from harvest.core.ids import shard_of


def _start(conn: psycopg.Connection, n: int) -> list[uuid.UUID]:
    starts = [{"workflow_name": "ids", "input": [k], "queue": "ids"} for k in range(n)]
    rows = conn.execute("SELECT * FROM harvest.start_workflows(%s::jsonb)", (json.dumps(starts),)).fetchall()
    return [row[1] for row in rows]  # (psycopg reads a uuid column as uuid.UUID)


def test_a_later_transactions_runs_sort_after_an_earlier_ones(conn: psycopg.Connection) -> None:
    batches = []
    for _ in range(3):
        batches.append(_start(conn, 20))
        # (Each start is a transaction of its own; the next one's clock is a millisecond on.)
        conn.execute("SELECT pg_sleep(0.002)")
    for earlier, later in itertools.pairwise(batches):
        assert max(earlier) < min(later)
    ids = [i for batch in batches for i in batch]
    assert len(set(ids)) == len(ids)
    assert {shard_of(i) for i in ids} == {0}
    assert {i.version for i in ids} == {4}
    assert {i.variant for i in ids} == {uuid.RFC_4122}
    created = dict(conn.execute("SELECT id, created_at FROM harvest.executions").fetchall())
    assert sorted(ids) == sorted(ids, key=lambda i: (created[i], i))
