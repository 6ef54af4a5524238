"""A latest-wins key before the mutex keys, in every transaction that takes both.

A ``cancel_running`` start holds its key (an advisory lock on ``hashtext(key)``, then the key's
row of ``harvest.flow_keys``) while it supersedes the runs of the key, and each close releases
the mutexes its run holds or waits for (``harvest.mutex:<key>`` locks). A transaction that ends a
mutex holder and then starts a ``cancel_running`` run takes them the other way round unless it
takes the key first: a decision releasing a mutex and starting a child of the key (before the
decision took its starts' keys ahead of its run's row, docs/internals.md "Lock order"), a start
replacing a prior run (``terminate_existing``) that holds a mutex, and a schedule's
``terminate_other`` slot ending a run and starting the next. Each test forces the interleaving
that met in a cycle (SQLSTATE 40P01): a third session holds the row of the run the start
supersedes, or the key's row, so that both transactions queue in the deadlocking order.

The same replacing start and ``terminate_other`` slot also lock the runs they end with the runs
their start supersedes, in id order, then those runs' mutex keys: a group commit (rows in id
order, then mutex keys) met them in a cycle while they took the ended run's row and mutexes
before the superseded runs' rows (the last three tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from race_helpers import Racer, flow_key_row, race_behind_a_held_lock, run_row, session, task_rows_of
from test_row_lock_order import GATES, _committing, _policy

LATEST_WINS = {"concurrency": {"key": "input.doc", "limit": 1, "on_conflict": "cancel_running"}}
POLICIES = Jsonb({"workflows": {"latest": LATEST_WINS}, "activities": {}})


def _claim(conn: psycopg.Connection) -> dict[str, tuple[str, int, int, int]]:
    """The claimable workflow tasks: run id -> (run id, task id, token, through)."""
    rows = conn.execute(
        "SELECT c.execution_id::text, c.task_id, c.fencing_token, e.last_event_id"
        " FROM harvest.claim_tasks('w', ARRAY['default'], 10) AS c"
        " JOIN harvest.executions AS e ON e.id = c.execution_id"
    ).fetchall()
    return {row[0]: row for row in rows}


def _claim_one(conn: psycopg.Connection) -> tuple[str, int, int, int]:
    """The one claimable workflow task: (run id, task id, token, through)."""
    tasks = list(_claim(conn).values())
    assert len(tasks) == 1, tasks
    return tasks[0]


def _decide(c: psycopg.Connection, task: tuple[str, int, int, int], commands: list[dict[str, Any]]) -> Any:
    _, task_id, token, through = task
    return c.execute(
        "SELECT execution_status FROM harvest.complete_workflow_task(%s, %s, %s, %s)",
        (task_id, token, through, Jsonb(commands)),
    ).fetchone()[0]


def _acquire_in_setup(db: str, task: tuple[str, int, int, int], key: str) -> None:
    """The task's run asks for mutex ``key`` (and, free, is granted it)."""
    with session(db, "setup") as c:
        assert _decide(c, task, [_marker(1, "mutex_acquire", key)]) == "RUNNING"


def _marker(seq: int, kind: str, key: str) -> dict[str, Any]:
    return {"type": "record_marker", "seq": seq, "kind": kind, "value": {"key": key}}


def _started(
    conn: psycopg.Connection, workflow_name: str, input_: Any = (), workflow_id: str | None = None
) -> str:
    """A run started: its id."""
    row = conn.execute(
        "SELECT execution_id::text FROM harvest.start_workflow(%s, %s, %s)",
        (workflow_name, Jsonb(list(input_)), workflow_id),
    ).fetchone()
    assert row is not None
    return row[0]


def _run_holding(conn: psycopg.Connection, db: str, workflow_name: str, input_: Any, **start: Any) -> str:
    """A run started and granted mutex m (its first decision asks for it)."""
    run = _started(conn, workflow_name, input_, start.get("workflow_id"))
    task = _claim_one(conn)
    assert task[0] == run
    _acquire_in_setup(db, task, "m")
    return run


