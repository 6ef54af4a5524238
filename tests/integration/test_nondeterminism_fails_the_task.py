"""A replay that no longer matches its history fails the task visibly and writes nothing."""

from __future__ import annotations

import json
import sys
import time

import psycopg

from harvest import App, Client, activity, workflow
from harvest.core.codecs import AesGcmCodec, ZlibCodec


@activity
async def step_a(ctx) -> str:
    return "a"


@activity
async def step_b(ctx) -> str:
    return "b"


@workflow(name="evolving")
async def evolving_v1(ctx) -> str:
    first = await ctx.execute_activity(step_a)
    await ctx.sleep(1.5)
    return first


@workflow(name="evolving")
async def evolving_v2(ctx) -> str:
    # A bad deploy: the first command changed under a running history.
    first = await ctx.execute_activity(step_b)
    await ctx.sleep(1.5)
    return first


def _after_a_bad_deploy(db: str, start_worker, client: Client, **options) -> tuple[dict, int]:
    """The failure a run's workflow task keeps once a worker with changed code replays it, and
    how many events its history had before."""
    v1 = start_worker(App(workflows=[evolving_v1], activities=[step_a, step_b]), cache_size=0, **options)
    handle = client.start_workflow("evolving", workflow_id="nd")
    deadline = time.monotonic() + 10
    while "TimerStarted" not in [e["event_type"] for e in handle.history()]:
        assert time.monotonic() < deadline, "the first workflow task never completed"
        time.sleep(0.05)
    # The timer is long enough that v1 has stopped before it fires: a v1 still running when it
    # fired would take the next workflow task and end the run the old way (seen once with a 0.2 s
    # timer under a loaded CI), and no v2 would ever replay it.
    v1.stop()
    assert handle.describe()["status"] == "RUNNING", "v1 ended the run before it stopped"
    events_before = len(handle.history())

    start_worker(App(workflows=[evolving_v2], activities=[step_a, step_b]), cache_size=0, **options)
    with psycopg.connect(db) as conn:
        deadline = time.monotonic() + 10
        failure = None
        while failure is None and time.monotonic() < deadline:
            row = conn.execute(
                "SELECT last_failure FROM harvest.tasks WHERE execution_id = %s AND kind = 'workflow'",
                (handle.execution_id,),
            ).fetchone()
            failure = row[0] if row else None
            time.sleep(0.05)
    assert failure is not None
    return failure, events_before


def test_changed_code_fails_the_task_not_the_run(db: str, start_worker, client: Client) -> None:
    failure, events_before = _after_a_bad_deploy(db, start_worker, client)
    assert failure["error_type"] == "NonDeterminismError"
    assert "step_a" in failure["message"] and "step_b" in failure["message"]
    assert "Traceback" in failure["traceback"]
    handle = client.get_handle(workflow_id="nd")
    assert handle.describe()["status"] == "RUNNING"
    # Nothing beyond the TimerFired that woke it was written.
    history = handle.history()
    assert [e["event_type"] for e in history[events_before:]] in ([], ["TimerFired"])


def test_a_failed_workflow_tasks_traceback_goes_through_the_codecs(db: str, start_worker) -> None:
    """The traceback is the failure's details, a payload: with codecs on it is stored encoded,
    as an activity failure's details are (docs/payloads.md); type and message stay readable."""
    codecs = [ZlibCodec(), AesGcmCodec({"k1": bytes(range(32))})]
    with Client(db, codecs=codecs) as client:
        failure, _ = _after_a_bad_deploy(db, start_worker, client, codecs=codecs)
    assert failure["error_type"] == "NonDeterminismError" and "step_b" in failure["message"]
    assert "_harvest_codec" in json.dumps(failure["traceback"]) and "Traceback" not in json.dumps(failure)


@workflow(name="exits")
async def exits(ctx) -> str:
    await ctx.execute_activity(step_a)
    sys.exit(3)


def _last_failure(db: str, execution_id: str) -> dict | None:
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT last_failure FROM harvest.tasks WHERE execution_id = %s AND kind = 'workflow'",
            (execution_id,),
        ).fetchone()
    return row[0] if row else None


def test_sys_exit_in_workflow_code_fails_its_task_and_the_worker_goes_on(
    db: str, start_worker, client: Client
) -> None:
    """sys.exit() in a workflow stopped the worker that ran it (and each worker that claimed
    the task after it): now the task fails, typed, and the worker serves other runs."""
    start_worker(App(workflows=[exits, evolving_v1], activities=[step_a, step_b]))
    bad = client.start_workflow("exits", workflow_id="exits")
    deadline = time.monotonic() + 10
    while (failure := _last_failure(db, bad.execution_id)) is None:
        assert time.monotonic() < deadline, "the workflow task never failed"
        time.sleep(0.05)
    assert failure["error_type"] == "IllegalWorkflowOperation" and "sys.exit" in failure["message"]
    assert client.start_workflow("evolving", workflow_id="after").result(timeout=10) == "a"
    assert bad.describe()["status"] == "RUNNING"
