"""Activity concurrency caps: declared on @activity, enforced inside claim_tasks."""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
import pytest

from harvest import App, activity, workflow
from harvest.core.errors import ConfigError, InvalidArgument

state = {"now": 0, "peak": 0}
state_lock = threading.Lock()


@activity(max_concurrent=3, concurrency_key="stripe", start_to_close="30s")
async def charge(ctx, n: int) -> int:
    with state_lock:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
    await asyncio.sleep(0.15)
    with state_lock:
        state["now"] -= 1
    return n


@activity(max_concurrent=3, concurrency_key="stripe")
async def refund(ctx, n: int) -> int:
    return await charge(ctx, n)


@workflow
async def fan_out(ctx, n: int) -> list:
    half = [ctx.execute_activity(charge, i) for i in range(n // 2)]
    rest = [ctx.execute_activity(refund, i) for i in range(n // 2, n)]
    return list(await asyncio.gather(*half, *rest))


def test_app_refuses_activities_that_disagree_on_a_shared_key() -> None:
    @activity(max_concurrent=5, concurrency_key="openai")
    async def a(ctx): ...

    @activity(max_concurrent=7, concurrency_key="openai")
    async def b(ctx): ...

    with pytest.raises(ConfigError) as info:
        App(activities=[a, b])
    message = str(info.value)
    assert "'openai'" in message and "a (max_concurrent=5)" in message and "b (max_concurrent=7)" in message


def test_the_key_defaults_to_the_activity_name_and_needs_a_cap() -> None:
    @activity(max_concurrent=2)
    async def solo(ctx): ...

    options = solo.__harvest_activity__.options_json()
    assert (options["max_concurrent"], options["concurrency_key"]) == (2, "solo")
    with pytest.raises(InvalidArgument):
        activity(concurrency_key="x")(solo.__wrapped__ if hasattr(solo, "__wrapped__") else solo)
    with pytest.raises(InvalidArgument):
        activity(max_concurrent=0)


def test_cap_holds_across_workers_and_every_call_completes(db, start_worker, client) -> None:
    state.update(now=0, peak=0)
    app = App(workflows=[fan_out], activities=[charge, refund])
    for _ in range(3):
        start_worker(app, concurrency=10)
    handle = client.start_workflow(fan_out, 16)
    assert handle.result(timeout=60) == list(range(16))
    assert 1 <= state["peak"] <= 3, state
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute("SELECT count(*) FROM harvest.tasks WHERE concurrency_key IS NOT NULL").fetchone()
    assert rows[0] == 0


def test_concurrency_status_reports_key_cap_in_flight_and_pending(db, client) -> None:
    sampled: list[tuple] = []
    app = App(workflows=[fan_out], activities=[charge, refund])
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.declare_flow_policies(%s)", (psycopg.types.json.Jsonb(app.flow_policies()),)
        )
        handle = client.start_workflow(fan_out, 8)
        # Decide by hand: claim the workflow task and answer it with the runtime's commands.
        from harvest.runtime import run as _run  # noqa: F401 - the worker would do this

        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w', ARRAY['default'], 1)"
        ).fetchone()
        commands = [
            {
                "type": "schedule_activity",
                "seq": i + 1,
                "name": "charge",
                "input": [i],
                "queue": "default",
                "options": charge.__harvest_activity__.options_json(),
            }
            for i in range(8)
        ]
        conn.execute(
            "SELECT harvest.complete_workflow_task(%s, %s, 1, %s)",
            (task[0], task[1], psycopg.types.json.Jsonb(commands)),
        )
        claimed = conn.execute(
            "SELECT count(*) FROM harvest.claim_tasks('w', ARRAY['default'], 10)"
        ).fetchone()[0]
        sampled = conn.execute(
            "SELECT key, task_type, max_concurrent, in_flight, pending, workflows "
            "FROM harvest.list_concurrency_keys()"
        ).fetchall()
    assert handle.execution_id
    assert claimed == 3
    assert sampled == [("stripe", "activity", 3, 3, 5, None)]


def test_many_claimers_never_over_admit(db) -> None:
    """8 connections claim at once, again and again; sampled in-flight never passes the cap."""
    cap, runs, per_run = 4, 6, 10
    options = {"max_concurrent": cap, "concurrency_key": "k", "start_to_close": 30}
    with psycopg.connect(db, autocommit=True) as conn:
        for r in range(runs):
            conn.execute("SELECT harvest.start_workflow('race', '[]', %s, 'race_wq')", (f"r{r}",))
            task = conn.execute(
                "SELECT task_id, fencing_token FROM harvest.claim_tasks('s', ARRAY['race_wq'], 1)"
            ).fetchone()
            commands = [
                {
                    "type": "schedule_activity",
                    "seq": i + 1,
                    "name": "capped",
                    "input": [i],
                    "queue": "race_q",
                    "options": options,
                }
                for i in range(per_run)
            ]
            conn.execute(
                "SELECT harvest.complete_workflow_task(%s, %s, 1, %s)",
                (task[0], task[1], psycopg.types.json.Jsonb(commands)),
            )
    total = runs * per_run
    done: list[int] = []
    peaks: list[int] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def claimer(n: int) -> None:
        try:
            with psycopg.connect(db, autocommit=True) as conn:
                while not stop.is_set():
                    rows = conn.execute(
                        "SELECT task_id, fencing_token FROM harvest.claim_tasks(%s, ARRAY['race_q'], 5)",
                        (f"c{n}",),
                    ).fetchall()
                    time.sleep(0.01)
                    for task_id, token in rows:
                        conn.execute("SELECT harvest.complete_activity(%s, %s, '1')", (task_id, token))
                        done.append(task_id)
                    if not rows:
                        time.sleep(0.01)
        except BaseException as exc:
            errors.append(exc)

    def sampler() -> None:
        with psycopg.connect(db, autocommit=True) as conn:
            while not stop.is_set():
                peaks.append(
                    conn.execute(
                        "SELECT count(*) FROM harvest.tasks WHERE concurrency_key = 'k' "
                        "AND status = 'running'"
                    ).fetchone()[0]
                )

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)] + [
        threading.Thread(target=sampler)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(done) < total and time.monotonic() < deadline and not errors:
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors, errors
    assert len(done) == total
    assert len(peaks) > 20 and max(peaks) <= cap, (len(peaks), max(peaks))
    assert max(peaks) == cap, "the cap was reached"
