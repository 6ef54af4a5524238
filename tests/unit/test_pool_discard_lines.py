"""A server restart under a pool costs one line a pool a minute, not one per idle connection it
broke (harvest.db.pools._OutageLines): psycopg_pool logs "discarding broken connection:
<object repr>" for each, naming neither the pool nor why."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from harvest.db import pools


def _discard(pool_name: str) -> logging.LogRecord:
    conn = SimpleNamespace(_pool=SimpleNamespace(name=pool_name))
    return logging.LogRecord(
        "psycopg.pool", logging.WARNING, __file__, 1, "discarding broken connection: %s", (conn,), None
    )


def test_a_restart_breaking_many_idle_connections_costs_a_line_a_pool_a_minute() -> None:
    lines = pools._OutageLines()
    now = [1000.0]
    lines.clock = lambda: now[0]
    passed = [r for r in (_discard("pool-1") for _ in range(20)) if lines.filter(r)]
    assert len(passed) == 1, [r.getMessage() for r in passed]
    first = passed[0].getMessage()
    assert "'pool-1'" in first and "discarding broken idle connections" in first and "at 0x" not in first
    assert lines.filter(_discard("shard-1"))  # another pool: its own line
    # An idle connection has no link to its pool: the check Harvest asked for names it.
    token = pools._CHECKING.set("shard-2")
    try:
        named = _discard("?")
        named.args = (SimpleNamespace(_pool=None),)
        assert lines.filter(named) and "'shard-2'" in named.getMessage()
    finally:
        pools._CHECKING.reset(token)
    now[0] += pools.OUTAGE_LINE_EVERY_SECS + 1
    later = _discard("pool-1")
    assert lines.filter(later) and "19 more since the last line" in later.getMessage()
    # Every other record of the logger passes as it was.
    other = logging.LogRecord(
        "psycopg.pool", logging.INFO, __file__, 1, "connection given by %r", ("p",), None
    )
    assert lines.filter(other) and other.getMessage() == "connection given by 'p'"


def test_connections_a_restart_broke_under_calls_share_the_pools_line() -> None:
    """psycopg_pool's "discarding closed connection: <repr>" (a connection a call gave back
    broken: one per call in flight at a restart) is counted in the same line a pool a minute."""
    lines = pools._OutageLines()
    lines.clock = lambda: 1000.0
    closed = [_discard("pool-1") for _ in range(5)]
    for record in closed:
        record.msg = "discarding closed connection: %s"
    passed = [r for r in closed if lines.filter(r)]
    assert len(passed) == 1, [r.getMessage() for r in passed]
    said = passed[0].getMessage()
    assert "'pool-1'" in said and "discarding broken connections" in said and "at 0x" not in said
    assert not lines.filter(_discard("pool-1"))  # an idle one found after: the same line's count
