"""harvest.db.group_commit: a caller cancelled while its item waits leaves its batch and the other
callers alone (the worker's result batch, with test_completion_batcher.py's fake SQL API)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import psycopg
from tests.unit.test_completion_batcher import FakeSql, FakeWorker

from harvest.core.errors import StaleTask
from harvest.db import group_commit
from harvest.db.group_commit import SPLIT_MIN, GroupCommit
from harvest.worker.completions import CompletionBatcher, Recorded


def _caller(answer: Awaitable[Any]) -> asyncio.Task[Any]:
    """A task that waits on one item's answer (``complete`` queues the item and returns its future)."""

    async def wait() -> Any:
        return await answer

    return asyncio.create_task(wait())


def test_a_cancelled_caller_leaves_its_batch_and_the_other_callers_alone():
    """A caller cancelled while its result waits (queued or in flight) gets CancelledError at
    once; its result still goes with its batch, and every other caller gets its answer,
    refused items too (the retry of a failed batch item by item as well)."""
    sql = FakeSql(stale={3}, fail_batches_over=3)

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql))
        in_flight = _caller(batcher.complete(1, 1, 1))
        await asyncio.sleep(0.001)  # its flush is in flight
        queued = [_caller(batcher.complete(i, 1, i)) for i in (2, 3, 4, 5)]
        await asyncio.sleep(0)
        in_flight.cancel()
        queued[2].cancel()  # task 4, queued behind the flush
        return await asyncio.gather(in_flight, *queued, return_exceptions=True)

    one, two, three, four, five = asyncio.run(main())
    assert isinstance(one, asyncio.CancelledError) and isinstance(four, asyncio.CancelledError)
    assert two == Recorded() and five == Recorded()
    assert isinstance(three, StaleTask)
    assert sql.batches == [[1], [2, 3, 4, 5], [2], [3], [4], [5]]  # both cancelled items still sent


class _ConcurrentSql(FakeSql):
    """complete_activities that notes how many calls are in flight at once."""

    def __init__(self):
        super().__init__()
        self.in_flight = 0
        self.most_in_flight = 0
        self.held: asyncio.Event | None = None  # when set by a test: calls wait for it

    async def complete_activities(self, *args, **kwargs):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.held is not None:
                await self.held.wait()
            return await super().complete_activities(*args, **kwargs)
        finally:
            self.in_flight -= 1


async def _until(done) -> None:
    """Let the loop run until ``done()`` (no wall-clock wait: a loaded machine only slows it)."""
    for _ in range(10_000):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("the batcher never reached the state the test waits for")


def test_what_waits_behind_a_flush_goes_beside_it_and_no_more_than_two_at_once():
    """A result that arrives while a batch commits goes at once in a second batch on another
    connection (with one flush in flight the server's other core sat idle while the slots
    waited, docs/performance.md); a third waits for one of them, and every item gets its answer."""
    sql = _ConcurrentSql()

    async def main():
        sql.held = asyncio.Event()  # the flushes stay in flight until the third batch waits
        batcher = CompletionBatcher(FakeWorker(sql))
        first = _caller(batcher.complete(1, 1, 1))
        await _until(lambda: sql.in_flight == 1)  # its flush is in flight
        second = _caller(batcher.complete(2, 1, 2))
        await _until(lambda: sql.in_flight == 2)  # its flush is in flight beside the first
        third = [_caller(batcher.complete(i, 1, i)) for i in (3, 4)]
        for _ in range(20):  # (a third flush would have started by now)
            await asyncio.sleep(0)
        assert sql.in_flight == 2
        sql.held.set()
        return await asyncio.gather(first, second, *third)

    answers = asyncio.run(main())
    assert answers == [Recorded()] * 4
    assert sql.batches == [[1], [2], [3, 4]]
    assert sql.most_in_flight == 2


