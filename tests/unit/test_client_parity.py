"""AsyncClient has everything Client has, and AsyncWorkflowHandle everything WorkflowHandle has, with
the same parameters: the asyncio twin of each public method is a coroutine. The few deliberate
differences are listed here, each with its reason, so a new method on one side fails this test
until its twin exists."""

from __future__ import annotations

import inspect

import pytest

from harvest.client import AsyncClient, AsyncWorkflowHandle, Client, WorkflowHandle

# name -> why the two sides differ in kind (both still have it)
SAME_NAME_OTHER_KIND = {
    # Client.sql() is a scope holding one pooled connection; AsyncClient.sql is the API on the
    # pool itself (each call takes a connection and is one transaction): no scope is needed.
    "sql",
    # A handle's iter_children and a client's list_workflows are iterators on one side and
    # async iterators (async generator functions: ``async for``, not ``await``) on the other.
    "iter_children",
    "list_workflows",
}
# Methods that do no I/O: plain methods on both sides.
NO_IO = {"get_handle"}
# AsyncClient is made by `await AsyncClient.connect(...)` (a constructor cannot await); its
# parameters are Client()'s, checked below.
ASYNC_ONLY = {"connect"}
# AsyncClient.connect's parameters that Client() lacks: an eager signal's handed task runs on
# the worker's event loop, which the synchronous Client's threads are not (docs/messages.md).
ASYNC_ONLY_PARAMETERS = {"eager_worker"}


def public(cls: type) -> dict[str, object]:
    return {
        name: member
        for name in dir(cls)
        if not name.startswith("_")
        for member in [inspect.getattr_static(cls, name)]
    }


def parameters(function: object) -> list[tuple]:
    """Name, kind and default of each parameter (annotations name each side's own types)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


PAIRS = [(Client, AsyncClient), (WorkflowHandle, AsyncWorkflowHandle)]


@pytest.mark.parametrize(("sync", "asynchronous"), PAIRS, ids=["client", "handle"])
def test_the_asyncio_twin_has_every_public_method(sync: type, asynchronous: type) -> None:
    assert set(public(sync)) == set(public(asynchronous)) - ASYNC_ONLY


@pytest.mark.parametrize(("sync", "asynchronous"), PAIRS, ids=["client", "handle"])
def test_each_twin_takes_the_same_parameters_and_is_a_coroutine(sync: type, asynchronous: type) -> None:
    for name, member in public(sync).items():
        twin = public(asynchronous)[name]
        if name in SAME_NAME_OTHER_KIND:
            continue
        assert parameters(member) == parameters(twin), f"{asynchronous.__name__}.{name} differs"
        assert not inspect.iscoroutinefunction(member)
        assert inspect.iscoroutinefunction(twin) is (name not in NO_IO), f"{asynchronous.__name__}.{name}"


def test_async_client_connect_takes_client_parameters() -> None:
    asynchronous = [p for p in parameters(AsyncClient.connect) if p[0] not in ASYNC_ONLY_PARAMETERS]
    assert parameters(Client.__init__)[1:] == asynchronous  # (bound: no cls)


def test_the_twins_repr_the_same_way() -> None:
    sync = WorkflowHandle(None, "e-1", "w-1")  # type: ignore[arg-type]
    asynchronous = AsyncWorkflowHandle(None, "e-1", "w-1")  # type: ignore[arg-type]
    assert repr(asynchronous) == "Async" + repr(sync)
