"""Must NOT type-check, as marked (tests/typing/check_types.py), under pyright's strict mode:
the test kit's activity mocks. ``mypy=none`` marks a line only pyright's strict mode refuses."""

# pyright: strict

from __future__ import annotations

import harvest
from harvest import ActivityContext
from harvest.testing import WorkflowEnvironment


@harvest.activity
async def charge(ctx: ActivityContext, order_id: str, amount: int) -> dict[str, int]:
    return {"charged": amount}


def mocks(env: WorkflowEnvironment) -> None:
    mock = env.mock_activity
    mock(charge, lambda ctx, order_id: {})  # expect-error: mypy=arg-type pyright=reportCallIssue
    mock(charge, lambda ctx, a, b, c: {})  # expect-error: mypy=arg-type pyright=reportCallIssue
    # The lambda's parameters are typed (str, int), so its body is checked too.
    mock(charge, lambda ctx, oid, n: oid + n)  # expect-error: mypy=operator pyright=reportOperatorIssue
    # By name, a lambda's parameters have no type a checker can know: strict refuses them.
    mock("charge", lambda ctx, oid, n: n)  # expect-error: mypy=none pyright=reportUnknownLambdaType
