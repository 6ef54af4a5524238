"""Child workflows: start_child_workflow, ChildWorkflowStarted, completion and failure."""

from __future__ import annotations

import asyncio

import pytest
from history_builder import Engine, HistoryBuilder, new_run, resolve_all_reversed
from workflows_fixture import Receipt

from harvest import ChildPlacement
from harvest.core.errors import ChildWorkflowError, InvalidArgument, NonDeterminismError
from harvest.declare.definitions import App, workflow
from harvest.runtime.loop import WorkflowCallError


def run(coro):
    return asyncio.run(coro)


@workflow(queue="billing")
async def charge_child(ctx, n: int) -> Receipt:
    return Receipt(f"o-{n}", n)


@workflow
async def parent(ctx, n: int) -> dict:
    receipt = await ctx.execute_child_workflow(charge_child, n)
    assert isinstance(receipt, Receipt)
    return {"receipt": receipt}


@workflow
async def tolerant_parent(ctx) -> dict:
    try:
        await ctx.execute_child_workflow(
            "remote_child", 1, workflow_id="fixed-id", queue="elsewhere", parent_close_policy="abandon"
        )
    except ChildWorkflowError as err:
        return {"status": err.status, "error_type": err.error_type, "child": err.child_execution_id}
    return {"status": "ok"}


@workflow
async def fan_out_children(ctx, n: int) -> list:
    receipts = await asyncio.gather(*(ctx.execute_child_workflow(charge_child, i) for i in range(n)))
    return [r.charged for r in receipts]


@workflow
async def with_handle(ctx) -> dict:
    handle = await ctx.start_child_workflow(charge_child, 5)
    before = handle.child_execution_id
    policy = handle.parent_close_policy  # known from the call, before the start is recorded
    await handle.started()
    receipt = await handle.result()
    return {
        "before": before,
        "after": handle.child_execution_id,
        "seq": handle.seq,
        "workflow_id": handle.workflow_id,
        "charged": receipt.charged,
        "policy": policy,
    }


@workflow
async def awaits_its_handles(ctx) -> list:
    first = await ctx.start_child_workflow(charge_child, 6)
    second = await ctx.start_child_workflow(charge_child, 7)
    # `await handle` is `await handle.result()` (Temporal's child handle is awaitable so),
    # and may be repeated, and gathered.
    both = await asyncio.gather(second, first)
    again = await first
    return [both[0].charged, both[1].charged, again.charged, (await first.result()).charged]


app = App(
    workflows=[charge_child, parent, tolerant_parent, fan_out_children, with_handle, awaits_its_handles]
)


def receipt_for(command: dict) -> dict:
    n = command["input"][0]
    return {"order_id": f"o-{n}", "charged": n}


def test_child_result_is_decoded_by_its_return_hint():
    e = Engine(app, parent, [3], resolver=lambda out: [(c, ("result", receipt_for(c))) for c in out])
    final = run(e.run_to_end())
    assert e.activations[0].commands == [
        {
            "type": "start_child_workflow",
            "seq": 1,
            "workflow_name": "charge_child",
            "input": [3],
            "workflow_id": None,
            "task_queue": "billing",
            "parent_close_policy": "terminate",
        }
    ]
    started = e.history.events[2]
    assert started["event_type"] == "ChildWorkflowStarted"
    assert started["event_data"]["workflow_id"] == "wf-1/1"
    assert final == {"type": "complete_workflow", "result": {"receipt": {"order_id": "o-3", "charged": 3}}}


def test_child_failure_raises_child_workflow_error_in_the_parent():
    e = Engine(app, tolerant_parent, resolver=lambda out: [(c, ("fail", "CardDeclined")) for c in out])
    final = run(e.run_to_end())
    command = e.activations[0].commands[0]
    assert command["workflow_name"] == "remote_child" and command["workflow_id"] == "fixed-id"
    assert command["task_queue"] == "elsewhere" and command["parent_close_policy"] == "abandon"
    assert final["result"] == {"status": "FAILED", "error_type": "CardDeclined", "child": "child-exec-1"}


