"""Plain ``def`` activities run in the worker's thread pool, one thread per slot by default
(WorkerOptions.activity_threads), and ``@activity(executor="process")`` ones in its process pool
(docs/activities.md, "Which executor")."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

import pytest

from harvest import App, RetryPolicy, activity, workflow
from harvest.config import load_config, worker_options
from harvest.core.errors import ConfigError, InvalidArgument, WorkflowFailed
from harvest.worker import Worker

PARALLEL = 10
_barrier = threading.Barrier(PARALLEL)
_lock = threading.Lock()
_running = {"now": 0, "max": 0}


@activity(start_to_close="20s", retry=RetryPolicy.none())
def meet(ctx, i: int) -> int:
    """Returns only once PARALLEL calls run at the same time (each in a thread of its own)."""
    _barrier.wait(timeout=10)
    return i


@activity(retry=RetryPolicy.none())
def count_threads(ctx, i: int) -> int:
    with _lock:
        _running["now"] += 1
        _running["max"] = max(_running["max"], _running["now"])
    time.sleep(0.2)
    with _lock:
        _running["now"] -= 1
    return i


@activity(executor="process", retry=RetryPolicy.none())
def crunch(ctx, n: int) -> dict:
    """CPU-bound work in a process of the pool: its pid is not the worker's."""
    return {"pid": os.getpid(), "total": sum(i * i for i in range(n)), "attempt": ctx.attempt()}


@activity(executor="process", retry=RetryPolicy.none(), dead_letter=False)
def unpicklable_result(ctx) -> object:
    return threading.Lock()


@workflow
async def fan_out(ctx, name: str, n: int) -> list:
    return list(await asyncio.gather(*(ctx.execute_activity(name, i) for i in range(n))))


@workflow
async def compute(ctx, n: int) -> dict:
    return await ctx.execute_activity(crunch, n)


@workflow
async def bad_result(ctx) -> object:
    return await ctx.execute_activity(unpicklable_result)


@activity(retry=RetryPolicy.none(), dead_letter=False)
async def exits_async(ctx) -> None:
    sys.exit(3)


@activity(retry=RetryPolicy.none(), dead_letter=False)
def exits_in_a_thread(ctx) -> None:
    sys.exit("bye")


@activity(retry=RetryPolicy.none(), dead_letter=False)
async def awaits_a_cancelled_future(ctx) -> None:
    """Raises CancelledError without being cancelled: what it awaited was (a shared future, a
    task another caller's timeout cancelled)."""
    future = asyncio.get_running_loop().create_future()
    future.cancel()
    await future


_local_attempts: list[int] = []


@activity(local=True, retry=RetryPolicy.exponential(max_attempts=2, initial="10ms"), dead_letter=False)
async def awaits_a_cancelled_future_locally(ctx) -> None:
    """awaits_a_cancelled_future as a local activity (run inline by the workflow task)."""
    _local_attempts.append(ctx.attempt())
    future = asyncio.get_running_loop().create_future()
    future.cancel()
    await future


@workflow
async def calls_locally(ctx) -> object:
    return await ctx.execute_activity(awaits_a_cancelled_future_locally)


@workflow
async def calls(ctx, name: str) -> object:
    return await ctx.execute_activity(name)


app = App(
    workflows=[fan_out, compute, bad_result, calls, calls_locally],
    activities=[
        meet,
        count_threads,
        crunch,
        unpicklable_result,
        exits_async,
        exits_in_a_thread,
        awaits_a_cancelled_future,
        awaits_a_cancelled_future_locally,
    ],
)


def test_def_activities_get_a_thread_per_slot_by_default(start_worker, client):
    """Ten blocking activities meet at a barrier: they need ten threads at once (the default
    executor of a two-core machine has six, and this would time out)."""
    start_worker(app, concurrency=PARALLEL)
    handle = client.start_workflow(fan_out, "meet", PARALLEL)
    assert handle.result(timeout=30) == list(range(PARALLEL))


def test_activity_threads_caps_the_thread_pool(start_worker, client):
    _running["max"] = 0
    start_worker(app, concurrency=PARALLEL, activity_threads=2)
    assert client.start_workflow(fan_out, "count_threads", 6).result(timeout=30) == list(range(6))
    assert _running["max"] == 2