def test_a_flush_that_finds_many_waiting_takes_half_and_the_rest_goes_beside_it():
    sql = _ConcurrentSql()

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql))
        # One burst (the handlers a batch's answer woke): both halves commit at once.
        await asyncio.gather(*(batcher.complete(i, 1, i) for i in range(1, 2 * SPLIT_MIN + 2)))
        return batcher

    batcher = asyncio.run(main())
    half = SPLIT_MIN + 1
    assert sql.batches == [list(range(1, half + 1)), list(range(half + 1, 2 * SPLIT_MIN + 2))]
    assert sql.most_in_flight == 2
    assert (batcher.batches, batcher.items) == (2, 2 * SPLIT_MIN + 1)


def test_a_small_burst_stays_one_batch_and_items_after_any_interleaving_are_all_answered():
    """Fewer than 2 * SPLIT_MIN waiting go in one batch (a split would only add a commit); waves
    of items landing while flushes start and end (a flusher that finds nothing left) all get
    their answer, with never more than two flushes in flight."""
    sql = _ConcurrentSql()

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql))
        burst = await asyncio.gather(*(batcher.complete(i, 1, i) for i in range(1, 2 * SPLIT_MIN)))
        waves = []
        for wave in range(20):
            ids = [1000 + wave * 10 + i for i in range(wave % 4)]
            waves += [_caller(batcher.complete(task_id, 1, 0)) for task_id in ids]
            await asyncio.sleep(0.003 * (wave % 3))
        return burst, await asyncio.gather(*waves)

    burst, waves = asyncio.run(main())
    assert sql.batches[0] == list(range(1, 2 * SPLIT_MIN))
    assert burst == [Recorded()] * (2 * SPLIT_MIN - 1)
    assert waves == [Recorded()] * len(waves)
    assert sum(len(batch) for batch in sql.batches) == 2 * SPLIT_MIN - 1 + len(waves)
    assert sql.most_in_flight == 2


class _Conflicted(GroupCommit):
    """Answers each item's name; the first send of "a" is rolled back by a deadlock."""

    resends_conflicts = True

    def __init__(self):
        super().__init__()
        self.sends: list[list[str]] = []

    async def _send(self, items):
        self.sends.append([item[0] for item in items])
        await asyncio.sleep(0)
        if self.sends == [["a"]]:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        return [{"name": item[0]} for item in items]

    def _settle(self, batch, rows, resent=False):
        for item, row in zip(batch, rows, strict=True):
            if not item[-1].done():
                item[-1].set_result(row["name"])


def test_a_lone_conflicts_pause_does_not_hold_the_items_queued_behind_it(monkeypatch):
    """A lone item rolled back by a conflict waited out its jittered pause (10-50 ms, up to
    three times) inside the flush, so every item queued meanwhile waited behind it (one flush
    at a time). The pause now holds only that item: it is sent again, alone and counted, by the
    next flush once its pause ends, and what was queued goes at once."""
    monkeypatch.setattr(group_commit.random, "uniform", lambda low, high: high)  # 50 ms
    batcher = _Conflicted()
    answered: list[str] = []

    async def main():
        first = _caller(batcher._submit("a"))
        while batcher.sends != [["a"]]:  # its flush is in flight (then rolled back)
            await asyncio.sleep(0)
        second = _caller(batcher._submit("b"))
        for done in asyncio.as_completed([first, second]):
            answered.append(await done)

    asyncio.run(main())
    assert batcher.sends == [["a"], ["b"], ["a"]]
    assert answered == ["b", "a"]


def test_a_conflicted_item_whose_caller_goes_during_its_pause_is_not_sent_again(monkeypatch):
    """The pause now outlives the flush: a caller cancelled during it (a worker's stop) leaves
    nothing to send, and the flush started for it ends."""
    monkeypatch.setattr(group_commit.random, "uniform", lambda low, high: low)  # 10 ms
    batcher = _Conflicted()

    async def main():
        first = _caller(batcher._submit("a"))
        while batcher.sends != [["a"]]:
            await asyncio.sleep(0)
        first.cancel()
        await asyncio.sleep(0.03)  # past the pause
        while batcher._flushers:
            await asyncio.sleep(0)
        return first

    first = asyncio.run(main())
    assert first.cancelled() and batcher.sends == [["a"]]
