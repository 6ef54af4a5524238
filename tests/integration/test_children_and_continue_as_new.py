"""Child workflows (results, failures, close policies) and continue-as-new on a real Postgres."""

from __future__ import annotations

import asyncio
import time

import pytest

from harvest import App, Client, activity, workflow
from harvest.core.errors import ChildWorkflowError


@activity
async def square(ctx, x: int) -> int:
    return x * x


@workflow
async def child_square(ctx, x: int) -> int:
    return await ctx.execute_activity(square, x)


@workflow
async def child_fails(ctx, x: int) -> int:
    raise ValueError(f"bad input {x}")


@workflow
async def child_waits(ctx) -> None:
    await ctx.wait_for_signal("never")


@workflow
async def parent_sum(ctx, n: int) -> int:
    results = await asyncio.gather(*(ctx.execute_child_workflow(child_square, i) for i in range(n)))
    return sum(results)


@workflow
async def parent_handles_failure(ctx) -> str:
    try:
        await ctx.execute_child_workflow(child_fails, 7)
    except ChildWorkflowError as exc:
        return f"child {exc.status}: {exc.failure['message']}"
    return "unreachable"


@workflow
async def parent_exits_early(ctx, policy: str) -> str:
    await ctx.start_child_workflow(child_waits, parent_close_policy=policy)
    await ctx.sleep(0.2)
    return "parent done"


@workflow
async def counter(ctx, n: int, total: int) -> int:
    if n == 0:
        return total
    await ctx.execute_activity(square, n)
    await ctx.continue_as_new(n - 1, total + n)
    return None


APP = App(
    workflows=[
        child_square,
        child_fails,
        child_waits,
        parent_sum,
        parent_handles_failure,
        parent_exits_early,
        counter,
    ],
    activities=[square],
)


def test_children_fan_out_and_return(start_worker, client: Client) -> None:
    start_worker(APP)
    handle = client.start_workflow(parent_sum, 4)
    assert handle.result(timeout=30) == 0 + 1 + 4 + 9
    children = handle.children()
    assert len(children) == 4 and {c["status"] for c in children} == {"COMPLETED"}
    assert all(c["workflow_id"].startswith(handle.workflow_id + "/") for c in children)


def test_child_failure_reaches_the_parent_typed(start_worker, client: Client) -> None:
    start_worker(APP)
    result = client.start_workflow(parent_handles_failure).result(timeout=30)
    assert result == "child FAILED: bad input 7"


@pytest.mark.parametrize(
    ("policy", "child_status"),
    [
        ("terminate", "TERMINATED"),
        ("request_cancel", "CANCELLED"),
        ("abandon", "RUNNING"),
    ],
)
def test_parent_close_policy(start_worker, client: Client, policy: str, child_status: str) -> None:
    start_worker(APP)
    handle = client.start_workflow(parent_exits_early, policy)
    assert handle.result(timeout=30) == "parent done"
    deadline = time.monotonic() + 10
    while True:
        children = handle.children()
        if children and children[0]["status"] == child_status:
            break
        assert time.monotonic() < deadline, f"child is {children}"
        time.sleep(0.05)


def test_continue_as_new_rotates_runs_and_result_follows(start_worker, client: Client) -> None:
    start_worker(APP)
    handle = client.start_workflow(counter, 3, 0, workflow_id="counter-1")
    assert handle.result(timeout=30) == 3 + 2 + 1
    first = handle.describe()
    assert first["status"] == "CONTINUED_AS_NEW"
    assert handle.history()[-1]["event_type"] == "WorkflowContinuedAsNew"


@workflow
async def rotating_inbox(ctx, seen: list) -> list:
    item = await ctx.wait_for_signal("item")
    seen = [*seen, item]
    if len(seen) < 3:
        await ctx.continue_as_new(seen)
    return seen


def test_signals_follow_the_chain_to_the_current_run(start_worker, client: Client, db: str) -> None:
    import psycopg

    start_worker(App(workflows=[rotating_inbox]))
    handle = client.start_workflow(rotating_inbox, [], workflow_id="inbox-1")
    for rotated, item in enumerate(("a", "b", "c")):
        handle.signal("item", item)  # sent to the first run's handle: follows its successors
        if item == "c":
            break
        deadline = time.monotonic() + 10
        with psycopg.connect(db) as conn:
            while (
                conn.execute(
                    "SELECT count(*) FROM harvest.executions WHERE workflow_id = 'inbox-1'"
                    " AND status = 'CONTINUED_AS_NEW'"
                ).fetchone()[0]
                <= rotated
            ):
                assert time.monotonic() < deadline, "the run did not rotate"
                time.sleep(0.05)
    assert handle.result(timeout=30) == ["a", "b", "c"]


def test_retention_keeps_a_live_chains_earlier_runs(start_worker, client: Client, db: str) -> None:
    """The runs a live run continued from are past the retention window but stay: the handle
    from the start (the first run's id) still signals and reads the chain's result."""
    import psycopg

    start_worker(App(workflows=[rotating_inbox]))
    handle = client.start_workflow(rotating_inbox, [], workflow_id="inbox-kept")
    handle.signal("item", "a")
    deadline = time.monotonic() + 10
    with psycopg.connect(db, autocommit=True) as conn:
        while not conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE id = %s AND status = 'CONTINUED_AS_NEW'",
            (handle.execution_id,),
        ).fetchone()[0]:
            assert time.monotonic() < deadline, "the run did not rotate"
            time.sleep(0.05)
        conn.execute(
            "UPDATE harvest.executions SET completed_at = completed_at - interval '40 days' WHERE id = %s",
            (handle.execution_id,),
        )
        swept = conn.execute("SELECT harvest.run_retention('30 days')").fetchone()[0]
        assert swept["deleted"] == 0 and swept["remaining"] == 0, swept
    handle.signal("item", "b")  # to the first run's id: it still leads to the live run
    handle.signal("item", "c")
    assert handle.result(timeout=30) == ["a", "b", "c"]


