"""A rolling deploy: old workers (an App without the new workflow or activity) and new ones poll
the same queue for minutes. What only the new workers have must end up on them: a query, an
update's validation, an activity, not a NotFound or a dead letter from an old worker that won
the claim; and when no live worker has it, a clear error naming it (docs/operations.md,
"Rolling deploys")."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from outage_helpers import wait_until

from harvest import (
    App,
    Client,
    QueryFailed,
    RetryPolicy,
    Schedule,
    UpdateFailed,
    UpdateRejected,
    WorkflowSchedule,
    activity,
    query,
    update,
    workflow,
)
from harvest.worker import workflows as worker_workflows


@workflow
async def legacy(ctx) -> str:
    return "old"


@activity(retry=RetryPolicy.exponential(max_attempts=1, initial="0.2s"))
async def fresh_step(ctx, n: int) -> dict:
    return {"n": n + 1, "attempt": ctx.attempt()}


@workflow(name="fresh")
async def fresh(ctx) -> Any:
    await ctx.wait_for_signal("go")
    return await ctx.execute_activity("fresh_step", 41)


@query(workflow="fresh")
def count(ctx) -> int:
    return ctx.state.get("count", 0)


def positive(ctx, by: int) -> None:
    if by <= 0:
        raise ValueError("by must be positive")


@update(workflow="fresh", validator=positive)
def bump(ctx, by: int) -> int:
    ctx.state["count"] = ctx.state.get("count", 0) + by
    return ctx.state.get("count", 0)


@query(workflow="fresh")
def doubled(ctx) -> int:  # a query the new deploy adds to a workflow the middle one has
    return 2 * ctx.state.get("count", 0)


OLD = App(workflows=[legacy])
NEW = App(workflows=[legacy, fresh], activities=[fresh_step], queries=[count, doubled], updates=[bump])
MIDDLE = App(workflows=[legacy, fresh], queries=[count], updates=[bump])  # the workflow, not the activity


def register_live(db: str, worker_id: str) -> None:
    """A worker of the new deploy that is live on the queue but has not claimed yet."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.register_worker(%s, ARRAY['default'], 'host', 1, 3600)", (worker_id,))


def registered(db: str, worker_id: str) -> bool:
    with psycopg.connect(db, autocommit=True) as conn:
        found = conn.execute(
            "SELECT 1 FROM harvest.workers WHERE id = %s AND status = 'active'", (worker_id,)
        )
        return found.fetchone() is not None


def request_unknown_to(db: str) -> list[Any]:
    with psycopg.connect(db, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT unknown_to FROM harvest.query_requests ORDER BY id")]


def decided(db: str, execution_id: str) -> bool:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT NOT EXISTS (SELECT 1 FROM harvest.tasks WHERE execution_id = %s AND kind = 'workflow')",
            (execution_id,),
        ).fetchone()[0]


class Call:
    """A blocking client call in a thread: its result or its exception."""

    def __init__(self, fn: Callable[[], Any]):
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:
            self.error = exc

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def get(self) -> Any:
        self._thread.join(60)
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def fresh_run(db: str, start_worker, client: Client, monkeypatch):
    """A run of `fresh` waiting for its signal, its first task done by a new worker that then
    stopped; the old worker polls the queue, alone."""
    monkeypatch.setattr(worker_workflows, "WORKFLOW_TASK_RETRY_SECS", 0.01)
    first = start_worker(NEW, worker_id="new-1", poll_interval=0.05)
    handle = client.start_workflow("fresh", workflow_id="fresh-1")
    wait_until(lambda: decided(db, handle.execution_id), "the first workflow task")
    first.stop()
    old = start_worker(OLD, worker_id="old-1", poll_interval=0.05)
    return handle, old


