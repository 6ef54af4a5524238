"""The deterministic loop can be stepped from inside a worker's own asyncio loop."""

from __future__ import annotations

import asyncio

import pytest
from history_builder import HistoryBuilder, new_run

from harvest.declare.definitions import workflow
from harvest.runtime import DeterministicEventLoop, IllegalWorkflowOperation


def test_stepping_restores_the_callers_running_loop():
    seen = {}

    @workflow
    async def peek(ctx) -> str:
        seen["inner"] = asyncio.get_running_loop()
        seen["task"] = asyncio.current_task()
        await asyncio.sleep(0)  # a bare yield is deterministic and allowed
        return "ok"

    async def worker():
        outer = asyncio.get_running_loop()
        act = await new_run(None, peek).advance(HistoryBuilder("peek").events)
        assert asyncio.get_running_loop() is outer
        return outer, act

    outer, act = asyncio.run(worker())
    assert isinstance(seen["inner"], DeterministicEventLoop) and seen["inner"] is not outer
    assert seen["task"] is not None
    assert act.commands == [{"type": "complete_workflow", "result": "ok"}]


def test_loop_primitives():
    loop = DeterministicEventLoop()
    order = []
    loop.call_soon(order.append, 1)
    loop.call_soon(order.append, 2)
    assert loop.time() == 0.0 and not loop.get_debug() and not loop.is_running()
    loop.run_until_idle()
    assert order == [1, 2]
    fut = loop.create_future()

    async def waiter():
        return await fut

    task = loop.create_task(waiter())
    loop.run_until_idle()
    assert not task.done()
    fut.set_result(5)
    loop.run_until_idle()
    assert task.result() == 5


def test_wall_clock_and_threads_are_refused():
    loop = DeterministicEventLoop()

    async def bad():
        await asyncio.to_thread(print, "x")

    task = loop.create_task(bad())
    loop.run_until_idle()
    assert isinstance(loop.fatal_error, IllegalWorkflowOperation)
    assert "activity" in str(loop.fatal_error)
    assert task.done()
    with pytest.raises(IllegalWorkflowOperation):
        loop.call_later(1, print)


def test_busy_workflow_is_stopped(monkeypatch):
    import harvest.runtime.loop as loop_mod

    monkeypatch.setattr(loop_mod, "MAX_CALLBACKS_PER_STEP", 50)

    @workflow
    async def spin(ctx) -> None:
        while True:
            await asyncio.sleep(0)

    with pytest.raises(IllegalWorkflowOperation, match="without blocking"):
        asyncio.run(new_run(None, spin).advance(HistoryBuilder("spin").events))


def test_handles_behave_as_asyncio_handles():
    """call_soon fills its handles itself and run_until_idle runs them inline (no
    Handle.__init__ or Handle._run per callback): cancelling, several arguments, the
    context, and a failing callback reported to the exception handler as asyncio does."""
    import contextvars

    loop = DeterministicEventLoop()
    reports: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: reports.append(context))
    seen: list[object] = []
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "in ctx")

    def boom(x: int) -> None:
        raise ValueError(f"boom {x}")

    skipped = loop.call_soon(seen.append, "cancelled")
    failing = loop.call_soon(boom, 7)
    loop.call_soon(lambda a, b, c: seen.append((a, b, c)), 1, 2, 3)
    loop.call_soon(lambda: seen.append(var.get()), context=ctx)
    loop.call_soon(lambda: seen.append(var.get()))
    skipped.cancel()
    assert isinstance(failing, asyncio.Handle) and skipped.cancelled() and not failing.cancelled()
    assert repr(skipped).endswith("cancelled>")
    loop.run_until_idle()
    assert seen == [(1, 2, 3), "in ctx", "unset"]  # the failure did not stop the others
    assert loop.fatal_error is None and not loop.is_running()
    [report] = reports
    assert report["handle"] is failing and isinstance(report["exception"], ValueError)
    assert report["message"].startswith("Exception in callback ") and "boom" in report["message"]
    # A coroutine's wake-ups are handles too: the task still sees its result.
    fut = loop.create_future()

    async def waiter() -> int:
        return await fut

    task = loop.create_task(waiter())
    loop.run_until_idle()
    fut.set_result(3)
    loop.run_until_idle()
    assert task.result() == 3 and loop.get_debug() is False


def test_call_soon_fills_every_slot_asyncio_gives_a_handle():
    """call_soon builds its handles without Handle.__init__ (runtime/loop.py's _Handle), so a
    Python whose asyncio.Handle gains a slot would hand out handles with that slot unset, to
    fail later in cancel() or repr(). This names the slot instead."""
    handle = DeterministicEventLoop().call_soon(print)
    unset = [slot for slot in asyncio.Handle.__slots__ if slot != "__weakref__" and not hasattr(handle, slot)]
    assert not unset, f"asyncio.Handle has slots DeterministicEventLoop.call_soon does not fill: {unset}"


@pytest.mark.parametrize(
    "method", ["idempotency_key", "heartbeat", "attempt", "aheartbeat", "arecord_llm_call"]
)
def test_an_activity_called_directly_in_a_workflow_is_named_as_the_mistake(method):
    """`charge(ctx, 5)` inside a workflow runs the activity's code inline (unrecorded, again on
    every replay) with the workflow's ctx; its first activity-only ctx call failed the run with
    a bare "'WorkflowContext' object has no attribute 'idempotency_key'"."""
    from harvest import activity

    @activity
    def charge(ctx, amount: int) -> str:
        return str(getattr(ctx, method)())

    @workflow
    async def pay(ctx) -> str:
        return charge(ctx, 5)

    act = asyncio.run(new_run(None, pay).advance(HistoryBuilder("pay").events))
    [command] = act.commands
    assert command["type"] == "fail_workflow"
    message = command["failure"]["message"]
    assert f"ctx.{method}" in message and "await ctx.execute_activity(" in message, message


def test_any_other_missing_ctx_attribute_is_the_usual_attribute_error():
    @workflow
    async def typo(ctx) -> str:
        try:
            ctx.no_such_thing  # noqa: B018
        except AttributeError as exc:
            return str(exc)
        return "found"

    act = asyncio.run(new_run(None, typo).advance(HistoryBuilder("typo").events))
    assert act.commands[0]["result"] == "'WorkflowContext' object has no attribute 'no_such_thing'"


@pytest.mark.parametrize(
    ("what", "call"),
    [
        ("create_connection", lambda: asyncio.open_connection("127.0.0.1", 9)),  # an HTTP client's
        ("getaddrinfo", lambda: asyncio.get_running_loop().getaddrinfo("localhost", 80)),
        ("subprocess_exec", lambda: asyncio.create_subprocess_exec("true")),
    ],
)
def test_network_and_process_io_in_a_workflow_is_an_illegal_operation(what, call):
    """An async HTTP or database client awaited in a workflow reached asyncio's unimplemented
    loop methods: a bare `NotImplementedError` with no message, which failed the run for good
    instead of failing its task until the code is fixed, like the other illegal operations."""

    @workflow
    async def fetch(ctx) -> str:
        await call()
        return "fetched"

    with pytest.raises(
        IllegalWorkflowOperation, match=rf"not allowed in a workflow \(loop\.{what}:.*put it in an activity"
    ):
        asyncio.run(new_run(None, fetch).advance(HistoryBuilder("fetch").events))
