"""A wait on pooled connections makes a call again when its connection's server restarted
since it was pooled (AdminShutdown, 57P01: the statement never ran), a bounded number of times."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg.errors import AdminShutdown

from harvest.db import sqlapi, steps


class _Api:
    """A pool whose first ``stale`` connections belong to a server that restarted."""

    def __init__(self, stale: int):
        self.stale, self.calls = stale, 0

    def get_execution(self, execution_id: str) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.stale:
            raise AdminShutdown("terminating connection due to administrator command")
        return {"id": execution_id}

    async def aget(self, execution_id: str) -> dict[str, Any]:
        return self.get_execution(execution_id)


def _read(execution_id: str) -> steps.Steps[Any]:
    row = yield steps.Sql(sqlapi.get_execution, execution_id)
    return row


def test_a_read_goes_again_on_the_next_connection() -> None:
    api = _Api(stale=3)

    @contextlib.contextmanager
    def lend() -> Iterator[Any]:
        yield api

    assert steps.run_steps_on_hub(_read("r1"), lend, hub=None) == {"id": "r1"}  # type: ignore[arg-type]
    assert api.calls == 4


def test_the_attempts_are_bounded() -> None:
    api = _Api(stale=steps.STALE_CONNECTION_ATTEMPTS)

    @contextlib.contextmanager
    def lend() -> Iterator[Any]:
        yield api

    with pytest.raises(AdminShutdown):
        steps.run_steps_on_hub(_read("r1"), lend, hub=None)  # type: ignore[arg-type]
    assert api.calls == steps.STALE_CONNECTION_ATTEMPTS


def test_the_asyncio_driver_does_the_same() -> None:
    class _Async:
        def __init__(self) -> None:
            self.inner = _Api(stale=2)

        async def get_execution(self, execution_id: str) -> dict[str, Any]:
            return await self.inner.aget(execution_id)

    api = _Async()

    class _Hub:
        def waiting(self, payload: str) -> Any:  # pragma: no cover - no Notified in these steps
            raise AssertionError

    row = asyncio.run(steps.arun_steps_on_hub(_read("r2"), api, _Hub()))  # type: ignore[arg-type]
    assert row == {"id": "r2"} and api.inner.calls == 3