def _incumbent_waiting_on_m(conn: psycopg.Connection, db: str) -> tuple[str, Any]:
    """A run of 'latest' under key d1 queued for mutex m (its close releases m's lock); also
    claimed: the next task of the holder of m, if any (returned too)."""
    run = _started(conn, "latest", [{"doc": "d1"}])
    tasks = _claim(conn)
    _acquire_in_setup(db, tasks.pop(run), "m")
    return run, next(iter(tasks.values()), None)


def _start_latest(doc: str, **args: Any) -> Callable[[psycopg.Connection], Any]:
    """A start of 'latest' under key ``doc`` (its ``workflow_id``, ``conflict`` policy), as a
    racer's call: started fresh or not."""
    return lambda c: c.execute(
        "SELECT started_fresh FROM harvest.start_workflow(%s, %s, %s, p_conflict_policy => %s)",
        ("latest", Jsonb([{"doc": doc}]), args.get("workflow_id"), args.get("conflict", "unspecified")),
    ).fetchone()[0]


def _fire(c: psycopg.Connection) -> Any:
    """Schedule s's next slot (under its terminate_other overlap): its status."""
    return c.execute("SELECT harvest.trigger_schedule('s') ->> 'status'").fetchone()[0]


def _status(conn: psycopg.Connection, run: str) -> str:
    return conn.execute("SELECT status FROM harvest.executions WHERE id = %s", (run,)).fetchone()[0]


# The holder's decision: release m and start a child of key d1, or end (a continue-as-new, which
# releases m) and start its successor under key d1.
ENDINGS = {
    "child": (
        "plain",
        [{"doc": "d2"}],
        [
            _marker(2, "mutex_release", "m"),
            {"type": "start_child_workflow", "seq": 3, "workflow_name": "latest", "input": [{"doc": "d1"}]},
        ],
    ),
    "continue_as_new": ("latest", [{"doc": "d2"}], [{"type": "continue_as_new", "input": [{"doc": "d1"}]}]),
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_mutex_holder_starting_a_latest_wins_run_and_a_start_superseding_a_waiter_do_not_deadlock(
    db: str, conn: psycopg.Connection, ending: str
) -> None:
    """The cycle docs/flow-control.md warned of: a client start of key d1 holds the key and
    supersedes a run queued for mutex m (its close takes m's lock), while the holder of m, in one
    decision, releases m (or ends, a continue-as-new) and starts a run of key d1. A decision
    taking that key after its run's row (and so after m) met the start in a cycle (40P01): it
    does if _lock_decision_start_keys (functions/decide.sql) skips its flow-key pass. It takes
    the key before its row, so it waits for the start and then supersedes its run."""
    workflow_name, input_, commands = ENDINGS[ending]
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (POLICIES,))
    holder_run = _run_holding(conn, db, workflow_name, input_)
    incumbent, holding = _incumbent_waiting_on_m(conn, db)  # holding: the holder's next task
    assert holding[0] == holder_run
    outcome = race_behind_a_held_lock(
        db,
        conn,
        run_row(incumbent),
        Racer("start", _start_latest("d1"), waits_on="the incumbent's row, holding key d1"),
        Racer(
            "decide",
            lambda c: _decide(c, holding, commands),
            waits_on="key d1 (taken after its row: holding m)",
        ),
    )

    ended = "RUNNING" if ending == "child" else "CONTINUED_AS_NEW"
    assert (outcome["start"], outcome["decide"]) == (True, ended), outcome
    assert _status(conn, incumbent) == "CANCELLED"
    # The decision's run of d1, started last, superseded the client's: latest wins.
    assert (
        conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE workflow_name = 'latest' AND status = 'RUNNING'"
            " AND concurrency_key = 'd1'"
        ).fetchone()[0]
        == 1
    )
    assert conn.execute("SELECT count(*) FROM harvest.mutex_locks").fetchone()[0] == 0


