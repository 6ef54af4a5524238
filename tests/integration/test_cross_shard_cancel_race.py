"""A cross-shard child's parent close policy racing the child's continue-as-new
(harvest.cancel_cross_shard_child, functions/cross_shard.sql).

The pump applies the ended parent's policy on the child's shard while the child's own decision
may be continuing it as new. The decision holds the child's current run's row until it commits;
the cancel that waits on that row then finds it CONTINUED_AS_NEW. The policy belongs to the
successor, which inherited the parent link: it must be terminated or asked to cancel, never left
running. The interleaving is forced: the decision is applied and held uncommitted, the cancel is
started on a session of its own and waited for on its lock, then the decision commits. The
parent's explicit cancel of the child (an external_cancel relay, deliver_external_relay) races
the same way.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.types.json import Jsonb
from race_helpers import in_thread, session, wait_until_blocked


def _minted(shard: int) -> str:
    """An execution id minted for ``shard`` (its first 16 bits, harvest.shard_of)."""
    return f"{shard:04x}" + str(uuid.uuid4())[4:]


def _cross_shard_child(conn: psycopg.Connection, key: str, policy: str) -> tuple[str, str]:
    """A child started here (shard 0) by a parent of shard 1, as the pump starts it: (child, parent)."""
    child, parent = _minted(0), _minted(1)
    outcome = conn.execute(
        "SELECT outcome FROM harvest.start_cross_shard_child(%s, %s, 1, 'kid', %s, %s, '[]', %s, NULL, 1)",
        (child, parent, key, f"kq_{key}", policy),
    ).fetchone()[0]
    assert outcome == "started"
    return child, parent


def _continue_as_new(conn: psycopg.Connection, key: str) -> None:
    """The current run of ``key`` continues as new, on ``conn`` (committed or not: its caller's)."""
    task = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('decider', %s, 1)", ([f"kq_{key}"],)
    ).fetchone()
    assert task is not None
    conn.execute(
        "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)",
        (task[0], task[1], Jsonb([{"type": "continue_as_new", "input": []}])),
    )


def _apply_policy(db: str, child: str, policy: str, parent: str) -> object:
    """The pump's call on the child's shard, on a session of its own named parent_policy."""
    with session(db, "parent_policy") as c:
        return c.execute(
            "SELECT harvest.cancel_cross_shard_child(%s, %s, %s)", (child, policy, parent)
        ).fetchone()[0]


def _runs(conn: psycopg.Connection, key: str) -> list[tuple[str, bool]]:
    return conn.execute(
        "SELECT status, cancel_requested FROM harvest.executions WHERE workflow_id = %s"
        " ORDER BY created_at, id",
        (key,),
    ).fetchall()


@pytest.mark.parametrize("rotated_before", [False, True], ids=["first_run", "rotated_run"])
@pytest.mark.parametrize(
    ("policy", "outcome", "successor"),
    [
        ("request_cancel", "cancel_requested", ("RUNNING", True)),
        ("terminate", "terminated", ("TERMINATED", False)),
    ],
)
def test_a_parent_policy_racing_the_childs_continue_as_new_reaches_the_successor(
    db: str, conn: psycopg.Connection, rotated_before: bool, policy: str, outcome: str, successor: tuple
) -> None:
    key = f"k-{uuid.uuid4()}"
    child, parent = _cross_shard_child(conn, key, policy)
    if rotated_before:  # the pump names the chain by its first run, the current run is a successor
        _continue_as_new(conn, key)
    answer: dict[str, object] = {}
    with psycopg.connect(db) as decider:
        _continue_as_new(decider, key)  # uncommitted: holds the current run's row
        thread = in_thread(lambda: _apply_policy(db, child, policy, parent), answer)
        wait_until_blocked(conn, "parent_policy", "the rotating run's row")
        decider.commit()
        thread.join(20)
    assert answer == {"result": outcome}
    runs = _runs(conn, key)
    assert runs[-1] == successor, runs
    assert all(status == "CONTINUED_AS_NEW" for status, _ in runs[:-1]), runs
    owed = conn.execute(
        "SELECT count(*) FROM harvest.executions WHERE workflow_id = %s AND end_owed_to_shard IS NOT NULL",
        (key,),
    )
    assert owed.fetchone()[0] == 0  # the parent ended first: its end is owed to nobody


@pytest.mark.parametrize(
    ("policy", "first_run"), [("request_cancel", ("RUNNING", True)), ("terminate", ("TERMINATED", False))]
)
def test_a_continue_as_new_racing_the_parent_policy_applied_first_starts_no_successor(
    db: str, conn: psycopg.Connection, policy: str, first_run: tuple
) -> None:
    """The other order: the policy holds the child's row when the child's decision, taken before
    the policy reached it, comes to continue it as new. The decision must not hand the run to a
    successor that never heard of the cancel (a successor does not carry a cancel request)."""
    key = f"k-{uuid.uuid4()}"
    child, parent = _cross_shard_child(conn, key, policy)
    task = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('decider', %s, 1)", ([f"kq_{key}"],)
    ).fetchone()
    answer: dict[str, object] = {}

    def decide() -> object:
        with session(db, "decider") as c:
            return c.execute(
                "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)",
                (task[0], task[1], Jsonb([{"type": "continue_as_new", "input": []}])),
            ).fetchone()

    with psycopg.connect(db) as policy_session:
        applied = policy_session.execute(
            "SELECT harvest.cancel_cross_shard_child(%s, %s, %s)", (child, policy, parent)
        ).fetchone()[0]
        thread = in_thread(decide, answer)
        wait_until_blocked(conn, "decider", "the child's row, held by the policy")
        policy_session.commit()
        thread.join(20)
    assert not thread.is_alive()
    assert applied == ("cancel_requested" if policy == "request_cancel" else "terminated")
    assert _runs(conn, key) == [first_run], answer  # refused: no successor


def test_a_parents_cancel_relay_racing_the_childs_continue_as_new_reaches_the_successor(
    db: str, conn: psycopg.Connection
) -> None:
    """The parent cancelling its cross-shard child (an external_cancel relay, delivered on the
    child's shard by deliver_external_relay, which waits for the target's lock) while the child
    continues as new: the cancel is the successor's."""
    key = f"k-{uuid.uuid4()}"
    child, parent = _cross_shard_child(conn, key, "abandon")
    answer: dict[str, object] = {}

    def deliver() -> object:
        with session(db, "cancel_relay") as c:
            return c.execute(
                "SELECT outcome, execution_id::text FROM harvest.deliver_external_relay("
                "1, 7, 'external_cancel', %s, NULL, NULL, '{\"reason\": \"the parent asked\"}', %s)",
                (child, parent),
            ).fetchone()

    with psycopg.connect(db) as decider:
        _continue_as_new(decider, key)  # uncommitted: holds the child's row
        thread = in_thread(deliver, answer)
        wait_until_blocked(conn, "cancel_relay", "the rotating run's row")
        decider.commit()
        thread.join(20)
    successor = conn.execute(
        "SELECT output ->> 'continued_as_new' FROM harvest.executions WHERE id = %s", (child,)
    ).fetchone()[0]
    assert answer == {"result": ("delivered", successor)}
    assert _runs(conn, key) == [("CONTINUED_AS_NEW", False), ("RUNNING", True)]
