"""Execution rows in id order, then mutex keys in key order, in every transaction that takes
several (docs/internals.md, "Lock order").

A latest-wins start (functions/flow_concurrency.sql, ``_supersede``) locked the runs it
supersedes in ``created_at`` order, while a group commit of decisions locks its runs in id order:
ids are minted from the transaction's clock with random low bytes, so two runs started in one
millisecond (or under a fake clock) sort one way by id and the other by ``created_at``. And a
group commit (functions/decide.sql, ``complete_workflow_tasks``) took each decision's mutex keys
as it reached the item, after that item's row and before the next item's row: two batches whose
items named two keys in opposite id orders each held a key the other waited on. A batch of
starts, or a decision, whose latest-wins starts supersede runs of two keys locked each key's runs
as it reached that start, not in id order across the keys. Each test forces
the interleaving that deadlocked (SQLSTATE 40P01) with a third session holding one lock while
the others queue behind it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from race_helpers import (
    Racer,
    in_thread,
    race_behind_a_held_lock,
    run_row,
    session,
    task_rows_of,
    wait_until_done_or_blocked,
)

# Start gates of 'latest' (docs/flow-control.md, "Start throttle, debounce and batch") that let
# every start of a test through, each gate per key: a throttle with tokens to spare, and a batch
# of one, which the start filling it starts (its run's input is the list of the starts'
# arguments, so its concurrency key is read one level down).
GATES: dict[str, tuple[dict[str, Any], str]] = {
    "throttle": ({"throttle": {"rps": 1, "burst": 100, "key": "input.doc"}}, "input.doc"),
    "batch": ({"batch": {"max_size": 1, "window_secs": 60, "key": "input.doc"}}, "input.0.doc"),
}


def _policy(limit: int, gate: str | None = None) -> Jsonb:
    declared, key = GATES[gate] if gate else ({}, "input.doc")
    concurrency = {"key": key, "limit": limit, "on_conflict": "cancel_running"}
    return Jsonb({"workflows": {"latest": {"concurrency": concurrency, **declared}}, "activities": {}})


def _claim_all(conn: psycopg.Connection, n: int) -> dict[str, tuple[int, int, int]]:
    """The first workflow tasks of n runs claimed: run id -> (task id, token, through)."""
    rows = conn.execute(
        "SELECT c.execution_id::text, c.task_id, c.fencing_token, e.last_event_id"
        " FROM harvest.claim_tasks('w', ARRAY['default'], %s) AS c"
        " JOIN harvest.executions AS e ON e.id = c.execution_id",
        (n,),
    ).fetchall()
    assert len(rows) == n, rows
    return {run: (task, token, through) for run, task, token, through in rows}


def _group_commit(
    c: psycopg.Connection, items: list[tuple[tuple[int, int, int], list[dict[str, Any]]]]
) -> Any:
    """complete_workflow_tasks of the items ((task id, token, through), commands), one
    transaction on ``c``: {task id: outcome}."""
    return dict(
        c.execute(
            "SELECT task_id, outcome FROM harvest.complete_workflow_tasks('w', %s, %s, %s, %s::jsonb[], %s)",
            (
                [t[0] for t, _ in items],
                [t[1] for t, _ in items],
                [t[2] for t, _ in items],
                [Jsonb(commands) for _, commands in items],
                [0 for _ in items],
            ),
        ).fetchall()
    )


def _committing(
    items: list[tuple[tuple[int, int, int], list[dict[str, Any]]]],
) -> Callable[[psycopg.Connection], Any]:
    """A group commit of the items, as a racer's call."""
    return lambda c: _group_commit(c, items)


def _group_commit_in_setup(db: str, items: list[tuple[tuple[int, int, int], list[dict[str, Any]]]]) -> Any:
    with session(db, "setup") as c:
        return _group_commit(c, items)


def _timer(seq: int = 1) -> list[dict[str, Any]]:
    return [{"type": "start_timer", "seq": seq, "duration": 3600}]


