"""examples/entity: an account taking commands by signal across continue-as-new rotations,
queried on its current run, closed with a statement; and the example's own runner."""

from __future__ import annotations

import asyncio

import pytest

from examples import _runner
from examples.entity import AccountState, Command, account, app
from examples.entity.__main__ import WORKFLOW_ID, scenario
from harvest import App, Client, WorkflowHandle
from harvest.testing import WorkflowEnvironment


@pytest.fixture
def harvest_app() -> App:
    return app


def open_account(client: Client, first: Command, commands_per_run: int = 3) -> WorkflowHandle:
    return client.signal_with_start(
        account,
        AccountState("a-1", "ann"),
        commands_per_run,
        workflow_id=WORKFLOW_ID,
        signal="command",
        signal_payload=first,
    )


def send(client: Client, command: Command) -> None:
    client.get_handle(workflow=account, workflow_id=WORKFLOW_ID).signal("command", command)


def test_commands_survive_rotations_and_queries_reach_the_current_run(harvest_env: WorkflowEnvironment):
    env = harvest_env
    env.mock_activity("post_to_ledger", lambda ctx, account_id, entry: f"posted {entry}")
    commands = [
        Command("deposit", 1_000, "d1"),
        Command("withdraw", 300, "w1"),
        Command("withdraw", 5_000, "too much"),  # refused
        Command("deposit", 0, "nothing"),  # refused
        Command("deposit", 200, "d2"),
        Command("freeze"),
        Command("withdraw", 100, "frozen"),  # refused
        Command("unfreeze"),
    ]
    first = open_account(env.client, commands[0])
    for command in commands[1:]:  # sent in a burst: most are buffered while the first ones run
        send(env.client, command)
    env.wait_until_idle()

    current = env.client.get_handle(workflow=account, workflow_id=WORKFLOW_ID)
    summary = current.query("summary")
    assert summary["commands_seen"] == len(commands)  # none lost across the rotations
    assert summary["runs"] == 3  # 8 commands, 3 a run: continued as new twice
    assert current.query("balance") == 900
    assert [r.split(":")[0] for r in summary["refused"]] == ["too much", "nothing", "frozen"]
    assert [c.args[1] for c in env.activity_calls("post_to_ledger")] == [
        "deposit 1000 (d1)",
        "withdraw 300 (w1)",
        "deposit 200 (d2)",
    ]
    assert first.describe()["status"] == "CONTINUED_AS_NEW"
    assert current.execution_id != first.execution_id

    send(env.client, Command("close"))
    final: AccountState = env.client.get_handle(workflow=account, workflow_id=WORKFLOW_ID).result(timeout=10)
    assert (final.balance_cents, final.commands_seen, final.runs) == (900, 9, 3)
    assert final.recent[-1] == "statement for ann (a-1): closed at 900 cents"


def test_the_runner_scenario(harvest_env: WorkflowEnvironment):
    """What ``python -m examples.entity`` runs, with the real activities."""

    async def run() -> AccountState:
        async with await harvest_env.async_client() as client:
            return await scenario(client)

    final = asyncio.run(run())
    assert (final.balance_cents, final.commands_seen, final.runs) == (5_500, 12, 3)
    assert len(final.refused) == 2


def test_the_runner_main_on_a_given_database(db: str, monkeypatch: pytest.MonkeyPatch):
    """``examples._runner.main``: the database from HARVEST_DATABASE_URL, a worker in the
    process (real time: the account has no timer), the scenario, the worker drained after."""
    monkeypatch.setenv("HARVEST_DATABASE_URL", db)
    assert _runner.main(app, scenario) == 0
    with Client(db) as client:
        final: AccountState = client.get_handle(workflow=account, workflow_id=WORKFLOW_ID).result(timeout=5)
    assert final.balance_cents == 5_500
