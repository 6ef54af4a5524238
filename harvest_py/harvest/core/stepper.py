"""Logic written once for a synchronous and an asyncio caller, as generators (the "sans-I/O"
style psycopg itself uses for its protocol): a generator yields what it needs done and is sent
the answer, or has the error thrown in. :class:`Stepper` is where one stands; ``harvest.db.steps``
drives steps of the SQL API with it, and :func:`drive` / :func:`adrive` drive flows: a flow
yields :class:`Do` (a call to make: the sync driver takes its value, the asyncio one awaits
it), so a client's or a batch's logic is one generator for both (harvest.client.client's flows,
harvest.client.batch). No I/O and no driver import here."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, ParamSpec, TypeVar, cast

T = TypeVar("T")
P = ParamSpec("P")
Op = TypeVar("Op")


class Stepper(Generic[Op]):
    """Where a generator stands: what to send it next (a value, or an error to throw in). The
    drivers step steps with it (harvest.db.steps) and flows (:func:`drive`)."""

    __slots__ = ("error", "result", "steps", "value")

    steps: Generator[Op, Any, Any]
    value: Any
    error: BaseException | None
    result: Any

    def __init__(self, steps: Generator[Op, Any, Any]):
        self.steps, self.value, self.error, self.result = steps, None, None, None

    def next(self) -> Op | None:
        """The next operation, or None once the steps have returned (``result``)."""
        try:
            op = self.steps.send(self.value) if self.error is None else self.steps.throw(self.error)
        except StopIteration as done:
            self.result = done.value
            return None
        self.value = self.error = None
        return op


class Do:
    """A step of a flow: call ``fn``; the asyncio driver awaits what it returns."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn


# A flow: logic that makes calls (a client's own methods, a batch's steps on a shard), written
# once for both kinds of caller. ``drive`` runs it synchronously, ``adrive`` under asyncio; what a
# call returns is sent back in, what it raises is thrown in.
Flow = Generator[Do, Any, T]


def drive(flow: Flow[T]) -> T:
    stepper = Stepper(flow)
    while (op := stepper.next()) is not None:
        try:
            stepper.value = op.fn()
        except BaseException as exc:  # thrown into the flow, which raises it on
            stepper.error = exc
    return cast(T, stepper.result)


async def adrive(flow: Flow[T]) -> T:
    """:func:`drive` under asyncio: each call's awaitable awaited."""
    stepper = Stepper(flow)
    while (op := stepper.next()) is not None:
        try:
            stepper.value = await op.fn()
        except BaseException as exc:  # thrown into the flow, which raises it on
            stepper.error = exc
    return cast(T, stepper.result)


def driven(make: Callable[P, Flow[T]]) -> Callable[P, T]:
    """A function of ``make``'s arguments that drives the flow it makes (:func:`drive`)."""

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return drive(make(*args, **kwargs))

    return run


def adriven(make: Callable[P, Flow[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """A coroutine function of ``make``'s arguments that drives the flow it makes (:func:`adrive`)."""

    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return await adrive(make(*args, **kwargs))

    return run
