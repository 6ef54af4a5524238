"""The history vocabulary of ``docs/internals.md`` and how commands are matched.

Every command that carries a ``seq`` is recorded as exactly one *command event*
with the same ``seq``; a replay compares the command the code issues with that
event by kind and name (``describe_command``). *Resolution events* wake the
workflow; *terminal events* close the run. ``CommandIssuer`` is the half of
``WorkflowRun`` that issues and matches commands for ``WorkflowContext``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, cast

from harvest.core.errors import (
    ActivityError,
    ActivityFailure,
    ChildWorkflowError,
    NonDeterminismError,
    recordable,
)
from harvest.core.payload import encode_details
from harvest.declare.definitions import WorkflowDefinition
from harvest.runtime.children import ChildHandle
from harvest.runtime.context import DEFAULT_VERSION
from harvest.runtime.external import describe_target
from harvest.runtime.loop import DeterministicEventLoop, IllegalWorkflowOperation, WorkflowCallError

if TYPE_CHECKING:
    from harvest.runtime.messages import RunHandlers

__all__ = [
    "BOOKKEEPING_EVENTS",
    "COMMAND_EVENTS",
    "DIRECTIVE_COMMANDS",
    "ENGINE_FAILURES",
    "EVENT_TYPES",
    "RESOLUTION_EVENTS",
    "TERMINAL_COMMANDS",
    "TERMINAL_EVENTS",
    "CommandIssuer",
    "Pending",
    "closed_by_engine",
    "describe_command",
    "describe_event",
    "event_as_command",
    "failure_json",
    "nondeterminism",
    "same",
]

# command event type -> command type
COMMAND_EVENTS = {
    "ActivityScheduled": "schedule_activity",
    "TimerStarted": "start_timer",
    "MarkerRecorded": "record_marker",
    "TimerCancelled": "cancel_timer",
    "ChildWorkflowStarted": "start_child_workflow",
}
COMMAND_EVENTS["UpdateCompleted"] = "complete_update"  # queries and updates (runtime/messages.py)
# signalling and cancelling another workflow (runtime/external.py)
COMMAND_EVENTS["ExternalSignalRequested"] = "signal_external_workflow"
COMMAND_EVENTS["ExternalCancelRequested"] = "cancel_external_workflow"
# resolution event type -> the kind of pending command it resolves (None: not seq-based)
RESOLUTION_EVENTS: dict[str, str | None] = {
    "ActivityCompleted": "activity",
    "ActivityFailed": "activity",
    "TimerFired": "timer",
    "ChildWorkflowCompleted": "child",
    "ChildWorkflowFailed": "child",
    "SignalReceived": None,
    "WorkflowCancelRequested": None,
}
RESOLUTION_EVENTS["UpdateAccepted"] = None  # delivered to runtime/messages.py
RESOLUTION_EVENTS["MutexAcquired"] = "mutex"  # {seq, key}: the grant of ctx.mutex (runtime/mutex.py)
# {seq, execution_id, ...}: the outcome of an external signal or cancel (runtime/external.py)
RESOLUTION_EVENTS.update(
    dict.fromkeys(
        [
            "ExternalSignalDelivered",
            "ExternalSignalFailed",
            "ExternalCancelDelivered",
            "ExternalCancelFailed",
        ],
        "external",
    )
)
TERMINAL_EVENTS = {
    "WorkflowCompleted",
    "WorkflowFailed",
    "WorkflowTerminated",
    "WorkflowCancelled",
    "WorkflowTimedOut",
    "WorkflowContinuedAsNew",
}
# terminal command type -> the terminal event the SQL writes for it
TERMINAL_COMMANDS = {
    "complete_workflow": "WorkflowCompleted",
    "fail_workflow": "WorkflowFailed",
    "cancel_workflow": "WorkflowCancelled",
    "continue_as_new": "WorkflowContinuedAsNew",
}
# Closing events the database writes with no decision, right after a step, where a closing
# command's event would be: a run superseded by a newer one of its key is cancelled
# (functions/flow_concurrency.sql), one whose history outgrew a hard cap or whose workflow no
# claiming worker has fails (functions/decide.sql). No code ended the run there (closed_by_engine).
ENGINE_FAILURES = frozenset({"HistoryEventCapExceeded", "HistoryByteCapExceeded", "UnknownWorkflow"})


def closed_by_engine(event_type: str, data: dict[str, Any]) -> bool:
    """Whether a closing event of a command's type (``WorkflowCancelled``, ``WorkflowFailed``)
    was written by the database on its own (``ENGINE_FAILURES``, a supersede), not by a decision."""
    if event_type == "WorkflowCancelled":
        details = data.get("details")
        return isinstance(details, dict) and "superseded_by" in details
    if event_type == "WorkflowFailed":
        failure = data.get("failure")
        return isinstance(failure, dict) and failure.get("error_type") in ENGINE_FAILURES
    return False


# commands that write no event: what the worker tells the database of the run's wait
# (hold_wakeups: docs/internals.md, "Held wake-ups"; await_signals, the signal waits its marker
# names: "Awaited signals"); _apply_decision reads them before its dispatcher
# (tests/integration/test_vocabulary.py)
DIRECTIVE_COMMANDS = frozenset({"hold_wakeups", "await_signals"})
# events that neither match a command nor resolve one: the run's input, the step
# boundary marker, and the note a reset leaves on its fork (history only)
BOOKKEEPING_EVENTS = frozenset(
    {"WorkflowStarted", "WorkflowTaskCompleted", "WorkflowResetFork", "WorkflowPaused", "WorkflowResumed"}
)
# every event type a history can hold: sql/events.sql's events_event_type_check lists the
# same (tests/integration/test_vocabulary.py)
EVENT_TYPES = frozenset(COMMAND_EVENTS) | frozenset(RESOLUTION_EVENTS) | TERMINAL_EVENTS | BOOKKEEPING_EVENTS


def describe_command(cmd: dict[str, Any]) -> str:
    """What a replay compares: the command kind plus what identifies it."""
    return _describe(cmd["type"], cmd)


def describe_event(event: dict[str, Any]) -> str:
    """``describe_command(event_as_command(event))``, without building the command."""
    data = event["event_data"]
    return _describe(data["type"] if "type" in data else COMMAND_EVENTS[event["event_type"]], data)


def _describe(kind: Any, cmd: dict[str, Any]) -> str:
    """A command of type ``kind`` with fields ``cmd`` (whose own "type" is not read)."""
    if kind == "schedule_activity":
        return f"schedule_activity {cmd.get('name')!r}"
    if kind == "start_child_workflow":
        return f"start_child_workflow {cmd.get('workflow_name')!r}"
    if kind == "cancel_timer":
        return f"cancel_timer of timer seq {cmd.get('timer_seq')}"
    if kind == "record_marker":
        value = cmd.get("value") or {}
        if cmd.get("kind") == "local_activity":
            return f"local activity {value.get('name')!r}"
        if cmd.get("kind") == "version":
            return f"version marker {value.get('change_id')!r}"
        if cmd.get("kind") == "dag_node":
            return f"dag_node marker of task {value.get('task')!r}"
        if cmd.get("kind") in ("mutex_acquire", "mutex_release"):
            return f"{cmd.get('kind')} {value.get('key')!r}"
        return f"record_marker {cmd.get('kind')!r}"
    if kind == "complete_update":
        return f"complete_update of update {cmd.get('update_id')!r}"
    if kind == "signal_external_workflow":
        return f"signal_external_workflow {cmd.get('signal_name')!r} to {describe_target(cmd)}"
    if kind == "cancel_external_workflow":
        return f"cancel_external_workflow of {describe_target(cmd)}"
    return cast(str, kind)


def event_as_command(event: dict[str, Any]) -> dict[str, Any]:
    return {"type": COMMAND_EVENTS[event["event_type"]], **event["event_data"]}


def same(cmd: dict[str, Any], recorded: dict[str, Any]) -> bool:
    return describe_command(cmd) == describe_command(recorded)


# Why code would not match its own history, and what to do (every mismatch's message ends so).
_CAUSES = (
    "; the workflow code changed since the run recorded it (gate the change with ctx.version, "
    "docs/versioning.md) or it is not deterministic (time, random, I/O, the environment: use "
    "ctx.now(), ctx.random(), ctx.uuid4() or an activity)"
)


def nondeterminism(
    seq: int | None, expected: str, got: str, hint: str = "", event: dict[str, Any] | None = None
) -> NonDeterminismError:
    """The error of a replay that diverged at ``seq``; ``event``, the recorded command's event,
    is named by its id, the one an operator reads in the history and picks a reset boundary by."""
    where = f" at seq {seq}" if seq is not None else ""
    if event is not None and event.get("event_id") is not None:
        where += f" (event {event['event_id']} {event.get('event_type')})"
    exc = NonDeterminismError(
        f"non-determinism{where}: expected {expected}, got {got}" + (f" ({hint})" if hint else "") + _CAUSES
    )
    exc.seq, exc.expected, exc.got = seq, expected, got  # type: ignore[attr-defined]
    return exc


def failure_json(exc: BaseException) -> dict[str, Any]:
    """The ``failure`` object of ``fail_workflow`` for an exception that ended the workflow."""
    if isinstance(exc, ActivityError):
        exc = exc.failure
    if isinstance(exc, ChildWorkflowError):
        return {
            "error_type": "ChildWorkflowError",
            "message": str(exc),
            "non_retryable": True,
            "details": {
                "status": exc.status,
                "child_execution_id": exc.child_execution_id,
                "failure": exc.failure,
            },
        }
    if isinstance(exc, ActivityFailure):
        return {
            "error_type": exc.error_type,
            "message": exc.message,
            "non_retryable": True,
            "details": encode_details(exc.details),
        }
    message = recordable(str(exc))
    return {"error_type": type(exc).__name__, "message": message, "non_retryable": True, "details": None}


@dataclass(slots=True)
class Pending:
    seq: int
    kind: str  # "activity" | "timer" | "local_activity" | "child" | "mutex" | "external"
    name: str | None
    future: asyncio.Future[Any]
    defn: Any = None
    args: tuple[Any, ...] = ()
    recorded: Any = None  # a local activity's marker value, when replayed
    done: bool = False
    on_fire: Callable[[], None] | None = None  # run at delivery (a signal wait's timeout)
    handle: ChildHandle[Any] | None = None  # a child workflow's


class CommandIssuer:
    """The half of ``WorkflowRun`` that ``WorkflowContext`` calls: numbered commands.

    In a replayed step each command is checked against the recorded command event
    at its ``seq`` (``_match``); in a live step it is queued for the database.
    """

    app: Any
    execution_id: str
    _seq: int
    _expected: dict[int, dict[str, Any]] | None
    _new_commands: list[dict[str, Any]]
    _pending: dict[int, Pending]
    _issued_local: bool  # set by issue_local: the run looks for ready local activities after a step
    _children: dict[int, ChildHandle[Any]]
    _cancelled_timers: set[int]
    _versions: dict[str, int]
    _fatal: BaseException | None
    _loop: DeterministicEventLoop
    step_marker: int | None  # the replayed step's WorkflowTaskCompleted event (None: a live step)
    handlers: RunHandlers  # its read_only is set while a query or validator runs

    # ------------------------------------------------------------------ for WorkflowContext
    def next_seq(self) -> int:
        read_only = self.handlers.read_only
        if read_only:  # a query or validator is running (runtime/messages.py)
            raise IllegalWorkflowOperation(read_only)
        self._seq += 1
        return self._seq

    def refuse_call(self, method: str, exc: Exception) -> WorkflowCallError:
        """The error of a ``ctx`` call whose own arguments Harvest refused (``exc``: an option,
        a duration, a name, a type of the method's parameters; never a payload's value, which
        is the run's data): a bug of the workflow's code, so it fails the workflow task, retried
        until a worker runs fixed code, even when the code catches it (the loop's fatal error).
        In a query or validator (read-only) it is only that handler's error."""
        refused = WorkflowCallError(
            f"ctx.{method}: {exc}; the workflow's code is wrong: its workflow task fails and is "
            "retried until a worker runs fixed code (the run is untouched)"
        )
        loop = self._loop
        if loop.fatal_error is None and not self.handlers.read_only:
            loop.fatal_error = refused
        return refused

    def find_activity(self, name: str) -> Any:
        return self.app.find_activity(name) if self.app is not None else None

    def find_workflow(self, name: str) -> WorkflowDefinition | None:
        return self.app.workflows.get(name) if self.app is not None else None

    def set_logical_time(self, timestamp: float) -> None:
        self._loop.logical_time = timestamp

    def _raise_fatal(self, exc: BaseException) -> NoReturn:
        if self._loop.fatal_error is None:
            self._loop.fatal_error = exc
        self._fatal = self._fatal or exc
        raise exc

    def _match(self, command: dict[str, Any]) -> dict[str, Any] | None:
        """Replay: check ``command`` against the history and return the recorded event data."""
        if self._expected is None:
            return None
        seq = command["seq"]
        event = self._expected.pop(seq, None)
        if event is None:
            got = describe_command(command)
            none = (
                "no command (the history has none here)"
                if self.step_marker is None
                else f"no command (the workflow task of event {self.step_marker} recorded none here)"
            )
            self._raise_fatal(nondeterminism(seq, none, got))
        data: dict[str, Any] = event["event_data"]
        name = command.get("name")
        if not (
            # Both schedule_activity of one name, a str: the descriptions are equal, unbuilt.
            command["type"] == "schedule_activity"
            and event["event_type"] == "ActivityScheduled"
            and "type" not in data
            and type(name) is str
            and type(data.get("name")) is str
            and data["name"] == name
        ):
            got, recorded = describe_command(command), describe_event(event)
            if recorded != got:
                self._raise_fatal(nondeterminism(seq, recorded, got, event=event))
        return data

    def matching(self) -> bool:
        """Whether commands are matched against a recorded step (a replay) rather than
        queued as new: a command's fields that replay does not compare go unused then."""
        return self._expected is not None

    def _record(self, command: dict[str, Any]) -> dict[str, Any] | None:
        """Match a replayed command, or queue a new one; the recorded data when replaying."""
        recorded = self._match(command)
        if recorded is None:
            self._new_commands.append(command)
        return recorded

    def issue(
        self, command: dict[str, Any], kind: str, name: str | None, on_fire: Callable[[], None] | None = None
    ) -> asyncio.Future[Any]:
        """Issue an activity or timer command; the future resolves from its history event."""
        if self._expected is None:  # (_record, inline: every activity and timer comes here)
            self._new_commands.append(command)
        else:
            self._match(command)
        future = self._loop.create_future()
        self._pending[command["seq"]] = Pending(command["seq"], kind, name, future, on_fire=on_fire)
        return future

    def issue_local(self, defn: Any, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        seq = self.next_seq()
        self._issued_local = True
        probe = {"type": "record_marker", "seq": seq, "kind": "local_activity", "value": {"name": defn.name}}
        recorded = self._match(probe)
        future = self._loop.create_future()
        self._pending[seq] = Pending(
            seq,
            "local_activity",
            defn.name,
            future,
            defn,
            tuple(args),
            recorded["value"] if recorded is not None else None,
        )
        return future

    def timer_pending(self, seq: int) -> bool:
        pending = self._pending.get(seq)
        return pending is not None and pending.kind == "timer" and not pending.done

    def cancel_timer(self, timer_seq: int) -> None:
        """Command ``cancel_timer``: the timer's wait is over; a late ``TimerFired`` is ignored."""
        pending = self._pending.pop(timer_seq, None)
        if pending is not None:
            pending.done = True
        self._cancelled_timers.add(timer_seq)
        self._record({"type": "cancel_timer", "seq": self.next_seq(), "timer_seq": timer_seq})

    def start_child(self, command: dict[str, Any], decode: Callable[[Any], Any]) -> ChildHandle[Any]:
        """Command ``start_child_workflow``; the handle resolves from the child's events."""
        self._record(command)
        seq, name = command["seq"], command["workflow_name"]
        future, started = self._loop.create_future(), self._loop.create_future()
        handle = ChildHandle(seq, name, command.get("workflow_id"), future, started, decode)
        handle.parent_close_policy = command.get("parent_close_policy")  # as asked: known at once
        self._pending[seq] = Pending(seq, "child", name, future, handle=handle)
        self._children[seq] = handle
        return handle

    def marker(self, kind: str, produce: Callable[[], Any]) -> Any:
        """A recorded value: produced once, read back from the history on replay."""
        seq = self.next_seq()
        command = {"type": "record_marker", "seq": seq, "kind": kind, "value": None}
        recorded = self._match(command)
        if recorded is not None:
            return recorded.get("value")
        command["value"] = produce()
        self._new_commands.append(command)
        return command["value"]

    def version(self, change_id: str, min_supported: int, max_supported: int) -> int:
        """See ``WorkflowContext.version``."""
        known = self._versions.get(change_id)
        if known is None:
            seq = self._seq + 1
            if self._expected is not None:
                event = self._expected.get(seq)
                data: dict[str, Any] = (event or {}).get("event_data") or {}
                value: dict[str, Any] = data["value"] if isinstance(data.get("value"), dict) else {}
                if (
                    event is None
                    or event["event_type"] != "MarkerRecorded"
                    or data.get("kind") != "version"
                    or value.get("change_id") != change_id
                ):
                    if min_supported != DEFAULT_VERSION:
                        recorded = describe_command(event_as_command(event)) if event else "no command"
                        self._raise_fatal(
                            nondeterminism(
                                seq,
                                recorded,
                                f"version marker {change_id!r}",
                                f"a history recorded before ctx.version({change_id!r}) was added "
                                f"replays only if min_supported is DEFAULT_VERSION "
                                f"({DEFAULT_VERSION}), not {min_supported}",
                                event,
                            )
                        )
                    known = DEFAULT_VERSION  # old history: no marker, no seq consumed
                else:
                    self._match(
                        {
                            "type": "record_marker",
                            "seq": self.next_seq(),
                            "kind": "version",
                            "value": {"change_id": change_id},
                        }
                    )
                    known = int(cast(int, value.get("version")))  # (a version marker has one)
                    if not min_supported <= known <= max_supported:  # where, as any divergence says
                        self._raise_fatal(
                            self._version_outside(change_id, known, min_supported, max_supported, seq)
                        )
            else:
                known = max_supported
                self._new_commands.append(
                    {
                        "type": "record_marker",
                        "seq": self.next_seq(),
                        "kind": "version",
                        "value": {"change_id": change_id, "version": known},
                    }
                )
            self._versions[change_id] = known
        if not min_supported <= known <= max_supported:
            self._raise_fatal(self._version_outside(change_id, known, min_supported, max_supported, None))
        return known

    @staticmethod
    def _version_outside(
        change_id: str, known: int, min_supported: int, max_supported: int, seq: int | None
    ) -> NonDeterminismError:
        where = f" at seq {seq}" if seq is not None else ""
        exc = NonDeterminismError(
            f"non-determinism{where}: version {known} recorded for change {change_id!r} is outside "
            f"the supported range [{min_supported}, {max_supported}]"
        )
        exc.seq = seq  # type: ignore[attr-defined]
        exc.expected = f"version marker {change_id!r} v{known}"  # type: ignore[attr-defined]
        exc.got = f"ctx.version({change_id!r}, {min_supported}, {max_supported})"  # type: ignore[attr-defined]
        return exc

    def call_side_effect(self, fn: Callable[[], Any]) -> Any:
        try:
            result = fn()
        except Exception as exc:
            self._raise_fatal(
                IllegalWorkflowOperation(
                    f"side_effect function {getattr(fn, '__name__', fn)!r} raised "
                    f"{type(exc).__name__}: {exc}; a side effect must not fail (its failure "
                    "cannot be replayed), so the workflow task fails and will be retried. "
                    "Use an activity for work that can fail."
                )
            )
        if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
            self._raise_fatal(
                IllegalWorkflowOperation(
                    "side_effect expects a plain function; use an activity for async work"
                )
            )
        return result
