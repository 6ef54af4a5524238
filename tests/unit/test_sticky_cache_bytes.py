"""The sticky cache is bounded in bytes as well as in runs (harvest/worker/workflows.py).

A run's estimate is a fixed cost plus the payloads fed to it (WorkflowRun.payload_bytes, counted
as each event is read); past ``max_bytes`` the least recently used runs are closed and dropped.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from harvest import App, Worker, activity, workflow
from harvest.config import load_config, worker_options
from harvest.core.errors import ConfigError
from harvest.runtime import WorkflowRun
from harvest.worker.workflows import CACHED_RUN_BASE_BYTES, StickyCache, cached_run_bytes


@activity
async def fetch(ctx: Any, i: int) -> str:
    return "x"


@workflow
async def holder(ctx: Any, blob: str) -> int:
    got = await ctx.execute_activity(fetch, 1)
    await ctx.execute_activity(fetch, 2)
    return len(blob) + len(got)


APP = App(workflows=[holder], activities=[fetch])


def _run(i: int, blob: str, result: str | None = None) -> WorkflowRun:
    """A run stepped to its first activity (and past it, given that activity's ``result``)."""
    run = WorkflowRun(APP, holder, f"exec-{i}", f"wf-{i}", "default")
    started = {"workflow_name": "holder", "workflow_id": f"wf-{i}", "input": [blob], "task_queue": "default"}
    activation = asyncio.run(
        run.advance([{"event_id": 1, "event_type": "WorkflowStarted", "event_data": started}])
    )
    if result is not None:
        scheduled = {k: v for k, v in activation.commands[0].items() if k != "type"}
        done = {"seq": 1, "result": result}
        asyncio.run(
            run.advance(
                [
                    {"event_id": 2, "event_type": "WorkflowTaskCompleted", "event_data": {"through": 1}},
                    {"event_id": 3, "event_type": "ActivityScheduled", "event_data": scheduled},
                    {"event_id": 4, "event_type": "ActivityCompleted", "event_data": done},
                ]
            )
        )
    return run


def test_a_run_counts_the_payloads_fed_to_it_as_it_reads_them() -> None:
    small, large = _run(1, "a"), _run(2, "a" * 10_000)
    assert 0 < small.payload_bytes < 100
    assert 10_000 < large.payload_bytes < 10_100  # the input's JSON text, about
    stepped = _run(3, "a", result="r" * 5_000)
    # The activity's result is counted; the command events (the run's own) are not.
    assert 5_000 < stepped.payload_bytes - small.payload_bytes < 5_100
    assert cached_run_bytes(stepped) == CACHED_RUN_BASE_BYTES + stepped.payload_bytes


def test_the_byte_bound_evicts_the_least_recently_used_runs() -> None:
    runs = [_run(i, "a" * 4_000) for i in range(4)]
    each = cached_run_bytes(runs[0])
    cache = StickyCache(capacity=100, max_bytes=3 * each)  # room for three of them
    for i, run in enumerate(runs[:3]):
        cache.put(f"exec-{i}", run)
    assert len(cache) == 3 and cache.bytes == 3 * each and cache.evictions == 0
    assert cache.take("exec-0") is runs[0]  # used again: now the most recent
    assert cache.bytes == 2 * each
    cache.put("exec-0", runs[0])
    cache.put("exec-3", runs[3])  # over the bound: the least recently used (exec-1) goes
    assert cache.ids() == {"exec-0", "exec-2", "exec-3"}
    assert cache.bytes == 3 * each <= cache.max_bytes and cache.evictions == 1
    assert runs[1]._loop.is_closed() and not runs[0]._loop.is_closed()
    # A run bigger than the whole bound is not kept, and evicts nobody.
    big = _run(9, "b" * (4 * each))
    cache.put("exec-9", big)
    assert cache.ids() == {"exec-0", "exec-2", "exec-3"} and big._loop.is_closed()
    assert cache.evictions == 2
    for execution_id in ("exec-0", "exec-2", "exec-3"):
        cache.drop(execution_id)
    assert len(cache) == 0 and cache.bytes == 0


def test_without_a_byte_bound_only_the_run_count_binds() -> None:
    cache = StickyCache(capacity=2, max_bytes=None)
    for i in range(3):
        cache.put(f"exec-{i}", _run(i, "a" * 50_000))
    assert cache.ids() == {"exec-1", "exec-2"} and cache.bytes > 100_000


def test_cache_max_bytes_is_a_worker_option_and_a_config_key(tmp_path: Path) -> None:
    worker = Worker(App(), "postgresql://nobody@127.0.0.1:1/none", cache_max_bytes=1_000_000)
    assert worker.cache.max_bytes == 1_000_000
    assert Worker(App(), "postgresql://nobody@127.0.0.1:1/none").cache.max_bytes == 256 * 1024 * 1024
    path = tmp_path / "harvest.toml"
    path.write_text("[worker]\ncache_max_bytes = 5000000\n")
    assert worker_options(load_config(path, env={})).cache_max_bytes == 5_000_000
    assert (
        worker_options(load_config(None, env={"HARVEST_WORKER__CACHE_MAX_BYTES": "7"})).cache_max_bytes == 7
    )
    path.write_text("[worker]\ncache_max_bytes = -1\n")
    with pytest.raises(ConfigError, match=r"worker.cache_max_bytes = -1 .* out of range"):
        load_config(path, env={})
