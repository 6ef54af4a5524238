"""A claim that decides (harvest/db/sqlapi.py, OpenClaim; harvest/worker/worker.py, _claim_deciding).

An idle worker woken for work keeps its claim's transaction open when the claim brought one
workflow task, decides it and commits the decision in that transaction: one commit for the claim
and the decision. Until then nobody else sees the claim; a rollback (or a lost connection)
leaves the task pending as it was, with no lease to wait out. The chaos test
(tests/chaos/test_chaos_claim_decides.py) kills a worker in between.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg
import pytest
from history_helpers import comparable_history

from harvest import App, Client, Worker, activity, workflow
from harvest.db import channels
from harvest.db.pools import open_async_pool
from harvest.db.sqlapi import AsyncSqlApi, claim_tasks_open
from harvest.worker import workflows as workflows_module
from harvest.worker.lanes import ShardLane

ran: list[int] = []


@activity
async def bump(ctx, x: int) -> int:
    ran.append(x)
    return x + 1


@activity(local=True)
async def slow_local(ctx, x: int) -> int:
    await asyncio.sleep(0.1)  # past the claim's window (CLAIM_DECIDES_WINDOW_SECS)
    return x


local_ran: list[int] = []


@activity(local=True)
async def quick_local(ctx, x: int) -> int:
    local_ran.append(x)  # (done within the claim's window)
    return x


@workflow
async def one_step(ctx, x: int) -> int:
    return await ctx.execute_activity(bump, x)


@workflow
async def local_first(ctx, x: int) -> int:
    x = await ctx.execute_local_activity(slow_local, x)
    return await ctx.execute_activity(bump, x)


@workflow
async def quick_local_first(ctx, x: int) -> int:
    x = await ctx.execute_local_activity(quick_local, x)
    return await ctx.execute_activity(bump, x)


APP = App(workflows=[one_step, local_first, quick_local_first], activities=[bump, slow_local, quick_local])


def _workflow_task(db: str, execution_id: str) -> tuple | None:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT status, attempt, lease_owner FROM harvest.tasks "
            "WHERE execution_id = %s AND kind = 'workflow'",
            (execution_id,),
        ).fetchone()


@pytest.fixture
def idle_worker(start_worker, monkeypatch):
    """start_worker for a test whose starts must each wake an idle worker (only such a claim
    decides): its poll comes every 5 s, not 0.5 (a claim after a poll's timeout is not woken), and
    it notes while it waits in ``Worker._sleep``, for ``_asleep``."""
    sleep, wake = Worker._sleep, Worker.wake

    async def noted_sleep(self: Worker, timeout: float) -> bool:
        self.test_waits, self.test_slept_at = timeout, time.monotonic()
        try:
            return await sleep(self, timeout)
        finally:
            self.test_waits = None

    def noted_wake(self: Worker) -> None:
        self.test_woken_at = time.monotonic()
        wake(self)

    listen = ShardLane.listen

    async def noted_listen(self: ShardLane, channel: str, wake: Any, what: str) -> None:
        def listener_woke() -> None:  # (first when it has connected: it looks for what came before)
            wake()
            self.worker.test_listener_woke = True

        # (the claim loop's listener; the query responder's wakes the responder)
        await listen(self, channel, listener_woke if channel == channels.TASKS else wake, what)

    monkeypatch.setattr(Worker, "_sleep", noted_sleep)
    monkeypatch.setattr(Worker, "wake", noted_wake)
    monkeypatch.setattr(ShardLane, "listen", noted_listen)
    return lambda app: start_worker(app, poll_interval=IDLE_POLL_SECS)


IDLE_POLL_SECS = 5.0


def _asleep(worker) -> None:
    """Wait until the worker (from ``idle_worker``) is idle, its mark asking producers to notify
    it, and waiting for that notification, having gone to sleep after its last wake-up: only a
    claim woken on an idle worker may decide. Neither a fixed pause nor its mark alone was
    enough on a loaded machine: the worker was still busy from its boot, or (CI 61e, 61f) still
    making the look for work that follows its mark, or in a short wait for a producer to
    settle, when the start came, and the task went the ordinary way; and (CI 62c) its listener,
    connecting, woke it once more (to look for what came before it listened) just before the
    start committed: that claim found nothing, and a claim not woken took the run."""
    w = worker.worker
    deadline = time.monotonic() + 30
    while not (
        getattr(w, "test_waits", None) == IDLE_POLL_SECS
        and getattr(w, "test_listener_woke", False)  # (connected, and woke the worker)
        and w.test_slept_at > getattr(w, "test_woken_at", 0.0)
        and w.lanes[0].sleeping is True
        and not w._inflight
        and not w._unsettled
        and not w._wake.is_set()
    ):
        assert time.monotonic() < deadline, "the worker never went to sleep"
        time.sleep(0.005)


def _one_at_a_time(db: str, fn, n: int, prefix: str, worker) -> list[str]:
    """Start ``n`` runs one after the other, each once the one before ended and the worker
    (from ``idle_worker``) waits for a notification (the start wakes it)."""
    ids = []
    with Client(db) as client:
        for i in range(n):
            _asleep(worker)
            handle = client.start_workflow(fn, i, workflow_id=f"{prefix}-{i}")
            assert handle.result(timeout=30) == i + 1
            ids.append(handle.execution_id)
    return ids


def test_an_open_claim_is_seen_by_nobody_until_it_commits_and_a_rollback_leaves_no_trace(db):
    with Client(db) as client:
        handle = client.start_workflow(one_step, 1, workflow_id="open")

    async def main() -> None:
        pool = await open_async_pool(db, max_size=2)
        try:
            api = AsyncSqlApi(pool)
            rows, claim = await claim_tasks_open(api, "w1", ["default"], 10, 30.0)
            assert [(r["kind"], r["execution_id"], r["attempt"]) for r in rows] == [
                ("workflow", handle.execution_id, 1)
            ]
            assert _workflow_task(db, handle.execution_id) == ("pending", 0, None)
            await claim.rollback()
            assert _workflow_task(db, handle.execution_id) == ("pending", 0, None)
            rows, claim = await claim_tasks_open(api, "w1", ["default"], 10, 30.0)
            assert len(rows) == 1
            await claim.commit()
            assert _workflow_task(db, handle.execution_id) == ("running", 1, "w1")
            await claim.commit()  # ended once: a second end does nothing
            assert await claim.decide("w1", [], None, None) is None
        finally:
            await pool.close()

    asyncio.run(main())


def test_an_idle_worker_commits_its_woken_claim_with_the_decision_and_writes_the_same_history(
    db, idle_worker
):
    ran.clear()
    worker = idle_worker(APP)
    merged = _one_at_a_time(db, one_step, 5, "merged", worker)
    decided = worker.worker.claims_decided
    worker.stop()
    assert decided == 5, decided
    plain_worker = idle_worker(APP)
    plain_worker.worker.claim_decides = False
    plain = _one_at_a_time(db, one_step, 5, "plain", plain_worker)
    assert plain_worker.worker.claims_decided == 0
    assert [comparable_history(db, e) for e in merged] == [comparable_history(db, e) for e in plain]
    assert sorted(ran) == sorted(list(range(5)) * 2)  # each activity ran once


def _refuse(
    db: str, table: str, condition: str, message: str, *, times: int = 1, at_commit: bool = False
) -> None:
    """A trigger on ``harvest.<table>`` that fails the first ``times`` rows written (inserted or
    updated) that match ``condition``, with ``message``: at the statement, or ``at_commit`` (a
    deferred constraint trigger: SQLSTATE 40001 at the commit, after every statement).
    ``public.refusals`` counts the rows that matched."""
    if at_commit:
        trigger = f"CONSTRAINT TRIGGER refuse AFTER INSERT OR UPDATE ON harvest.{table} "
        trigger += "DEFERRABLE INITIALLY DEFERRED"
        raised = f"RAISE EXCEPTION '{message}' USING ERRCODE = '40001'"
    else:
        trigger = f"TRIGGER refuse BEFORE INSERT OR UPDATE ON harvest.{table}"
        raised = f"RAISE EXCEPTION '{message}'"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE SEQUENCE public.refusals")
        conn.execute(
            f"""
            CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF {condition} AND nextval('public.refusals') <= {times} THEN
                    {raised};
                END IF;
                RETURN NEW;
            END $$"""
        )
        conn.execute(f"CREATE {trigger} FOR EACH ROW EXECUTE FUNCTION public.refuse()")


def _assert_idle(conn: psycopg.AsyncConnection) -> None:
    """A pooled connection given back clean: out of pipeline mode, in no transaction."""
    assert conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_decision_the_database_refuses_rolls_its_claim_back_and_is_made_again(db, idle_worker, caplog):
    ran.clear()
    # The first ActivityScheduled event written fails its statement: the merged decision's.
    _refuse(db, "events", "NEW.event_type = 'ActivityScheduled'", "refused once by the test")
    worker = idle_worker(APP)
    _asleep(worker)  # the start wakes it
    with caplog.at_level(logging.WARNING), Client(db) as client:
        handle = client.start_workflow(one_step, 7, workflow_id="refused")
        assert handle.result(timeout=30) == 8
    assert worker.worker.claims_decided == 0  # the one claim that tried rolled back
    assert worker.worker.claims_rolled_back == 1
    # The claim's block, aborted by the refused statement, was rolled back before its connection
    # went back: the pool found it idle (else it warns "rolling back returned connection").
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [m for m in warnings if "connection" in m], warnings
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT last_value FROM public.refusals").fetchone()[0] == 2
    events = [kind for kind, _ in comparable_history(db, handle.execution_id)]
    assert events == [
        "WorkflowStarted",
        "WorkflowTaskCompleted",
        "ActivityScheduled",
        "ActivityCompleted",
        "WorkflowTaskCompleted",
        "WorkflowCompleted",
    ]
    assert ran == [7]


def test_a_decision_past_the_window_commits_its_claim_alone(db, idle_worker):
    ran.clear()
    worker = idle_worker(APP)
    _one_at_a_time(db, local_first, 2, "slow", worker)
    assert worker.worker.claims_decided == 0
    assert ran == [0, 1]


def test_a_workflow_task_that_fails_commits_its_claim_first_and_the_attempt_counts(
    db, start_worker, monkeypatch
):
    # A run of a workflow this worker does not have: its workflow task fails on the worker
    # (fail_workflow_task, retried a minute later). The claim commits before the failure is
    # recorded: the attempt counts. (A claim rolled back instead would leave attempt 0.)
    monkeypatch.setattr(workflows_module, "WORKFLOW_TASK_RETRY_SECS", 60.0)
    start_worker(App(workflows=[one_step], activities=[bump]))
    # The worker's registration first (a fixed 0.2 s was too short at load 10-12: it registered
    # after the delete, and the start was refused), then none (or the start is refused).
    deadline = time.monotonic() + 30
    with psycopg.connect(db, autocommit=True) as conn:
        registered = "SELECT count(*) FROM harvest.registered_workflows"
        while conn.execute(registered).fetchone() == (0,) and time.monotonic() < deadline:
            time.sleep(0.02)
        conn.execute("DELETE FROM harvest.registered_workflows")
    with Client(db) as client:
        handle = client.start_workflow("not_registered", workflow_id="unknown")

    def failed_once() -> tuple | None:
        with psycopg.connect(db, autocommit=True) as conn:
            return conn.execute(
                "SELECT status, attempt, last_failure ->> 'error_type' FROM harvest.tasks "
                "WHERE execution_id = %s AND last_failure IS NOT NULL",
                (handle.execution_id,),
            ).fetchone()

    deadline = time.monotonic() + 30
    while (row := failed_once()) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert row == ("pending", 1, "UnknownWorkflow")


def _event_insert_waits(db: str, event_type: str, lock_key: int) -> None:
    """Every insert of an ``event_type`` event waits on advisory lock ``lock_key`` (shared), which
    the test holds to keep a decision waiting there."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            f"""
            CREATE FUNCTION public.wait_for_test() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.event_type = '{event_type}' THEN
                    PERFORM pg_advisory_xact_lock_shared({lock_key});
                END IF;
                RETURN NEW;
            END $$"""
        )
        conn.execute(
            "CREATE TRIGGER wait_for_test BEFORE INSERT ON harvest.events "
            "FOR EACH ROW EXECUTE FUNCTION public.wait_for_test()"
        )


def test_a_decision_that_waits_on_a_lock_rolls_back_with_its_claim_instead_of_holding_the_task(
    db, idle_worker
):
    # The claim holds the task's row while the decision locks the run's: the reverse of the lock
    # order, so the decision waits on no lock for long (lock_timeout), and gives the task back.
    # Here the first ActivityScheduled insert waits on an advisory lock the test holds.
    ran.clear()
    _event_insert_waits(db, "ActivityScheduled", 4242)
    worker = idle_worker(APP)
    _asleep(worker)
    with psycopg.connect(db, autocommit=True) as holder, Client(db) as client:
        holder.execute("SELECT pg_advisory_lock(4242)")
        handle = client.start_workflow(one_step, 3, workflow_id="waits")
        deadline = time.monotonic() + 30
        while worker.worker.claims_rolled_back == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert worker.worker.claims_rolled_back == 1
        holder.execute("SELECT pg_advisory_unlock(4242)")
        assert handle.result(timeout=30) == 4
    assert worker.worker.claims_decided == 0
    assert ran == [3]
    assert [kind for kind, _ in comparable_history(db, handle.execution_id)].count("ActivityScheduled") == 1


def test_a_decision_that_records_a_local_activity_commits_its_claim_first(db, idle_worker):
    # A local activity's marker records work done outside the database: a claim rolled back
    # with it (its decision waited on a lock past the claim's lock_timeout) would run the
    # activity again. Such a decision goes the ordinary way, after the claim commits alone, and
    # waits for the lock; the local activity runs once. Here the marker's insert waits on an
    # advisory lock the test holds.
    local_ran.clear()
    ran.clear()
    _event_insert_waits(db, "MarkerRecorded", 4243)
    worker = idle_worker(APP)
    _asleep(worker)  # the start wakes it, and its claim may decide
    with psycopg.connect(db, autocommit=True) as holder, Client(db) as client:
        holder.execute("SELECT pg_advisory_lock(4243)")
        handle = client.start_workflow(quick_local_first, 5, workflow_id="local-once")
        deadline = time.monotonic() + 30
        waiting = 0
        while not waiting and time.monotonic() < deadline:
            time.sleep(0.01)
            waiting = holder.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4243 AND NOT granted"
            ).fetchone()[0]
        assert waiting, "the decision never reached the marker's insert"
        time.sleep(0.1)  # well past the claim's lock_timeout (20 ms)
        holder.execute("SELECT pg_advisory_unlock(4243)")
        assert handle.result(timeout=30) == 6
    assert worker.worker.claims_rolled_back == 0
    assert local_ran == [5]  # once: no rollback made the task run it again
    assert ran == [5]


# Claims whose commit fails, one after the other: the old commit at the Sync lost the server's
# error to psycopg's own (an IndexError in its queue of pipeline results, or "cannot exit
# pipeline mode while busy") about one time in eight.
COMMIT_FAILURES = 100


def test_a_claim_whose_commit_fails_raises_the_servers_error_and_gives_back_a_clean_connection(db):
    # The claim's COMMIT is a statement of its own, before the Sync: its error is the server's,
    # every time, and the connection goes back to the pool out of pipeline mode and idle.
    _refuse(
        db,
        "tasks",
        "NEW.status = 'running'",
        "commit refused by the test",
        times=COMMIT_FAILURES,
        at_commit=True,
    )
    with Client(db) as client:
        handle = client.start_workflow(one_step, 1, workflow_id="commit-fails")

    async def main() -> None:
        pool = await open_async_pool(db, min_size=1, max_size=1)
        try:
            api = AsyncSqlApi(pool)
            for _ in range(COMMIT_FAILURES):
                # (the pool's one connection each time: given back usable, or the claim fails)
                rows, claim = await claim_tasks_open(api, "w1", ["default"], 10, 30.0)
                assert len(rows) == 1
                with pytest.raises(psycopg.errors.SerializationFailure, match="commit refused by the test"):
                    await claim.commit()
            # The one connection came back out of pipeline mode, idle, and is used again.
            async with pool.connection() as conn:
                _assert_idle(conn)
                assert await (await conn.execute("SELECT 42")).fetchone() == (42,)
            assert _workflow_task(db, handle.execution_id) == ("pending", 0, None)
            assert pool.get_stats().get("returns_bad", 0) == 0
            rows, claim = await claim_tasks_open(api, "w1", ["default"], 10, 30.0)
            assert len(rows) == 1
            await claim.commit()
            assert _workflow_task(db, handle.execution_id) == ("running", 1, "w1")
        finally:
            await pool.close()

    asyncio.run(main())


def test_a_claim_that_fails_raises_the_servers_error_and_gives_back_an_idle_connection(db, caplog):
    # A statement that fails in the claim's transaction block leaves the block aborted after the
    # Sync: it is rolled back before the connection goes back to the pool.
    _refuse(db, "tasks", "NEW.status = 'running'", "claim refused by the test")
    with Client(db) as client:
        handle = client.start_workflow(one_step, 1, workflow_id="claim-fails")

    async def main() -> None:
        pool = await open_async_pool(db, min_size=1, max_size=1)
        try:
            api = AsyncSqlApi(pool)
            with pytest.raises(psycopg.errors.RaiseException, match="claim refused by the test"):
                await claim_tasks_open(api, "w1", ["default"], 10, 30.0)
            async with pool.connection() as conn:
                _assert_idle(conn)
            assert _workflow_task(db, handle.execution_id) == ("pending", 0, None)
            rows, claim = await claim_tasks_open(api, "w1", ["default"], 10, 30.0)
            assert len(rows) == 1
            await claim.commit()
            assert _workflow_task(db, handle.execution_id) == ("running", 1, "w1")
            assert pool.get_stats().get("returns_bad", 0) == 0
        finally:
            await pool.close()

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_lone_decision_rolled_back_by_a_conflict_is_sent_again_not_left_to_its_lease(
    db, start_worker, caplog
):
    # The ordinary way (no claim that decides): the decision's batch of one is refused at its
    # commit with a serialization failure, as a deadlock's loser is. It crashed the handler and
    # the task waited for its lease (30 s) to be claimed again; it is sent again at once.
    ran.clear()
    _refuse(
        db, "events", "NEW.event_type = 'ActivityScheduled'", "commit refused by the test", at_commit=True
    )
    worker = start_worker(APP)
    worker.worker.claim_decides = False
    with caplog.at_level(logging.WARNING), Client(db) as client:
        handle = client.start_workflow(one_step, 9, workflow_id="lone-conflict")
        assert handle.result(timeout=20) == 10  # (well inside the 30 s lease)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [m for m in warnings if "crashed the handler" in m], warnings
    assert [m for m in warnings if "a batch of 1 decisions was rolled back" in m], warnings
    with psycopg.connect(db) as conn:
        (refusals,) = conn.execute("SELECT last_value FROM public.refusals").fetchone()
    assert refusals >= 2  # refused once, then committed
    assert ran == [9]


def test_a_claim_and_decision_whose_commit_fails_are_logged_with_the_servers_error(db, idle_worker, caplog):
    ran.clear()
    _refuse(
        db, "events", "NEW.event_type = 'ActivityScheduled'", "commit refused by the test", at_commit=True
    )
    worker = idle_worker(APP)
    _asleep(worker)  # the start wakes it
    with caplog.at_level(logging.WARNING), Client(db) as client:
        handle = client.start_workflow(one_step, 5, workflow_id="decision-commit-fails")
        assert handle.result(timeout=30) == 6
    assert worker.worker.claims_rolled_back == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    rolled_back = [m for m in warnings if "its claim and decision were rolled back" in m]
    assert len(rolled_back) == 1, warnings
    assert rolled_back[0].endswith("commit refused by the test (SQLSTATE 40001)"), rolled_back
    assert not [m for m in warnings if "pipeline" in m or "connection" in m], warnings
    assert ran == [5]
