"""An approval workflow: someone asks, an approver decides, and nobody waits forever.

- The decision arrives as the signal ``decision`` (fire and forget: an e-mail link, a chat
  button). Only the current approver's decision counts; others are recorded and ignored.
- ``status`` (a query) answers where the request stands, at any time, without touching it.
- ``reassign`` and ``comment`` (updates) change the request and answer the caller; the
  validator refuses a reassignment to the requester before anything is recorded.
- A deadline timer races the decision. When it passes, the request is escalated to the
  manager (an activity sends the notice) with a second deadline; when that passes too, the
  request expires.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from harvest import ActivityContext, App, RetryPolicy, SignalTimeout, WorkflowContext, activity, query, update
from harvest import workflow as workflow_


@dataclass
class Request:
    request_id: str
    requester: str
    approver: str
    manager: str
    description: str
    amount_cents: int


@dataclass
class Decision:
    approver: str
    approve: bool
    reason: str = ""


@dataclass
class Outcome:
    request_id: str
    status: str  # approved | rejected | expired
    decided_by: str | None
    escalated: bool
    comments: list[str] = field(default_factory=list)


# -- activities: the side effects (here they only say what they would do) ------------------


@activity(start_to_close="30s", retry=RetryPolicy.exponential(max_attempts=5, initial="1s"))
def notify(ctx: ActivityContext, to: str, message: str) -> str:
    """Tell someone something (a real app sends an e-mail or a chat message here)."""
    ctx.logger.info("to %s: %s", to, message)
    return f"{to}: {message}"


# -- the workflow ---------------------------------------------------------------------------


@workflow_
async def approval(
    ctx: WorkflowContext,
    request: Request,
    deadline: dt.timedelta = dt.timedelta(days=2),
    escalation_deadline: dt.timedelta = dt.timedelta(days=1),
) -> Outcome:
    """Wait for the approver's decision until ``deadline``, then escalate to the manager until
    ``escalation_deadline``, then expire."""
    state = ctx.state
    state.update(
        request=request,
        approver=request.approver,
        status="pending",
        escalated=False,
        comments=[],
        ignored=[],
    )
    await ctx.execute_activity(
        notify, request.approver, f"please approve {request.request_id}: {request.description}"
    )
    decision = await _decision_before(ctx, deadline)
    if decision is None:
        state.update(escalated=True, approver=request.manager, status="escalated")
        await ctx.execute_activity(
            notify,
            request.manager,
            f"{request.request_id} waited {deadline} for {request.approver}: please decide",
        )
        decision = await _decision_before(ctx, escalation_deadline)
    if decision is None:
        state["status"] = "expired"
        outcome = Outcome(request.request_id, "expired", None, state["escalated"], state["comments"])
    else:
        state["status"] = "approved" if decision.approve else "rejected"
        outcome = Outcome(
            request.request_id, state["status"], decision.approver, state["escalated"], state["comments"]
        )
    await ctx.execute_activity(notify, request.requester, f"{request.request_id} is {outcome.status}")
    await ctx.drain_admitted_updates()  # an update accepted just before the end still answers
    return outcome


async def _decision_before(ctx: WorkflowContext, duration: dt.timedelta) -> Decision | None:
    """The current approver's decision, or None once ``duration`` has passed. A decision
    from anyone else is kept in ``ignored`` and the wait goes on for what is left of it."""
    until = ctx.now() + duration
    ctx.state["deadline"] = until.isoformat()
    while True:
        left = (until - ctx.now()).total_seconds()
        if left <= 0:
            return None
        try:
            decision: Decision = await ctx.wait_for_signal("decision", timeout=left, type_hint=Decision)
        except SignalTimeout:
            return None
        if decision.approver == ctx.state["approver"]:
            return decision
        ctx.state["ignored"].append(decision.approver)


# -- queries and updates ----------------------------------------------------------------------


@query(workflow=approval)
def status(ctx: WorkflowContext) -> dict[str, Any]:
    """Where the request stands: status, approver, deadline, escalation, comments."""
    state = ctx.state
    return {
        "status": state["status"],
        "approver": state["approver"],
        "deadline": state.get("deadline"),
        "escalated": state["escalated"],
        "comments": list(state["comments"]),
        "ignored_decisions_from": list(state["ignored"]),
    }


def _check_reassign(ctx: WorkflowContext, approver: str) -> None:
    if ctx.state["status"] not in ("pending", "escalated"):
        raise ValueError(f"the request is {ctx.state['status']}: nothing to reassign")
    if approver == ctx.state["request"].requester:
        raise ValueError("the requester cannot approve their own request")


@update(workflow=approval, validator=_check_reassign)
async def reassign(ctx: WorkflowContext, approver: str) -> str:
    """Hand the decision to someone else (who is told so); answers the new approver."""
    ctx.state["approver"] = approver
    request: Request = ctx.state["request"]
    await ctx.execute_activity(
        notify, approver, f"please approve {request.request_id}: {request.description}"
    )
    return approver


@update(workflow=approval)
def comment(ctx: WorkflowContext, text: str) -> int:
    """Add a comment to the request; answers how many it has."""
    ctx.state["comments"].append(text)
    return len(ctx.state["comments"])


app = App(workflows=[approval], activities=[notify], queries=[status], updates=[reassign, comment])