def test_a_start_replacing_a_mutex_holder_and_a_start_superseding_a_waiter_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """A start of id A with terminate_existing ends A's prior run, the holder of mutex m (its
    close takes m's lock), and then, latest wins, takes key d1; a start of key d1 meanwhile
    holds the key and supersedes a run queued for m."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (POLICIES,))
    prior = _run_holding(conn, db, "latest", [{"doc": "d9"}], workflow_id="A")
    incumbent, _ = _incumbent_waiting_on_m(conn, db)
    replace = _start_latest("d1", workflow_id="A", conflict="terminate_existing")
    outcome = race_behind_a_held_lock(
        db,
        conn,
        run_row(incumbent),
        Racer("start", _start_latest("d1"), waits_on="the incumbent's row, holding key d1"),
        Racer("replace", replace, waits_on="key d1 (before the fix: holding m)"),
    )

    assert (outcome["start"], outcome["replace"]) == (True, True), outcome
    assert (_status(conn, prior), _status(conn, incumbent)) == ("TERMINATED", "CANCELLED")
    assert conn.execute(
        "SELECT array_agg(workflow_id) FROM harvest.executions"
        " WHERE workflow_name = 'latest' AND status = 'RUNNING'"
    ).fetchone()[0] == ["A"]


def _scheduled_run_holding_m(conn: psycopg.Connection, db: str, gate: str | None, doc: str) -> str:
    """Schedule s of 'latest' (limit 1 of key input.doc, behind ``gate`` if one is named; input
    key ``doc``; overlap terminate_other): its first run, an hour back, granted mutex m."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (_policy(1, gate),))
    conn.execute(
        "SELECT harvest.create_schedule('s', 'latest', p_interval_secs => 3600, p_input => %s,"
        " p_overlap => 'terminate_other')",
        (Jsonb([{"doc": doc}]),),
    )
    # (The first slot an hour back, so the next trigger's run has an id of its own.)
    conn.execute("UPDATE harvest.engine_settings SET test_clock_allowed = true")
    conn.execute("SELECT set_config('harvest.fake_now', (now() - interval '1 hour')::text, false)")
    run = conn.execute("SELECT harvest.trigger_schedule('s', 'allow_all')").fetchone()[0]["execution_id"]  # type: ignore[index]
    conn.execute("RESET harvest.fake_now")
    task = _claim_one(conn)
    assert task[0] == run
    _acquire_in_setup(db, task, "m")
    return run


@pytest.mark.parametrize("gate", [None, *GATES])
def test_a_terminate_other_slot_and_a_start_superseding_its_run_do_not_deadlock(
    db: str, conn: psycopg.Connection, gate: str | None
) -> None:
    """A schedule of 'latest' (key d1) whose slot terminates the live run, the holder of mutex m,
    and then starts the next run, taking key d1; a client start of key d1 meanwhile holds the
    key's advisory lock and, once it has the key's row, supersedes that same live run. Behind a
    start gate (per key), the slot took the gate only at its start, after the run's row and m,
    and the client start held the gate: the same cycle, until the slot admitted its start at
    the gate before it locked any run."""
    run = _scheduled_run_holding_m(conn, db, gate, "d1")

    outcome = race_behind_a_held_lock(
        db,
        conn,
        flow_key_row("concurrency", "d1"),
        Racer("start", _start_latest("d1"), waits_on="key d1's row, holding its advisory lock"),
        Racer("fire", _fire, waits_on="key d1 (before the fix: holding the run and m)"),
    )

    assert (outcome["start"], outcome["fire"]) == (True, "started"), outcome
    assert _status(conn, run) in ("CANCELLED", "TERMINATED")
    assert (
        conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE workflow_name = 'latest' AND status = 'RUNNING'"
        ).fetchone()[0]
        == 1
    )


