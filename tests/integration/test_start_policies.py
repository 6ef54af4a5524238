"""Duplicate starts: reuse_policy x conflict_policy, and concurrent starts converging."""

from __future__ import annotations

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
def test_running_prior(client: Client, reuse: str, conflict: str, outcome: str) -> None:
    prior = client.start_workflow("wf", workflow_id="live")
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