def _start_latest_d1(c: psycopg.Connection) -> Any:
    """A start of 'latest' under key d1: started fresh or not."""
    return c.execute(
        "SELECT started_fresh FROM harvest.start_workflow('latest', %s)", (Jsonb([{"doc": "d1"}]),)
    ).fetchone()[0]


def test_a_start_superseding_two_runs_and_a_group_commit_of_their_decisions_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """Two runs of one key (started under limit 2, the limit since lowered to 1), the one with
    the higher id started first; a new start supersedes both while a worker commits both runs'
    decisions in one batch. The start locked the older run (higher id) and, closing it, waited on
    its task row (a third session); the batch locked the lower id and waited on the higher; the
    start then waited on the lower: a cycle."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (_policy(2),))
    for _ in range(2):
        conn.execute("SELECT harvest.start_workflow('latest', %s)", (Jsonb([{"doc": "d1"}]),))
    claimed = _claim_all(conn, 2)
    low, high = sorted(claimed)
    # (Runs started in one millisecond: the ids' random low bytes decide their order.)
    conn.execute(
        "UPDATE harvest.executions SET created_at = created_at - CASE WHEN id = %s THEN interval '1 s'"
        " ELSE interval '0' END WHERE id IN (%s, %s)",
        (high, low, high),
    )
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (_policy(1),))

    batch = [(claimed[low], _timer()), (claimed[high], _timer())]
    outcome = race_behind_a_held_lock(
        db,
        conn,
        task_rows_of(high),
        Racer("start", _start_latest_d1, waits_on="the higher id's task row, closing that run"),
        Racer("batch", _committing(batch), waits_on="the higher id's row, holding the lower"),
    )

    assert outcome["start"] is True, outcome
    # Both runs were superseded before the batch could lock them: its items are refused.
    assert isinstance(outcome["batch"], dict), outcome
    assert "completed" not in outcome["batch"].values(), outcome
    assert conn.execute(
        "SELECT array_agg(status ORDER BY id) FROM harvest.executions WHERE id IN (%s, %s)", (low, high)
    ).fetchone()[0] == ["CANCELLED", "CANCELLED"]


def _acquire(key: str) -> list[dict[str, Any]]:
    return [{"type": "record_marker", "seq": 1, "kind": "mutex_acquire", "value": {"key": key}}]


def test_two_group_commits_acquiring_mutexes_in_opposite_orders_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """Four runs r1 < r2 < r3 < r4 by id; one batch decides r1 (mutex a) and r3 (mutex b), the
    other r2 (b) and r4 (a). Taken item by item, the first held a and waited on b, the second
    held b and waited on a. A third session holds r3's row so that the first batch stops
    between its two items."""
    for _ in range(4):
        conn.execute("SELECT harvest.start_workflow('plain', '[]')")
    claimed = _claim_all(conn, 4)
    r1, r2, r3, r4 = sorted(claimed)
    one = [(claimed[r1], _acquire("a")), (claimed[r3], _acquire("b"))]
    two = [(claimed[r2], _acquire("b")), (claimed[r4], _acquire("a"))]
    outcome = race_behind_a_held_lock(
        db,
        conn,
        run_row(r3),
        Racer("one", _committing(one), waits_on="r3's row (holding mutex a, before the fix)"),
        Racer("two", _committing(two), waits_on="mutex a, holding b", waits_only_before_the_fix=True),
    )

    assert isinstance(outcome["one"], dict) and isinstance(outcome["two"], dict), outcome
    assert set(outcome["one"].values()) | set(outcome["two"].values()) == {"completed"}, outcome
    held = conn.execute("SELECT array_agg(lock_key ORDER BY lock_key) FROM harvest.mutex_locks").fetchone()
    assert held == (["a", "b"],)
    # Each key went to one of its two askers; the other waits for it.
    assert conn.execute("SELECT count(*) FROM harvest.mutex_waiters").fetchone()[0] == 2


def test_a_group_commit_and_a_terminate_of_a_later_run_holding_its_mutex_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """Runs r1 < r2 by id, r2 holding mutex a; one batch decides r1 (acquire a) and r2. A
    terminate of r2 locks r2's row, then a's lock to release it. Taken item by item, the batch
    held a (r1's marker) and then waited on r2's row: a cycle. A third session's uncommitted
    insert of r1's waiter row stops the batch just after it took a."""
    for _ in range(2):
        conn.execute("SELECT harvest.start_workflow('plain', '[]')")
    claimed = _claim_all(conn, 2)
    r1, r2 = sorted(claimed)
    _group_commit_in_setup(db, [(claimed[r2], _acquire("a"))])
    assert conn.execute("SELECT holder_execution_id::text FROM harvest.mutex_locks").fetchone()[0] == r2
    r2_task = _claim_all(conn, 1)[r2]  # its task after MutexAcquired
    batch = [(claimed[r1], _acquire("a")), (r2_task, _timer(2))]

    def r1s_waiter_row(holder: psycopg.Connection) -> None:  # uncommitted: rolled back to let go
        holder.execute(
            "INSERT INTO harvest.mutex_waiters (lock_key, execution_id, seq, enqueued_at)"
            " VALUES ('a', %s, 1, now())",
            (r1,),
        )

    outcome = race_behind_a_held_lock(
        db,
        conn,
        r1s_waiter_row,
        Racer(
            "batch", _committing(batch), waits_on="r1's waiter row, holding a (and r2's row, after the fix)"
        ),
        Racer(
            "terminate",
            lambda c: c.execute("SELECT harvest.terminate_workflow(%s)", (r2,)).fetchone()[0],
            waits_on="a lock (before the fix: on a, holding r2's row)",
        ),
        let_go=psycopg.Connection.rollback,
    )

    assert outcome.get("batch") == {claimed[r1][0]: "completed", r2_task[0]: "completed"}, outcome
    assert not isinstance(outcome["terminate"], BaseException), outcome
    # r2 let a go as it ended, to r1, its waiter.
    assert conn.execute("SELECT holder_execution_id::text FROM harvest.mutex_locks").fetchall() == [(r1,)]


def _fire_terminate_other_slot(c: psycopg.Connection) -> Any:
    """Schedule ov's slot of 2030-01-01T00:00:03 fired under overlap terminate_other: its status."""
    c.execute("SELECT set_config('harvest.fake_now', '2030-01-01T00:00:03+00:00', false)")
    return c.execute("SELECT harvest.trigger_schedule('ov', 'terminate_other') ->> 'status'").fetchone()[0]


def test_a_schedule_terminating_two_runs_and_a_group_commit_of_their_decisions_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """A slot fired under overlap terminate_other ends the schedule's live runs (two: started
    under allow_all), and ended them one by one in created_at order; a group commit of both
    runs' decisions locks them in id order. The firing held the older run (higher id) and,
    closing it, waited on its task row (a third session); the batch held the lower id and waited
    on the higher; the firing then waited on the lower: a cycle."""
    conn.execute(
        "SELECT harvest.create_schedule('ov', 'plain', p_interval_secs => 3600, p_overlap => 'allow_all')"
    )
    for at in ("2030-01-01T00:00:01+00:00", "2030-01-01T00:00:02+00:00"):
        conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (at,))
        assert conn.execute("SELECT harvest.trigger_schedule('ov') ->> 'status'").fetchone()[0] == "started"
    claimed = _claim_all(conn, 2)
    low, high = sorted(claimed)
    conn.execute(
        "UPDATE harvest.executions SET created_at = CASE WHEN id = %s"
        " THEN timestamptz '2030-01-01T00:00:01+00' ELSE timestamptz '2030-01-01T00:00:02+00' END"
        " WHERE id IN (%s, %s)",
        (high, low, high),
    )

    batch = [(claimed[low], _timer()), (claimed[high], _timer())]
    outcome = race_behind_a_held_lock(
        db,
        conn,
        task_rows_of(high),
        Racer("fire", _fire_terminate_other_slot, waits_on="the higher id's task row, closing that run"),
        Racer("batch", _committing(batch), waits_on="the higher id's row, holding the lower"),
    )

    assert outcome["fire"] == "started", outcome
    assert isinstance(outcome["batch"], dict), outcome
    assert "completed" not in outcome["batch"].values(), outcome
    assert conn.execute(
        "SELECT array_agg(status ORDER BY id) FROM harvest.executions WHERE id IN (%s, %s)", (low, high)
    ).fetchone()[0] == ["TERMINATED", "TERMINATED"]


