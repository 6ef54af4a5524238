"""@workflow(throttle=..., debounce=..., batch=...): validation and the declared JSON."""

from __future__ import annotations

import pytest

from harvest import App, Batch, Debounce, Throttle, workflow
from harvest.core.errors import InvalidArgument


def test_policies_json_carries_each_gate():
    @workflow(throttle=Throttle(rps=5, key="input.t"))
    async def t(ctx, x) -> None: ...

    @workflow(debounce=Debounce(quiet="30s", max_wait="5m"))
    async def d(ctx, x) -> None: ...

    @workflow(batch=Batch(max_size=10, window=2))
    async def b(ctx, x) -> None: ...

    policies = App(workflows=[t, d, b]).flow_policies()["workflows"]
    assert policies["t"] == {"throttle": {"rps": 5, "burst": 5, "key": "input.t"}}
    assert policies["d"] == {"debounce": {"key": None, "quiet_secs": 30.0, "max_wait_secs": 300.0}}
    assert policies["b"] == {"batch": {"key": None, "max_size": 10, "window_secs": 2.0}}


@pytest.mark.parametrize(
    "make",
    [
        lambda: Throttle(rps=0),
        lambda: Throttle(rps=1, burst=0.5),
        lambda: Throttle(rps=1, key="tenant"),
        lambda: Debounce(quiet=0),
        lambda: Debounce(quiet="1s", max_wait=-1),
        lambda: Batch(max_size=0, window="1s"),
        lambda: Batch(max_size=2, window=0),
    ],
)
def test_bad_values_are_refused(make):
    with pytest.raises(InvalidArgument):
        make()


def test_two_gates_on_one_workflow_are_refused():
    with pytest.raises(InvalidArgument, match="cannot be combined"):

        @workflow(throttle=Throttle(rps=1), batch=Batch(max_size=2, window=1))
        async def both(ctx, x) -> None: ...


def test_a_gate_of_the_wrong_type_is_refused():
    with pytest.raises(TypeError, match="Debounce"):

        @workflow(debounce=Throttle(rps=1))
        async def wrong(ctx, x) -> None: ...
