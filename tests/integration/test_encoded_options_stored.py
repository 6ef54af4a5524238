"""An activity's options written as their kept text (ActivityDefinition.encoded_options,
harvest.core.jsonb.dumps_spliced; docs/performance.md, "Cheaper Python, eleventh cut"): the
stored ActivityScheduled events carry the options ``options_json`` makes, through a workflow
task's decision and decisions ahead, and a per-call override in between gets its own.
"""

from __future__ import annotations

import psycopg

from harvest import App, Client, RetryPolicy, activity, workflow
from harvest.testing import WorkflowReplayer


@activity(priority=3, retry=RetryPolicy(max_attempts=5, non_retryable_errors=["KeyError"]), max_concurrent=4)
async def declared(ctx, n: int) -> int:
    return n


@workflow
async def three_with_an_override(ctx) -> int:
    a = await ctx.execute_activity(declared, 1)
    b = await ctx.execute_activity(declared, 2, priority=9, start_to_close="8s")
    c = await ctx.execute_activity(declared, 3)
    return a + b + c


def test_the_stored_options_are_the_declarations_and_the_overrides(db, start_worker):
    app = App(workflows=[three_with_an_override], activities=[declared])
    worker = start_worker(app)
    with Client(db) as client:
        handle = client.start_workflow(three_with_an_override, workflow_id="options-kept")
        assert handle.result(timeout=30) == 6
    worker.stop()
    assert worker.worker.decided_ahead >= 1  # the kept text went through a decision ahead too
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT event_id, event_type, event_data FROM harvest.events"
            " WHERE execution_id = %s ORDER BY event_id",
            (handle.execution_id,),
        ).fetchall()
    scheduled = {d["seq"]: d["options"] for _, t, d in rows if t == "ActivityScheduled"}
    defn = declared.__harvest_activity__
    assert scheduled[1] == defn.options_json() == scheduled[3]
    assert scheduled[2] == defn.with_options(priority=9, start_to_close="8s").options_json()
    assert scheduled[2]["priority"] == 9 and scheduled[2]["start_to_close"] == 8
    history = [{"event_id": i, "event_type": t, "event_data": d} for i, t, d in rows]
    WorkflowReplayer(app).replay_or_raise(history)