def _runs_awaiting_a_result(conn: psycopg.Connection, n: int) -> dict[str, tuple[int, int, int]]:
    """n runs, each decided by worker w to run one activity on queue aq, whose activity tasks w
    claimed: run id -> (activity task id, token, the run's last event id)."""
    conn.execute("SELECT harvest.register_worker('w', ARRAY['default'], 'host', 1)")
    for _ in range(n):
        conn.execute("SELECT harvest.start_workflow('plain', '[]')")
    for task, token, through in _claim_all(conn, n).values():
        conn.execute(
            "SELECT harvest.complete_workflow_task(%s, %s, %s, %s, 'w')",
            (
                task,
                token,
                through,
                Jsonb([{"type": "schedule_activity", "seq": 1, "name": "noop", "queue": "aq"}]),
            ),
        )
    rows = conn.execute(
        "SELECT c.execution_id::text, c.task_id, c.fencing_token, e.last_event_id"
        " FROM harvest.claim_tasks('w', ARRAY['aq'], %s) AS c"
        " JOIN harvest.executions AS e ON e.id = c.execution_id",
        (n,),
    ).fetchall()
    assert len(rows) == n, rows
    return {run: (task, token, last) for run, task, token, last in rows}


def _results_with_decisions(c: psycopg.Connection, items: list[tuple[tuple[int, int, int], str]]) -> Any:
    """complete_activities of the items ((task id, token, last event id), the mutex key the
    decision ahead asks for), each result 1: {task id: decided or not}."""
    decisions = [
        Jsonb(
            {
                "after": last,
                "result_text": "1",
                "hand_off_slots": 0,
                "commands": [
                    {"type": "record_marker", "seq": 2, "kind": "mutex_acquire", "value": {"key": key}}
                ],
            }
        )
        for (_, _, last), key in items
    ]
    return dict(
        c.execute(
            "SELECT task_id, decided IS NOT NULL FROM harvest.complete_activities("
            "'w', %s, %s, %s::jsonb[], true, 30, %s::jsonb[])",
            ([t[0] for t, _ in items], [t[1] for t, _ in items], [Jsonb(1) for _ in items], decisions),
        ).fetchall()
    )