def test_a_query_an_old_worker_claims_is_answered_by_a_new_one(db: str, start_worker, fresh_run) -> None:
    handle, _old = fresh_run
    register_live(db, "new-2")
    asked = Call(lambda: handle.query("count", timeout=30))
    # The old worker claims it and hands it back (before: answered at once, QueryFailed NotFound).
    wait_until(lambda: asked.done or request_unknown_to(db) == [["old-1"]], "the old worker to decline")
    assert not asked.done, asked.error
    start_worker(NEW, worker_id="new-2", poll_interval=0.05)
    assert asked.get() == 0


def test_an_update_an_old_worker_claims_is_validated_by_a_new_one(db: str, start_worker, fresh_run) -> None:
    handle, _old = fresh_run
    register_live(db, "new-2")
    asked = Call(lambda: handle.update("bump", 5, timeout=30))
    wait_until(lambda: asked.done or request_unknown_to(db) == [["old-1"]], "the old worker to decline")
    assert not asked.done, asked.error
    start_worker(NEW, worker_id="new-2", poll_interval=0.05)
    assert asked.get() == 5
    with pytest.raises(UpdateRejected) as rejected:  # the new worker's validator, not the old one's NotFound
        handle.update("bump", 0, timeout=30)
    assert rejected.value.error_type == "ValueError"
    assert handle.query("count") == 5


def test_a_query_a_worker_without_its_handler_claims_is_answered_by_one_with_it(
    db: str, start_worker, fresh_run
) -> None:
    handle, _old = fresh_run
    start_worker(MIDDLE, worker_id="mid-1", poll_interval=0.05)
    register_live(db, "new-2")
    asked = Call(lambda: handle.query("doubled", timeout=30))
    # Both the old worker (no workflow) and the middle one (the workflow, not the query) hand it
    # back (before: the middle one answered UnknownQuery whenever it won the claim).
    wait_until(
        lambda: asked.done or [sorted(u) for u in request_unknown_to(db)] == [["mid-1", "old-1"]],
        "both workers to decline",
    )
    assert not asked.done, asked.error
    start_worker(NEW, worker_id="new-2", poll_interval=0.05)
    assert asked.get() == 0


def test_with_no_live_worker_that_has_the_handler_the_caller_gets_its_error(
    db: str, start_worker, fresh_run
) -> None:
    handle, _old = fresh_run
    start_worker(MIDDLE, worker_id="mid-1", poll_interval=0.05)
    # start_worker returns once the worker's loop runs, not once it registered: a query the old
    # worker declined before then met no other live worker and was answered UnknownWorkflow
    # (seen once under a loaded CI), which is right for that moment, not what this test asks.
    wait_until(lambda: registered(db, "mid-1"), "the middle worker's registration")
    with pytest.raises(QueryFailed) as failed:
        handle.query("doubled", timeout=30)
    assert failed.value.error_type == "UnknownQuery"
    assert "doubled" in str(failed.value) and "count" in str(failed.value)  # the known ones


def test_with_no_live_worker_that_has_the_workflow_the_caller_is_told_so(fresh_run) -> None:
    handle, _old = fresh_run
    for ask, error in (
        (lambda: handle.query("count", timeout=30), QueryFailed),
        (lambda: handle.update("bump", 1, timeout=30), UpdateRejected),
    ):
        with pytest.raises(error) as failed:  # (not QueryTimeout: answered, not left to time out)
            ask()
        assert failed.value.error_type == "UnknownWorkflow"
        message = str(failed.value)
        assert "'fresh'" in message, message
        assert "no live worker polling task queue 'default' registers" in message, message
        assert failed.value.details["unknown_to"] == ["old-1"]


def dead_letters(db: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM harvest.dead_letters").fetchone()[0]


def activity_task(db: str) -> tuple[Any, ...] | None:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT status, attempt, last_failure -> 'details' -> 'unknown_to' FROM harvest.tasks "
            "WHERE kind = 'activity'"
        ).fetchone()


