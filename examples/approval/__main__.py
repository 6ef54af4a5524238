"""``python -m examples.approval``: two requests on the embedded PostgreSQL. One is approved
by signal after a comment, a refused reassignment and a decision from the wrong person; the
other waits out its deadline, is escalated, and expires (deadlines of a second here, days in
production)."""

from __future__ import annotations

import datetime as dt
import sys

from examples._runner import main, say
from examples.approval.workflows import Decision, Outcome, Request, app, approval
from harvest import AsyncClient, StartOptions, UpdateRejected

SECOND = dt.timedelta(seconds=1)


async def scenario(client: AsyncClient, deadline: dt.timedelta = SECOND) -> list[Outcome]:
    """Run both requests; returns their outcomes."""
    laptop = Request(
        "REQ-1",
        requester="ann",
        approver="bob",
        manager="carol",
        description="a laptop",
        amount_cents=180_000,
    )
    handle = await client.start_workflow(
        approval, laptop, deadline * 60, deadline * 60, options=StartOptions(workflow_id="approval-REQ-1")
    )
    say(f"REQ-1 started: {handle.execution_id}")
    say(f"  comments: {await handle.update('comment', 'the old one no longer boots')}")
    try:
        await handle.update("reassign", "ann")
    except UpdateRejected as exc:
        say(f"  reassign to the requester refused: {exc}")
    await handle.signal("decision", Decision("mallory", approve=True))  # not the approver: ignored
    await handle.signal("decision", Decision("bob", approve=True, reason="within budget"))
    first: Outcome = await handle.result(timeout=60)
    say(f"  outcome: {first}")

    monitor = Request(
        "REQ-2",
        requester="ann",
        approver="bob",
        manager="carol",
        description="a monitor",
        amount_cents=30_000,
    )
    handle = await client.start_workflow(
        approval, monitor, deadline, deadline, options=StartOptions(workflow_id="approval-REQ-2")
    )
    say(f"REQ-2 started, nobody decides; deadline {deadline}, then escalation for {deadline}")
    second: Outcome = await handle.result(timeout=60)
    say(f"  outcome: {second}")
    return [first, second]


if __name__ == "__main__":
    sys.exit(main(app, scenario))