def test_two_result_batches_deciding_mutexes_in_opposite_orders_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """The same as two group commits of decisions, for results that carry their decisions
    ahead (complete_activities): one batch decides r1 (mutex a) and r3 (b), the other r2 (b) and
    r4 (a)."""
    runs = _runs_awaiting_a_result(conn, 4)
    r1, r2, r3, r4 = sorted(runs)
    one = [(runs[r1], "a"), (runs[r3], "b")]
    two = [(runs[r2], "b"), (runs[r4], "a")]
    outcome = race_behind_a_held_lock(
        db,
        conn,
        run_row(r3),
        Racer(
            "one",
            lambda c: _results_with_decisions(c, one),
            waits_on="r3's row (holding mutex a, before the fix)",
        ),
        Racer(
            "two",
            lambda c: _results_with_decisions(c, two),
            waits_on="mutex a, holding b",
            waits_only_before_the_fix=True,
        ),
    )

    assert isinstance(outcome["one"], dict) and isinstance(outcome["two"], dict), outcome
    assert set(outcome["one"].values()) | set(outcome["two"].values()) == {True}, outcome  # all decided
    assert conn.execute("SELECT count(*) FROM harvest.mutex_waiters").fetchone()[0] == 2


def test_a_start_superseding_two_mutex_holders_and_a_group_commit_asking_for_their_keys_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """Two runs of one key hold mutexes b (the older) and a (the newer); a start supersedes both
    while a batch of two other runs' decisions asks for a and b. The start released each run's
    keys as it closed it, b then a, while the batch took a then b: the start held b and, closing
    the older run, waited on its task row (a third session); the batch took a and waited on b;
    the start then waited on a."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (_policy(2),))
    for _ in range(2):
        conn.execute("SELECT harvest.start_workflow('latest', %s)", (Jsonb([{"doc": "d1"}]),))
    latest = _claim_all(conn, 2)
    older, newer = sorted(latest)
    conn.execute(
        "UPDATE harvest.executions SET created_at = created_at - interval '1 s' WHERE id = %s", (older,)
    )
    _group_commit_in_setup(db, [(latest[older], _acquire("b")), (latest[newer], _acquire("a"))])
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (_policy(1),))
    for _ in range(2):
        conn.execute("SELECT harvest.start_workflow('plain', '[]')")
    others = {
        run: task for run, task in _claim_all(conn, 4).items() if run not in latest
    }  # (and the two holders' tasks after MutexAcquired)
    x, y = sorted(others)

    batch = [(others[x], _acquire("a")), (others[y], _acquire("b"))]
    outcome = race_behind_a_held_lock(
        db,
        conn,
        task_rows_of(older),
        Racer("start", _start_latest_d1, waits_on="the older run's task row (before the fix: holding b)"),
        Racer("batch", _committing(batch), waits_on="a mutex key (before the fix: b, holding a)"),
    )

    assert outcome["start"] is True, outcome
    assert outcome["batch"] == {others[x][0]: "completed", others[y][0]: "completed"}, outcome
    holders = conn.execute("SELECT lock_key, holder_execution_id::text FROM harvest.mutex_locks ORDER BY 1")
    assert holders.fetchall() == [("a", x), ("b", y)]


def test_a_schedule_terminating_two_mutex_holders_and_a_group_commit_asking_for_their_keys_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """The same as a start superseding two mutex holders, for a slot fired under overlap
    terminate_other: each terminate released its run's keys, b then a."""
    conn.execute(
        "SELECT harvest.create_schedule('ov', 'plain', p_interval_secs => 3600, p_overlap => 'allow_all')"
    )
    for at in ("2030-01-01T00:00:01+00:00", "2030-01-01T00:00:02+00:00"):
        conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (at,))
        conn.execute("SELECT harvest.trigger_schedule('ov')")
    scheduled = _claim_all(conn, 2)
    older, newer = sorted(scheduled)
    conn.execute(
        "UPDATE harvest.executions SET created_at = created_at - interval '1 h' WHERE id = %s", (older,)
    )
    _group_commit_in_setup(db, [(scheduled[older], _acquire("b")), (scheduled[newer], _acquire("a"))])
    for _ in range(2):
        conn.execute("SELECT harvest.start_workflow('plain', '[]')")
    others = {run: task for run, task in _claim_all(conn, 4).items() if run not in scheduled}
    x, y = sorted(others)

    batch = [(others[x], _acquire("a")), (others[y], _acquire("b"))]
    outcome = race_behind_a_held_lock(
        db,
        conn,
        task_rows_of(older),
        Racer(
            "fire",
            _fire_terminate_other_slot,
            waits_on="the older run's task row (before the fix: holding b)",
        ),
        Racer("batch", _committing(batch), waits_on="a mutex key (before the fix: b, holding a)"),
    )

    assert outcome["fire"] == "started", outcome
    assert outcome["batch"] == {others[x][0]: "completed", others[y][0]: "completed"}, outcome
    holders = conn.execute("SELECT lock_key, holder_execution_id::text FROM harvest.mutex_locks ORDER BY 1")
    assert holders.fetchall() == [("a", x), ("b", y)]