def test_an_activity_an_old_worker_lacks_waits_for_a_new_one(db: str, start_worker, fresh_run) -> None:
    handle, _old = fresh_run
    register_live(db, "new-2")
    # The signal's workflow task: the old worker fails it (UnknownWorkflow), the run waits for
    # new-2 (live, untried). A worker with the workflow but not the activity decides it, and stops.
    decider = start_worker(MIDDLE, worker_id="mid-1", poll_interval=0.05)
    handle.signal("go", None)
    wait_until(lambda: activity_task(db) is not None, "the activity to be scheduled")
    decider.stop()
    # Only the old worker claims now: ActivityNotRegistered. Before: its one attempt was spent
    # and the activity dead-lettered while new-2 was live on the queue.
    state = wait_until(
        lambda: dead_letters(db) or ((t := activity_task(db)) is not None and "old-1" in (t[2] or []) and t),
        "the old worker to fail the activity",
    )
    assert dead_letters(db) == 0
    assert state[1] == 0, state  # not an attempt: none spent
    start_worker(NEW, worker_id="new-2", poll_interval=0.05)
    assert handle.result(timeout=30) == {"n": 42, "attempt": 1}


@workflow(name="fresh_child")
async def fresh_child(ctx, n: int) -> int:
    return n + 1


@workflow(name="fresh_parent")
async def fresh_parent(ctx) -> int:
    return await ctx.execute_child_workflow("fresh_child", 1)


def test_a_child_and_a_scheduled_run_of_a_new_workflow_end_on_a_new_worker(
    db: str, start_worker, client: Client, monkeypatch
) -> None:
    # The new deploy registered its names and is live, not claiming yet; the old worker claims
    # every task first (UnknownWorkflow): the parent, its child and a schedule's run wait for it.
    monkeypatch.setattr(worker_workflows, "WORKFLOW_TASK_RETRY_SECS", 0.01)
    newest = App(workflows=[legacy, fresh_parent, fresh_child])
    start_worker(newest, worker_id="new-1", poll_interval=0.05).stop()
    start_worker(OLD, worker_id="old-1", poll_interval=0.05)
    register_live(db, "new-2")
    parent = client.start_workflow("fresh_parent", workflow_id="parent-1")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.create_schedule('fresh-hourly', 'fresh_child', p_cron => '0 * * * *', "
            "p_input => '[41]')"
        )
        conn.execute("SELECT harvest.trigger_schedule('fresh-hourly')")
        scheduled = wait_until(
            lambda: conn.execute(
                "SELECT id::text FROM harvest.executions WHERE workflow_name = 'fresh_child'"
            ).fetchone(),
            "the schedule's run",
        )[0]
    # Past the bound of 10 attempts: before the first rolling-deploy fix, both runs FAILED there.
    wait_until(lambda: past_the_bound(db) == 2, "the old worker to fail both runs' tasks 11 times")
    start_worker(newest, worker_id="new-2", poll_interval=0.05)
    assert parent.result(timeout=30) == 2
    assert client.get_handle(scheduled).result(timeout=30) == 42


def past_the_bound(db: str) -> int:
    """How many workflow tasks the old worker failed more than 10 times for want of their workflow."""
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM harvest.tasks WHERE kind = 'workflow' AND attempt > 10 "
            "AND last_failure -> 'details' -> 'unknown_to' ? 'old-1'"
        ).fetchone()[0]


@update(workflow="fresh")
def triple(ctx, n: int) -> int:  # an update only the newest deploy declares
    ctx.state["count"] = ctx.state.get("count", 0) + 3 * n
    return ctx.state["count"]


NEWEST = App(
    workflows=[legacy, fresh], activities=[fresh_step], queries=[count, doubled], updates=[bump, triple]
)


def accept_as(db: str, worker_id: str) -> None:
    """A worker of the newest deploy validates the pending update (its validator is not the point
    here: the workflow task that runs the handler is)."""
    with psycopg.connect(db, autocommit=True) as conn:

        def accepted() -> bool:
            for (request_id,) in conn.execute(
                "SELECT request_id FROM harvest.claim_query_requests(%s, ARRAY['default'], 1, 30)",
                (worker_id,),
            ).fetchall():
                return conn.execute(
                    "SELECT harvest.accept_update(%s, %s)", (request_id, worker_id)
                ).fetchone()[0]
            return False

        wait_until(accepted, "the update to be accepted")


