"""Duplicate starts: reuse_policy x conflict_policy, and concurrent starts converging."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from harvest import Client
from harvest.core.errors import InvalidArgument, WorkflowAlreadyExists


def finish(db: str, execution_id: str, status: str) -> None:
    """Close a run the way the engine does (used to set up a terminal prior)."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest._close_execution(%s, %s, NULL, NULL)", (execution_id, status))


def test_default_attaches_to_the_existing_run(client: Client) -> None:
    first = client.start_workflow("wf", 1, workflow_id="order-1")
    again = client.start_workflow("wf", 2, workflow_id="order-1")
    assert again.execution_id == first.execution_id
    assert first.started_fresh and not again.started_fresh


def test_reject_duplicate_carries_the_existing_run(client: Client) -> None:
    first = client.start_workflow("wf", workflow_id="order-2")
    with pytest.raises(WorkflowAlreadyExists) as info:
        client.start_workflow("wf", workflow_id="order-2", reuse_policy="reject_duplicate")
    assert info.value.existing_execution_id == first.execution_id
    assert info.value.existing_status == "RUNNING"
    assert info.value.existing_state == "RUNNING", "the old name stays readable"


@pytest.mark.parametrize(
    ("prior_status", "policy", "fresh"),
    [
        ("FAILED", "allow_duplicate_failed_only", True),
        ("CANCELLED", "allow_duplicate_failed_only", True),
        ("COMPLETED", "allow_duplicate_failed_only", False),
        ("COMPLETED", "allow_duplicate", False),
        ("COMPLETED", "terminate_if_running", True),
    ],
)
def test_terminal_prior(db: str, client: Client, prior_status: str, policy: str, fresh: bool) -> None:
    prior = client.start_workflow("wf", workflow_id="k")
    finish(db, prior.execution_id, prior_status)
    handle = client.start_workflow("wf", workflow_id="k", reuse_policy=policy)
    assert handle.started_fresh is fresh
    assert (handle.execution_id != prior.execution_id) is fresh


@pytest.mark.parametrize(
    ("reuse", "conflict", "outcome"),
    [
        ("allow_duplicate", "unspecified", "attach"),
        ("allow_duplicate_failed_only", "unspecified", "attach"),
        ("reject_duplicate", "unspecified", "reject"),
        ("terminate_if_running", "unspecified", "replace"),
        ("terminate_if_running", "use_existing", "attach"),
        ("terminate_if_running", "fail", "reject"),
        ("allow_duplicate", "terminate_existing", "replace"),
    ],
)
@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
def test_running_prior(client: Client, reuse: str, conflict: str, outcome: str, paused: bool) -> None:
    """A PAUSED prior is an active one, as a RUNNING one (spec 002: conflict_policy decides about
    "a currently active (RUNNING/PAUSED) prior")."""
    prior = client.start_workflow("wf", workflow_id="live")
    if paused:
        assert prior.pause("held") and prior.describe()["status"] == "PAUSED"
    if outcome == "reject":
        with pytest.raises(WorkflowAlreadyExists):
            client.start_workflow("wf", workflow_id="live", reuse_policy=reuse, conflict_policy=conflict)
        return
    handle = client.start_workflow("wf", workflow_id="live", reuse_policy=reuse, conflict_policy=conflict)
    assert (handle.execution_id == prior.execution_id) is (outcome == "attach")
    if outcome == "replace":
        assert prior.describe()["status"] == "TERMINATED"


def test_unknown_policy_names_the_value(client: Client) -> None:
    with pytest.raises(InvalidArgument, match='unknown reuse_policy "sometimes"'):
        client.start_workflow("wf", workflow_id="x", reuse_policy="sometimes")
    with pytest.raises(InvalidArgument, match='unknown conflict_policy "maybe"'):
        client.start_workflow("wf", workflow_id="x", conflict_policy="maybe")


@pytest.mark.parametrize("conflict", ["use_existing", "terminate_existing"])
def test_concurrent_identical_starts_converge(db: str, conflict: str) -> None:
    def start(_: int) -> str:
        with Client(db, check_schema=False) as own:
            return own.start_workflow("wf", workflow_id="race", conflict_policy=conflict).execution_id

    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(start, range(16)))
    with psycopg.connect(db) as conn:
        running = conn.execute(
            "SELECT id::text FROM harvest.executions WHERE workflow_id = 'race' AND status = 'RUNNING'"
        ).fetchall()
    assert len(running) == 1
    if conflict == "use_existing":
        assert set(ids) == {running[0][0]}


