"""Query and update handlers of one ``WorkflowRun``: registry, update execution, read-only calls.

Updates run inside the workflow. An ``UpdateAccepted{update_id, name, input}``
resolution event is delivered in ``event_id`` order with the rest of its batch;
the run then starts the update's handler as a workflow coroutine (a task on the
deterministic loop, so the commands it issues get their ``seq`` in a replayable
order). When the handler returns or raises, the run issues the command
``complete_update{seq, update_id, result | failure}``, recorded as the command
event ``UpdateCompleted`` and matched on replay by ``seq`` + ``update_id``.

An update whose handler is not registered when it is delivered waits until the
end of that step (every coroutine blocked), so a handler the workflow registers
with ``ctx.register_update_handler`` on its way there still gets it; after
that it is completed with an ``UnknownUpdate`` failure. Cold and warm runs reach
that point at the same place, so both issue the same command. A replay that reaches it
for an update the history has completed otherwise (a worker that has the handler ran it)
raises ``UnknownHandler``: this worker cannot rebuild the run's state. The other way
round, a replay of a step whose history records ``UnknownUpdate`` does not run the
handler this worker has: the history's outcome is the run's.

Queries and validators run *read-only* on the state a worker rebuilt (its cached
run, or a replay of the recorded steps): they must not issue commands (that
raises ``IllegalWorkflowOperation``) and cannot wait (an ``async def`` handler is
run to its first suspension; suspending is an error). A call that tried either is
reported and marks the run ``tainted``, so the worker drops it from its cache.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from harvest.core.errors import InvalidArgument, NonDeterminismError, PayloadError, QueryFailed
from harvest.core.payload import encode
from harvest.declare.messages import HandlerDefinition, check_handler
from harvest.runtime.commands import failure_json
from harvest.runtime.context import ContinueAsNew
from harvest.runtime.loop import IllegalWorkflowOperation

if TYPE_CHECKING:
    from harvest.runtime.run import WorkflowRun

__all__ = ["RunHandlers", "UnknownHandler"]


class UnknownHandler(QueryFailed):
    """No handler of that name: neither declared on the App nor registered by the workflow."""


class RunHandlers:
    def __init__(self, run: WorkflowRun):
        self.run = run
        self.queries: dict[str, HandlerDefinition] = {}  # registered by the workflow itself
        self.updates: dict[str, HandlerDefinition] = {}
        self.state: dict[str, Any] = {}  # ctx.state: what declarative handlers read
        self.read_only: str | None = None  # set while a query or validator runs
        self.tainted = False
        self._admitted: list[dict[str, Any]] = []  # accepted, waiting for a handler until the step ends
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._drain_waiters: list[asyncio.Future[Any]] = []
        self.completed: set[str] = set()

    def detach(self) -> None:
        """The run ended and is closed (WorkflowRun.close): drop the reference back to it."""
        del self.run

    # ------------------------------------------------------------------ lookup
    def find(self, kind: str, name: str) -> HandlerDefinition | None:
        own = (self.queries if kind == "query" else self.updates).get(name)
        if own is not None:
            return own
        app = self.run.app
        table = getattr(app, "queries" if kind == "query" else "updates", None) or {}
        return cast("HandlerDefinition | None", table.get(self.run.definition.name, {}).get(name))

    def known(self, kind: str) -> list[str]:
        app = self.run.app
        table = getattr(app, "queries" if kind == "query" else "updates", None) or {}
        own = self.queries if kind == "query" else self.updates
        return sorted(set(own) | set(table.get(self.run.definition.name, {})))

    def _unknown(self, kind: str, name: str) -> UnknownHandler:
        return UnknownHandler(
            f"workflow {self.run.definition.name!r} has no {kind} handler {name!r}; "
            f"known: {self.known(kind) or 'none'}",
            f"Unknown{kind.capitalize()}",
        )

    # ------------------------------------------------------------------ registration
    def register_query(self, name: str, fn: Callable[..., Any]) -> None:
        self.queries[_name(name, "query")] = HandlerDefinition(
            "query", name, check_handler(fn, "query", name)
        )

    def register_update(
        self, name: str, fn: Callable[..., Any], validator: Callable[..., Any] | None = None
    ) -> None:
        if validator is not None:
            check_handler(validator, "update validator", name)
        defn = HandlerDefinition(
            "update", _name(name, "update"), check_handler(fn, "update", name), None, validator
        )
        self.updates[name] = defn
        waiting = [d for d in self._admitted if d.get("name") == name and not d.get("_recorded_unknown")]
        self._admitted = [d for d in self._admitted if d.get("name") != name or d.get("_recorded_unknown")]
        for data in waiting:
            self._start(defn, data)

    # ------------------------------------------------------------------ updates in the workflow
    def admit(self, data: dict[str, Any]) -> None:
        """``UpdateAccepted`` was delivered: run its handler, or hold it until the step ends."""
        update_id = str(data.get("update_id"))
        if update_id in self._running or update_id in self.completed:
            return  # the database records an update id once; be safe anyway
        handler = self.find("update", str(data.get("name")))
        if handler is None:
            self._admitted.append(data)
        elif self._recorded_unknown(update_id):
            # A replay of a step in which a worker without the handler failed it (a rolling
            # deploy's older worker): the history's outcome, not this worker's handler.
            self._admitted.append({**data, "_recorded_unknown": True})
        else:
            self._start(handler, data)

    def _recorded_unknown(self, update_id: str) -> bool:
        """Whether the replayed step records this update's completion as ``UnknownUpdate``."""
        expected = self.run._expected
        return expected is not None and any(
            e["event_type"] == "UpdateCompleted"
            and e["event_data"].get("update_id") == update_id
            and (e["event_data"].get("failure") or {}).get("error_type") == "UnknownUpdate"
            for e in expected.values()
        )

    def _start(self, handler: HandlerDefinition, data: dict[str, Any]) -> None:
        update_id = str(data.get("update_id"))
        task = self.run._loop.create_task(self._run_update(handler, data))
        self._running[update_id] = task

    async def _run_update(self, handler: HandlerDefinition, data: dict[str, Any]) -> None:
        update_id = str(data.get("update_id"))
        result: Any = None
        failure: dict[str, Any] | None = None
        try:
            # Validation refused an argument the handler does not take; one accepted before it
            # did is dropped as it was then, so its replay does what its first run did.
            args = handler.decode_arg(data.get("input"), refuse_extra=False)
            value = handler.fn(self.run.ctx, *args)
            if inspect.isawaitable(value):
                value = await value
            result = encode(value, f"update {handler.name!r} result")
        except NonDeterminismError:
            raise
        except asyncio.CancelledError:
            failure = _failure("CancelledError", f"update {handler.name!r} was cancelled")
        except ContinueAsNew:
            # A BaseException: uncaught, it would end this task with nothing recorded and leave
            # the caller waiting. The run is the main code's to end, so the update fails instead.
            failure = _failure(
                "IllegalWorkflowOperation",
                f"update {handler.name!r} called ctx.continue_as_new(): continue_as_new is not "
                "allowed in an update handler; return from the handler and continue as new from "
                "the main workflow code",
            )
        except Exception as exc:
            failure = failure_json(exc)
        finally:
            self._running.pop(update_id, None)
        self._complete(update_id, result, failure)

    def _complete(self, update_id: str, result: Any, failure: dict[str, Any] | None) -> dict[str, Any] | None:
        command: dict[str, Any] = {
            "type": "complete_update",
            "seq": self.run.next_seq(),
            "update_id": update_id,
        }
        if failure is None:
            command["result"] = result
        else:
            command["failure"] = failure
        self.completed.add(update_id)
        recorded = self.run._record(command)
        self._wake_drainers()
        return recorded

    def end_of_step(self) -> None:
        """Every coroutine is blocked: updates still without a handler fail as unknown."""
        if not self._admitted:
            return  # (every step of a replay ends here: no list made and dropped per step)
        admitted, self._admitted = self._admitted, []
        for data in admitted:
            name = str(data.get("name"))
            exc = self._unknown("update", name)
            recorded = self._complete(
                str(data.get("update_id")), None, _failure(exc.error_type or "UnknownUpdate", str(exc))
            )
            if recorded is not None and (recorded.get("failure") or {}).get("error_type") != "UnknownUpdate":
                # A replay of a step in which a worker that has the handler ran it: matched by
                # seq and update id, the run would go on from a state without the update (a
                # rolling deploy's older worker). Not this worker's run to rebuild.
                raise UnknownHandler(
                    f"{exc}: the run's history has it run by a worker whose App has the handler, "
                    "so this worker cannot rebuild the run's state",
                    exc.error_type,
                )

    def _wake_drainers(self) -> None:
        if self._running:
            return
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def drain(self) -> None:
        """Wait until every accepted update's handler has finished."""
        while self._running:
            waiter = self.run._loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter

    @property
    def running_updates(self) -> int:
        return len(self._running)

    # ------------------------------------------------------------------ read-only calls (worker)
    def answer_query(self, name: str, raw_arg: Any) -> Any:
        """Run query ``name`` on the current state; its JSON-encoded answer."""
        handler = self.find("query", name)
        if handler is None:
            raise self._unknown("query", name)
        value = self._read_only(handler.fn, handler.decode_arg(raw_arg), f"query {name!r}")
        return encode(value, f"query {name!r} result")

    def validate_update(self, name: str, raw_arg: Any) -> None:
        """Raise to reject update ``name``: unknown, an undecodable argument, or the validator."""
        handler = self.find("update", name)
        if handler is None:
            raise self._unknown("update", name)
        args = handler.decode_arg(raw_arg)
        if handler.validator is not None:
            self._read_only(
                handler.validator,
                args if _takes_arg_or_none(handler.validator) else (),
                f"the validator of update {name!r}",
            )

    def _read_only(self, fn: Callable[..., Any], args: tuple[Any, ...], what: str) -> Any:
        run = self.run
        before = (run._seq, len(run._new_commands), run.signals.count())
        previous, self.read_only = (
            self.read_only,
            (
                f"{what} tried to act on the workflow: queries and validators only read its state "
                "(no activities, timers, signals, markers or other commands)"
            ),
        )
        try:
            value = fn(run.ctx, *args)
            if inspect.isawaitable(value):
                value = _finish_without_waiting(value, what)
            return value
        except IllegalWorkflowOperation:
            self.tainted = True
            raise
        except ContinueAsNew:
            # Ending the run is a command like any other: refused here, and answered as a failure.
            raise IllegalWorkflowOperation(
                f"{what} called ctx.continue_as_new(): queries and validators only read the workflow's state"
            ) from None
        finally:
            self.read_only = previous
            if (run._seq, len(run._new_commands), run.signals.count()) != before:
                self.tainted = True