def workflow_task(db: str) -> tuple[Any, ...] | None:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT last_failure ->> 'error_type', last_failure -> 'details' -> 'unknown_to' "
            "FROM harvest.tasks WHERE kind = 'workflow'"
        ).fetchone()


def history(db: str, execution_id: str) -> list[tuple[str, Any]]:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT event_type, event_data FROM harvest.events WHERE execution_id = %s "
            "AND event_type LIKE 'Update%%' ORDER BY event_id",
            (execution_id,),
        ).fetchall()


@pytest.fixture
def accepted_update(db: str, start_worker, client: Client, monkeypatch):
    """A run of `fresh` waiting for its signal, and an update `triple` the newest deploy accepted;
    the workflow task that runs its handler is pending, no worker polling yet."""
    monkeypatch.setattr(worker_workflows, "WORKFLOW_TASK_RETRY_SECS", 0.01)
    first = start_worker(NEWEST, worker_id="new-1", poll_interval=0.05)
    handle = client.start_workflow("fresh", workflow_id="fresh-1")
    wait_until(lambda: decided(db, handle.execution_id), "the first workflow task")
    first.stop()
    register_live(db, "new-2")
    asked = Call(lambda: handle.update("triple", 2, timeout=30))
    accept_as(db, "new-2")
    return handle, asked


def test_an_update_handler_a_worker_lacks_runs_on_a_worker_that_has_it(
    db: str, start_worker, accepted_update
) -> None:
    handle, asked = accepted_update
    # A worker of the middle deploy (the workflow and `bump`, not `triple`) claims the workflow
    # task and hands it back (before: it recorded UpdateCompleted UnknownUpdate, the caller got
    # UpdateFailed while new-2 was live on the queue).
    middle = start_worker(MIDDLE, worker_id="mid-1", poll_interval=0.05)
    wait_until(
        lambda: asked.done or workflow_task(db) == ("UnknownUpdate", ["mid-1"]),
        "the middle worker to hand it back",
    )
    assert not asked.done, asked.error
    assert history(db, handle.execution_id)[-1][0] == "UpdateAccepted"  # nothing recorded
    newer = start_worker(NEWEST, worker_id="new-2", poll_interval=0.05)
    assert asked.get() == 6
    events = history(db, handle.execution_id)
    assert [e[0] for e in events] == ["UpdateAccepted", "UpdateCompleted"]
    assert events[1][1]["failure"] is None and events[1][1]["result"] == 6, events
    handle.signal("go", None)
    assert handle.result(timeout=30) == {"n": 42, "attempt": 1}
    middle.stop()
    newer.stop()
    start_worker(NEWEST, worker_id="new-3", poll_interval=0.05)
    assert handle.query("count") == 6  # a replay on a cold cache reads the recorded update the same way


def test_with_no_live_worker_that_has_the_update_handler_it_fails_and_the_run_goes_on(
    db: str, start_worker, accepted_update
) -> None:
    handle, asked = accepted_update
    with psycopg.connect(db, autocommit=True) as conn:  # new-2 left the queue
        conn.execute("SELECT harvest.stop_worker('new-2')")
    middle = start_worker(MIDDLE, worker_id="mid-1", poll_interval=0.05)
    with pytest.raises(UpdateFailed) as failed:
        asked.get()
    assert failed.value.error_type == "UnknownUpdate"
    assert "triple" in str(failed.value)
    assert handle.describe()["status"] == "RUNNING"
    start_worker(NEWEST, worker_id="new-3", poll_interval=0.05)
    handle.signal("go", None)
    assert handle.result(timeout=30)["n"] == 42
    middle.stop()
    # new-3 replayed the run: it has `triple`, but the history says the update failed, so its
    # replay does not run the handler (before: it did, and went on from a state with the update).
    assert handle.query("count") == 0


