"""The DAG interpreter: the workflow code of every ``Dag`` (declare/dags.py, docs/dags.md).

It runs the graph as ordinary deterministic workflow code: each ready task becomes an
``asyncio`` task on the run's deterministic loop, which schedules the task's activity (its
recorded options carry ``dag_node``: the task's name) or starts its child workflow (workflow
id ``<execution id>/<task>``, ``/<attempt>`` from the second attempt). A task that does not
run (skipped, upstream_failed, or whose arguments could not be made) gets a ``dag_node``
marker instead. So every task's fate is in the history, which is what
``harvest.get_dag_run`` reads, and a replay walks the same graph to the same commands.

Task states: ``success``, ``failed``, ``skipped``, ``upstream_failed`` (terminal) and
``running`` / ``pending``. The run fails (``DagRunFailed``) when any task failed, and
completes otherwise with ``{"states": {...}, "results": {...}}``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from harvest.core.errors import ActivityError, ActivityFailure, ChildWorkflowError
from harvest.core.payload import encode
from harvest.declare.definitions import ActivityDefinition

__all__ = ["TERMINAL", "decide", "run_dag"]

TERMINAL = ("success", "failed", "skipped", "upstream_failed")
_BAD = ("failed", "upstream_failed")


def decide(rule: str, upstream: list[str]) -> str | None:
    """What a pending task with trigger rule ``rule`` does, given its upstream tasks'
    states: ``"run"``, ``"skipped"``, ``"upstream_failed"``, or None (wait)."""
    if not upstream or rule == "always":
        return "run"
    done = all(s in TERMINAL for s in upstream)
    ok = [s == "success" for s in upstream]
    bad = [s in _BAD for s in upstream]
    skipped = [s == "skipped" for s in upstream]
    if rule == "one_success" and any(ok):
        return "run"
    if rule == "one_failed" and any(bad):
        return "run"
    if not done:
        return None
    if rule == "all_success":
        return "run" if all(ok) else ("upstream_failed" if any(bad) else "skipped")
    if rule == "all_failed":
        return "run" if all(bad) else "skipped"
    if rule == "all_done":
        return "run"
    if rule == "one_success":
        return "upstream_failed" if any(bad) else "skipped"
    if rule == "one_failed":
        return "skipped"
    if rule == "none_failed":
        return "upstream_failed" if any(bad) else "run"
    if rule == "none_skipped":
        return "skipped" if any(skipped) else "run"
    raise ValueError(f"unknown trigger rule {rule!r}")


def _mark(
    ctx: Any, task: str, state: str, failure: dict[str, Any] | None = None, reused_from: str | None = None
) -> None:
    """A ``dag_node`` marker: the task ended without running anything (``reused_from``: the
    state is the retried run's)."""
    run = ctx._run
    value: dict[str, Any] = {"task": task, "state": state}
    if failure is not None:
        value["failure"] = failure
    if reused_from is not None:
        value["reused_from"] = reused_from
    run._record({"type": "record_marker", "seq": run.next_seq(), "kind": "dag_node", "value": value})


def _skip_or_fail(failure: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
    failure = failure or {"error_type": "Error", "message": "", "non_retryable": True, "details": None}
    return ("skipped", None) if failure.get("error_type") == "SkipTask" else ("failed", failure)


async def _run_activity(ctx: Any, task: Any, args: list[Any]) -> tuple[str, Any]:
    defn = task.definition
    if defn is None or defn.fn is None:
        defn = ctx._run.find_activity(task.target)
    if defn is None:  # not in this App: by name, as ctx.execute_activity does
        defn = ActivityDefinition(name=task.target, fn=None)  # type: ignore[arg-type]
    try:
        raw = await ctx._schedule_activity(
            defn, None, tuple(args), dict(task.options), {"dag_node": task.name}
        )
    except ActivityError as err:
        return _skip_or_fail(err.failure.to_json())
    return "success", raw


async def _run_child(ctx: Any, task: Any, args: list[Any]) -> tuple[str, Any]:
    retry = task.options.get("retry")
    attempt = 1
    while True:
        workflow_id = f"{ctx.execution_id}/{task.name}" + (f"/{attempt}" if attempt > 1 else "")
        try:
            handle = await ctx.start_child_workflow(
                task.target, *args, workflow_id=workflow_id, queue=task.options.get("queue")
            )
            return "success", await handle.result()
        except ChildWorkflowError as err:
            state, failure = _skip_or_fail(
                err.failure or {"error_type": err.status, "message": str(err), "non_retryable": False}
            )
            if state == "skipped":
                return state, None
            failure = {**(failure or {}), "child_status": err.status}  # (not None unless skipped)
            # Every workflow failure is recorded non_retryable (a run is not retried), so the
            # flag says nothing here: the policy's attempts and non_retryable_errors decide.
            verdict = ActivityFailure.from_json({**failure, "non_retryable": False})
            if retry is None or not retry.should_retry(verdict, attempt):
                return "failed", failure
            await ctx.sleep(retry.delay(attempt))
            attempt += 1


async def run_dag(
    ctx: Any, conf: Any = None, retry: dict[str, Any] | None = None, *, dag: Any
) -> dict[str, Any]:
    """Run ``dag`` as the workflow ``ctx`` belongs to, with the run's ``conf``; ``retry``
    carries the successful results of the run this one retries (they are not run again)."""
    conf = {} if conf is None else conf
    retry = retry or {}
    states: dict[str, str] = dict.fromkeys(dag.order, "pending")
    results: dict[str, Any] = {}
    failures: dict[str, Any] = {}
    for name, result in (retry.get("results") or {}).items():
        if name in states:
            states[name], results[name] = "success", result
    # A task the retried run skipped stays skipped when everything it waits for is carried
    # over too; one downstream of a task that runs again is decided again.
    skipped = set(retry.get("skipped") or ())
    for name in dag.order:
        upstream = dag.tasks[name].upstream
        if name in skipped and all(states[u] in ("success", "skipped") for u in upstream):
            states[name] = "skipped"
            _mark(ctx, name, "skipped", reused_from=retry.get("retry_of"))
    running: dict[str, asyncio.Task[Any]] = {}

    async def node(name: str) -> tuple[str, Any]:
        task = dag.tasks[name]
        upstream = {u: results[u] for u in task.upstream if states[u] == "success"}
        try:
            args = task.arguments(conf, upstream)
            encode(args, f"the arguments of dag task {name!r}")
        except Exception as exc:  # deterministic: the same on every replay
            failure = ActivityFailure("DagTaskArguments", f"{type(exc).__name__}: {exc}", True).to_json()
            _mark(ctx, name, "failed", failure)
            return "failed", failure
        if task.kind == "activity":
            return await _run_activity(ctx, task, args)
        return await _run_child(ctx, task, args)

    while True:
        changed = True
        while changed:  # decide every pending task whose upstream allows it, in order
            changed = False
            for name in dag.order:
                if states[name] != "pending":
                    continue
                task = dag.tasks[name]
                verdict = decide(task.trigger_rule, [states[u] for u in task.upstream])
                if verdict is None:
                    continue
                changed = True
                if verdict == "run":
                    states[name] = "running"
                    running[name] = asyncio.ensure_future(node(name))
                else:
                    states[name] = verdict
                    _mark(ctx, name, verdict)
        if not running:
            break
        await asyncio.wait(list(running.values()), return_when=asyncio.FIRST_COMPLETED)
        for name in [n for n in dag.order if n in running and running[n].done()]:
            state, value = running.pop(name).result()
            states[name] = state
            if state == "success":
                results[name] = value
            elif state == "failed":
                failures[name] = value
    failed = [name for name in dag.order if states[name] == "failed"]
    if failed:
        raise ActivityFailure(
            "DagRunFailed",
            f"dag {dag.name!r}: task(s) {', '.join(failed)} failed; retry the run to rerun them "
            "(harvest dag retry)",
            True,
            {"states": states, "failures": failures},
        )
    return {"states": states, "results": results}
