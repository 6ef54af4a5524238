"""A decision that starts children takes their flow keys before its own run's row.

A quota'd start locks its key's row of ``harvest.flow_keys`` and a ``cancel_running`` start its
key's advisory lock and row (functions/flow_quotas.sql, flow_concurrency.sql), and every client
start takes them before it writes execution rows. A decision that started a child locked its
own run's row first and the child's keys after, so it could wait in a cycle (SQLSTATE 40P01)
with a start that held a key and then needed that run's row, or with another decision taking
two keys in the other order. A batch of starts (start_workflows) and a decision's mutex keys
had the same flaw: keys taken in turn, in no one order. docs/internals.md, "Lock order". Each
test forces the interleaving that deadlocked with a third session holding one lock while the
others queue behind it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from race_helpers import LockHold, Racer, flow_key_row, race_behind_a_held_lock, start_lock

POLICIES = {
    "workflows": {
        "metered": {"quota": {"key": "input.t", "max_active_executions": 100}},
        "latest": {
            "quota": {"key": "input.t", "max_active_executions": 100},
            "concurrency": {"key": "input.doc", "limit": 1, "on_conflict": "cancel_running"},
        },
    },
    "activities": {},
}


def _declare(conn: psycopg.Connection) -> None:
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(POLICIES),))


def _claimed_decision(conn: psycopg.Connection, workflow_name: str, input_: Any) -> tuple[Any, ...]:
    """A run started and its first workflow task claimed: (run id, task id, token, through)."""
    run_id = conn.execute(
        "SELECT execution_id FROM harvest.start_workflow(%s, %s)", (workflow_name, Jsonb(input_))
    ).fetchone()[0]
    task_id, token = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('w', ARRAY['default'], 1)"
    ).fetchone()
    through = conn.execute(
        "SELECT last_event_id FROM harvest.executions WHERE id = %s", (run_id,)
    ).fetchone()[0]
    return run_id, task_id, token, through


def _children(*tenants: str) -> list[dict[str, Any]]:
    return [
        {"type": "start_child_workflow", "seq": seq, "workflow_name": "metered", "input": [{"t": tenant}]}
        for seq, tenant in enumerate(tenants, start=1)
    ]


def _deciding(
    decision: tuple[Any, ...], commands: list[dict[str, Any]]
) -> Callable[[psycopg.Connection], Any]:
    """The claimed decision completed with ``commands``, as a racer's call: the run's status."""
    _, task_id, token, through = decision
    return lambda c: c.execute(
        "SELECT execution_status FROM harvest.complete_workflow_task(%s, %s, %s, %s)",
        (task_id, token, through, Jsonb(commands)),
    ).fetchone()[0]


def _two_decisions_behind_a_held_key(
    db: str,
    conn: psycopg.Connection,
    hold: LockHold,
    one_commands: list[dict[str, Any]],
    two_commands: list[dict[str, Any]],
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Two runs' first decisions, each queued behind a key a third session holds (``hold``),
    then let go: both must end RUNNING (before the fixes, one of them met DeadlockDetected).
    Both ask for key a first (in key order); the first racer takes it, then waits on the held
    key. Returns the two claimed decisions."""
    first = _claimed_decision(conn, "plain", [])
    second = _claimed_decision(conn, "plain", [])
    outcome = race_behind_a_held_lock(
        db,
        conn,
        hold,
        Racer("one", _deciding(first, one_commands), waits_on="the key the third session holds"),
        Racer("two", _deciding(second, two_commands), waits_on="key a, which one holds"),
    )
    assert (outcome["one"], outcome["two"]) == ("RUNNING", "RUNNING"), outcome
    return first, second


def test_a_child_under_a_quota_and_a_callers_start_then_signal_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """The caller's transaction starts a quota'd run (the key's row) and then signals the
    parent (its row), the documented order; the parent's decision starts a child under the
    same key meanwhile."""
    _declare(conn)
    parent = _claimed_decision(conn, "plain", [])

    def start_metered(caller: psycopg.Connection) -> None:  # a transaction: its locks stay until commit
        caller.execute("SELECT harvest.start_workflow('metered', %s)", (Jsonb([{"t": "acme"}]),))

    def signal_the_parent(caller: psycopg.Connection) -> None:
        caller.execute("SELECT harvest.signal_workflow(%s, 'poke')", (parent[0],))
        caller.commit()

    outcome = race_behind_a_held_lock(
        db,
        conn,
        start_metered,
        Racer(
            "decide", _deciding(parent, _children("acme")), waits_on="the quota key's row the caller holds"
        ),
        let_go=signal_the_parent,
    )

    assert "holder" not in outcome, outcome  # no DeadlockDetected on either side (the caller's own)
    assert outcome["decide"] == "RUNNING", outcome
    assert (
        conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE workflow_name = 'metered' AND quota_key = 'acme'"
        ).fetchone()[0]
        == 2
    )