@workflow
async def rotates_with_run_timeout(ctx, n: int) -> None:
    if n == 0:
        await ctx.continue_as_new(1)
    await ctx.wait_for_signal("never")


def test_a_successor_keeps_the_run_timeout(start_worker, client: Client) -> None:
    from harvest.core.errors import WorkflowTimedOut

    start_worker(App(workflows=[rotates_with_run_timeout]))
    handle = client.start_workflow(rotates_with_run_timeout, 0, run_timeout="1s")
    with pytest.raises(WorkflowTimedOut):
        handle.result(timeout=30)


@workflow
async def rotates_under_an_execution_timeout(ctx, n: int) -> None:
    if n == 0:
        await ctx.sleep(0.6)
        await ctx.continue_as_new(1)
    await ctx.wait_for_signal("never")


def test_a_successor_keeps_the_execution_deadline(start_worker, client: Client, db: str) -> None:
    """docs/guarantees.md: the execution timeout covers the whole chain, counted from the first
    start, not restarted by the rotation."""
    import psycopg

    from harvest.core.errors import WorkflowTimedOut

    start_worker(App(workflows=[rotates_under_an_execution_timeout]))
    # (The rotation comes 0.6 s in; the deadline leaves it 3.4 s more: at 1.5 s a loaded CI machine
    # once timed the first run out before its timer's decision rotated it.)
    handle = client.start_workflow(rotates_under_an_execution_timeout, 0, execution_timeout="4s")
    with pytest.raises(WorkflowTimedOut):
        handle.result(timeout=30)
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT status, execution_timeout_at, created_at FROM harvest.executions"
            " WHERE workflow_id = %s ORDER BY created_at",
            (handle.workflow_id,),
        ).fetchall()
    assert [r[0] for r in rows] == ["CONTINUED_AS_NEW", "TIMED_OUT"]
    assert rows[0][1] == rows[1][1]  # one deadline for the chain
    assert (rows[1][1] - rows[0][2]).total_seconds() == pytest.approx(4, abs=0.05)
    ended = handle.history()  # the first run; its successor timed out on the chain's deadline
    assert ended[-1]["event_type"] == "WorkflowContinuedAsNew"


@workflow
async def slow_rotator(ctx, seen: list) -> list:
    item = await ctx.wait_for_signal("item")
    await ctx.execute_activity(square, 1)  # signals sent meanwhile arrive before the rotation
    seen = [*seen, item]
    if len(seen) < 4:
        await ctx.continue_as_new(seen)
    return seen


def test_a_rotation_hands_unseen_signals_to_the_successor(start_worker, client: Client) -> None:
    handle = client.start_workflow(slow_rotator, [], workflow_id="slow-rotator")
    for item in ("a", "b", "c", "d"):  # sent before any worker runs: read one per run, the rest ride along
        handle.signal("item", item)
    start_worker(App(workflows=[slow_rotator], activities=[square]))
    assert handle.result(timeout=30) == ["a", "b", "c", "d"]


@workflow
async def child_rotates_on_signal(ctx, n: int) -> None:
    if n == 0:
        await ctx.wait_for_signal("go")
        await ctx.continue_as_new(1)
    await ctx.wait_for_signal("never")


@workflow
async def parent_of_a_rotating_child(ctx, policy: str) -> None:
    await ctx.start_child_workflow(child_rotates_on_signal, 0, parent_close_policy=policy)
    await ctx.wait_for_signal("never")


@pytest.mark.parametrize(
    ("policy", "successor_status"), [("terminate", "TERMINATED"), ("request_cancel", "CANCELLED")]
)
def test_a_parent_close_policy_reaches_the_successor_of_a_child_that_rotated_meanwhile(
    start_worker, client: Client, db: str, policy: str, successor_status: str
) -> None:
    # The parent closes while its child's row is busy (a decision of the child commits): the
    # policy waits in a relay for the scanner. The child continues as new meanwhile; the relay
    # must reach the successor, which inherited the parent link, not die with the rotated run.
    import psycopg

    start_worker(App(workflows=[child_rotates_on_signal, parent_of_a_rotating_child]), run_scanner=False)
    parent = client.start_workflow(parent_of_a_rotating_child, policy)
    deadline = time.monotonic() + 10
    while not (children := parent.children()):
        assert time.monotonic() < deadline, "the child did not start"
        time.sleep(0.05)
    child = client.get_handle(str(children[0]["execution_id"]))
    with psycopg.connect(db) as locker:
        locker.execute("SELECT 1 FROM harvest.executions WHERE id = %s FOR UPDATE", (child.execution_id,))
        parent.terminate("closing the parent")
        locker.rollback()
    child.signal("go")
    deadline = time.monotonic() + 10
    while len(rotated := parent.children()) < 2:
        assert time.monotonic() < deadline, f"the child did not rotate: {rotated}"
        time.sleep(0.05)
    # The scanner's passes, as its loop runs them: a pass that finds the successor's row busy
    # (its first decision committing) leaves the relay for the next, as the first one did.
    deadline = time.monotonic() + 10
    with psycopg.connect(db, autocommit=True) as conn:
        while True:
            conn.execute("SELECT harvest.scan()")
            statuses = sorted(row["status"] for row in parent.children())
            if statuses == sorted(["CONTINUED_AS_NEW", successor_status]):
                break
            assert time.monotonic() < deadline, f"the successor was not reached: {statuses}"
            time.sleep(0.05)
