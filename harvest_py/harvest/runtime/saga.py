"""Sagas: undo the steps that succeeded when a later one fails.

::

    saga = Saga(ctx)
    try:
        await ctx.execute_activity(reserve_hotel, trip)
        saga.add_compensation(cancel_hotel, trip)
        await ctx.execute_activity(book_flight, trip)
        saga.add_compensation(cancel_flight, trip)
    except Exception:
        await saga.compensate()
        raise

or, compensating and re-raising on any exception (and on cancellation)::

    async with Saga(ctx) as saga:
        ...

Compensations are workflow code like any other: an activity runs through
``ctx.execute_activity`` (durable, retried, replayed), a plain callable is called
(and awaited when it returns an awaitable) inside the workflow.
"""

from __future__ import annotations

import asyncio
import inspect
from types import TracebackType
from typing import Any, Self

from harvest.declare.definitions import ActivityDefinition

__all__ = ["Saga"]


def _is_activity(step: Any) -> bool:
    return isinstance(step, (str, ActivityDefinition)) or isinstance(
        getattr(step, "__harvest_activity__", None), ActivityDefinition
    )


class Saga:
    """Compensations registered after each successful step, run in reverse order."""

    def __init__(self, ctx: Any, *, continue_on_error: bool = True):
        self.ctx = ctx
        self.continue_on_error = continue_on_error
        self._compensations: list[tuple[Any, tuple[Any, ...]]] = []
        self.errors: list[BaseException] = []  # failed compensations, in the order they ran

    def add_compensation(self, step: Any, *args: Any) -> None:
        """Register ``step(*args)``: an activity (function, definition or name) or a callable."""
        if not _is_activity(step) and not callable(step):
            raise TypeError(f"add_compensation: {step!r} is neither an activity nor a callable")
        self._compensations.append((step, args))

    @property
    def pending(self) -> int:
        """Compensations registered and not yet run."""
        return len(self._compensations)

    async def compensate(self) -> None:
        """Run every registered compensation, last first.

        A failing compensation is kept in ``errors`` and the next one runs, unless
        ``continue_on_error=False``, which re-raises the first failure at once (the
        ones not yet run stay registered). Nothing is raised otherwise: the caller
        re-raises its own error.
        """
        while self._compensations:
            step, args = self._compensations.pop()
            try:
                if _is_activity(step):
                    await self.ctx.execute_activity(step, *args)
                else:
                    result = step(*args)
                    if inspect.isawaitable(result):
                        await result
            except Exception as exc:  # recorded; the caller decides
                self.errors.append(exc)
                if not self.continue_on_error:
                    raise

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if exc is not None and isinstance(exc, (Exception, asyncio.CancelledError)):
            await self.compensate()
        return False  # the original exception propagates