@pytest.mark.parametrize("status", ["CANCELLED", "TERMINATED", "TIMED_OUT"])
def test_other_child_endings_are_errors_too(status):
    e = Engine(app, parent, [1], resolver=lambda out: [])
    run(e.task())
    e.history.child_failed(1, status=status)
    final = run(e.task())
    failure = final.commands[-1]["failure"]
    assert failure["error_type"] == "ChildWorkflowError"
    assert failure["details"]["status"] == status
    assert failure["details"]["child_execution_id"] == "child-exec-1"
    assert status in failure["message"]


def test_gather_fans_out_children_with_results_in_any_order():
    def resolver(out):
        return [(c, ("result", receipt_for(c))) for c, _ in resolve_all_reversed(out)]

    e = Engine(app, fan_out_children, [3], resolver=resolver)
    final = run(e.run_to_end())
    assert [(c["seq"], c["input"]) for c in e.activations[0].commands] == [(1, [0]), (2, [1]), (3, [2])]
    assert final["result"] == [0, 1, 2]


def test_handle_learns_the_child_execution_id_once_the_start_is_recorded():
    e = Engine(app, with_handle, resolver=lambda out: [(c, ("result", receipt_for(c))) for c in out])
    final = run(e.run_to_end())  # warm == cold at every task
    assert final["result"] == {
        "before": None,
        "after": "child-exec-1",
        "seq": 1,
        "workflow_id": "wf-1/1",
        "charged": 5,
        "policy": "terminate",
    }


def test_awaiting_a_child_handle_gives_the_childs_result():
    e = Engine(app, awaits_its_handles, resolver=lambda out: [(c, ("result", receipt_for(c))) for c in out])
    final = run(e.run_to_end())  # warm == cold at every task
    assert final["result"] == [7, 6, 6, 6]


def test_invalid_parent_close_policy_is_rejected_at_the_call():
    @workflow
    async def bad_policy(ctx) -> None:
        await ctx.execute_child_workflow(charge_child, 1, parent_close_policy="orphan")

    # The workflow's code is wrong: its task fails (retried until fixed code runs), not the run.
    with pytest.raises(WorkflowCallError, match=r"ctx\.start_child_workflow: parent_close_policy: 'orphan'"):
        run(new_run(app, bad_policy).advance(HistoryBuilder("bad_policy").events))


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("workflow_id", "workflow_id: 'id\\x00' holds a NUL"),
        ("queue", "queue: 'q\\x00' holds a NUL"),
        ("name", "child workflow name: 'c\\x00' holds a NUL"),
    ],
)
def test_a_nul_in_a_childs_name_is_rejected_at_the_call(where, message):
    """The database refused the whole decision (22P05): the workflow task crashed its handler
    at every lease. The call raises InvalidArgument, which the parent's code may catch."""

    @workflow
    async def nul_child(ctx) -> None:
        if where == "name":
            await ctx.execute_child_workflow("c\x00", 1)
        elif where == "workflow_id":
            await ctx.execute_child_workflow(charge_child, 1, workflow_id="id\x00")
        else:
            await ctx.execute_child_workflow(charge_child, 1, queue="q\x00")

    act = run(new_run(app, nul_child).advance(HistoryBuilder("nul_child").events))
    assert act.commands == [act.commands[-1]]  # no start_child_workflow was issued
    failure = act.commands[-1]["failure"]
    assert failure["error_type"] == "InvalidArgument" and message in failure["message"]


def test_replaying_a_renamed_child_is_nondeterministic():
    e = Engine(app, parent, [1], resolver=lambda out: [])
    run(e.task())

    @workflow(name="parent")
    async def renamed(ctx, n: int) -> None:
        await ctx.execute_child_workflow("other_child", n)

    with pytest.raises(NonDeterminismError, match="start_child_workflow 'charge_child'"):
        run(new_run(app, renamed).advance(e.history.events))


@workflow
async def old_spelling_parent(ctx) -> dict:
    await ctx.execute_child_workflow("remote_child", 1, workflow_id="fixed-id", task_queue="elsewhere")
    return {"status": "ok"}


def test_task_queue_is_a_deprecated_spelling_of_queue():
    e = Engine(app, old_spelling_parent, resolver=lambda out: [(c, ("result", None)) for c in out])
    with pytest.warns(DeprecationWarning, match="task_queue= is deprecated: pass queue="):
        run(e.run_to_end())
    # The recorded command field keeps its spelling (CONTRIBUTING.md "Names").
    assert e.activations[0].commands[0]["task_queue"] == "elsewhere"


