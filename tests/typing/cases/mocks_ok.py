"""Must type-check under pyright's strict mode too (a user's strict project): the test kit's
activity mocks as docs/testing.md "Activity mocks" shows them."""

# pyright: strict

from __future__ import annotations

from typing import Any, assert_type

import harvest
from harvest import ActivityContext
from harvest.testing import ActivityCall, WorkflowEnvironment


@harvest.activity
async def charge(ctx: ActivityContext, order_id: str, amount: int) -> dict[str, int]:
    return {"charged": amount}


@harvest.activity
def reserve(ctx: ActivityContext, sku: str, count: int = 1) -> list[int]:
    return [count]


@harvest.activity(local=True)
def stamp(ctx: Any) -> float:
    return 1.0


class Rates:
    @harvest.activity
    def convert(self, ctx: ActivityContext, amount: float) -> float:
        return amount


async def charge_mock(ctx: ActivityContext, order_id: str, amount: int) -> dict[str, int]:
    return {"mocked": amount}


def refund_mock(ctx: ActivityContext, charge_id: str) -> bool:
    return bool(charge_id)


def mocks(env: WorkflowEnvironment) -> None:
    # By function: the lambda's parameters are typed from the activity's (ctx first).
    env.mock_activity(charge, lambda ctx, order_id, amount: {"charged": amount})
    env.mock_activity(charge, lambda ctx, order, total: {order: total})  # positional: any names
    env.mock_activity(reserve, lambda ctx, sku, count: [count] * len(sku))
    env.mock_activity(charge, charge_mock)  # a def or an async def, either way round
    env.mock_activity(reserve, lambda ctx, sku, count: [ctx.attempt(), count])  # ctx: ActivityContext
    env.mock_activity(stamp, lambda ctx: 2.0)
    env.mock_activity(Rates().convert, lambda ctx, amount: amount * 2)
    # By name: fn is not checked; under strict, a def with annotated parameters.
    env.mock_activity("payments.refund", refund_mock)
    assert_type(env.activity_calls(charge), list[ActivityCall])