def _takes_arg_or_none(fn: Callable[..., Any]) -> bool:
    try:
        return (
            len(
                [
                    p
                    for p in inspect.signature(fn).parameters.values()
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                ]
            )
            >= 2
        )
    except (TypeError, ValueError):
        return True


def _finish_without_waiting(awaitable: Any, what: str) -> Any:
    if not asyncio.iscoroutine(awaitable):
        raise IllegalWorkflowOperation(f"{what} returned {awaitable!r}; it must return a value")
    try:
        awaitable.send(None)
    except StopIteration as stop:
        return stop.value
    awaitable.close()
    raise IllegalWorkflowOperation(
        f"{what} waited for something: queries and validators cannot wait; read the state and return"
    )


def _failure(error_type: str, message: str) -> dict[str, Any]:
    return {"error_type": error_type, "message": message, "non_retryable": True, "details": None}


def _name(name: Any, kind: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgument(f"{kind} handler name: expected a non-empty string, got {name!r}")
    return name


def failure_of(exc: BaseException) -> dict[str, Any]:
    """The ``error`` JSON of a refused query or update (what the client's exception carries)."""
    if isinstance(exc, QueryFailed):
        return _failure(exc.error_type or type(exc).__name__, str(exc))
    if isinstance(exc, PayloadError):
        return _failure("PayloadError", str(exc))
    return failure_json(exc)
