"""A database shutdown ends every session with AdminShutdown (57P01), so each task in flight lost
its handler at once: each was one ERROR line with a traceback ("crashed the handler"), dozens for
one restart. An outage is not Harvest's bug: one WARNING an outage (a minute) names the first
task and counts the others, as the pools' connect failures are folded (harvest.db.pools)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

from harvest import App, Worker, activity
from harvest.db.pools import OUTAGE_LINE_EVERY_SECS, OUTAGE_LINES


@activity
async def noop(ctx: Any) -> None:
    return None


def _task(task_id: int, shard: int) -> dict[str, Any]:
    return {"task_id": task_id, "kind": "workflow", "fencing_token": 1, "_lane": SimpleNamespace(shard=shard)}


def test_tasks_a_shutdown_cut_off_are_one_warning_an_outage(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = Worker(App(activities=[noop]), "postgresql://127.0.0.1:1/none")
    now = [1000.0]
    monkeypatch.setattr(OUTAGE_LINES, "clock", lambda: now[0])
    shard = 4711  # (a shard of this test's own: OUTAGE_LINES counts per shard, process-wide)

    async def shut_down(_worker: Any, _task: Any) -> None:
        raise psycopg.errors.AdminShutdown("terminating connection due to administrator command")

    async def run(first: int, count: int) -> None:
        for task_id in range(first, first + count):
            await worker._guard(shut_down, _task(task_id, shard))

    with caplog.at_level(logging.INFO, logger="harvest.worker"):
        asyncio.run(run(1, 20))
        lines = [r for r in caplog.records if r.name == "harvest.worker"]
        assert [r.levelno for r in lines] == [logging.WARNING], caplog.text
        (line,) = lines
        assert line.exc_info is None  # (an outage is no bug: no traceback)
        message = line.getMessage()
        assert "task 1 (workflow) was cut off by an outage of shard 4711" in message
        assert "AdminShutdown" in message and "logged again once a minute" in message

        # a minute on, still going: one more line, with the count of those not logged
        now[0] += OUTAGE_LINE_EVERY_SECS + 1
        caplog.clear()
        asyncio.run(run(21, 3))
        (line,) = [r for r in caplog.records if r.name == "harvest.worker"]
        assert "task 21 (workflow)" in line.getMessage()
        assert "19 more tasks cut off since the last line" in line.getMessage()
    assert worker.completed_tasks == 23


def test_a_handler_crashed_by_anything_else_is_still_an_error_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = Worker(App(activities=[noop]), "postgresql://127.0.0.1:1/none")

    async def crashed(_worker: Any, _task: Any) -> None:
        raise RuntimeError("a bug")

    with caplog.at_level(logging.INFO, logger="harvest.worker"):
        asyncio.run(worker._guard(crashed, _task(7, 4712)))
        asyncio.run(worker._guard(crashed, _task(8, 4712)))
    lines = [r for r in caplog.records if "crashed the handler" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.ERROR, logging.ERROR]
    assert all(r.exc_info for r in lines)
