"""A batch of activity results that claims for the slots it frees, on a real worker
(functions/claim.sql, complete_activities_with_claim; harvest/worker/completions.py).

While work is waiting, a result batch claims in its own transaction one task per result
that hands nothing back, and the batch's last completed handler runs them in the freed
slots. The worker must never run more tasks than its concurrency, and every activity
must run once.
"""

from __future__ import annotations

import asyncio
import threading

from harvest import App, Client, activity, workflow

state = {"running": 0, "most": 0}
ran: dict[int, int] = {}
lock = threading.Lock()


@activity
async def counted(ctx, i: int) -> int:
    with lock:
        state["running"] += 1
        state["most"] = max(state["most"], state["running"])
        ran[i] = ran.get(i, 0) + 1
    await asyncio.sleep(0.001 * (i % 7))  # uneven: a batch frees some of the slots, not all
    with lock:
        state["running"] -= 1
    return i


@workflow
async def fan(ctx, start: int, n: int) -> int:
    results = await asyncio.gather(*(ctx.execute_activity(counted, start + i) for i in range(n)))
    return sum(results)


def _drain(db: str, start_worker, **options) -> object:
    state.update(running=0, most=0)
    ran.clear()
    app = App(workflows=[fan], activities=[counted])
    worker = start_worker(app, **options)
    with Client(db) as client:
        handles = [
            client.start_workflow(fan, k * 100, 100, workflow_id=f"fan-{options.get('hand_off')}-{k}")
            for k in range(3)
        ]
        for k, handle in enumerate(handles):
            assert handle.result(timeout=60) == sum(range(k * 100, k * 100 + 100))
    return worker.worker


def test_result_batches_claim_within_the_concurrency_and_each_activity_runs_once(db, start_worker):
    worker = _drain(db, start_worker, concurrency=8, claim_batch=8)
    assert ran == dict.fromkeys(range(300), 1)
    assert state["most"] <= 8, f"{state['most']} activities ran at once on 8 slots"
    claimed = worker.completions.claimed
    assert claimed > 0, "no result batch claimed"
    # The claims that rode with the batches are fewer round trips than tasks.
    assert worker.completions.batches < worker.completed_tasks


def test_without_hand_off_no_result_batch_claims(db, start_worker):
    worker = _drain(db, start_worker, concurrency=8, claim_batch=8, hand_off=False)
    assert ran == dict.fromkeys(range(300), 1)
    assert state["most"] <= 8
    assert worker.completions.claimed == 0


together = {"running": 0}


@activity
async def all_at_once(ctx, i: int) -> int:
    # Each waits until all 300 run, so that their results come in together.
    together["running"] += 1
    while together["running"] < 300:
        await asyncio.sleep(0.001)
    return i


@workflow
async def fan_together(ctx, start: int) -> int:
    results = await asyncio.gather(*(ctx.execute_activity(all_at_once, start + i) for i in range(100)))
    return sum(results)


def test_a_worker_of_many_slots_commits_the_results_that_pile_up_in_batches_over_a_hundred(db, start_worker):
    # 300 slots: the results that pile up behind a batch in flight go in one commit of up to
    # 150 (worker/completions.py, result_batch_size), not in batches of 100.
    together["running"] = 0
    worker = start_worker(
        App(workflows=[fan_together], activities=[all_at_once]), concurrency=300, claim_batch=300
    )
    with Client(db) as client:
        handles = [
            client.start_workflow(fan_together, k * 100, workflow_id=f"together-{k}") for k in range(3)
        ]
        for k, handle in enumerate(handles):
            assert handle.result(timeout=60) == sum(range(k * 100, k * 100 + 100))
    assert together["running"] == 300
    assert 100 < worker.worker.completions.largest <= 150, worker.worker.completions.largest