@workflow
async def reads_its_queue(ctx) -> dict:
    return {"queue": ctx.queue, "info": ctx.info.queue}


def test_the_run_knows_its_queue_and_task_queue_is_a_deprecated_attribute():
    """WorkflowInfo.queue and ctx.queue (migration 0022's spelling); WorkflowInfo.task_queue and
    ctx.task_queue read the same value with a DeprecationWarning, and WorkflowRun(task_queue=) is
    the deprecated keyword of its queue argument."""
    from harvest.runtime.context import WorkflowInfo

    h = HistoryBuilder("reads_its_queue", task_queue="recorded_q")
    r = new_run(app, reads_its_queue, queue="claimed_q")
    activation = run(r.advance(h.events))
    assert activation.commands[-1]["type"] == "complete_workflow"
    assert activation.commands[-1]["result"] == {"queue": "claimed_q", "info": "claimed_q"}
    with pytest.warns(DeprecationWarning, match=r"ctx.task_queue is deprecated: read queue"):
        assert r.ctx.task_queue == "claimed_q"
    info = WorkflowInfo(workflow_id="w", execution_id="e", workflow_name="n", queue="q")
    with pytest.warns(DeprecationWarning, match=r"WorkflowInfo.task_queue is deprecated: read queue"):
        assert info.task_queue == "q"
    # Without a claimed queue the run reads the one its WorkflowStarted recorded.
    r = new_run(app, reads_its_queue)
    assert run(r.advance(h.events)).commands[-1]["result"]["queue"] == "recorded_q"
    with pytest.warns(DeprecationWarning, match="task_queue= is deprecated: pass queue="):
        r = new_run(app, reads_its_queue, task_queue="old_kw_q")
    assert run(r.advance(h.events)).commands[-1]["result"]["queue"] == "old_kw_q"


@workflow
async def placed_parent(ctx, where: str) -> list:
    placement = {
        "default": None,
        "parent": ChildPlacement.PARENT_SHARD,
        "distributed": ChildPlacement.DISTRIBUTED,
        "shard": ChildPlacement.shard(2),
        "eu": ChildPlacement.residency_key("eu"),
    }[where]
    receipt = await ctx.execute_child_workflow(charge_child, 4, placement=placement)
    return [receipt.charged]


@pytest.mark.parametrize(
    ("where", "field"),
    [
        ("default", None),
        ("parent", None),
        ("distributed", {"kind": "distributed"}),
        ("shard", {"kind": "shard", "shard_id": 2}),
        ("eu", {"kind": "residency_key", "key": "eu"}),
    ],
)
def test_a_placement_rides_on_the_command_and_the_parent_replays_without_it(where, field):
    """The worker resolves ``placement`` to a shard; the history records only the child's id,
    so warm and cold replays agree whatever the placement (Engine checks both each task)."""
    e = Engine(
        app, placed_parent, [where], resolver=lambda out: [(c, ("result", receipt_for(c))) for c in out]
    )
    final = run(e.run_to_end())
    assert e.activations[0].commands[0].get("placement") == field
    assert ("placement" in e.activations[0].commands[0]) == (field is not None), (
        "the default command is unchanged"
    )
    assert final["result"] == [4]


def test_child_placement_is_checked_when_made():
    assert ChildPlacement.shard(0).as_command() == {"kind": "shard", "shard_id": 0}
    for bad in (
        lambda: ChildPlacement.shard(-1),
        lambda: ChildPlacement.shard(True),
        lambda: ChildPlacement("x"),
    ):
        with pytest.raises(InvalidArgument):
            bad()
    with pytest.raises(InvalidArgument, match="residency key"):
        ChildPlacement.residency_key(" ")

    @workflow
    async def bad_placement(ctx) -> None:
        await ctx.execute_child_workflow(charge_child, 1, placement="shard-2")

    with pytest.raises(WorkflowCallError, match="placement: expected a ChildPlacement"):
        run(new_run(app, bad_placement).advance(HistoryBuilder("bad_placement").events))
