"""The workflow task's lease keeper (harvest/worker/lease_keeper.py) against a fake SQL API."""

from __future__ import annotations

import asyncio

from harvest.worker.lease_keeper import LeaseKeeper


class FakeSql:
    def __init__(self, answers: list[bool]):
        self.answers = answers
        self.calls: list[tuple[int, int, float]] = []

    async def heartbeat_workflow_task(self, task_id: int, fencing_token: int, lease_secs: float) -> bool:
        self.calls.append((task_id, fencing_token, lease_secs))
        await asyncio.sleep(0)
        return self.answers.pop(0) if self.answers else True


async def _wait_for_calls(sql: FakeSql, n: int) -> None:
    async with asyncio.timeout(5):
        while len(sql.calls) < n:
            await asyncio.sleep(0.005)


def test_a_task_done_within_a_third_of_its_lease_makes_no_call() -> None:
    async def go() -> FakeSql:
        sql = FakeSql([])
        LeaseKeeper(sql, 7, 70, 0.3).stop()  # the task ended at once
        await asyncio.sleep(0.2)  # twice the timer's delay
        return sql

    assert asyncio.run(go()).calls == []


def test_a_long_task_is_extended_every_third_of_its_lease_until_it_stops() -> None:
    async def go() -> tuple[FakeSql, int]:
        sql = FakeSql([])
        keeper = LeaseKeeper(sql, 7, 70, 0.06)
        await _wait_for_calls(sql, 3)
        keeper.stop()
        seen = len(sql.calls)
        await asyncio.sleep(0.1)  # five of its periods: no call after stop
        return sql, seen

    sql, seen = asyncio.run(go())
    assert sql.calls[0] == (7, 70, 0.06) and len(sql.calls) == seen


def test_a_lost_lease_ends_the_extensions() -> None:
    async def go() -> FakeSql:
        sql = FakeSql([True, False])
        keeper = LeaseKeeper(sql, 7, 70, 0.03)
        await _wait_for_calls(sql, 2)
        await asyncio.sleep(0.1)  # ten periods: the loop returned after the refusal
        keeper.stop()
        return sql

    assert len(asyncio.run(go()).calls) == 2
