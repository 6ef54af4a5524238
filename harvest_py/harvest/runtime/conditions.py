"""``ctx.wait_condition``: waits on the workflow's own state, checked whenever its code is blocked.

A predicate is a plain function over state the code keeps (``ctx.state``, locals, a handler's
flag). It is evaluated when the wait begins and then each time the run's loop has run every
ready callback (``DeterministicEventLoop.on_idle``): after the step's events were delivered and
the code they woke (update handlers, activity and timer results, signals taken) ran until
blocked. Those points are fixed by the history alone (a step's events, then its code), so a
replay finds the predicates true at the same places and issues the same commands.

A wait with a timeout has a durable timer; its ``TimerFired`` only marks the wait, and the
wait times out at the first idle point at which no predicate came true: a condition that
holds in the step its timer fired in wins (docs/messages.md, "Waiting on the workflow's state").
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harvest.core.errors import ConditionTimeout

if TYPE_CHECKING:
    from harvest.runtime.loop import WorkflowCallError
    from harvest.runtime.run import WorkflowRun

__all__ = ["ConditionWait", "ConditionWaits", "predicate_name"]


def predicate_name(predicate: Callable[[], Any]) -> str:
    """How a message names a predicate: its qualified name (``approval.<locals>.<lambda>``)."""
    return str(getattr(predicate, "__qualname__", None) or repr(predicate))


class ConditionWait:
    __slots__ = ("future", "predicate", "timed_out", "timeout")

    def __init__(self, predicate: Callable[[], Any], future: asyncio.Future[None], timeout: float | None):
        self.predicate = predicate
        self.future = future
        self.timeout = timeout
        self.timed_out = False  # its timer fired: it times out unless its predicate holds first

    def fire(self) -> None:
        """The wait's ``TimerFired`` was delivered (``Pending.on_fire``)."""
        self.timed_out = True


class ConditionWaits:
    """One run's pending ``ctx.wait_condition`` calls, oldest first."""

    def __init__(self, run: WorkflowRun):
        self.run = run
        self.waits: list[ConditionWait] = []
        run._loop.on_idle = self.check

    def holds(self, predicate: Callable[[], Any]) -> bool:
        """Evaluate ``predicate`` now. One that raises, returns an awaitable or issues a command
        is the code's mistake: the workflow task fails (the loop's fatal error, raised here)."""
        run = self.run
        handlers = run.handlers
        previous, handlers.read_only = (
            handlers.read_only,
            (
                f"the predicate {predicate_name(predicate)} of ctx.wait_condition tried to act on "
                "the workflow: a predicate only reads state (no activities, timers, markers, "
                "ctx.now() or other commands)"
            ),
        )
        try:
            value = predicate()
            if not inspect.isawaitable(value):
                return bool(value)  # (a value's own __bool__ may raise too)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            handlers.read_only = previous
            raise self._refused(predicate, f"raised {type(exc).__name__}: {exc}", exc) from exc
        finally:
            handlers.read_only = previous
        if inspect.iscoroutine(value):
            value.close()  # (never awaited: no RuntimeWarning pointing elsewhere)
        raise self._refused(
            predicate,
            f"returned {type(value).__name__} {value!r:.60}: a predicate is a plain function "
            "(not an async def) returning a bool",
            None,
        )

    def _refused(
        self, predicate: Callable[[], Any], what: str, cause: BaseException | None
    ) -> WorkflowCallError:
        refused = self.run.refuse_call(
            "wait_condition", _PredicateError(f"its predicate {predicate_name(predicate)} {what}")
        )
        refused.__cause__ = cause
        return refused

    def add(
        self, predicate: Callable[[], Any], future: asyncio.Future[None], timeout: float | None
    ) -> ConditionWait:
        wait = ConditionWait(predicate, future, timeout)
        self.waits.append(wait)
        return wait

    def drop(self, wait: ConditionWait) -> None:
        """A wait its code gave up: never evaluated again."""
        if wait in self.waits:
            self.waits.remove(wait)

    def awaited(self) -> list[str]:
        """The predicates of the waits still pending, oldest first (the test kit's stuck report)."""
        return [predicate_name(w.predicate) for w in list(self.waits) if not w.future.done()]

    def check(self) -> bool:
        """The loop ran every ready callback: resolve the waits whose predicate holds, oldest
        first; if none does, time out the waits whose timer fired. Whether a future was
        settled (the loop has callbacks to run again)."""
        waits = self.waits
        live = [w for w in waits if not w.future.done()]  # (a cancelled waiter leaves)
        if not live:
            waits.clear()
            return False
        settled = False
        for wait in live:
            try:
                held = self.holds(wait.predicate)
            except Exception:  # (holds made it the loop's fatal error: stop here)
                self.waits = [w for w in live if not w.future.done()]
                return False
            if held:
                wait.future.set_result(None)
                settled = True
        if not settled:
            for wait in live:
                if wait.timed_out:
                    wait.future.set_exception(
                        ConditionTimeout(predicate_name(wait.predicate), float(wait.timeout or 0))
                    )
                    settled = True
        self.waits = [w for w in live if not w.future.done()]
        return settled


class _PredicateError(Exception):
    """What ``refuse_call`` is handed: the predicate's failure, said once."""
