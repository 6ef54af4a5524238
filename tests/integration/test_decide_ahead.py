"""Deciding ahead on a real worker (harvest/worker/decide_ahead.py; docs/internals.md).

A worker whose cached run decided last feeds an activity's result to the run and
commits the run's next decision with the result. The history must be the one
the plain path writes, the run must have seen the result as a replay reads it
back, and where anything else reached the run first, the database must refuse
the decision and the workflow must still end right.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from harvest import App, Client, activity, workflow
from harvest.testing import WorkflowReplayer
from harvest.worker import activities as activities_module


@activity
async def shaped(ctx) -> dict[str, Any]:
    # Python keeps this key order and this float; jsonb sorts the keys (by length,
    # then bytes) and stores 1e20 as numeric, which reads back as an int.
    return {"zz": 1, "a": 1e20, "mid": [2.50]}


@activity
async def echo(ctx, text: str) -> str:
    return text


@workflow
async def branches_on_the_stored_shape(ctx) -> str:
    shape = await ctx.execute_activity(shaped)
    first_key, kind = next(iter(shape)), type(shape["a"]).__name__
    return await ctx.execute_activity(echo, f"{first_key}:{kind}")


@activity
def signal_own_workflow(ctx) -> int:
    return 1


@workflow
async def waits_for_its_own_signal(ctx) -> list[int]:
    x = await ctx.execute_activity(signal_own_workflow)
    go = await ctx.wait_for_signal("go", type_hint=int)
    return [x, go]


@workflow
async def mixed(ctx, n: int) -> int:
    total = 0
    for i in range(n):
        # Awaited one by one, not gathered: a gather of all the run's activities holds its
        # wake-ups until they drain, so no decision ahead is made on them (test_held_wakeups.py).
        first = asyncio.ensure_future(ctx.execute_activity(echo, f"{i}a"))
        second = asyncio.ensure_future(ctx.execute_activity(echo, f"{i}b"))
        parts = [await first, await second]
        await ctx.sleep(0.01)
        total += len("".join(parts))
    return total


def _history(db: str, execution_id: str) -> list[dict]:
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT event_id, event_type, event_data FROM harvest.events "
            "WHERE execution_id = %s ORDER BY event_id",
            (execution_id,),
        ).fetchall()
    return [{"event_id": i, "event_type": t, "event_data": d} for i, t, d in rows]


# What differs between two runs of one workflow: who ran it, its id, and when an attempt started
# (an outcome's started_at, for the usage report's compute seconds).
_VARYING = ("worker_id", "workflow_id", "started_at")


def _comparable(history: list[dict]) -> list[tuple[str, dict]]:
    """Without worker and workflow ids and attempt start times (what differs between the two runs)."""
    return [
        (e["event_type"], {k: v for k, v in e["event_data"].items() if k not in _VARYING}) for e in history
    ]


def test_a_decision_ahead_sees_the_result_as_stored_and_writes_the_plain_history(db, start_worker):
    app = App(workflows=[branches_on_the_stored_shape], activities=[shaped, echo])
    histories = []
    for hand_off in (True, False):
        worker = start_worker(app, hand_off=hand_off)
        with Client(db) as client:
            handle = client.start_workflow(branches_on_the_stored_shape, workflow_id=f"shape-{hand_off}")
            # "zz:float" would mean the run decided on the value in memory, which a replay
            # of the stored history contradicts.
            assert handle.result(timeout=30) == "a:int"
        worker.stop()
        assert worker.worker.decided_ahead == (2 if hand_off else 0)
        history = _history(db, handle.execution_id)
        WorkflowReplayer(app).replay_or_raise(history)
        histories.append(_comparable(history))
    assert histories[0] == histories[1]


def test_an_event_that_reached_the_run_first_refuses_the_decision(db, start_worker, monkeypatch):
    # The signal lands right before the decision ahead takes the run, in the same step of the
    # worker's loop: its workflow task cannot be claimed first (which would feed the signal to
    # the cached run and let the decision ahead stand), so the run steps on the result as the
    # event after its last decision and the database must refuse that.
    real = activities_module.decide_ahead

    async def signal_first(worker: Any, task: dict[str, Any], *args: Any) -> Any:
        if task.get("activity_name") == "signal_own_workflow":
            with psycopg.connect(db, autocommit=True) as conn:
                conn.execute(
                    "SELECT harvest.signal_workflow(%s, 'go', '7'::jsonb)", (str(task["execution_id"]),)
                )
        return await real(worker, task, *args)

    monkeypatch.setattr(activities_module, "decide_ahead", signal_first)
    app = App(workflows=[waits_for_its_own_signal], activities=[signal_own_workflow])
    worker = start_worker(app)
    with Client(db) as client:
        handle = client.start_workflow(waits_for_its_own_signal, workflow_id="signalled")
        assert handle.result(timeout=30) == [1, 7]
    worker.stop()
    # Refused, and the result was recorded alone; the woken workflow task replayed and
    # finished the run.
    assert worker.worker.decided_ahead == 0
    history = _history(db, handle.execution_id)
    kinds = [e["event_type"] for e in history]
    assert kinds.index("SignalReceived") < kinds.index("ActivityCompleted")
    WorkflowReplayer(app).replay_or_raise(history)


def test_parallel_activities_and_timers_decide_ahead_and_replay(db, start_worker):
    app = App(workflows=[mixed], activities=[echo])
    worker = start_worker(app, concurrency=10)
    with Client(db) as client:
        handles = [client.start_workflow(mixed, 3, workflow_id=f"mixed-{i}") for i in range(5)]
        assert [h.result(timeout=30) for h in handles] == [12] * 5
    worker.stop()
    assert worker.worker.decided_ahead > 0
    for handle in handles:
        history = _history(db, handle.execution_id)
        WorkflowReplayer(app).replay_or_raise(history)
        completed = [e["event_data"]["seq"] for e in history if e["event_type"] == "ActivityCompleted"]
        assert sorted(completed) == sorted(set(completed)) and len(completed) == 6


@workflow
async def child_of_ahead(ctx, n: int) -> int:
    return await ctx.execute_activity(echo, str(n)) == str(n) and n * 10


@workflow
async def rotates_and_spawns(ctx, round_no: int) -> int:
    # A decision ahead that starts a child (its start event is read back, not taken as
    # read), one that continues as new, and one that completes.
    got = await ctx.execute_activity(echo, f"r{round_no}")
    if round_no < 2:
        ctx.continue_as_new(round_no + 1)
    child = await ctx.execute_child_workflow(child_of_ahead, len(got))
    tail = await ctx.execute_activity(echo, "end")
    return child + len(tail)


def test_children_and_continue_as_new_decided_ahead_replay(db, start_worker):
    app = App(workflows=[rotates_and_spawns, child_of_ahead], activities=[echo])
    worker = start_worker(app)
    with Client(db) as client:
        handle = client.start_workflow(rotates_and_spawns, 0, workflow_id="rotates")
        assert handle.result(timeout=30) == 23  # child 2 * 10, plus len("end")
    worker.stop()
    assert worker.worker.decided_ahead >= 4
    with psycopg.connect(db) as conn:
        runs = [
            r[0]
            for r in conn.execute("SELECT id::text FROM harvest.executions ORDER BY created_at").fetchall()
        ]
    assert len(runs) == 4  # three rounds of the parent and one child
    for execution_id in runs:
        WorkflowReplayer(app).replay_or_raise(_history(db, execution_id))


@workflow
async def three_echoes(ctx, n: int) -> str:
    a = await ctx.execute_activity(echo, f"{n}a")
    b = await ctx.execute_activity(echo, f"{n}b")
    return await ctx.execute_activity(echo, a + b)


def test_batched_decisions_write_gapless_histories(db, start_worker):
    # Many runs at once: a flush of results and decisions carries several runs' decisions,
    # whose events go in with one statement per call (harvest._insert_events). Every run's
    # history must still be gapless, counted in its row (last_event_id, history_bytes) and
    # replay as the decisions were made.
    app = App(workflows=[three_echoes], activities=[echo])
    worker = start_worker(app, concurrency=20)
    with Client(db) as client:
        handles = [client.start_workflow(three_echoes, i, workflow_id=f"three-{i}") for i in range(60)]
        assert [h.result(timeout=60) for h in handles] == [f"{i}a{i}b" for i in range(60)]
    worker.stop()
    assert worker.worker.decided_ahead > 0
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT e.id::text, e.last_event_id, e.decided_through,"
            " (SELECT count(*) FROM harvest.events AS ev WHERE ev.execution_id = e.id),"
            " (SELECT max(ev.event_id) FROM harvest.events AS ev WHERE ev.execution_id = e.id),"
            " e.history_bytes = (SELECT sum(harvest._event_bytes(ev.event_data))"
            "                    FROM harvest.events AS ev WHERE ev.execution_id = e.id)"
            " FROM harvest.executions AS e WHERE e.workflow_id LIKE 'three-%'"
        ).fetchall()
    assert len(rows) == 60
    for execution_id, last, through, count, top, bytes_match in rows:
        assert (count, top, bytes_match) == (last, last, True), execution_id
        assert through <= last
        WorkflowReplayer(app).replay_or_raise(_history(db, execution_id))


@workflow
async def shaped_twice(ctx) -> str:
    first = await ctx.execute_activity(shaped)
    second = await ctx.execute_activity(shaped)
    return f"{next(iter(first))}{next(iter(second))}"


def test_a_result_decided_on_ahead_is_printed_once(db, start_worker, monkeypatch):
    # Its size check (payload.checked_text) prints the result's stored text, and the decision
    # ahead sends that text as its result_text: one print of each result, where the check and
    # the decision made one each (a walk of the whole value in Python, twice).
    from harvest.core import jsonb, payload

    printed: list[Any] = []
    real = jsonb.stored_text

    def counted(value: Any) -> str:
        if type(value) is dict and "zz" in value:  # the shaped activity's result
            printed.append(value)
        return real(value)

    monkeypatch.setattr(jsonb, "stored_text", counted)
    monkeypatch.setattr(payload, "stored_text", counted)
    app = App(workflows=[shaped_twice], activities=[shaped])
    worker = start_worker(app)
    with Client(db) as client:
        handle = client.start_workflow(shaped_twice, workflow_id="printed-once")
        assert handle.result(timeout=30) == "aa"
    worker.stop()
    assert worker.worker.decided_ahead == 2
    assert len(printed) == 2  # one per result
    WorkflowReplayer(app).replay_or_raise(_history(db, handle.execution_id))
