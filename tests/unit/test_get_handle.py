"""get_handle's arguments, checked before any I/O (docs/workflows.md, "Waiting for results")."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from harvest import AsyncClient, Client, workflow
from harvest.core.errors import InvalidArgument


@workflow
async def order(ctx) -> int:
    return 1


def offline(cls: type, sharded: bool) -> object:
    """A client with no database behind it: only its target's kind matters here."""
    client = object.__new__(cls)
    client._target = SimpleNamespace(sharded=sharded)
    return client


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_an_execution_id_or_a_workflow_id_one_of_the_two(cls: type) -> None:
    client = offline(cls, sharded=False)
    with pytest.raises(InvalidArgument, match="one of the two"):
        client.get_handle()
    with pytest.raises(InvalidArgument, match="one of the two"):
        client.get_handle("0000aaaa-0000-4000-8000-000000000001", workflow_id="k")
    with pytest.raises(InvalidArgument, match="non-empty string"):
        client.get_handle(workflow_id="")
    handle = client.get_handle(workflow_id="k", workflow=order)
    assert (handle.execution_id, handle.workflow_id, handle.deferred) == (None, "k", False)
    assert handle.definition is order.__harvest_workflow__


def test_a_sharded_client_finds_a_workflow_id_by_its_workflow() -> None:
    with pytest.raises(InvalidArgument, match="a sharded client finds workflow_id 'k' by its workflow"):
        offline(Client, sharded=True).get_handle(workflow_id="k").describe()
    handle = offline(AsyncClient, sharded=True).get_handle(workflow_id="k")
    with pytest.raises(InvalidArgument, match="a sharded client finds workflow_id 'k' by its workflow"):
        asyncio.run(handle.describe())