def test_a_worker_without_an_update_handler_the_history_ran_does_not_replay_the_run(
    db: str, start_worker, accepted_update
) -> None:
    handle, asked = accepted_update
    newer = start_worker(NEWEST, worker_id="new-2", poll_interval=0.05)
    assert asked.get() == 6
    newer.stop()
    # Only the middle worker polls now, new-3 live: its replay lacks `triple`, whose recorded
    # UpdateCompleted it would match with its own UnknownUpdate (by seq and update id) and go
    # on from a state without the update. Before: the query answered 0, and the signal's
    # workflow task was decided on that state.
    start_worker(MIDDLE, worker_id="mid-1", poll_interval=0.05)
    register_live(db, "new-3")
    asked = Call(lambda: handle.query("count", timeout=30))
    wait_until(
        lambda: asked.done or request_unknown_to(db)[-1:] == [["mid-1"]], "the middle worker to decline"
    )
    assert not asked.done, asked.result
    handle.signal("go", None)
    wait_until(
        lambda: workflow_task(db) == ("UnknownUpdate", ["mid-1"]), "the middle worker to hand the task back"
    )
    start_worker(NEWEST, worker_id="new-3", poll_interval=0.05)
    assert asked.get() == 6
    assert handle.result(timeout=30)["n"] == 42


@workflow(name="report")
async def report(ctx, n: int) -> int:
    return n


def report_app(schedule: Schedule, n: int) -> App:
    return App(
        workflows=[report], schedules=[WorkflowSchedule("nightly", schedule, workflow=report, input=n)]
    )


def nightly(db: str) -> tuple[Any, ...]:
    with psycopg.connect(db, autocommit=True) as conn:
        got = conn.execute("SELECT harvest.get_schedule('nightly')").fetchone()[0]
    return got["cron"], got["interval_secs"], got["input"]


def test_an_old_worker_restarting_does_not_declare_its_schedule_over_the_new_one(
    db: str, start_worker, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = report_app(Schedule.cron("0 3 * * *"), 1), report_app(Schedule.every("1h"), 2)
    start_worker(old, worker_id="old-1").stop()
    assert nightly(db) == ("0 3 * * *", None, [1])
    start_worker(new, worker_id="new-1").stop()
    assert nightly(db) == (None, 3600, [2])
    # An old worker restarts mid-deploy. Before: its spec went back in (cron, input and all),
    # and the next new worker's boot put the new one back again.
    with caplog.at_level(logging.WARNING, logger="harvest.worker"):
        start_worker(old, worker_id="old-2").stop()
    assert nightly(db) == (None, 3600, [2])
    # The boot says so: a deploy that means to go back to a replaced spec must be told.
    warned = [r.getMessage() for r in caplog.records if "a later change replaced" in r.getMessage()]
    assert len(warned) == 1 and "'nightly'" in warned[0] and "every 3600s -> " in warned[0], warned
    assert "harvest schedule update nightly" in warned[0], warned
    with psycopg.connect(db, autocommit=True) as conn:
        kept = conn.execute(
            "SELECT details FROM harvest.audit_log WHERE operation = 'schedule.declare_superseded'"
        ).fetchall()
    assert len(kept) == 1 and kept[0][0]["spec"]["cron"] == "0 3 * * *", kept
    # A rollback is the operator's: an update puts the old spec back, and then the new
    # deploy's spec is the superseded one.
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute('SELECT harvest.update_schedule(\'nightly\', \'{"cron": "0 3 * * *", "input": [1]}\')')
    start_worker(new, worker_id="new-2").stop()
    assert nightly(db) == ("0 3 * * *", None, [1])
    start_worker(old, worker_id="old-3").stop()
    assert nightly(db) == ("0 3 * * *", None, [1])
