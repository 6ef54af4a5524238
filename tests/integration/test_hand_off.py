"""Hand-off and group commit on a real worker (functions/claim.sql, "Hand-off";
harvest/worker/completions.py).

A decision hands the activities it schedules to the deciding worker, and an
activity result hands the workflow task it wakes back to the worker whose cached
run decided last (or carries that run's next decision, test_decide_ahead.py), so
a sequential workflow on one worker needs one claim (its first workflow task).
The histories must be what a claim-only run writes.
"""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
from history_helpers import comparable_history
from outage_helpers import wait_until

from harvest import App, Client, activity, workflow
from harvest.worker import worker as worker_module

ran: dict[int, int] = {}
ran_lock = threading.Lock()


@activity
async def step(ctx, x: int) -> int:
    return x + 1


@activity
async def mark(ctx, i: int) -> int:
    with ran_lock:
        ran[i] = ran.get(i, 0) + 1
    await asyncio.sleep(0.01)
    return i


@workflow
async def three_steps(ctx, x: int) -> int:
    x = await ctx.execute_activity(step, x)
    x = await ctx.execute_activity(step, x)
    return await ctx.execute_activity(step, x)


@workflow
async def fan_out(ctx, n: int) -> int:
    results = await asyncio.gather(*(ctx.execute_activity(mark, i) for i in range(n)))
    return sum(results)


def test_a_sequential_workflow_runs_on_hand_offs_and_writes_the_claim_only_history(
    db, start_worker, monkeypatch
):
    # A slot handed on for longer than HAND_OFF_CHAIN_SECS goes back to the claim loop: on a
    # loaded machine the three steps can take longer than its 0.5 s (CI 66a handed 2 of 3).
    monkeypatch.setattr(worker_module, "HAND_OFF_CHAIN_SECS", 3600.0)
    app = App(workflows=[three_steps], activities=[step])
    histories = []
    for hand_off in (True, False):
        worker = start_worker(app, hand_off=hand_off)
        with Client(db) as client:
            handle = client.start_workflow(three_steps, 1, workflow_id=f"steps-{hand_off}")
            assert handle.result(timeout=30) == 4
        worker.stop()
        # Three activities handed by the decisions; each result decided on at once
        # (test_decide_ahead.py), so no workflow task is handed back.
        assert worker.worker.handed_tasks == (3 if hand_off else 0)
        assert worker.worker.decided_ahead == (3 if hand_off else 0)
        histories.append(comparable_history(db, handle.execution_id))
    assert histories[0] == histories[1]


def test_concurrent_results_commit_in_batches_and_each_activity_runs_once(db, start_worker):
    ran.clear()
    app = App(workflows=[fan_out], activities=[mark])
    worker = start_worker(app, concurrency=50)
    with Client(db) as client:
        assert client.start_workflow(fan_out, 40, workflow_id="fan").result(timeout=30) == sum(range(40))
    batcher = worker.worker.completions
    # The last results' transaction may complete the run (a decision made ahead rides with them),
    # so the client can see the result before the worker's loop has read that commit's answer.
    wait_until(lambda: batcher.items >= 40, "the worker counts its last result batch")
    assert batcher.items == 40
    assert batcher.batches < 20, f"40 results took {batcher.batches} commits"
    assert ran == dict.fromkeys(range(40), 1)


def test_a_draining_worker_is_handed_nothing(db, start_worker):
    """The worker row says who may be handed work: after a remote drain, nothing is."""
    app = App(workflows=[three_steps], activities=[step])
    worker = start_worker(app, hand_off=True)
    with psycopg.connect(db, autocommit=True) as conn:
        for _ in range(200):  # until the worker has registered
            drained = conn.execute(
                "UPDATE harvest.workers SET status = 'draining' WHERE id = %s", (worker.worker.worker_id,)
            ).rowcount
            if drained:
                break
            time.sleep(0.02)
        assert drained
    with Client(db) as client:
        handle = client.start_workflow(three_steps, 1, workflow_id="drained")
        assert handle.result(timeout=30) == 4
    assert worker.worker.handed_tasks == 0


@activity
async def tick(ctx, i: int) -> int:
    await asyncio.sleep(0.01)
    return i


@workflow
async def long_chain(ctx, n: int) -> int:
    for i in range(n):
        await ctx.execute_activity(tick, i)
    return n


@workflow
async def one_tick(ctx) -> int:
    return await ctx.execute_activity(tick, 1)


@workflow
async def short_nap(ctx) -> str:
    await ctx.sleep(0.1)
    return "woke"


def test_long_runs_handing_every_step_on_do_not_starve_new_work(db, start_worker):
    """Two long runs on a worker of two slots keep both busy by hand-off; a slot goes back to
    the claim loop after HAND_OFF_CHAIN_SECS, so a new run and a due timer are not held up
    until the long runs end."""
    app = App(workflows=[long_chain, one_tick, short_nap], activities=[tick])
    worker = start_worker(app, concurrency=2)
    with Client(db) as client:
        longs = [client.start_workflow(long_chain, 150, workflow_id=f"long-{i}") for i in range(2)]
        time.sleep(0.3)  # both slots are taken by the long runs' hand-off chains
        short = client.start_workflow(one_tick, workflow_id="short")
        nap = client.start_workflow(short_nap, workflow_id="nap")
        assert short.result(timeout=30) == 1
        assert nap.result(timeout=30) == "woke"
        with psycopg.connect(db) as conn:
            still = conn.execute(
                "SELECT count(*) FROM harvest.executions WHERE workflow_id LIKE 'long-%%'"
                " AND status = 'RUNNING'"
            ).fetchone()[0]
        assert still == 2, "the new run and the timer waited for the long runs to end"
        assert [h.result(timeout=60) for h in longs] == [150, 150]
    assert worker.worker.handed_tasks > 200