def test_a_decision_taking_a_mutex_and_superseding_a_holder_of_another_and_a_group_commit_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """Run v (latest-wins, key d1) holds mutex a. Run r1's decision takes mutex b and starts a
    child of key d1, which supersedes v and so releases a; a group commit of x's and y's
    decisions asks for a, then b. The decision took v's row and a after its own row and b,
    out of key order, and met the batch in a cycle (40P01); it now locks v with its own run and
    a with b before its first command (_lock_superseded_runs; docs/internals.md "Lock order")."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (POLICIES,))
    v = _started(conn, "latest", [{"doc": "d1"}])
    _acquire_in_setup(db, _claim(conn)[v], "a")
    r1, x, y = (_started(conn, "plain") for _ in range(3))
    tasks = _claim(conn)
    child = {"type": "start_child_workflow", "seq": 2, "workflow_name": "latest", "input": [{"doc": "d1"}]}
    one = [_marker(1, "mutex_acquire", "b"), child]
    two = [
        (tasks[x][1:], [_marker(1, "mutex_acquire", "a")]),
        (tasks[y][1:], [_marker(1, "mutex_acquire", "b")]),
    ]
    race_behind_a_held_lock(
        db,
        conn,
        run_row(v),
        Racer("one", lambda c: _decide(c, tasks[r1], one), waits_on="v's row"),
        Racer("two", _committing(two), waits_on="b, one holding it", waits_only_before_the_fix=True),
    )


# A start of 'latest' (key d1) replacing the live run of workflow id W (terminate_existing).
REPLACE_W = _start_latest("d1", workflow_id="W", conflict="terminate_existing")


def test_a_start_replacing_a_mutex_holder_and_superseding_a_run_and_a_group_commit_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """Prior p (workflow id W, key dP) holds mutex m; v (key d1) sorts before x by id. A group
    commit of v's decision (asking for m) and x's locks v, then x, then m. A start of key d1
    replacing p (terminate_existing) took p's row and m (the terminate) before v's row (the
    supersede): it held m and waited on v while the batch held v and waited on m (40P01). The
    start now locks p with the runs it supersedes, in id order, then their mutex keys, before
    the terminate (docs/internals.md "Lock order")."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (POLICIES,))
    p = _run_holding(conn, db, "latest", [{"doc": "dP"}], workflow_id="W")
    v = _started(conn, "latest", [{"doc": "d1"}])
    x = _started(conn, "plain")
    assert p < v < x  # (ids in start order)
    tasks = _claim(conn)
    batch = [(tasks[v][1:], [_marker(1, "mutex_acquire", "m")]), (tasks[x][1:], [])]
    outcome = race_behind_a_held_lock(
        db,
        conn,
        run_row(x),
        Racer("batch", _committing(batch), waits_on="x's row, holding v's"),
        Racer("start", REPLACE_W, waits_on="v's row (before the fix: holding p's row and m)"),
    )
    assert outcome["start"] is True
    assert (_status(conn, p), _status(conn, v)) == ("TERMINATED", "CANCELLED")


