"""harvest.db.group_commit: a caller cancelled while its item waits leaves its batch and the other
callers alone (the worker's result batch, with test_completion_batcher.py's fake SQL API)."""

from __future__ import annotations

import asyncio

from tests.unit.test_completion_batcher import FakeSql, FakeWorker

from harvest.core.errors import StaleTask
from harvest.worker.completions import CompletionBatcher, Recorded


def test_a_cancelled_caller_leaves_its_batch_and_the_other_callers_alone():
    """A caller cancelled while its result waits (queued or in flight) gets CancelledError at
    once; its result still goes with its batch, and every other caller gets its answer,
    refused items too (the retry of a failed batch item by item as well)."""
    sql = FakeSql(stale={3}, fail_batches_over=3)

    async def main():
        batcher = CompletionBatcher(FakeWorker(sql))
        in_flight = asyncio.create_task(batcher.complete(1, 1, 1))
        await asyncio.sleep(0.001)  # its flush is in flight
        queued = [asyncio.create_task(batcher.complete(i, 1, i)) for i in (2, 3, 4, 5)]
        await asyncio.sleep(0)
        in_flight.cancel()
        queued[2].cancel()  # task 4, queued behind the flush
        return await asyncio.gather(in_flight, *queued, return_exceptions=True)

    one, two, three, four, five = asyncio.run(main())
    assert isinstance(one, asyncio.CancelledError) and isinstance(four, asyncio.CancelledError)
    assert two == Recorded() and five == Recorded()
    assert isinstance(three, StaleTask)
    assert sql.batches == [[1], [2, 3, 4, 5], [2], [3], [4], [5]]  # both cancelled items still sent
