"""``python -m examples.entity``: an account opened by its first command, a dozen commands
(one refused), three rotations by continue-as-new, queries on the current run, then close."""

from __future__ import annotations

import sys
from typing import Any

from examples._runner import main, query_until, say
from examples.entity.workflows import AccountState, Command, account, app
from harvest import AsyncClient

ACCOUNT_ID = "acct-42"
WORKFLOW_ID = f"account-{ACCOUNT_ID}"


async def open_account(client: AsyncClient, first: Command, commands_per_run: int) -> None:
    """Send the account its first command, starting its run in the same transaction (a retried
    call, or a run that is already there, just gets the signal)."""
    await client.signal_with_start(
        account,
        AccountState(ACCOUNT_ID, owner="ann"),
        commands_per_run,
        workflow_id=WORKFLOW_ID,
        signal="command",
        signal_payload=first,
    )


async def send(client: AsyncClient, command: Command) -> None:
    """Send a command to the account's current run (a handle by workflow_id finds it; a signal
    to a run that has just continued as new follows it to its successor)."""
    await client.get_handle(workflow=account, workflow_id=WORKFLOW_ID).signal("command", command)


async def scenario(client: AsyncClient, commands_per_run: int = 4) -> AccountState:
    commands = [Command("deposit", 10_000, "salary")]
    commands += [Command("withdraw", 1_500, f"groceries {week}") for week in range(1, 5)]
    commands += [
        Command("withdraw", 50_000, "a car"),  # refused: insufficient funds
        Command("freeze"),
        Command("deposit", 100, "refund"),  # refused: frozen
        Command("unfreeze"),
        Command("deposit", 2_500, "refund"),
        Command("withdraw", 1_000, "books"),
    ]
    await open_account(client, commands[0], commands_per_run)
    for command in commands[1:]:
        await send(client, command)
    summary: dict[str, Any] = await query_until(
        client, account, WORKFLOW_ID, "summary", lambda answer: answer["commands_seen"] >= len(commands)
    )
    say(f"after {len(commands)} commands, run {summary['runs']}: balance {summary['balance_cents']} cents")
    say(f"  recent: {summary['recent'][-3:]}")
    say(f"  refused: {summary['refused']}")
    await send(client, Command("close"))
    final: AccountState = await client.get_handle(workflow=account, workflow_id=WORKFLOW_ID).result(
        timeout=60
    )
    say(f"closed after {final.commands_seen} commands in {final.runs} runs: {final.recent[-1]}")
    return final


if __name__ == "__main__":
    sys.exit(main(app, scenario))
