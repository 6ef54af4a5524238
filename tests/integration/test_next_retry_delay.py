"""An activity that knows when to try again (a 429's ``Retry-After``) says so with
``ActivityFailure(..., next_retry_delay=...)``: the retry is due after that, not after the policy's
backoff (docs/activities.md, "Retries")."""

from __future__ import annotations

import datetime as dt
import time

import psycopg

from harvest import ActivityFailure, App, Client, RetryPolicy, activity, workflow
from harvest.db import testkit


@activity(start_to_close="30s", retry=RetryPolicy.exponential(max_attempts=3, initial="1s", maximum="5s"))
async def call_model(ctx) -> int:
    if ctx.attempt() == 1:
        raise ActivityFailure(
            "RateLimited", "HTTP 429", next_retry_delay=dt.timedelta(hours=1)
        )  # Retry-After: 3600
    return ctx.attempt()


@workflow
async def agent(ctx) -> int:
    return await ctx.execute_activity(call_model)


def test_a_failure_s_next_retry_delay_replaces_the_backoff(
    start_worker, db: str, conn: psycopg.Connection
) -> None:
    """The retry is due an hour after the 429 (not after the policy's 1 s, nor its 5 s maximum),
    and runs once the clock gets there."""
    shared = testkit.shared_clock_dsn(db)
    start_worker(App(workflows=[agent], activities=[call_model]), shared)
    with Client(shared) as client:
        handle = client.start_workflow(agent)
        deadline = time.monotonic() + 30
        while True:
            row = conn.execute(
                "SELECT attempt, due_at - harvest.now() AS wait, last_failure ->> 'next_retry_delay'"
                " FROM harvest.tasks WHERE kind = 'activity' AND last_failure IS NOT NULL"
            ).fetchone()
            if row is not None:
                break
            assert time.monotonic() < deadline, "the first attempt never failed"
            time.sleep(0.05)
        attempt, wait, recorded = row
        assert attempt == 1 and recorded == "3600.0"
        assert 3500 < wait.total_seconds() <= 3600, wait
        conn.execute("UPDATE harvest.engine_settings SET test_clock_offset = interval '3601 seconds'")
        assert handle.result(timeout=30) == 2