def test_a_process_activity_runs_in_another_process(start_worker, client):
    start_worker(app, activity_processes=1)
    result = client.start_workflow(compute, 1000).result(timeout=60)
    assert result["total"] == sum(i * i for i in range(1000))
    assert result["pid"] != os.getpid()
    assert result["attempt"] == 1


def test_a_result_that_cannot_be_pickled_back_fails_for_good_saying_so(start_worker, client):
    start_worker(app, activity_processes=1)
    with pytest.raises(WorkflowFailed, match="cannot be pickled"):
        client.start_workflow(bad_result).result(timeout=60)


@pytest.mark.parametrize(("name", "code"), [("exits_async", "3"), ("exits_in_a_thread", "bye")])
def test_sys_exit_in_an_activity_fails_the_attempt_not_the_worker(start_worker, client, name, code):
    """sys.exit() in an activity (async, or in the thread pool) escaped the worker's handler
    (it catches Exception) and stopped the worker's loop: the run waited for good. Now the
    attempt fails, typed SystemExit, and the worker goes on."""
    start_worker(app)
    with pytest.raises(WorkflowFailed, match=f"SystemExit.*{code}"):
        client.start_workflow(calls, name).result(timeout=30)
    assert client.start_workflow(fan_out, "count_threads", 1).result(timeout=30) == [0]


def test_a_cancelled_error_the_activity_raises_itself_fails_the_attempt(start_worker, client):
    """An activity whose own code raised CancelledError, the worker not having cancelled it
    (it awaited a future cancelled elsewhere), was taken for the worker's stop: its task was
    released with no report and no log, claimed again at once and run again, for ever, no
    attempt counted (and when its lease was lost meanwhile, nothing at all was said). Now the
    attempt fails, typed CancelledError, as any exception of the activity's does."""
    start_worker(app)
    with pytest.raises(WorkflowFailed, match="CancelledError"):
        client.start_workflow(calls, "awaits_a_cancelled_future").result(timeout=20)
    assert client.start_workflow(fan_out, "count_threads", 1).result(timeout=30) == [0]


def test_a_cancelled_error_a_local_activity_raises_itself_fails_the_attempt(start_worker, client):
    """The same for a local activity: its CancelledError, the worker not having cancelled it,
    fails the attempt (typed CancelledError, retried by its policy), as a queued activity's does."""
    _local_attempts.clear()
    start_worker(app)
    with pytest.raises(WorkflowFailed, match="CancelledError"):
        client.start_workflow(calls_locally).result(timeout=20)
    assert _local_attempts == [1, 2]
    assert client.start_workflow(fan_out, "count_threads", 1).result(timeout=30) == [0]


def _ghost(ctx) -> None:
    return None


_ghost.__qualname__ = "not_in_this_module"
ghost = activity(executor="process")(_ghost)


def test_a_worker_refuses_a_process_activity_it_cannot_pickle(db):
    with pytest.raises(ConfigError, match=r"executor='process' must be functions .*: _ghost"):
        Worker(App(activities=[ghost]), db)


def test_executor_is_checked_where_it_is_declared():
    with pytest.raises(InvalidArgument, match="use 'thread' or 'process'"):
        activity(executor="gpu")
    with pytest.raises(TypeError, match="an async activity runs on the worker's event loop"):

        @activity(executor="process")
        async def fetch(ctx) -> None: ...

    with pytest.raises(TypeError, match="define it at the top level of a module"):

        @activity(executor="process")
        def nested(ctx) -> None: ...


def test_the_pools_sizes_come_from_the_config():
    config = load_config(
        None,
        env={
            "HARVEST_CONFIG": "",
            "HARVEST_WORKER__ACTIVITY_THREADS": "12",
            "HARVEST_WORKER__ACTIVITY_PROCESSES": "3",
        },
    )
    options = worker_options(config)
    assert (options.activity_threads, options.activity_processes) == (12, 3)
    with pytest.raises(ConfigError, match=r"worker.activity_threads = 0 .* out of range"):
        load_config(None, env={"HARVEST_CONFIG": "", "HARVEST_WORKER__ACTIVITY_THREADS": "0"})
