"""The App of the DAG chaos test (test_chaos_dags.py): every task's activity records each run
in ``chaos_runs`` (kind ``dag:<task>``) through apps.py's helpers; ``slow`` blocks on its first
run so the test knows when to SIGKILL the worker that holds it."""

from __future__ import annotations

import asyncio
from typing import Any

from apps import _record_finish, _record_start

from harvest import App, RetryPolicy, activity, workflow
from harvest.declare.dags import Dag

FAST_RETRY = RetryPolicy(max_attempts=5, initial_interval=0.1, backoff=1.0, max_interval=0.2)


@activity(retry=FAST_RETRY)
async def dag_step(ctx: Any, task: str, conf: dict) -> str:
    run_id, prior = await _record_start(ctx, f"dag:{task}")
    if task == "slow" and prior == 0:
        await asyncio.sleep(600)  # held until the worker is killed
    result = f"{task}:{conf.get('date')}"
    await _record_finish(run_id, result)
    return result


@workflow
async def dag_child(ctx: Any, conf: dict) -> str:
    return await ctx.execute_activity(dag_step, "child_step", conf)


def _named(task: str):
    return lambda conf, upstream: [task, conf]


chaos_dag = Dag("chaos_dag", default_args={"retry": FAST_RETRY})
_a = chaos_dag.task("a", dag_step, args=_named("a"))
_fast = chaos_dag.task("fast", dag_step, args=_named("fast")).after(_a)
_slow = chaos_dag.task("slow", dag_step, args=_named("slow"), start_to_close="3s").after(_a)
_child = chaos_dag.task("child", dag_child).after(_a)
_join = chaos_dag.task("join", dag_step, args=_named("join")).after(_fast, _slow, _child)
chaos_dag.task("after_join", dag_step, args=_named("after_join"), trigger_rule="all_done").after(_join)

app = App(workflows=[dag_child], activities=[dag_step], dags=[chaos_dag])
