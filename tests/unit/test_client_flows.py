"""The client's logic is written once and driven by a sync and an asyncio driver each
(harvest/client/client.py, "one place for both clients"): the two drivers of a flow, and the
offload steps both clients share, behave the same."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harvest.client import payloads as payload_policy
from harvest.client.client import _adrive, _Do, _drive, _Flow
from harvest.core.codecs import Payloads
from harvest.db.steps import Atomic, Sql


def _flow(calls: list[Any], log: list[str]) -> _Flow[tuple[Any, ...]]:
    """Sends each call's answer back, catches a ValueError thrown in, and cleans up however it ends."""
    try:
        answers = []
        for call in calls:
            try:
                answers.append((yield _Do(call)))
            except ValueError as exc:
                answers.append(f"caught {exc}")
        return tuple(answers)
    finally:
        log.append("finally")


def _raise(exc: BaseException) -> Any:
    raise exc


async def _async(value: Any) -> Any:
    return value


async def _async_raise(exc: BaseException) -> Any:
    raise exc


def test_both_drivers_send_answers_and_throw_errors_into_the_flow() -> None:
    sync_log: list[str] = []
    answers = _drive(_flow([lambda: 1, lambda: _raise(ValueError("no")), lambda: 3], sync_log))
    async_log: list[str] = []
    calls = [lambda: _async(1), lambda: _async_raise(ValueError("no")), lambda: _async(3)]
    async_answers = asyncio.run(_adrive(_flow(calls, async_log)))
    assert answers == async_answers == (1, "caught no", 3)
    assert sync_log == async_log == ["finally"]


def test_an_error_the_flow_does_not_catch_reaches_the_caller_after_its_cleanup() -> None:
    log: list[str] = []
    with pytest.raises(KeyError):
        _drive(_flow([lambda: _raise(KeyError("gone"))], log))
    assert log == ["finally"]
    log.clear()
    with pytest.raises(KeyError):
        asyncio.run(_adrive(_flow([lambda: _async_raise(KeyError("gone"))], log)))
    assert log == ["finally"]


def test_offloaded_steps_store_the_oversized_values_and_hand_back_references() -> None:
    policy = Payloads(offload_bytes=64)
    small, big = {"a": 1}, {"text": "x" * 1000}
    steps = payload_policy.offloaded(policy, "run-1", [small, big])
    put = next(steps)
    assert isinstance(put, Sql) and put.name == "put_payloads" and put.args == ("run-1", [big])
    with pytest.raises(StopIteration) as done:
        steps.send(["00000000-0000-0000-0000-000000000001"])
    values, owned = done.value.value
    assert values[0] == small and values[1] == Payloads.reference("00000000-0000-0000-0000-000000000001", big)
    assert owned == ["00000000-0000-0000-0000-000000000001"]


def test_offloaded_steps_make_no_call_when_nothing_is_oversized() -> None:
    steps = payload_policy.offloaded(Payloads(offload_bytes=1000), None, [{"a": 1}])
    with pytest.raises(StopIteration) as done:
        next(steps)
    assert done.value.value == ([{"a": 1}], [])


def test_a_custom_store_is_called_through_one_step_for_both_clients() -> None:
    class Store:
        async def put(self, sql: Any, execution_id: str | None, values: list[Any]) -> list[str]:
            return ["ref-" + str(i) for i, _ in enumerate(values)]

        async def get(self, sql: Any, ids: list[str]) -> dict[str, Any]:
            return {}

    policy = Payloads(offload_bytes=64, store=Store())
    steps = payload_policy.offloaded(policy, None, [{"text": "x" * 1000}])
    op = next(steps)
    assert isinstance(op, Atomic)
    assert asyncio.run(op.asynchronous(object())) == ["ref-0"]
    assert op.sync(object()) == ["ref-0"]
    with pytest.raises(StopIteration) as done:
        steps.send(["ref-0"])
    assert done.value.value[1] == []  # a custom store's rows are not the run's to own