def _incumbents_of_two_keys(
    conn: psycopg.Connection, gate: str | None = None
) -> tuple[dict[str, tuple[int, int, int]], str, str]:
    """One run of 'latest' (cancel_running, limit 1, behind ``gate`` if one is named) per key,
    d1 and d2, their first tasks claimed: (run id -> task, the key of the run with the higher
    id, the other key)."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (_policy(1, gate),))
    doc_of = {
        conn.execute(
            "SELECT execution_id::text FROM harvest.start_workflow('latest', %s)", (Jsonb([{"doc": doc}]),)
        ).fetchone()[0]: doc
        for doc in ("d1", "d2")
    }
    claimed = _claim_all(conn, 2)
    low, high = sorted(claimed)
    return claimed, doc_of[high], doc_of[low]


def _race_against_a_group_commit_of_the_incumbents(
    db: str, conn: psycopg.Connection, claimed: dict[str, tuple[int, int, int]], superseding: Racer
) -> dict[str, Any]:
    """``superseding`` supersedes the higher-id incumbent first; a third session holds that
    run's task row, so the call stops closing it; a group commit of both incumbents' decisions
    then locks the lower id and waits on the higher. Taken start by start, the call then waited
    on the lower id: a cycle (40P01)."""
    low, high = sorted(claimed)
    batch = [(claimed[low], _timer()), (claimed[high], _timer())]
    outcome = race_behind_a_held_lock(
        db,
        conn,
        task_rows_of(high),
        superseding,
        Racer("batch", _committing(batch), waits_on="the higher id's row, holding the lower"),
    )
    # Both incumbents were superseded before the batch could lock them: its items are refused.
    assert isinstance(outcome["batch"], dict), outcome
    assert "completed" not in outcome["batch"].values(), outcome
    assert conn.execute(
        "SELECT array_agg(status ORDER BY id) FROM harvest.executions WHERE id IN (%s, %s)", (low, high)
    ).fetchone()[0] == ["CANCELLED", "CANCELLED"]
    return outcome


@pytest.mark.parametrize("gate", [None, *GATES])
def test_a_batch_of_starts_superseding_runs_of_two_keys_and_a_group_commit_of_their_decisions_do_not_deadlock(
    db: str, conn: psycopg.Connection, gate: str | None
) -> None:
    """A start_workflows batch of two latest-wins starts, keys d_high then d_low, each
    superseding the one run of its key. Each start locked its key's runs in turn (_supersede),
    so the batch held the higher id and then waited on the lower, while a group commit of both
    runs' decisions held the lower and waited on the higher. Behind a gate (a throttle letting
    them through, a batch each fills): left out of the batch's id-ordered pass, the starts met
    the same cycle, until the batch admitted them at their gates before the pass."""
    claimed, first, second = _incumbents_of_two_keys(conn, gate)

    def start_both(c: psycopg.Connection) -> Any:
        c.execute("SET deadlock_timeout = '50ms'")
        return c.execute(
            "SELECT array_agg(started_fresh ORDER BY n) FROM harvest.start_workflows(%s)",
            (Jsonb([{"workflow_name": "latest", "input": [{"doc": doc}]} for doc in (first, second)]),),
        ).fetchone()[0]

    starts = Racer("starts", start_both, waits_on="the higher id's task row, closing that run")
    outcome = _race_against_a_group_commit_of_the_incumbents(db, conn, claimed, starts)
    assert outcome["starts"] == [True, True], outcome


def test_a_decision_starting_children_that_supersede_runs_of_two_keys_and_a_group_commit_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """The same for one decision starting two latest-wins children, keys d_high then d_low:
    each child's start locked its key's runs after the parent's row, in the decision's order."""
    claimed, first, second = _incumbents_of_two_keys(conn)
    start = "SELECT execution_id::text FROM harvest.start_workflow('plain', '[]')"
    parent = conn.execute(start).fetchone()[0]
    task, token, through = _claim_all(conn, 1)[parent]
    children = [
        {"type": "start_child_workflow", "seq": seq, "workflow_name": "latest", "input": [{"doc": doc}]}
        for seq, doc in enumerate((first, second), start=1)
    ]

    def decide(c: psycopg.Connection) -> Any:
        c.execute("SET deadlock_timeout = '50ms'")
        return c.execute(
            "SELECT execution_status FROM harvest.complete_workflow_task(%s, %s, %s, %s)",
            (task, token, through, Jsonb(children)),
        ).fetchone()[0]

    outcome = _race_against_a_group_commit_of_the_incumbents(
        db, conn, claimed, Racer("decide", decide, waits_on="the higher id's task row, closing that run")
    )
    assert outcome["decide"] == "RUNNING", outcome
    assert (
        conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE parent_id = %s AND status = 'RUNNING'", (parent,)
        ).fetchone()[0]
        == 2
    )


@pytest.mark.parametrize("gate", [None, *GATES])
def test_two_batches_of_starts_superseding_runs_of_two_keys_in_opposite_orders_do_not_deadlock(
    db: str, conn: psycopg.Connection, gate: str | None
) -> None:
    """Two start_workflows batches of latest-wins starts of keys d1 and d2, one in each order.
    Both take the two keys' locks, in one order, before any run's row (_lock_flow_keys_of), so
    the second waits for the first's commit and then supersedes its new runs: no cycle. Taken
    start by start (no pass before the first start), the first held d_high's key and run and
    stopped closing it (a third session holds its task), the second took d_low's key and run and
    waited on d_high's key, and the first then waited on d_low's: 40P01. Behind a gate (per key),
    each start took its gate and its key as the batch reached it: the same cycle, until the
    batch took the gates of all its starts, in one order, first."""
    claimed, first, second = _incumbents_of_two_keys(conn, gate)
    low, high = sorted(claimed)

    def starts(*docs: str) -> Any:
        def start_batch(c: psycopg.Connection) -> Any:
            c.execute("SET deadlock_timeout = '50ms'")
            return c.execute(
                "SELECT array_agg(execution_id::text ORDER BY n) FROM harvest.start_workflows(%s)",
                (Jsonb([{"workflow_name": "latest", "input": [{"doc": doc}]} for doc in docs]),),
            ).fetchone()[0]

        return start_batch

    outcome = race_behind_a_held_lock(
        db,
        conn,
        task_rows_of(high),
        Racer("one", starts(first, second), waits_on="d_high's run's task row (its delete, closing the run)"),
        Racer(
            "two", starts(second, first), waits_on="a key (before the pass: d_high's key, holding d_low's)"
        ),
    )

    assert isinstance(outcome["one"], list) and isinstance(outcome["two"], list), outcome
    live = conn.execute(
        "SELECT array_agg(id::text ORDER BY id) FROM harvest.executions WHERE status = 'RUNNING'"
    ).fetchone()[0]
    assert live == sorted(outcome["two"]), outcome  # the later batch superseded the first's runs
    statuses = conn.execute(
        "SELECT array_agg(status ORDER BY id) FROM harvest.executions WHERE id::text = ANY (%s)",
        ([low, high, *outcome["one"]],),
    ).fetchone()[0]
    assert statuses == ["CANCELLED"] * 4, outcome


def test_a_batch_of_starts_replacing_two_runs_and_a_group_commit_of_their_decisions_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """A start_workflows batch of two terminate_existing starts (no policy), ids A then B, whose
    live priors have the higher id (A's) and the lower (B's). Each start locked its prior as the
    batch reached it, in (workflow_name, workflow_id) order: the batch held A's prior and then
    waited on B's while a group commit of both priors' decisions held B's and waited on A's
    (40P01). The batch now locks them in id order before its first start (_lock_superseded_runs,
    p_runs)."""
    start = "SELECT execution_id::text FROM harvest.start_workflow('plain', '[]', %s)"
    low = conn.execute(start, ("B",)).fetchone()[0]  # type: ignore[index]
    high = conn.execute(start, ("A",)).fetchone()[0]  # type: ignore[index]
    assert low < high  # (ids in start order)
    claimed = _claim_all(conn, 2)

    replacing = [
        {"workflow_name": "plain", "workflow_id": w, "conflict_policy": "terminate_existing"}
        for w in ("A", "B")
    ]

    def replace_both(c: psycopg.Connection) -> Any:
        c.execute("SET deadlock_timeout = '50ms'")
        return c.execute(
            "SELECT array_agg(started_fresh ORDER BY n) FROM harvest.start_workflows(%s)", (Jsonb(replacing),)
        ).fetchone()[0]

    batch = [(claimed[low], _timer()), (claimed[high], _timer())]
    outcome = race_behind_a_held_lock(
        db,
        conn,
        task_rows_of(high),
        Racer("starts", replace_both, waits_on="A's prior's task row (the higher id), closing it"),
        Racer("batch", _committing(batch), waits_on="the higher id's row, holding the lower"),
    )
    assert outcome["starts"] == [True, True], outcome
    assert isinstance(outcome["batch"], dict) and "completed" not in outcome["batch"].values(), outcome
    assert conn.execute(
        "SELECT array_agg(status ORDER BY id) FROM harvest.executions WHERE id IN (%s, %s)", (low, high)
    ).fetchone()[0] == ["TERMINATED", "TERMINATED"]


def test_a_batch_of_deferred_latest_wins_starts_locks_and_supersedes_nothing(
    db: str, conn: psycopg.Connection
) -> None:
    """A batch's pass locks the runs of the starts a gate lets through, never those of a start its
    gate defers: behind a debounce, both latest-wins starts of a batch are deferred, so the batch
    answers while a third session holds both incumbents' rows, and both stay live."""
    claimed, first, second = _incumbents_of_two_keys(conn)
    debounced = {"debounce": {"key": "input.doc", "quiet_secs": 60}}
    concurrency = {"key": "input.doc", "limit": 1, "on_conflict": "cancel_running"}
    conn.execute(
        "SELECT harvest.declare_flow_policies(%s)",
        (Jsonb({"workflows": {"latest": {"concurrency": concurrency, **debounced}}, "activities": {}}),),
    )
    outcome: dict[str, Any] = {}

    def start_both() -> Any:
        with psycopg.connect(db, autocommit=True, application_name="starts") as c:
            return c.execute(
                "SELECT array_agg(status ORDER BY n) FROM harvest.start_workflows(%s)",
                (Jsonb([{"workflow_name": "latest", "input": [{"doc": doc}]} for doc in (first, second)]),),
            ).fetchone()[0]

    with psycopg.connect(db) as holder:
        holder.execute(
            "SELECT 1 FROM harvest.executions WHERE id = ANY (%s::uuid[]) FOR UPDATE", (list(claimed),)
        )
        starting = in_thread(start_both, outcome, "starts")
        wait_until_done_or_blocked(conn, starting, "starts")
        assert not starting.is_alive(), "the batch waited on a run its deferred starts do not end"
    starting.join(20)
    assert outcome == {"starts": ["DEFERRED", "DEFERRED"]}
    assert conn.execute(
        "SELECT array_agg(status) FROM harvest.executions WHERE id = ANY (%s::uuid[])", (list(claimed),)
    ).fetchone()[0] == ["RUNNING", "RUNNING"]


