"""A run whose signals land while its activities run does not replay on each of them
(harvest/worker/plain_runs.py; docs/performance.md, "Signal storms").

Each activity's result reaches the worker with the run's next signal already appended (sent
in the same step of the worker's loop, before the decision ahead takes the run: no sleeps), so
every decision ahead on it is refused. On its own, each refusal drops the cached run and the
woken workflow task replays the whole history; after the first one, the run's results go the
plain way and its cached run takes the signal and the result together, reading no history.
The worker claims nothing while a result is on its way to the database (an event in its loop),
so the signal's workflow task is claimed with the result in it, as a busy worker would claim it:
the rule then sees every ping interleave, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from harvest import App, Client, activity, workflow
from harvest.db.sqlapi import AsyncSqlApi
from harvest.testing import WorkflowReplayer
from harvest.worker import activities as activities_module
from harvest.worker import completions as completions_module
from harvest.worker import worker as worker_module

PINGS = 6


@activity
async def pong(ctx: Any, i: int) -> int:
    return i


@workflow
async def pinged(ctx: Any, n: int) -> list[int]:
    seen = []
    for _ in range(n):
        i = await ctx.wait_for_signal("ping", type_hint=int)
        seen.append(await ctx.execute_activity(pong, i))
    return seen


def _storm(monkeypatch: Any, db: str) -> list[tuple[str, int]]:
    """Send the run its next ping right before each result's decision ahead (the last one's
    excepted), and note each history read as (execution id, after)."""
    reads: list[tuple[str, int]] = []
    state: dict[str, Any] = {}
    decide_ahead = activities_module.decide_ahead
    get_history = AsyncSqlApi.get_history
    complete = completions_module.CompletionBatcher.complete
    claim = worker_module.Worker._claim

    async def signal_first(worker: Any, task: dict[str, Any], *args: Any) -> Any:
        i = args[0]  # the result: the ping's number
        if task.get("activity_name") == "pong" and i + 1 < PINGS:
            state["recorded"] = asyncio.Event()  # (set once the result is in: recorded below)
            with psycopg.connect(db, autocommit=True) as conn:
                conn.execute(
                    "SELECT harvest.signal_workflow(%s, 'ping', %s::jsonb)",
                    (str(task["execution_id"]), str(i + 1)),
                )
        return await decide_ahead(worker, task, *args)

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        answer = complete(self, *args, **kwargs)
        event = state.pop("recorded", None)
        if event is not None:
            answer.add_done_callback(lambda _: event.set())
        return answer

    async def claiming(self: Any) -> Any:
        event = state.get("recorded")
        if event is not None:
            await event.wait()  # the signal's task is claimed with the result in it
        return await claim(self)

    async def noted(self: Any, execution_id: Any, after: int = 0, *args: Any, **kwargs: Any) -> Any:
        reads.append((str(execution_id), after))
        return await get_history(self, execution_id, after, *args, **kwargs)

    monkeypatch.setattr(activities_module, "decide_ahead", signal_first)
    monkeypatch.setattr(completions_module.CompletionBatcher, "complete", recorded)
    monkeypatch.setattr(worker_module.Worker, "_claim", claiming)
    monkeypatch.setattr(AsyncSqlApi, "get_history", noted)
    return reads


def test_a_run_whose_signals_land_during_its_activities_replays_once(db, start_worker, monkeypatch):
    reads = _storm(monkeypatch, db)
    app = App(workflows=[pinged], activities=[pong])
    worker = start_worker(app)
    with Client(db) as client:
        handle = client.start_workflow(pinged, PINGS, workflow_id="stormed")
        handle.signal("ping", 0)
        assert handle.result(timeout=30) == list(range(PINGS))
    worker.stop()
    history = [
        {"event_id": i, "event_type": t, "event_data": d}
        for i, t, d in psycopg.connect(db)
        .execute(
            "SELECT event_id, event_type, event_data FROM harvest.events WHERE execution_id = %s"
            " ORDER BY event_id",
            (handle.execution_id,),
        )
        .fetchall()
    ]
    WorkflowReplayer(app).replay_or_raise(history)
    kinds = [e["event_type"] for e in history]
    # Every ping but the first landed while an activity ran (before its result).
    assert kinds.count("SignalReceived") == PINGS
    # The first refusal replays (the run had stepped on the result); the rest went plain.
    replays = [after for execution_id, after in reads if execution_id == handle.execution_id and after == 0]
    assert len(replays) == 1, reads
    w = worker.worker
    assert w.refused_ahead == 1
    assert w.plain_by_rule == PINGS - 1
    assert w.decided_ahead == 0
    # Each plain task brought a ping with the result: the run stays remembered.
    assert handle.execution_id in w.plain_runs
