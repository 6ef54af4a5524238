"""A run's next workflow task, claimed while the handler of its previous one has not yet heard
its commit, waits for that handler and takes the run it puts back (harvest/worker/workflows.py,
StickyCache.wait_back; docs/performance.md, "In-flight cache misses").

The first handler is held right after its decision commits (its activity is claimable, and
runs), until the run's next workflow task arrives on the same worker: the case a loaded
machine makes by itself. No sleeps: an event in the worker's loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harvest import App, Client, activity, workflow
from harvest.core.errors import StaleTask
from harvest.db.sqlapi import AsyncSqlApi
from harvest.worker import worker as worker_module
from harvest.worker import workflows as workflows_module
from harvest.worker.lanes import lane_of


@activity
async def echo(ctx: Any, text: str) -> str:
    return text


@workflow
async def one_activity(ctx: Any, text: str) -> str:
    return await ctx.execute_activity(echo, text) + "!"


APP = App(workflows=[one_activity], activities=[echo])


def _hold_first_decision(monkeypatch: Any, workflow_id: str, then_raise: BaseException | None = None) -> list:
    """Hold the handler of ``workflow_id``'s first workflow task right after its decision
    commits, until the run's next workflow task reaches the worker (then raise ``then_raise``
    in the held handler, if given, as a commit whose answer failed would); and note each
    history read as (execution id, after)."""
    reads: list[tuple[str, int]] = []
    state: dict[str, Any] = {}
    decide_in_claim = workflows_module.decide_in_claim
    run_workflow_task = worker_module.run_workflow_task
    get_history = AsyncSqlApi.get_history

    async def held(worker: Any, task: dict[str, Any], decision: tuple[Any, ...]) -> Any:
        outcome = await decide_in_claim(worker, task, decision)
        if outcome is None:
            outcome = await lane_of(task).decisions.complete(*decision)
        if task["workflow_id"] == workflow_id and "gate" not in state:
            state["gate"] = asyncio.Event()
            await state["gate"].wait()  # committed: its activity runs, and its result wakes the run
            if then_raise is not None:
                raise then_raise
        return outcome

    async def arriving(worker: Any, task: dict[str, Any]) -> Any:
        gate = state.get("gate")
        if task["workflow_id"] == workflow_id and gate is not None and not gate.is_set():
            gate.set()  # the held handler resumes in a later step of the loop than this task's take
        return await run_workflow_task(worker, task)

    async def noted(self: Any, execution_id: Any, after: int = 0, *args: Any, **kwargs: Any) -> Any:
        reads.append((str(execution_id), after))
        return await get_history(self, execution_id, after, *args, **kwargs)

    monkeypatch.setattr(workflows_module, "decide_in_claim", held)
    monkeypatch.setattr(worker_module, "run_workflow_task", arriving)
    monkeypatch.setattr(AsyncSqlApi, "get_history", noted)
    # A wait that ran out would be a replay too: no bound is reached here, whatever the load.
    monkeypatch.setattr(workflows_module, "STICKY_WAIT_SECS", 3600.0, raising=False)
    return reads


def test_the_next_task_takes_the_run_its_handler_puts_back_and_reads_none_of_it(
    db, start_worker, monkeypatch
):
    reads = _hold_first_decision(monkeypatch, "in-flight")
    running = start_worker(APP, hand_off=False)
    with Client(db) as client:
        handle = client.start_workflow(one_activity, "hi", workflow_id="in-flight")
        assert handle.result(timeout=30) == "hi!"
    running.stop()
    cache = running.worker.cache
    # On main the second task found nothing in the cache and replayed the whole history.
    assert (handle.execution_id, 0) not in reads
    assert reads == []  # its claim carried the events after the first decision: none read back
    assert (cache.hits, cache.misses) == (1, 1)  # the first task's miss is the run's start
    assert (cache.waits, cache.wait_timeouts) == (1, 0)


@pytest.mark.parametrize(
    ("workflow_id", "failure"),
    [
        # Its commit went in, but it hears a refusal (as when its answer was lost and the
        # resend is refused): it drops the run.
        ("dropped", StaleTask("refused on resend")),
        # A bug after the commit: the run is dropped with the handler.
        ("crashed", RuntimeError("a bug after the commit")),
    ],
)
def test_a_held_run_its_handler_drops_is_replayed_by_the_next_task(
    db, start_worker, monkeypatch, workflow_id, failure
):
    # The waiting task is woken at once (no wait runs out) and replays.
    reads = _hold_first_decision(monkeypatch, workflow_id, then_raise=failure)
    running = start_worker(APP, hand_off=False)
    with Client(db) as client:
        handle = client.start_workflow(one_activity, "ho", workflow_id=workflow_id)
        assert handle.result(timeout=30) == "ho!"
    running.stop()
    cache = running.worker.cache
    assert reads == [(handle.execution_id, 0)]  # one replay, by the second task
    assert (cache.hits, cache.misses, cache.waits, cache.wait_timeouts) == (0, 2, 1, 0)
