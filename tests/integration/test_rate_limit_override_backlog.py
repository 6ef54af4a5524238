"""A rate limit's override, and its clear, take effect for the tasks already waiting for a token
(functions/flow_rate_limits.sql, _repace_rate_bucket; docs/flow-control.md "Rate limits").

A real worker on the shared test clock (harvest.fake_now): the clock is moved, never slept on.
Before, each task a claim refused waited until its token was due at the rate of its refusal,
and an override or a clear changed nothing for it."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import psycopg

from harvest import App, Client, RateLimit, RetryPolicy, activity, workflow
from harvest.db import testkit

# Declared slow (one token every 100 s): what an override then speeds up.
SLOW = RateLimit(rps=0.01, burst=2)
# Declared at one token every 10 s: what a clear of a slower override goes back to. (A burst
# of 4: a bucket banks no more than its burst, and the clock is moved 25 s at once.)
BRISK = RateLimit(rps=0.1, burst=4)
failed_once: set[int] = set()


@activity(rate_limit=SLOW, retry=RetryPolicy.exponential(max_attempts=3, initial="1000s"))
async def paced70(ctx, n: int) -> int:
    if n == 0 and n not in failed_once:  # the first: one failure, then a 1000 s backoff
        failed_once.add(n)
        raise RuntimeError("first attempt fails")
    return n


@activity(rate_limit=BRISK)
async def brisk70(ctx, n: int) -> int:
    return n


@workflow
async def paced70_flow(ctx, n: int) -> list:
    return list(await asyncio.gather(*(ctx.execute_activity(paced70, i) for i in range(n))))


@workflow
async def brisk70_flow(ctx, n: int) -> list:
    return list(await asyncio.gather(*(ctx.execute_activity(brisk70, i) for i in range(n))))


def wait_for(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (got := predicate()):
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)
    return got


def _count(conn: psycopg.Connection, sql: str, *args) -> int:
    return int(conn.execute(sql, args).fetchone()[0])


# An activity's tasks that wait: held back (due later than now) or not done yet.
_WAITING = (
    "SELECT count(*) FROM harvest.tasks WHERE activity_name = %s AND status = 'pending' "
    "AND due_at > harvest.now()"
)
_LEFT = "SELECT count(*) FROM harvest.tasks WHERE activity_name = %s"


def _advance(clock: testkit.SharedClock, worker_ids: list[str], secs: float) -> None:
    clock.set_offset(clock.offset() + dt.timedelta(seconds=secs), heartbeat=worker_ids)


def test_an_override_and_a_clear_repace_the_tasks_already_held(db: str, start_worker) -> None:
    failed_once.clear()
    clock = testkit.SharedClock(db)
    dsn = testkit.shared_clock_dsn(db)
    try:
        worker = start_worker(
            App(workflows=[paced70_flow, brisk70_flow], activities=[paced70, brisk70]),
            dsn=dsn,
            poll_interval=0.1,
        )
        with Client(dsn) as client, psycopg.connect(dsn, autocommit=True) as conn:
            ids = [worker.worker.worker_id]
            # 10 activities at one token per 100 s, burst 2: the first fails into its 1000 s
            # backoff, the second runs, eight are held back 100 s apart (100 to 800 s).
            slow = client.start_workflow(paced70_flow, 10)
            wait_for(lambda: _count(conn, _WAITING, "paced70") == 9)
            backoff_due = conn.execute(
                "SELECT due_at FROM harvest.tasks WHERE activity_name = 'paced70' AND attempt >= 1 "
                "AND status = 'pending'"
            ).fetchone()[0]

            # Raised to one token every 10 s: the eight held take it now. 45 s later four
            # have run (before: none, the first was due at 100 s). A burst of 8: a bucket banks
            # no more than its burst, and the clock is moved 45 s at once.
            conn.execute("SELECT * FROM harvest.set_rate_limit_override('paced70', 0.1, 8, 3600)")
            _advance(clock, ids, 45)
            wait_for(lambda: _count(conn, _LEFT, "paced70") == 5)  # 4 of 8 held, and the backoff
            assert _count(conn, _WAITING, "paced70") == 5  # the rest wait for their tokens
            # The retry's backoff was not pulled forward by the override.
            assert (
                conn.execute(
                    "SELECT due_at FROM harvest.tasks WHERE activity_name = 'paced70' AND attempt >= 1 "
                    "AND status = 'pending'"
                ).fetchone()[0]
                == backoff_due
            )

            # A clear: brisk70 (declared one per 10 s) under an override of one per 100 s holds
            # four 100 s apart; cleared, they are due 10 s apart: 25 s later two more have run.
            conn.execute("SELECT * FROM harvest.set_rate_limit_override('brisk70', 0.01, 1, 3600)")
            brisk = client.start_workflow(brisk70_flow, 5)
            wait_for(lambda: _count(conn, _WAITING, "brisk70") == 4)
            assert conn.execute("SELECT harvest.clear_rate_limit_override('brisk70')").fetchone()[0]
            _advance(clock, ids, 25)
            wait_for(lambda: _count(conn, _LEFT, "brisk70") == 2)
            _advance(clock, ids, 20)
            assert brisk.result(timeout=30) == list(range(5))

            # The rest of the slow line, and the backoff's retry, when the clock gets there.
            _advance(clock, ids, 1000)
            assert slow.result(timeout=30) == list(range(10))
    finally:
        clock.close()


def test_a_claim_does_not_wait_for_an_override_re_pacing_its_bucket(db: str) -> None:
    """An override holds its bucket's row while it re-paces the held tasks (up to 10,000 rows).
    A claim made the missing buckets with INSERT ... ON CONFLICT DO NOTHING, which waits for a
    transaction updating the existing row: every claim of the limit's tasks stalled for the
    re-pace. It inserts only the buckets it does not see now, and takes the rest SKIP LOCKED."""
    with psycopg.connect(db, autocommit=True) as setup:
        setup.execute(
            "SELECT harvest.declare_flow_policies("
            """'{"activities": {"lk70": {"rate_limit": {"rps": 1, "burst": 1}}}}')"""
        )
        setup.execute("SELECT harvest.start_workflow('wf_lk70', '[]', 'lk70', 'lq0')")
        setup.execute(
            "SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1, (SELECT jsonb_agg("
            "jsonb_build_object('type', 'schedule_activity', 'seq', i, 'name', 'lk70', 'input', '[]'::jsonb,"
            """ 'queue', 'lq', 'options', '{"rate_limit": {"rps": 1, "burst": 1}}'::jsonb))"""
            " FROM generate_series(1, 20) AS i)) FROM harvest.claim_tasks('w', ARRAY['lq0']) AS c"
        )
        assert _count(setup, "SELECT count(*) FROM harvest.claim_tasks('w', ARRAY['lq'], 100)") == 1
        held = (
            "SELECT count(*) FROM harvest.tasks"
            " WHERE queue = 'lq' AND status = 'pending' AND rate_due_at = due_at"
        )
        assert _count(setup, held) == 19
        # Three come due (as the clock would bring them): the next claim's candidates.
        setup.execute(
            "UPDATE harvest.tasks SET due_at = now() - interval '1 s' WHERE id IN ("
            "SELECT id FROM harvest.tasks WHERE queue = 'lq' AND status = 'pending' ORDER BY id LIMIT 3)"
        )
    with psycopg.connect(db) as override, psycopg.connect(db, autocommit=True) as claimer:
        override.execute("SELECT * FROM harvest.set_rate_limit_override('lk70', 40, 1, 60)")  # open
        claimer.execute("SET lock_timeout = '2s'")  # (before the fix: LockNotAvailable here)
        claimer.execute("SELECT count(*) FROM harvest.claim_tasks('w2', ARRAY['lq'], 10)").fetchone()
        override.rollback()
