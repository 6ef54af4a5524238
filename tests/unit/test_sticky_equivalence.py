"""Sticky (cached) and cache-miss (cold) runs agree for signals, cancel, children, versions.

``Engine.task`` compares the warm run's commands with a fresh run over the whole
history at every task; here each scenario also delivers events while a task is
in flight (they land in the next batch) and ends with a clean replay of the
closed history.
"""

from __future__ import annotations

import asyncio

import pytest
from history_builder import Engine, resolve_all_in_order, resolve_all_reversed, resolve_one_at_a_time
from test_cancellation import with_cleanup
from test_children import charge_child, fan_out_children, with_handle
from test_continue_as_new import paginate
from test_signals import two_waiters, wait_or_timeout
from test_versioning import notify_v2
from workflows_fixture import render, send_email

from harvest.declare.definitions import App, workflow
from harvest.testing import WorkflowReplayer


@workflow
async def everything(ctx, n: int) -> dict:
    v = ctx.version("fan-out", -1, 2)
    kids = await asyncio.gather(*(ctx.execute_child_workflow(charge_child, i) for i in range(n)))
    try:
        sig = await ctx.wait_for_signal("go", timeout=30)
    except TimeoutError:
        sig = None
    page = await ctx.execute_activity(render, n)
    suggest = ctx.should_continue_as_new()
    return {
        "v": v,
        "kids": [k.charged for k in kids],
        "sig": sig,
        "page": page,
        "suggest": suggest,
        "signals_left": ctx.pending_signals(),
    }


app = App(
    workflows=[
        everything,
        with_cleanup,
        charge_child,
        fan_out_children,
        with_handle,
        paginate,
        two_waiters,
        wait_or_timeout,
        notify_v2,
    ],
    activities=[send_email, render],
)


def outcome(c):
    if c["type"] == "start_timer":
        return ("fire",)
    if c["type"] == "start_child_workflow":
        return ("result", {"order_id": "o", "charged": c["input"][0]})
    if c.get("name") == "render":
        return ("result", 7)
    return ("result", {"sent": "x"})


def resolver_from(order):
    return lambda out: [(c, outcome(c)) for c, _ in order(out)]


def drive(wf, input, order, signals=(), cancel_after=None, **kw):
    e = Engine(app, wf, input, resolver=resolver_from(order), **kw)
    pending_signals = list(signals)
    for task_no in range(30):

        def in_flight(h, task_no=task_no):
            if pending_signals:
                h.signal(*pending_signals.pop(0))  # arrives during the task: next batch
            if cancel_after == task_no:
                h.cancel_requested("stop")

        act = run(e.task(in_flight=in_flight))
        if act.finished:
            break
        e.resolve()
    else:
        raise AssertionError("did not finish")
    result = WorkflowReplayer(app).replay(e.history.events, workflow=wf)
    assert result.ok, result.error
    return act.commands[-1]


def run(coro):
    return asyncio.run(coro)


ORDERS = [resolve_all_in_order, resolve_all_reversed, resolve_one_at_a_time]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("signals", [(), [("go", 1), ("go", 2), ("other", 3)]])
@pytest.mark.parametrize("trust", [False, True], ids=["read-back", "trust-own-commits"])
def test_everything(order, signals, trust):
    final = drive(everything, [3], order, signals, trust_own_commits=trust)
    assert final["type"] == "complete_workflow"
    assert final["result"]["kids"] == [0, 1, 2] and final["result"]["v"] == 2


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    ("wf", "input", "signals", "cancel_after", "kw"),
    [
        (with_cleanup, [], (), 0, {}),
        (with_cleanup, [], (), 1, {}),
        (fan_out_children, [4], (), None, {}),
        (with_handle, [], (), None, {}),
        (paginate, [1, []], (), None, {"continue_as_new_threshold": 3}),
        (two_waiters, [], [("s", 1), ("t", 2), ("s", 3)], None, {}),
        (wait_or_timeout, [], [("go", 9)], None, {}),
        (wait_or_timeout, [], (), None, {}),
        (notify_v2, [], (), None, {}),
    ],
)
@pytest.mark.parametrize("trust", [False, True], ids=["read-back", "trust-own-commits"])
def test_scenarios(order, wf, input, signals, cancel_after, kw, trust):
    final = drive(wf, input, order, signals, cancel_after, trust_own_commits=trust, **kw)
    assert final["type"] in ("complete_workflow", "cancel_workflow", "continue_as_new")


def test_trusting_own_commits_skips_exactly_the_runs_own_events():
    """recorded() takes a commit's events as read only when they are the activation's own:
    not for a step that started children (their start events carry the children's ids),
    nor after a signal landed mid-task (the marker is then not at through + 1)."""
    e = Engine(app, everything, [2], trust_own_commits=True, resolver=resolver_from(resolve_all_in_order))
    assert [c["type"] for c in run(e.task()).commands][1:] == ["start_child_workflow"] * 2
    assert e.recorded == 0
    e.resolve()
    act = run(e.task(in_flight=lambda h: h.signal("go", 1)))
    assert [c["type"] for c in act.commands] == ["start_timer"] and e.recorded == 0
    e.resolve()
    act = run(e.task())  # the render activity alone: taken as read
    assert [c["type"] for c in act.commands] == ["schedule_activity"]
    assert e.recorded == 1 and e.run.settled
    e.resolve()
    assert run(e.task()).commands[-1]["result"]["sig"] == 1


def test_a_query_reads_a_settled_run_only_while_the_history_has_nothing_new():
    """worker/queries.py answers from the cached run when it is current: a run that took its
    own commit's events as read is current while no event follows them."""
    from harvest.worker.queries import _is_current

    e = Engine(app, everything, [2], trust_own_commits=True, resolver=resolver_from(resolve_all_in_order))
    run(e.task())  # the children
    e.resolve()
    run(e.task(in_flight=lambda h: h.signal("go", 1)))  # the signal's timer
    e.resolve()
    run(e.task())  # the render activity: its events taken as read
    assert e.run.settled and e.recorded == 1
    assert _is_current(e.run, [])
    assert not _is_current(
        e.run,
        [
            {
                "event_id": e.run.last_event_id + 1,
                "event_type": "SignalReceived",
                "event_data": {"name": "x", "payload": None},
            }
        ],
    )
