"""A worker's report whose connection failed is sent again until the database answers
(harvest/db/resend.py), with fake SQL APIs: what counts as a lost connection, a batch sent
again, a repeat of a send that had committed answered as done (RefusedOnResend), and the
database's own answers (refusals, deadlocks) never sent again."""

from __future__ import annotations

import asyncio
import logging

import psycopg
import psycopg_pool
import pytest

from harvest.core.errors import InvalidArgument, StaleTask, WorkflowNotRunning
from harvest.db import group_commit, resend
from harvest.db.resend import RefusedOnResend, connection_lost, resend_lost
from harvest.telemetry.metrics import Metrics
from harvest.worker.completions import CompletionBatcher, DecisionBatcher, Recorded


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pauses between sends (50 ms and up) are not what these tests are about."""
    monkeypatch.setattr(resend, "resend_pause", lambda sends: 0.0)
    monkeypatch.setattr(group_commit, "resend_pause", lambda sends: 0.0)


def _closed() -> psycopg.OperationalError:
    return psycopg.OperationalError("server closed the connection unexpectedly")


def _terminated() -> psycopg.OperationalError:
    return psycopg.errors.AdminShutdown("terminating connection due to administrator command")


@pytest.mark.parametrize(
    ("exc", "lost"),
    [
        (_closed(), True),
        (_terminated(), True),
        (psycopg.errors.CrashShutdown("crash"), True),
        (psycopg.errors.CannotConnectNow("the database system is starting up"), True),
        (psycopg.errors.ConnectionFailure("connection failure"), True),
        (psycopg_pool.PoolTimeout("couldn't get a connection after 30.00 sec"), True),
        (psycopg_pool.PoolClosed("the pool is closed"), False),  # the worker is stopping
        (psycopg.errors.DeadlockDetected("deadlock detected"), False),  # an answer: rolled back
        (psycopg.errors.QueryCanceled("canceling statement due to statement timeout"), False),
        (psycopg.errors.UniqueViolation("duplicate key"), False),
        (StaleTask("task 1 is not held"), False),
        (InvalidArgument("unknown command"), False),
        (ValueError("not a database error"), False),
    ],
)
def test_only_a_failed_connection_counts_as_lost(exc: BaseException, lost: bool) -> None:
    assert connection_lost(exc) is lost


class Database:
    """complete_activities / complete_workflow_tasks over tasks held at token 1. ``lose``
    answers: "before" fails the call before it runs, "after" commits it and loses the answer
    (what a connection that breaks between the commit and the reply does)."""

    def __init__(self, lose: list[str] | None = None, error: Exception | None = None):
        self.lose = list(lose or [])
        self.error = error
        self.done: set[int] = set()
        self.sends: list[list[int]] = []

    def _commit(self, items: list[tuple]) -> list[dict]:
        ids = [item[0] for item in items]
        self.sends.append(ids)
        if self.error is not None:
            raise self.error
        how = self.lose.pop(0) if self.lose else None
        if how == "before":
            raise _terminated()
        rows = []
        for task_id in ids:
            if task_id in self.done:
                rows.append({"task_id": task_id, "outcome": "stale", "message": f"task {task_id} is stale"})
            else:
                self.done.add(task_id)
                rows.append(
                    {
                        "task_id": task_id,
                        "outcome": "completed",
                        "message": None,
                        "handed": None,
                        "decided": None,
                        "last_event_id": 4,
                        "execution_status": "RUNNING",
                    }
                )
        if how == "after":
            raise _closed()
        return rows

    async def complete_activities(self, worker_id, items, **options):
        await asyncio.sleep(0)
        return self._commit(items)

    async def complete_workflow_tasks(self, worker_id, items, **options):
        await asyncio.sleep(0)
        return self._commit(items)


class FakeWorker:
    worker_id = "w"
    workflow_lease = 30.0
    history_event_hard_cap = 50_000
    history_byte_hard_cap = 1_000_000
    redis = None

    def __init__(self, sql: Database):
        self.sql = sql
        self.metrics = Metrics()

    def accepts_hand_off(self) -> bool:
        return True


def test_a_batch_whose_connection_failed_is_sent_again_until_it_commits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = Database(lose=["before", "before", "before"])

    async def main():
        batcher = CompletionBatcher(FakeWorker(db))
        return await asyncio.gather(*(batcher.complete(i, 1, i) for i in (1, 2, 3)))

    with caplog.at_level(logging.INFO, "harvest"):
        assert asyncio.run(main()) == [Recorded()] * 3
    assert db.sends == [[1, 2, 3]] * 4  # the whole batch again, not item by item
    assert db.done == {1, 2, 3}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1  # one warning per failure, saying what is sent again
    assert "a batch of 3 activity results" in warned[0] and "sending it again" in warned[0]


def test_a_repeat_of_a_batch_that_had_committed_is_answered_as_done_not_as_a_lost_lease() -> None:
    db = Database(lose=["after"])

    async def main():
        batcher = CompletionBatcher(FakeWorker(db))
        return await asyncio.gather(*(batcher.complete(i, 1, i) for i in (1, 2)), return_exceptions=True)

    one, two = asyncio.run(main())
    assert isinstance(one, RefusedOnResend) and isinstance(two, RefusedOnResend)
    assert isinstance(one, StaleTask)  # (a handler that knows only StaleTask still ends)
    assert db.sends == [[1, 2], [1, 2]] and db.done == {1, 2}


def test_a_decision_whose_connection_failed_is_sent_again() -> None:
    db = Database(lose=["before"])

    async def main():
        return await DecisionBatcher(FakeWorker(db)).complete(7, 1, 3, [], 0)

    assert asyncio.run(main())["outcome"] == "completed"
    assert db.sends == [[7], [7]]


@pytest.mark.parametrize(
    "error",
    [
        WorkflowNotRunning("the run is closed"),
        psycopg.errors.UniqueViolation("duplicate key"),
    ],
)
def test_the_databases_answer_is_not_sent_again(error: Exception) -> None:
    db = Database(error=error)

    async def main():
        await DecisionBatcher(FakeWorker(db)).complete(7, 1, 3, [], 0)

    with pytest.raises(type(error)):
        asyncio.run(main())
    assert db.sends == [[7]]


@pytest.mark.parametrize(
    "error",
    [psycopg.errors.DeadlockDetected("deadlock detected"), psycopg.errors.SerializationFailure("conflict")],
)
def test_a_lone_decision_rolled_back_by_a_conflict_is_sent_again_a_bounded_number_of_times(
    error: Exception,
) -> None:
    # The conflict rolled its transaction back (nothing was done): sent again, CONFLICT_SENDS in
    # all, then its caller hears of it.
    db = Database(error=error)

    async def main():
        await DecisionBatcher(FakeWorker(db)).complete(7, 1, 3, [], 0)

    with pytest.raises(type(error)):
        asyncio.run(main())
    assert db.sends == [[7]] * group_commit.CONFLICT_SENDS


def test_a_batch_whose_callers_have_all_gone_is_not_sent_again() -> None:
    class Down(Database):
        async def complete_activities(self, worker_id, items, **options):
            self.sends.append([item[0] for item in items])
            await asyncio.sleep(0)
            raise _closed()

    db = Down()

    async def main():
        batcher = CompletionBatcher(FakeWorker(db))
        waiting = asyncio.ensure_future(batcher.complete(1, 1, 1))
        while len(db.sends) < 3:  # the server is down: sent again and again
            await asyncio.sleep(0)
        waiting.cancel()  # the worker's stop at its grace cancels the handler
        while batcher._flushers:  # the flush ends: nothing is left to send
            await asyncio.sleep(0)
        return len(db.sends)

    sent = asyncio.run(main())
    assert len(db.sends) == sent >= 3


def test_a_single_report_is_sent_again_until_it_commits_and_its_stale_repeat_is_done() -> None:
    calls: list[str] = []

    def report(answers: list):
        async def call():
            calls.append("send")
            answer = answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer

        return call

    assert (
        asyncio.run(resend_lost(report([_terminated(), _closed(), "completed"]), "a failure")) == "completed"
    )
    assert len(calls) == 3
    with pytest.raises(RefusedOnResend):
        asyncio.run(resend_lost(report([_closed(), StaleTask("task 1 is not held")]), "a failure"))
    # A refusal at the first send is a lost lease, as before: a StaleTask, not a RefusedOnResend.
    with pytest.raises(StaleTask) as refused:
        asyncio.run(resend_lost(report([StaleTask("task 1 is not held")]), "a failure"))
    assert not isinstance(refused.value, RefusedOnResend)
    calls.clear()
    with pytest.raises(InvalidArgument):
        asyncio.run(resend_lost(report([InvalidArgument("bad")]), "a failure"))
    assert calls == ["send"]


def test_each_repeat_of_a_batch_is_counted_as_a_connection_retry() -> None:
    db = Database(lose=["before", "before"])
    worker = FakeWorker(db)

    async def main():
        return await CompletionBatcher(worker).complete(1, 1, 1)

    assert asyncio.run(main()) == Recorded()
    retried = worker.metrics.registry.get_sample_value(
        "harvest_db_transaction_retry_total", {"site": "activity_completion", "reason": "connection"}
    )
    assert retried == 2
