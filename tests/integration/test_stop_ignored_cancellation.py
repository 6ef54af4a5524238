"""A stop ends at the worker's grace even when user code ignores its cancellation: a real
`harvest worker` process runs an async activity that catches every CancelledError and goes on
awaiting. At the grace the worker names it, leaves it running and releases its task
(harvest/worker/stopping.py); the process still exits (harvest/worker/event_loop.py, its
bounded end), and another worker takes the task and finishes it. It used to wait for the
activity forever: the drain's gather, then asyncio's own end, each waited for it to end."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from worker_helpers import HARVEST, REPO

from harvest import App, Client, activity, workflow

# Set for the `harvest worker` process only: there the activity ignores its cancellation; in
# this process (the replacement worker) it returns at once.
MARK = "STUBBORN_ACTIVITY_MARK"


@activity
async def stubborn(ctx) -> str:
    mark = os.environ.get(MARK)
    if mark is None:
        return "done"
    Path(mark).write_text("started")
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass  # what this test is about: user code that swallows its cancellation


@workflow
async def runs_stubborn(ctx) -> str:
    return await ctx.execute_activity(stubborn)


app = App(workflows=[runs_stubborn], activities=[stubborn])


def _activity_task(db: str, execution_id: str) -> tuple | None:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT status, lease_owner FROM harvest.tasks WHERE execution_id = %s AND kind = 'activity'",
            (execution_id,),
        ).fetchone()


@pytest.mark.parametrize("loop", ["asyncio", "auto"])
def test_a_worker_stops_at_its_grace_though_an_async_activity_ignores_its_cancellation(
    db: str, client: Client, start_worker, tmp_path: Path, loop: str
) -> None:
    mark = tmp_path / "started"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")}
    env.update(
        HARVEST_DATABASE_URL=db,
        HARVEST_SCHEDULER__ENABLED="false",
        PYTHONPATH=os.pathsep.join([str(REPO / "harvest_py"), str(Path(__file__).resolve().parent)]),
        **{MARK: str(mark)},
    )
    args = ["test_stop_ignored_cancellation:app", "--shutdown-grace", "0.5", "--event-loop", loop]
    proc = subprocess.Popen(
        [*HARVEST, "worker", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        handle = client.start_workflow(runs_stubborn)
        deadline = time.monotonic() + 60
        while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mark.exists(), "the activity did not start"
        proc.send_signal(signal.SIGTERM)
        # The grace is 0.5 s and the bounded waits after it some seconds: this bound only tells
        # a stop from a hang (the activity never ends by itself).
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:  # (it hung: the failure above says so)
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert "ignores asyncio.CancelledError; left running, their tasks released: activity stubborn" in stderr
    assert f"workflow runs_stubborn run {handle.execution_id}" in stderr
    assert _activity_task(db, handle.execution_id) == ("pending", None)  # released, not waiting out a lease
    start_worker(app)  # another worker takes it
    assert handle.result(timeout=30) == "done"