def test_a_start_replacing_a_run_and_superseding_an_older_one_and_a_group_commit_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """No mutex: v (key d1) sorts before prior p (workflow id W, key dP) by id. A start of key d1
    replacing p (terminate_existing) locked p's row, then v's (the supersede), out of id order,
    while a group commit of v's and p's decisions held v and waited on p (40P01). The start now
    locks v and p in id order before the terminate."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (POLICIES,))
    v = _started(conn, "latest", [{"doc": "d1"}])
    p = _started(conn, "latest", [{"doc": "dP"}], "W")
    assert v < p  # (ids in start order)
    tasks = _claim(conn)
    batch = [(tasks[v][1:], []), (tasks[p][1:], [])]
    outcome = race_behind_a_held_lock(
        db,
        conn,
        task_rows_of(p),
        Racer("start", REPLACE_W, waits_on="p's task row (the terminate), holding p's row"),
        Racer("batch", _committing(batch), waits_on="v's row (before the fix: holding v's, on p's)"),
    )
    assert outcome["start"] is True
    assert (_status(conn, p), _status(conn, v)) == ("TERMINATED", "CANCELLED")


@pytest.mark.parametrize("gate", [None, *GATES])
def test_a_terminate_other_slot_superseding_a_run_and_a_group_commit_do_not_deadlock(
    db: str, conn: psycopg.Connection, gate: str | None
) -> None:
    """A schedule's run r (key dR, its input then) holds mutex m; the schedule's input is now key
    d1, whose live run v sorts before x by id. A group commit of v's decision (asking for m) and
    x's locks v, then x, then m. The next terminate_other slot locked r and m (its end) before
    v's row (its start's supersede): it held m and waited on v while the batch held v and
    waited on m (40P01). The slot now locks the runs its start supersedes with its own, in id
    order, then their mutex keys (docs/internals.md "Lock order"). Behind a start gate, the slot
    left its start out of that pass (its gate comes first) and met the same cycle, until it
    admitted the start at its gate before locking any run."""
    r = _scheduled_run_holding_m(conn, db, gate, "dR")
    conn.execute("SELECT harvest.update_schedule('s', %s)", (Jsonb({"input": [{"doc": "d1"}]}),))
    v = _started(conn, "latest", [{"doc": "d1"}])
    x = _started(conn, "plain")
    assert v < x  # (ids in start order)
    tasks = _claim(conn)
    batch = [(tasks[v][1:], [_marker(1, "mutex_acquire", "m")]), (tasks[x][1:], [])]
    outcome = race_behind_a_held_lock(
        db,
        conn,
        run_row(x),
        Racer("batch", _committing(batch), waits_on="x's row, holding v's"),
        Racer("fire", _fire, waits_on="v's row (before the fix: holding r's row and m)"),
    )
    assert outcome["fire"] == "started"
    assert (_status(conn, r), _status(conn, v)) == ("TERMINATED", "CANCELLED")


def test_a_batch_of_replacing_starts_and_a_group_commit_of_their_runs_do_not_deadlock(
    db: str, conn: psycopg.Connection
) -> None:
    """A start_workflows batch whose start of key d1 replaces prior p (workflow id W, key dP) and
    supersedes v (key d1), p < x < v by id. The batch locked v up front (_lock_superseded_runs)
    and p only at W's start (its replace pass), out of id order, while a group commit of p's,
    x's and v's decisions held p and, once a third session let x go, waited on v (40P01). The
    batch now locks each replacing start's live prior in its id-ordered pass before the first
    start (docs/internals.md "Lock order")."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (POLICIES,))
    p = _started(conn, "latest", [{"doc": "dP"}], "W")
    x = _started(conn, "plain")
    v = _started(conn, "latest", [{"doc": "d1"}])
    assert p < x < v  # (ids in start order)
    tasks = _claim(conn)
    replacing = [
        {
            "workflow_name": "latest",
            "workflow_id": wid,
            "input": [{"doc": doc}],
            "conflict_policy": "terminate_existing",
        }
        for wid, doc in (("W", "d1"), ("Z", "d2"))
    ]

    def start_batch(c: psycopg.Connection) -> Any:
        c.execute("SET deadlock_timeout = '50ms'")
        return c.execute(
            "SELECT array_agg(started_fresh ORDER BY n) FROM harvest.start_workflows(%s)", (Jsonb(replacing),)
        ).fetchone()[0]

    batch = [(tasks[run][1:], []) for run in (p, x, v)]
    outcome = race_behind_a_held_lock(
        db,
        conn,
        run_row(x),
        Racer("batch", _committing(batch), waits_on="x's row, holding p's"),
        Racer("starts", start_batch, waits_on="p's row (before the fix: holding v's)"),
    )
    assert outcome["starts"] == [True, True]
    assert (_status(conn, p), _status(conn, v)) == ("TERMINATED", "CANCELLED")
