"""Many signals to one run: what one costs as the count grows, and the limit per transaction.

Each signal moves its run's row (the last event id). Across transactions the old versions are
pruned and a signal reads what the first one read, however many came before. Within one
transaction Postgres keeps every version until the end, and each later signal reads past them
all: 100,000 signals to one run in one statement took ten minutes holding the run's lock. So a
transaction that has added 10,000 events to a run is refused its next signals (HR001, checked
on every 1,000th event; functions/signals.sql, docs/messages.md "How many signals a run takes").
"""

from __future__ import annotations

import psycopg
import pytest
from test_quota_history_bytes import _buffers

LIMIT = 10_000
SIGNALS = (  # n signals to a run in one statement
    "SELECT count(harvest.signal_workflow(%s, 'n', to_jsonb(g))) FROM generate_series(1, %s::integer) AS g"
)
# A run's history grown by direct writes, committed: what that many signals would have left.
GROWN = (
    "WITH moved AS (UPDATE harvest.executions SET last_event_id = %(stop)s WHERE id = %(run)s RETURNING id)"
    " INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)"
    ' SELECT m.id, g, \'SignalReceived\', \'{"name": "n", "payload": 1}\', now()'
    " FROM moved AS m, generate_series(%(start)s::bigint, %(stop)s::bigint) AS g"
)


def _run(conn: psycopg.Connection, key: str) -> str:
    (execution_id,) = conn.execute(
        "SELECT execution_id FROM harvest.start_workflow('burst_wf', '[]', %s)", (key,)
    ).fetchone()
    return execution_id


def _signal(conn: psycopg.Connection, run: str) -> int:
    return conn.execute("SELECT harvest.signal_workflow(%s, 'n', '1')", (run,)).fetchone()[0]


def test_signals_in_one_transaction_are_refused_past_the_limit(conn: psycopg.Connection) -> None:
    """10,999 real signals in one statement: refused with HR001 at event 11,000 (the first
    thousandth whose event 10,000 back is the transaction's own), and none of them is kept."""
    run = _run(conn, "in-one")
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(SIGNALS, (run, LIMIT + 1_000))
    assert raised.value.sqlstate == "HR001"
    assert "too many signals to execution" in str(raised.value)
    assert "commit every 1,000 signals" in (raised.value.diag.message_hint or "")
    (last,) = conn.execute("SELECT last_event_id FROM harvest.executions WHERE id = %s", (run,)).fetchone()
    assert last == 1  # the transaction rolled back: only WorkflowStarted


def test_signals_each_in_a_subtransaction_are_refused_past_the_limit(conn: psycopg.Connection) -> None:
    """A loop that sends each signal in a block of its own (a PL/pgSQL EXCEPTION block; a
    client's savepoint is the same) writes each event in a subtransaction, whose id is not the
    transaction's: the check compared the top-level id only, and such a loop was never stopped,
    though it costs the most (each version of the run's row is a subtransaction's: 11,000 such
    signals took six and a half minutes, 2 s at the top level). The first 10,997 events are
    written here as such a loop writes them, each in a block of its own (without moving the
    run's row: quick), then the loop's signals go on in blocks: the one at 11,000 is refused."""
    run = _run(conn, "in-subtransactions")
    loop = (
        "DO $$ BEGIN"
        f" FOR g IN 2..{LIMIT + 998} LOOP BEGIN"
        " INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)"
        f" VALUES ('{run}', g, 'SignalReceived', '{{\"name\": \"n\", \"payload\": 1}}', now());"
        " EXCEPTION WHEN unique_violation THEN NULL; END; END LOOP;"
        f" UPDATE harvest.executions SET last_event_id = {LIMIT + 998} WHERE id = '{run}';"
        " FOR g IN 1..2 LOOP"
        f" BEGIN PERFORM harvest.signal_workflow('{run}', 'n', to_jsonb(g));"
        " EXCEPTION WHEN SQLSTATE 'HR005' THEN NULL; END; END LOOP; END $$"
    )
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(loop)
    assert raised.value.sqlstate == "HR001", raised.value
    (last,) = conn.execute("SELECT last_event_id FROM harvest.executions WHERE id = %s", (run,)).fetchone()
    assert last == 1


def test_signals_in_separate_transactions_have_no_limit(conn: psycopg.Connection) -> None:
    """A run whose 10,999 events were committed before takes its 11,000th signal (and more);
    the check reads the event 10,000 back and finds it was another transaction's."""
    run = _run(conn, "across")
    for start in range(2, LIMIT + 1_000, 1_000):  # committed in transactions of at most 1,000 events
        stop = min(start + 999, LIMIT + 999)
        conn.execute(GROWN, {"run": run, "start": start, "stop": stop})
    assert _signal(conn, run) == LIMIT + 1_000
    assert _signal(conn, run) == LIMIT + 1_001


def test_a_signal_touches_as_many_buffers_at_any_history_length(conn: psycopg.Connection) -> None:
    """In separate transactions a signal's cost does not grow with the run's history: the same
    buffers at 10 events as at 5,000 (each signal its own transaction, as every client sends)."""
    # The same statistics for both counts: an autovacuum ANALYZE landing between them (after the
    # 5,000 signals, on a loaded CI) changes the plans and the buffers with them (20 -> 35-43),
    # which is no cost of the history's length (analysed before both: 24 and 29, an index's depth).
    conn.execute(
        "ALTER TABLE harvest.events SET (autovacuum_enabled = off); "
        "ALTER TABLE harvest.executions SET (autovacuum_enabled = off); "
        "ALTER TABLE harvest.tasks SET (autovacuum_enabled = off)"
    )
    run = _run(conn, "flat")
    for _ in range(10):
        _signal(conn, run)
    early = [_buffers(conn, f"SELECT harvest.signal_workflow('{run}', 'n', '1')") for _ in range(3)]
    for _ in range(5):  # 5,000 more, a transaction of 1,000 each
        conn.execute(SIGNALS, (run, 1_000))
    late = [_buffers(conn, f"SELECT harvest.signal_workflow('{run}', 'n', '1')") for _ in range(3)]
    assert min(late) <= min(early) + 5, (early, late)


def test_a_reset_then_a_signal_in_one_transaction_is_not_refused(conn: psycopg.Connection) -> None:
    """A reset copies the run's history into its fork in one statement: those events are the
    transaction's own, but they moved the fork's row once, not once each. A signal to the fork
    in the reset's transaction is not refused however long the copied history (its first
    thousandth event, 11,000, finds event 1,000 copied by the transaction)."""
    run = _run(conn, "reset-then-signal")
    for start in range(2, LIMIT + 1_000, 1_000):
        conn.execute(GROWN, {"run": run, "start": start, "stop": min(start + 999, LIMIT + 999)})
    with conn.transaction():
        (plan,) = conn.execute(
            "SELECT harvest.reset_workflow(%s, %s, 'a stuck run', 'op')", (run, LIMIT + 998)
        ).fetchone()
        fork = plan["new_execution_id"]
        assert _signal(conn, fork) == LIMIT + 1_000  # 10,998 copied, the fork's event, this one
        assert _signal(conn, fork) == LIMIT + 1_001
