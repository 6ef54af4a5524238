"""``WorkflowRun``: turn a history into the next commands, with no database.

It implements the batch replay rule of ``docs/internals.md``: each
``WorkflowTaskCompleted{through}`` marker is one step (deliver the resolution
events up to ``through``, run until blocked, check the issued commands against
the command events recorded after that marker); what follows the last marker is
the new batch, whose commands are returned. A cached run receives only new
events and takes the same steps, so both paths return identical commands.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import random as _random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from harvest.definitions import App, WorkflowDefinition
from harvest.errors import ActivityError, ActivityFailure, HarvestError, NonDeterminismError
from harvest.payload import decode_args, encode
from harvest.runtime.context import WorkflowContext, WorkflowInfo
from harvest.runtime.local import LocalActivityContext, run_local_activity
from harvest.runtime.loop import DeterministicEventLoop, IllegalWorkflowOperation

__all__ = ["Activation", "HistoryMismatch", "WorkflowRun"]

COMMAND_EVENTS = {"ActivityScheduled": "schedule_activity", "TimerStarted": "start_timer",
                  "MarkerRecorded": "record_marker"}
RESOLUTION_EVENTS = {"ActivityCompleted": "activity", "ActivityFailed": "activity",
                     "TimerFired": "timer"}
TERMINAL_EVENTS = {"WorkflowCompleted", "WorkflowFailed", "WorkflowTerminated",
                   "WorkflowCancelled", "WorkflowTimedOut", "WorkflowContinuedAsNew"}


class HistoryMismatch(HarvestError):
    """The new events do not continue this cached run; replay from the full history."""


@dataclass
class Activation:
    """The answer to one workflow task: new commands and the last event id read."""

    commands: list[dict[str, Any]]
    through: int
    finished: bool = False


@dataclass
class _Pending:
    seq: int
    kind: str  # "activity" | "timer" | "local_activity"
    name: str | None
    future: asyncio.Future
    defn: Any = None
    args: tuple = ()
    recorded: Any = None  # a local activity's marker value, when replayed
    done: bool = False


def _describe_command(cmd: dict) -> str:
    kind = cmd["type"]
    if kind == "schedule_activity":
        return f"schedule_activity {cmd.get('name')!r}"
    if kind == "record_marker":
        if cmd.get("kind") == "local_activity":
            return f"local activity {(cmd.get('value') or {}).get('name')!r}"
        return f"record_marker {cmd.get('kind')!r}"
    return kind


def _event_as_command(event: dict) -> dict:
    return {"type": COMMAND_EVENTS[event["event_type"]], **event["event_data"]}


def _same(cmd: dict, recorded: dict) -> bool:
    return _describe_command(cmd) == _describe_command(recorded)


def _nondeterminism(seq: int, expected: str, got: str, hint: str = "") -> NonDeterminismError:
    exc = NonDeterminismError(f"non-determinism at seq {seq}: expected {expected}, got {got}"
                              + (f" ({hint})" if hint else ""))
    exc.seq, exc.expected, exc.got = seq, expected, got  # type: ignore[attr-defined]
    return exc


class WorkflowRun:
    """One execution's workflow code, stepped through its history."""

    def __init__(self, app_or_definition: Any, workflow_definition: Any = None,
                 execution_id: str = "", workflow_id: str | None = None,
                 task_queue: str | None = None, *,
                 activity_context_factory: Callable[[str, int, int, str], Any] | None = None,
                 clock: Callable[[], _dt.datetime] | None = None,
                 rng: _random.Random | None = None,
                 local_sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep):
        if isinstance(app_or_definition, App) or app_or_definition is None:
            self.app = app_or_definition
            wf = workflow_definition
        elif workflow_definition is None:
            self.app, wf = None, app_or_definition
        else:
            raise TypeError("WorkflowRun(app_or_definition, workflow_definition, ...): "
                            "the first argument must be an App (or None) when both are given")
        if isinstance(wf, str):
            if self.app is None:
                raise TypeError("a workflow name needs an App to look it up")
            wf = self.app.workflow(wf)
        self.definition: WorkflowDefinition = getattr(wf, "__harvest_workflow__", wf)
        if not isinstance(self.definition, WorkflowDefinition):
            raise TypeError(f"WorkflowRun: {wf!r} is not a @workflow")
        self.execution_id = str(execution_id)
        self._workflow_id, self._task_queue = workflow_id, task_queue
        self.activity_context_factory = activity_context_factory or LocalActivityContext
        self.clock = clock or (lambda: _dt.datetime.now(_dt.UTC))
        self.rng = rng or _random.SystemRandom()
        self._local_sleep = local_sleep
        self._loop = DeterministicEventLoop()
        self.ctx: WorkflowContext | None = None
        self._main: asyncio.Task | None = None
        self._start: dict | None = None
        self.last_event_id = 0
        self._markers: deque[tuple[int, int]] = deque()  # (event_id, through), not yet stepped
        self._groups: dict[int, dict[int, dict]] = {}  # marker event id -> seq -> command event
        self._group_owner: int | None = None
        self._resolutions: deque[dict] = deque()
        self._terminal_event: dict | None = None
        self._seq = 0
        self._pending: dict[int, _Pending] = {}
        self._expected: dict[int, dict] | None = None  # recorded commands of a replayed step
        self._new_commands: list[dict] = []
        self._live: tuple[int, list[dict]] | None = None  # last activation, not yet confirmed
        self._fatal: BaseException | None = None
        self.through = 0
        self.is_replaying = False
        self.finished = False

    # ------------------------------------------------------------------ public
    async def advance(self, new_events: list[dict]) -> Activation:
        """Feed events not seen before; get the commands of the new batch."""
        if self._fatal is not None:
            raise self._fatal
        self._ingest(new_events)
        if self._terminal_event is not None or self.finished:
            self.finished = True
            return Activation([], self.last_event_id, True)
        if self._main is None:
            self._begin()
        while self._markers:
            marker_id, through = self._markers.popleft()
            if self._live is not None:
                self._confirm_live(marker_id, through)
            else:
                self._replay_step(marker_id, through)
        if self._live is not None:
            raise HistoryMismatch(f"execution {self.execution_id}: the last activation "
                                  f"(through {self._live[0]}) was never recorded in the history")
        return await self._live_step()

    def close(self) -> None:
        """Drop an evicted run; its suspended coroutines are abandoned."""
        self._loop.close()
        self._pending.clear()

    # ------------------------------------------------------------------ history
    def _ingest(self, events: list[dict]) -> None:
        for event in events:
            event_id = int(event["event_id"])
            if event_id != self.last_event_id + 1:
                raise HistoryMismatch(f"execution {self.execution_id}: expected event "
                                      f"{self.last_event_id + 1}, got {event_id}")
            self.last_event_id = event_id
            data = event.get("event_data") or {}
            if isinstance(data, str):
                data = json.loads(data)
            event = {"event_id": event_id, "event_type": event["event_type"], "event_data": data}
            kind = event["event_type"]
            if kind == "WorkflowStarted":
                self._start = data
            elif kind == "WorkflowTaskCompleted":
                self._markers.append((event_id, int(data["through"])))
                self._groups[event_id] = {}
                self._group_owner = event_id
            elif kind in COMMAND_EVENTS:
                if self._group_owner is None:
                    raise HistoryMismatch(f"event {event_id} {kind} precedes any "
                                          "WorkflowTaskCompleted")
                self._groups[self._group_owner][int(data["seq"])] = event
            elif kind in RESOLUTION_EVENTS:
                self._resolutions.append(event)
            elif kind in TERMINAL_EVENTS:
                self._terminal_event = event

    def _begin(self) -> None:
        if self._start is None:
            raise HistoryMismatch(f"execution {self.execution_id}: the history must begin "
                                  "with WorkflowStarted")
        info = WorkflowInfo(
            workflow_id=str(self._workflow_id or self._start.get("workflow_id") or ""),
            execution_id=self.execution_id,
            workflow_name=self._start.get("workflow_name") or self.definition.name,
            task_queue=self._task_queue or self._start.get("task_queue")
            or self.definition.queue)
        self.ctx = WorkflowContext(self, info)
        self._main = self._loop.create_task(self._run_main(self._start.get("input")))

    async def _run_main(self, json_input: Any) -> Any:
        fn = self.definition.fn
        args, kwargs = decode_args(fn, json_input)
        result = await fn(self.ctx, *args, **kwargs)
        return encode(result, "result")

    # ------------------------------------------------------------------ steps
    def _replay_step(self, marker_id: int, through: int) -> None:
        self.is_replaying, self.through = True, through
        self._expected = dict(self._groups.pop(marker_id))
        self._deliver(through)
        self._run_until_blocked_replay()
        if self._main.done():
            raise NonDeterminismError(
                f"non-determinism: the workflow finished while replaying the step through "
                f"event {through}, but its history continues (event {marker_id} onwards)")
        if self._expected:
            seq = min(self._expected)
            expected = _describe_command(_event_as_command(self._expected[seq]))
            self._raise_fatal(_nondeterminism(seq, expected, "nothing",
                                              "the code no longer issues this command"))
        self._expected = None

    def _run_until_blocked_replay(self) -> None:
        while True:
            self._step_loop()
            ready = sorted((p for p in self._pending.values()
                            if p.kind == "local_activity" and not p.done), key=lambda p: p.seq)
            if self._main.done() or not ready:
                return
            for p in ready:
                self._resolve_local(p, p.recorded)

    async def _live_step(self) -> Activation:
        self.is_replaying, self.through = False, self.last_event_id
        self._new_commands = []
        self._deliver(None)
        while True:
            self._step_loop()
            if self._main.done():
                self.finished = True
                break
            ready = sorted((p for p in self._pending.values()
                            if p.kind == "local_activity" and not p.done), key=lambda p: p.seq)
            if not ready:
                break
            values = await asyncio.gather(*(self._execute_local(p) for p in ready))
            for p, value in zip(ready, values):
                self._new_commands.append({"type": "record_marker", "seq": p.seq,
                                           "kind": "local_activity", "value": value})
                self._resolve_local(p, value)
        commands = sorted(self._new_commands, key=lambda c: c["seq"])
        self._new_commands = []
        if self.finished:
            commands.append(self._terminal_command())
        self._live = (self.last_event_id, commands)
        return Activation(commands, self.last_event_id, self.finished)

    def _confirm_live(self, marker_id: int, through: int) -> None:
        live_through, commands = self._live
        recorded = self._groups.pop(marker_id)
        issued = {c["seq"]: c for c in commands if "seq" in c}
        if through != live_through or set(recorded) != set(issued) or not all(
                _same(issued[s], _event_as_command(recorded[s])) for s in issued):
            raise HistoryMismatch(f"execution {self.execution_id}: the history's step at event "
                                  f"{marker_id} (through {through}) is not the activation this "
                                  f"cached run produced (through {live_through})")
        self._live = None

    def _step_loop(self) -> None:
        self._loop.run_until_idle()
        if self._loop.fatal_error is not None:
            self._fatal = self._loop.fatal_error
            raise self._fatal
        if self._main.done() and not self._main.cancelled() \
                and isinstance(self._main.exception(), NonDeterminismError):
            self._fatal = self._main.exception()
            raise self._fatal

    def _terminal_command(self) -> dict:
        task = self._main
        if task.cancelled():
            return {"type": "fail_workflow", "failure": {
                "error_type": "CancelledError", "message": "the workflow was cancelled",
                "non_retryable": True, "details": None}}
        exc = task.exception()
        if exc is None:
            return {"type": "complete_workflow", "result": task.result()}
        if isinstance(exc, ActivityError):
            exc = exc.failure
        if isinstance(exc, ActivityFailure):
            failure = {"error_type": exc.error_type, "message": exc.message,
                       "non_retryable": True, "details": exc.details}
        else:
            failure = {"error_type": type(exc).__name__, "message": str(exc),
                       "non_retryable": True, "details": None}
        return {"type": "fail_workflow", "failure": failure}

    # ------------------------------------------------------------------ resolution
    def _deliver(self, through: int | None) -> None:
        keep: deque[dict] = deque()
        while self._resolutions:
            event = self._resolutions.popleft()
            if through is None or event["event_id"] <= through:
                self._resolve(event)
            else:
                keep.append(event)
        self._resolutions = keep

    def _resolve(self, event: dict) -> None:
        data, kind = event["event_data"], event["event_type"]
        seq = int(data.get("seq", 0))
        pending = self._pending.pop(seq, None)
        if pending is None or pending.kind != RESOLUTION_EVENTS[kind]:
            self._fatal = NonDeterminismError(
                f"non-determinism: event {event['event_id']} {kind} resolves seq {seq}, "
                f"but the code has no pending {RESOLUTION_EVENTS[kind]} at that seq")
            raise self._fatal
        pending.done = True
        if pending.future.done():  # the awaiting task was cancelled; the outcome is moot
            return
        if kind == "ActivityFailed":
            failure = ActivityFailure.from_json(data.get("failure") or {})
            pending.future.set_exception(ActivityError(pending.name or "?", failure))
        else:
            pending.future.set_result(data.get("result"))

    def _resolve_local(self, pending: _Pending, value: dict) -> None:
        pending.done = True
        self._pending.pop(pending.seq, None)
        if pending.future.done():
            return
        if "failure" in value:
            failure = ActivityFailure.from_json(value.get("failure") or {})
            pending.future.set_exception(ActivityError(pending.name or "?", failure))
        else:
            pending.future.set_result(value.get("result"))

    async def _execute_local(self, pending: _Pending) -> dict:
        defn = pending.defn
        if defn.fn is None:
            return {"name": defn.name, "failure": {
                "error_type": "NotFound", "non_retryable": True, "details": None,
                "message": f"local activity {defn.name!r} is not registered in this App"}}
        return await run_local_activity(defn, pending.args, self.execution_id, pending.seq,
                                        self.activity_context_factory, self._local_sleep)

    # ------------------------------------------------------------------ for WorkflowContext
    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def find_activity(self, name: str) -> Any:
        return self.app.find_activity(name) if self.app is not None else None

    def set_logical_time(self, timestamp: float) -> None:
        self._loop.logical_time = timestamp

    def _raise_fatal(self, exc: BaseException) -> None:
        if self._loop.fatal_error is None:
            self._loop.fatal_error = exc
        self._fatal = self._fatal or exc
        raise exc

    def _match(self, command: dict) -> dict | None:
        """Replay: check ``command`` against the history and return the recorded event data."""
        if self._expected is None:
            return None
        seq = command["seq"]
        event = self._expected.pop(seq, None)
        got = _describe_command(command)
        if event is None:
            self._raise_fatal(_nondeterminism(seq, "no command (the history has none here)",
                                              got))
        recorded = _event_as_command(event)
        if not _same(command, recorded):
            self._raise_fatal(_nondeterminism(seq, _describe_command(recorded), got))
        return event["event_data"]

    def issue(self, command: dict, kind: str, name: str | None) -> asyncio.Future:
        """Issue an activity or timer command; the future resolves from its history event."""
        if self._match(command) is None:
            self._new_commands.append(command)
        future = self._loop.create_future()
        self._pending[command["seq"]] = _Pending(command["seq"], kind, name, future)
        return future

    def issue_local(self, defn: Any, args: tuple) -> asyncio.Future:
        seq = self.next_seq()
        probe = {"type": "record_marker", "seq": seq, "kind": "local_activity",
                 "value": {"name": defn.name}}
        recorded = self._match(probe)
        future = self._loop.create_future()
        self._pending[seq] = _Pending(seq, "local_activity", defn.name, future, defn, tuple(args),
                                      recorded["value"] if recorded is not None else None)
        return future

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

    def call_side_effect(self, fn: Callable[[], Any]) -> Any:
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - user code; reported, never swallowed
            self._raise_fatal(IllegalWorkflowOperation(
                f"side_effect function {getattr(fn, '__name__', fn)!r} raised "
                f"{type(exc).__name__}: {exc}; a side effect must not fail (its failure "
                "cannot be replayed), so the workflow task fails and will be retried. "
                "Use an activity for work that can fail."))
        if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
            self._raise_fatal(IllegalWorkflowOperation(
                "side_effect expects a plain function; use an activity for async work"))
        return result