def test_the_release_of_debounced_starts_superseding_runs_of_two_keys_and_a_group_commit_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """The scanner's release of two debounced latest-wins starts, keys d_high then d_low (their
    release order), each superseding the one run of its key, and a group commit of both runs'
    decisions. Each release locked its key's runs as the scan reached it: the same cycle as a
    batch's starts taken in turn."""
    claimed, first, second = _incumbents_of_two_keys(conn)
    concurrency = {"key": "input.doc", "limit": 1, "on_conflict": "cancel_running"}
    debounced = {"concurrency": concurrency, "debounce": {"key": "input.doc", "quiet_secs": 1}}
    conn.execute(
        "SELECT harvest.declare_flow_policies(%s)",
        (Jsonb({"workflows": {"latest": debounced}, "activities": {}}),),
    )
    for doc in (first, second):
        conn.execute("SELECT harvest.start_workflow('latest', %s)", (Jsonb([{"doc": doc}]),))
    conn.execute("UPDATE harvest.engine_settings SET test_clock_allowed = true")

    def release(c: psycopg.Connection) -> Any:
        c.execute("SET deadlock_timeout = '50ms'")
        c.execute("SELECT set_config('harvest.fake_now', (now() + interval '1 minute')::text, false)")
        return c.execute("SELECT harvest.release_pending_starts()").fetchone()[0]

    outcome = _race_against_a_group_commit_of_the_incumbents(
        db, conn, claimed, Racer("scan", release, waits_on="the higher id's task row, closing that run")
    )
    assert outcome["scan"] == 2, outcome
    assert conn.execute("SELECT count(*) FROM harvest.pending_starts").fetchone()[0] == 0