def test_concurrent_async_starts_share_commits_and_a_refused_one_fails_alone(db: str) -> None:
    """AsyncClient group-commits concurrent starts (harvest.start_workflows); a start its policy
    refuses fails the shared batch, which then goes start by start: only that one raises."""
    import asyncio

    from harvest import AsyncClient

    async def main():
        async with await AsyncClient.connect(db, check_schema=False) as aclient:
            await aclient.start_workflow("wf", workflow_id="taken")
            starts = [aclient.start_workflow("wf", 1, workflow_id=f"w-{i}") for i in range(30)]
            starts.append(aclient.start_workflow("wf", workflow_id="taken", reuse_policy="reject_duplicate"))
            outcomes = await asyncio.gather(*starts, return_exceptions=True)
            before = aclient._starts.batches
            more = await asyncio.gather(
                *(aclient.start_workflow("wf", workflow_id=f"m-{i}") for i in range(20))
            )
            assert len({h.execution_id for h in more}) == 20
            assert aclient._starts.batches - before == 1  # 20 starts made together: one commit
            return outcomes, aclient._starts

    outcomes, batcher = asyncio.run(main())
    *fine, refused = outcomes
    assert isinstance(refused, WorkflowAlreadyExists)
    assert all(h.started_fresh and h.execution_id for h in fine)
    assert sorted(h.workflow_id for h in fine) == sorted(f"w-{i}" for i in range(30))
    with psycopg.connect(db) as conn:
        assert (
            conn.execute("SELECT count(*) FROM harvest.executions WHERE workflow_id LIKE 'w-%'").fetchone()[0]
            == 30
        )
    # The first start went alone; the other 31, made together, were sent as one batch,
    # which the refused start sank; they were then committed one by one (only commits
    # that succeeded count: the first, and 30 of the 31).
    assert (batcher.batches, batcher.items) == (32, 51)


def test_an_apps_declared_workflows_keep_the_clients_start_batches_plain(db: str) -> None:
    """A worker declares every workflow of its App, {} for one without a flow policy (so a
    policy dropped from the code is cleared). Such a name must not send the AsyncClient's
    batches one start at a time (start_workflow per start): start_workflows takes them
    through _start_plain_batch, as it does before any worker declared anything."""
    import asyncio

    from harvest import App, AsyncClient, workflow
    from harvest.client import client as client_module

    @workflow(name="plain_wf")
    async def plain_wf(ctx, n: int) -> int:
        return n

    app = App(workflows=[plain_wf])
    assert app.flow_policies()["workflows"] == {"plain_wf": {}}
    with psycopg.connect(db, autocommit=True) as conn:
        # What a worker does at start-up (worker.py _register, _set_up).
        conn.execute("SELECT harvest.register_workflows(%s, %s)", (["default"], ["plain_wf"]))
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(app.flow_policies()),))

    sent: list[list[dict]] = []
    send = client_module._StartBatcher._send

    async def recording(self, items):  # type: ignore[no-untyped-def]
        sent.append([call for (call,) in items])
        return await send(self, items)

    async def main() -> None:
        async with await AsyncClient.connect(db, check_schema=False) as aclient:
            await asyncio.gather(*(aclient.start_workflow(plain_wf, i) for i in range(5)))

    client_module._StartBatcher._send = recording  # type: ignore[method-assign]
    try:
        asyncio.run(main())
    finally:
        client_module._StartBatcher._send = send  # type: ignore[method-assign]
    assert sent and sum(len(batch) for batch in sent) == 5
    with psycopg.connect(db) as conn:  # one transaction, rolled back: the batch again, counted
        conn.execute("SET LOCAL track_functions = 'all'")
        conn.execute("SELECT * FROM harvest.start_workflows(%s)", (json.dumps(sent[0], default=str),))
        calls = dict(
            conn.execute(
                "SELECT funcname, calls FROM pg_stat_xact_user_functions"
                " WHERE schemaname = 'harvest' AND funcname IN ('_start_plain_batch', 'start_workflow')"
            ).fetchall()
        )
        conn.rollback()
    assert calls == {"_start_plain_batch": 1}