def test_a_child_under_a_quota_and_a_start_superseding_its_parent_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """A client start of a cancel_running workflow holds its quota key and then locks the run it
    supersedes; that run's decision starts a child under the same quota key."""
    _declare(conn)
    parent = _claimed_decision(conn, "latest", [{"t": "acme", "doc": "d1"}])

    def start(c: psycopg.Connection) -> Any:
        return c.execute(
            "SELECT started_fresh FROM harvest.start_workflow('latest', %s)",
            (Jsonb([{"t": "acme", "doc": "d1"}]),),
        ).fetchone()[0]

    outcome = race_behind_a_held_lock(
        db,
        conn,
        flow_key_row("concurrency", "d1"),
        Racer("start", start, waits_on="key d1's row, holding the quota key, before the superseding"),
        # Its run superseded while it waits, the decision may be refused: judged below.
        Racer("decide", _deciding(parent, _children("acme")), waits_on="the quota key acme", may_fail=True),
    )

    assert outcome["start"] is True, outcome
    # The parent was superseded while its decision waited: its task is gone, not a deadlock.
    assert not isinstance(outcome["decide"], psycopg.errors.DeadlockDetected), outcome
    status = conn.execute("SELECT status FROM harvest.executions WHERE id = %s", (parent[0],)).fetchone()[0]
    assert status == "CANCELLED"


def test_two_decisions_starting_children_under_keys_in_opposite_orders_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """One decision starts children of tenants a, c, b, the other of b, a: each took a key and
    waited on the other's."""
    _declare(conn)
    _two_decisions_behind_a_held_key(
        db,
        conn,
        flow_key_row("quota", "c"),
        _children("a", "c", "b"),
        _children("b", "a"),
    )
    assert conn.execute(
        "SELECT array_agg(quota_key ORDER BY quota_key) FROM harvest.executions"
        " WHERE workflow_name = 'metered'"
    ).fetchone()[0] == ["a", "a", "b", "b", "c"]


def test_two_batches_of_starts_under_quota_keys_in_opposite_orders_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """start_workflows took each start's start lock and quota key in turn: a batch holding the
    quota key of its first start waited on its second start's lock, while another batch held
    that second key and waited on the first."""
    _declare(conn)

    def batch(*starts: tuple[str, str]) -> Any:
        args = [{"workflow_name": "metered", "workflow_id": i, "input": [{"t": t}]} for i, t in starts]
        return lambda c: c.execute(
            "SELECT count(*) FROM harvest.start_workflows(%s)", (Jsonb(args),)
        ).fetchone()[0]

    outcome = race_behind_a_held_lock(
        db,
        conn,
        start_lock("metered", "b"),
        Racer("one", batch(("a", "k2"), ("b", "k1")), waits_on="start b's lock"),
        Racer(
            "two",
            batch(("c", "k1"), ("d", "k2")),
            waits_on="the first batch's key",
            waits_only_before_the_fix=True,
        ),
    )

    assert outcome == {"one": 2, "two": 2}


def _mutexes(*keys: str) -> list[dict[str, Any]]:
    return [
        {"type": "record_marker", "seq": seq, "kind": "mutex_acquire", "value": {"key": key}}
        for seq, key in enumerate(keys, start=1)
    ]


def test_two_decisions_acquiring_mutexes_in_opposite_orders_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """A decision asking for several mutexes at once (ctx.mutex in gathered branches) took their
    keys' locks in its commands' order: one asking for a, c, b and one for b, a each held a key
    the other waited on. The mutex keys are not flow keys, but the same rule holds: one order."""
    first, _ = _two_decisions_behind_a_held_key(
        db,
        conn,
        lambda holder: holder.execute("SELECT pg_advisory_xact_lock(hashtext('harvest.mutex:c'))"),
        _mutexes("a", "c", "b"),
        _mutexes("b", "a"),
    )
    assert conn.execute(
        "SELECT array_agg(lock_key ORDER BY lock_key) FROM harvest.mutex_locks"
        " WHERE holder_execution_id = %s",
        (first[0],),
    ).fetchone()[0] == ["a", "b", "c"]


def test_a_batch_with_a_gated_start_and_a_gated_start_under_its_quota_key_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """A start_workflows batch of a quota'd start (key acme) and a start of a throttled workflow;
    beside it a client's start of the throttled workflow under quota key acme, which took the
    throttle's gate and waits on its start lock (a third session holds it). The batch took acme
    (its pass before the first start) and then, at its gated start's turn, waited on the gate;
    the client start, let go, waited on acme: a cycle (40P01). The batch now takes its starts'
    gates before any start lock or key (docs/internals.md, "Lock order", 1), so it waits on the
    gate holding nothing the client start needs."""
    gated = {"throttle": {"rps": 1, "burst": 100}, "quota": {"key": "input.t", "max_active_executions": 100}}
    conn.execute(
        "SELECT harvest.declare_flow_policies(%s)",
        (Jsonb({**POLICIES, "workflows": {**POLICIES["workflows"], "paced": gated}}),),
    )
    starts = [
        {"workflow_name": "metered", "workflow_id": "m", "input": [{"t": "acme"}]},
        {"workflow_name": "paced", "workflow_id": "p", "input": [{"t": "other"}]},
    ]

    def batch(c: psycopg.Connection) -> Any:
        c.execute("SET deadlock_timeout = '50ms'")
        return c.execute("SELECT count(*) FROM harvest.start_workflows(%s)", (Jsonb(starts),)).fetchone()[0]

    def start(c: psycopg.Connection) -> Any:
        return c.execute(
            "SELECT status FROM harvest.start_workflow('paced', %s, 'x')", (Jsonb([{"t": "acme"}]),)
        ).fetchone()[0]

    outcome = race_behind_a_held_lock(
        db,
        conn,
        start_lock("paced", "x"),
        Racer("start", start, waits_on="its start lock, holding the gate"),
        Racer("batch", batch, waits_on="the gate (before the fix: holding acme)"),
    )
    assert outcome == {"batch": 2, "start": "RUNNING"}
