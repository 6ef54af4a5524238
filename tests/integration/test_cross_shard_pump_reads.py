"""The cross-shard pump's claim of children over many in flight (docs/performance.md, "The
cross-shard loops, the resume scanner and the exact counts"): it reads the rows it takes, in due
order, counted in rows read (the statistics views), not in time; and a child polled goes behind
the others, so a child past the claim's limit is read (its end reaches its parent) while older
children run on.

claim_cross_shard_children (functions/cross_shard.sql) took the due rows oldest first with no
index for that order: every claim read the whole table and sorted every due row, and a running
child, leased for the pump's 1 s poll, was due again by the next tick, so the oldest 100 running
children were the only ones ever read (migration 0118).
"""

from __future__ import annotations

import asyncio
import datetime

import psycopg
from stats_helpers import rows_read

from harvest.db import testkit
from harvest.shard.children import drive_children
from harvest.shard.pools import AsyncShardPools
from harvest.shard.relay_pump import PumpReport
from harvest.shard.router import ShardRouter

ROWS = """
INSERT INTO harvest.cross_shard_children (
    child_execution_id, parent_execution_id, parent_seq, target_shard, workflow_name, workflow_id, queue,
    input, parent_close_policy, status, next_attempt_at, created_at
)
SELECT harvest._new_execution_id(1), %(parent)s, g, 1, 'child', 'child-' || g, 'q', '[]', 'terminate',
       %(status)s, %(due)s::timestamptz, harvest.now() - interval '1 hour' + make_interval(secs => g)
FROM generate_series(%(first)s::int, %(last)s::int) AS g
"""


def _parent(conn: psycopg.Connection) -> object:
    row = conn.execute("SELECT execution_id FROM harvest.start_workflow('parent', p_queue => 'q')").fetchone()
    assert row is not None
    return row[0]


def test_a_claim_reads_the_due_children_not_every_child_in_flight(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        parent = _parent(conn)
        later = "infinity"  # (leased or backing off: not due)
        conn.execute(ROWS, {"parent": parent, "status": "running", "due": later, "first": 1, "last": 3000})
        conn.execute(ROWS, {"parent": parent, "status": "starting", "due": None, "first": 3001, "last": 3001})
        conn.execute("ANALYZE harvest.cross_shard_children")
        before = rows_read(conn, "cross_shard_children")
        claimed = conn.execute(
            "SELECT workflow_id FROM harvest.claim_cross_shard_children(100, 1)"
        ).fetchall()
        read = rows_read(conn, "cross_shard_children") - before
        assert claimed == [("child-3001",)]
        assert read < 50, f"claim_cross_shard_children read {read} rows for one due child of 3,001"


def test_a_child_past_the_claims_limit_is_read_while_older_children_run(two_shards: dict[int, str]) -> None:
    """150 children running on shard 1, the newest of them ended; the pump's claim takes 100 a
    tick, and the clock moves past the poll's lease between ticks: the ended child's end reaches
    its parent by the second tick (oldest first, the same 100 were read at every tick)."""
    children = 150
    with (
        psycopg.connect(two_shards[0], autocommit=True) as parents,
        psycopg.connect(two_shards[1], autocommit=True) as there,
    ):
        parent = _parent(parents)
        parents.execute(
            ROWS, {"parent": parent, "status": "running", "due": None, "first": 1, "last": children}
        )
        for child, seq, workflow_id in parents.execute(
            "SELECT child_execution_id, parent_seq, workflow_id FROM harvest.cross_shard_children"
        ).fetchall():
            there.execute(
                "SELECT * FROM harvest.start_cross_shard_child(%s, %s, %s, 'child', %s, 'q', '[]',"
                " 'terminate', NULL, 0)",
                [child, parent, seq, workflow_id],
            )
        newest = parents.execute(
            "SELECT child_execution_id FROM harvest.cross_shard_children WHERE parent_seq = %s", [children]
        ).fetchone()[0]  # type: ignore[index]
        there.execute("SELECT harvest.terminate_workflow(%s, 'done')", [newest])

        clock = testkit.shared_clock_dsn(two_shards[0])
        pools = AsyncShardPools(ShardRouter([0, 1], [0, 1], 0), {0: clock, 1: two_shards[1]}, max_size=2)

        async def ticks() -> None:
            try:
                for tick in range(1, 3):
                    await drive_children(pools, 0, PumpReport(), limit=100, poll_secs=1.0)
                    # The poll's lease (1 s) runs out before the next tick.
                    parents.execute(
                        "UPDATE harvest.engine_settings SET test_clock_offset = %s",
                        [datetime.timedelta(seconds=2 * tick)],
                    )
            finally:
                await pools.close()

        asyncio.run(ticks())
        ended = parents.execute(
            "SELECT event_data ->> 'status' FROM harvest.events WHERE execution_id = %s"
            " AND event_type = 'ChildWorkflowFailed' AND (event_data ->> 'seq')::int = %s",
            [parent, children],
        ).fetchall()
        assert ended == [("TERMINATED",)], "the newest child's end never reached its parent"
