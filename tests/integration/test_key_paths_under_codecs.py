"""Key paths that codecs make unresolvable, refused where the App's boot check cannot see them:
a ``Client(codecs=...)`` starting a workflow whose gates read a key path (its App declared
without codecs), and a workflow's ``execute_activity(fairness_key=...)`` under a worker's codecs.
The database holds the input encoded there, so the key never resolved: the gate silently never
applied."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from history_helpers import workflow_task_failure

from harvest import App, AsyncClient, Client, activity, workflow
from harvest.core.codecs import ZlibCodec
from harvest.core.errors import InvalidArgument
from harvest.declare.flow_control import Concurrency


@workflow(concurrency=Concurrency(key="input.tenant", limit=1, on_conflict="defer"))
async def per_tenant(ctx, order: dict) -> str:
    return order["tenant"]


@workflow
async def ungated(ctx, order: dict) -> str:
    return order["tenant"]


def _runs(db: str) -> int:
    with psycopg.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM harvest.executions").fetchone()[0]


def test_a_client_with_codecs_refuses_to_start_a_keyed_workflow(db: str) -> None:
    before = _runs(db)
    with Client(db, codecs=[ZlibCodec()]) as client:
        with pytest.raises(InvalidArgument) as raised:
            client.start_workflow(per_tenant, {"tenant": "a"})
        message = str(raised.value)
        assert message.startswith("Client(codecs=...): workflow 'per_tenant' concurrency key 'input.tenant'")
        assert "reads the input, which the codecs store encoded, so the key never resolves" in message
        assert "start it from a Client without codecs" in message
        # By name, through the App the client knows (a server's --app) …
        client.app = App(workflows=[per_tenant])
        with pytest.raises(InvalidArgument, match=r"concurrency key 'input\.tenant'"):
            client.start_workflow("per_tenant", {"tenant": "a"})
        # … and a workflow with no key path starts as before.
        assert client.start_workflow(ungated, {"tenant": "b"}).execution_id

    async def asynchronously() -> None:
        async with await AsyncClient.connect(db, codecs=[ZlibCodec()]) as client:
            with pytest.raises(InvalidArgument, match=r"concurrency key 'input\.tenant'"):
                await client.start_workflow(per_tenant, {"tenant": "a"})

    asyncio.run(asynchronously())
    assert _runs(db) == before + 1  # only the ungated one
    with Client(db) as plain:  # without codecs the key resolves: started
        assert plain.start_workflow(per_tenant, {"tenant": "c"}).execution_id


@activity
async def notify(ctx, order: dict) -> str:
    return order["tenant"]


@workflow
async def fair_per_call(ctx, order: dict) -> str:
    return await ctx.execute_activity(notify, order, fairness_key="input.tenant")


def test_a_per_call_fairness_key_under_the_workers_codecs_fails_the_workflow_task(
    db: str, start_worker
) -> None:
    codecs = [ZlibCodec()]
    start_worker(App(workflows=[fair_per_call], activities=[notify]), codecs=codecs)
    with Client(db, codecs=codecs) as client:
        handle = client.start_workflow(fair_per_call, {"tenant": "a"})
        failure = workflow_task_failure(db, handle.execution_id)
        assert failure["error_type"] == "WorkflowCallError"
        assert (
            "fairness_key 'input.tenant' reads the input, which the codecs store encoded"
            in failure["message"]
        )
        assert "leave fairness_key= out of the call" in failure["message"]
        assert handle.describe()["status"] == "RUNNING"
        assert "ActivityScheduled" not in [e["event_type"] for e in handle.history()]
