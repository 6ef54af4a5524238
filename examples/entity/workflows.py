"""A bank account as a long-running entity workflow.

One run per account (``workflow_id = "account-<id>"``) holds the account's state in memory
and changes it only through commands, which arrive as the signal ``command``: deposit,
withdraw, freeze, unfreeze, close. Signals are buffered and read one at a time in the order
the database accepted them, so commands never race each other and none is lost, even while
no worker runs.

Its history grows with every command. After ``commands_per_run`` commands (or earlier, when
the worker says the history is long: ``ctx.should_continue_as_new()``) the run continues as
new, carrying only the state; commands that arrived meanwhile are handed to the next run.
Queries (``balance``, ``summary``) read the state of the current run; reach it by the
account's ``workflow_id``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harvest import ActivityContext, App, WorkflowContext, activity, query, workflow

# Transactions kept in the state (and so carried across a rotation); older ones are in the
# ledger the activity writes to.
RECENT = 10


@dataclass
class Command:
    op: str  # deposit | withdraw | freeze | unfreeze | close
    amount_cents: int = 0
    reference: str = ""


@dataclass
class AccountState:
    account_id: str
    owner: str
    balance_cents: int = 0
    frozen: bool = False
    commands_seen: int = 0
    runs: int = 1
    recent: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


@activity(start_to_close="30s")
def post_to_ledger(ctx: ActivityContext, account_id: str, entry: str) -> str:
    """Record a transaction in the system of record (a real app writes to its ledger table,
    keyed by ``ctx.idempotency_key()`` so a retry never posts twice)."""
    ctx.logger.info("ledger %s: %s", account_id, entry)
    return f"{ctx.idempotency_key()}"


@activity(start_to_close="30s")
def send_statement(ctx: ActivityContext, account_id: str, owner: str, balance_cents: int) -> str:
    """Send the closing statement."""
    return f"statement for {owner} ({account_id}): closed at {balance_cents} cents"


@workflow
async def account(ctx: WorkflowContext, state: AccountState, commands_per_run: int = 1000) -> AccountState:
    """Run the account until a ``close`` command; continue as new every ``commands_per_run``
    commands, carrying ``state``."""
    ctx.state["account"] = state
    handled = 0
    while True:
        command: Command = await ctx.wait_for_signal("command", type_hint=Command)
        state.commands_seen += 1
        handled += 1
        refusal = _refusal(state, command)
        if refusal is not None:
            state.refused = [*state.refused[-(RECENT - 1) :], f"{command.reference or command.op}: {refusal}"]
        elif command.op == "close":
            statement = await ctx.execute_activity(
                send_statement, state.account_id, state.owner, state.balance_cents
            )
            state.recent = [*state.recent[-(RECENT - 1) :], statement]
            return state
        elif command.op in ("freeze", "unfreeze"):
            state.frozen = command.op == "freeze"
        else:
            sign = 1 if command.op == "deposit" else -1
            state.balance_cents += sign * command.amount_cents
            entry = f"{command.op} {command.amount_cents} ({command.reference or 'no reference'})"
            await ctx.execute_activity(post_to_ledger, state.account_id, entry)
            state.recent = [*state.recent[-(RECENT - 1) :], entry]
        if handled >= commands_per_run or ctx.should_continue_as_new():
            state.runs += 1
            ctx.continue_as_new(state, commands_per_run)


def _refusal(state: AccountState, command: Command) -> str | None:
    """Why ``command`` cannot be applied to ``state``, or None."""
    if command.op not in ("deposit", "withdraw", "freeze", "unfreeze", "close"):
        return f"unknown command {command.op!r}"
    if command.op in ("deposit", "withdraw") and command.amount_cents <= 0:
        return "the amount must be positive"
    if state.frozen and command.op in ("deposit", "withdraw", "close"):
        return "the account is frozen"
    if command.op == "withdraw" and command.amount_cents > state.balance_cents:
        return f"insufficient funds: balance {state.balance_cents}, asked {command.amount_cents}"
    return None


@query(workflow=account)
def balance(ctx: WorkflowContext) -> int:
    """The balance in cents."""
    state: AccountState = ctx.state["account"]
    return state.balance_cents


@query(workflow=account)
def summary(ctx: WorkflowContext) -> dict[str, Any]:
    """The account's whole state: balance, frozen, commands seen, runs, recent and refused."""
    state: AccountState = ctx.state["account"]
    return {
        "account_id": state.account_id,
        "owner": state.owner,
        "balance_cents": state.balance_cents,
        "frozen": state.frozen,
        "commands_seen": state.commands_seen,
        "runs": state.runs,
        "recent": list(state.recent),
        "refused": list(state.refused),
    }


app = App(workflows=[account], activities=[post_to_ledger, send_statement], queries=[balance, summary])
