"""``WorkflowRun``: turn a history into the next commands, with no database.

It implements the batch replay rule of ``docs/internals.md``: each
``WorkflowTaskCompleted{through}`` marker is one step (deliver the resolution
events up to ``through``, run until blocked, check the issued commands against
the command events recorded after that marker); what follows the last marker is
the new batch, whose commands are returned. A cached run receives only new
events and takes the same steps, so both paths return identical commands.

Resolution events are delivered synchronously in ``event_id`` order before the
code runs: activity/timer/child outcomes resolve their ``seq``'s future,
``SignalReceived`` feeds the per-name signal buffer (``signals.py``) and
``WorkflowCancelRequested`` cancels the main task. A child's
``ChildWorkflowStarted`` (a command event) reaches its handle when the step that
issued it is confirmed, so warm and cold runs see it at the same point.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import functools
import json
import random as _random
import sys
import types
from asyncio.events import _get_running_loop, _set_running_loop
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from harvest.core.codecs import is_erased
from harvest.core.deprecation import queue_alias
from harvest.core.errors import (
    ActivityError,
    ActivityFailure,
    ChildWorkflowError,
    HarvestError,
    InvalidArgument,
    NonDeterminismError,
    PayloadError,
    external_workflow_error,
    failure_traceback,
)
from harvest.core.payload import approx_size, decode_args, decode_result, encode, return_hint, type_name
from harvest.declare.definitions import App, WorkflowDefinition
from harvest.runtime.children import ChildHandle
from harvest.runtime.commands import (
    COMMAND_EVENTS,
    RESOLUTION_EVENTS,
    TERMINAL_COMMANDS,
    TERMINAL_EVENTS,
    CommandIssuer,
    Pending,
    closed_by_engine,
    describe_command,
    event_as_command,
    failure_json,
    nondeterminism,
    same,
)
from harvest.runtime.conditions import ConditionWaits
from harvest.runtime.context import (
    ContinueAsNew,
    WorkflowContext,
    WorkflowInfo,
    never_awaited_message,
)
from harvest.runtime.local import LocalActivityContext, run_local_activity
from harvest.runtime.loop import DeterministicEventLoop, IllegalWorkflowOperation
from harvest.runtime.messages import RunHandlers
from harvest.runtime.signals import SignalBuffer

__all__ = [
    "DEFAULT_CONTINUE_AS_NEW_THRESHOLD",
    "Activation",
    "HistoryMismatch",
    "LocalActivitiesDeferred",
    "WorkflowRun",
]

DEFAULT_CONTINUE_AS_NEW_THRESHOLD = 10_000
_UNSET = object()
# The runs' default source of ctx.random() and ctx.uuid4() (recorded as markers, so a replay
# reads them back). SystemRandom keeps no state (each draw reads os.urandom), so one serves
# every run: a new one per run cost each run its construction and nothing else.
_SYSTEM_RANDOM = _random.SystemRandom()
# Commands whose one event, written by our own commit, tells the run nothing it
# does not know (WorkflowRun.recorded). A child's start event carries the child's
# id; a mutex marker may be followed by a grant; a terminal command ends the run.
_SELF_RECORDING = frozenset({"schedule_activity", "start_timer", "record_marker", "cancel_timer"})
# What a run is handed from outside, by event type: the field holding the payload its code
# receives (and may keep). Their sizes add up to WorkflowRun.payload_bytes, the sticky cache's
# estimate of what a run holds beyond its fixed cost (harvest/worker/workflows.py).
_PAYLOAD_FIELD = {
    "WorkflowStarted": "input",
    "ActivityCompleted": "result",
    "ActivityFailed": "failure",
    "ChildWorkflowCompleted": "result",
    "ChildWorkflowFailed": "failure",
    "SignalReceived": "payload",
    "UpdateAccepted": "input",
    "WorkflowCancelRequested": "reason",
    "MarkerRecorded": "value",
}
# The vocabulary as sets, for the per-event tests of _ingest (the event types are disjoint).
_COMMAND_EVENTS = frozenset(COMMAND_EVENTS)
_RESOLUTION_EVENTS = frozenset(RESOLUTION_EVENTS)
_TERMINAL_COMMAND_EVENTS = frozenset(TERMINAL_COMMANDS.values())
_TERMINAL_EVENT_NAMES = frozenset(TERMINAL_EVENTS)


def _gather_done_code() -> tuple[types.CodeType | None, int | None]:
    """The code of ``asyncio.gather``'s per-child callback and the index of ``outer`` (the
    gathering future) in its closure; (None, None) if this asyncio's gather has none."""
    for const in asyncio.tasks.gather.__code__.co_consts:
        if (
            isinstance(const, types.CodeType)
            and const.co_name == "_done_callback"
            and "outer" in const.co_freevars
        ):
            return const, const.co_freevars.index("outer")
    return None, None


_GATHER_DONE_CODE, _GATHER_OUTER = _gather_done_code()
_EXECUTE_ACTIVITY_CODE = WorkflowContext.execute_activity.__wrapped__.__code__  # type: ignore[attr-defined]


def _started(coro: Any) -> bool:
    return bool(coro.cr_frame is None or coro.cr_suspended or coro.cr_running)


def _references(entry: tuple[Any, ...]) -> int:
    """The reference count of ``entry``'s coroutine, as ``check_awaited`` sees it."""
    coro = entry[0]
    return sys.getrefcount(coro)


# A replayed step checks the ctx calls it made only once this many are waiting: a replay of a
# long history would otherwise pay a check per step (about 3% of its time), and a dropped call
# is reported as surely later (made holds it), at the latest by the live step after the replay.
_MADE_CHECKED_AT = 32

# What _references answers for an object that only its entry holds (measured, not assumed: the
# interpreter's own references in the call differ between Python versions).
_UNHELD = _references((object(),))


class HistoryMismatch(HarvestError):
    """The new events do not continue this cached run; replay from the full history."""


class LocalActivitiesDeferred(HarvestError):
    """The step would run local activities, which the caller asked not to; the run is
    left mid-step and must be dropped."""


@dataclass
class Activation:
    """The answer to one workflow task: new commands and the last event id read."""

    commands: list[dict[str, Any]]
    through: int
    finished: bool = False
    # The run now waits for all of its open activities at once (WorkflowRun.holds_wakeups):
    # its results need not wake it one batch at a time.
    hold: bool = False
    # The ctx.wait_for_signal calls still pending (SignalBuffer.awaiting), None when none: the
    # decision reports them (the await_signals directive), so the run's stack names them.
    awaiting: list[dict[str, Any]] | None = None


class WorkflowRun(CommandIssuer):
    """One execution's workflow code, stepped through its history."""

    # Where the worker puts this run's spans (harvest/worker/workflows.py, _trace_seed).
    trace_seed: dict[str, Any] | None = None

    def __init__(
        self,
        app_or_definition: Any,
        workflow_definition: Any = None,
        execution_id: str = "",
        workflow_id: str | None = None,
        queue: str | None = None,
        *,
        task_queue: str | None = None,
        activity_context_factory: Callable[[str, int, int, str], Any] | None = None,
        clock: Callable[[], _dt.datetime] | None = None,
        rng: _random.Random | None = None,
        local_sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        continue_as_new_threshold: int = DEFAULT_CONTINUE_AS_NEW_THRESHOLD,
        inputs_encoded: bool | None = None,
    ):
        if isinstance(app_or_definition, App) or app_or_definition is None:
            self.app = app_or_definition
            wf = workflow_definition
        elif workflow_definition is None:
            self.app, wf = None, app_or_definition
        else:
            raise TypeError(
                "WorkflowRun(app_or_definition, workflow_definition, ...): "
                "the first argument must be an App (or None) when both are given"
            )
        if isinstance(wf, str):
            if self.app is None:
                raise TypeError("a workflow name needs an App to look it up")
            wf = self.app.workflow(wf)
        self.definition: WorkflowDefinition = getattr(wf, "__harvest_workflow__", wf)
        if not isinstance(self.definition, WorkflowDefinition):
            raise TypeError(f"WorkflowRun: {wf!r} is not a @workflow")
        if not isinstance(continue_as_new_threshold, int) or continue_as_new_threshold < 0:
            raise InvalidArgument(
                f"continue_as_new_threshold: {continue_as_new_threshold!r} must be an int >= 0"
            )
        # Whether the database holds the inputs this run's activities get encoded (the worker's
        # codecs; None: its App's): a key path given per call never resolves then (refused).
        if inputs_encoded is None:
            inputs_encoded = self.app is not None and bool(self.app.payloads.chain.codecs)
        self.inputs_encoded = inputs_encoded
        self.execution_id = str(execution_id)
        self._workflow_id, self._queue = workflow_id, queue_alias(queue, task_queue)
        self.activity_context_factory = activity_context_factory or LocalActivityContext
        self.clock = clock or (lambda: _dt.datetime.now(_dt.UTC))
        self.rng = rng or _SYSTEM_RANDOM
        self.continue_as_new_threshold = continue_as_new_threshold
        self._local_sleep = local_sleep
        self._loop = DeterministicEventLoop()  # type: ignore[abstract]  # no I/O methods: workflows do no I/O
        self.ctx: WorkflowContext | None = None
        self._main: asyncio.Task[Any] | None = None
        self._start: dict[str, Any] | None = None
        self.last_event_id = 0
        # About the bytes of the payloads fed to the run so far (_PAYLOAD_FIELD, approx_size):
        # counted once per event as it is read, never by walking the run.
        self.payload_bytes = 0
        # What _ingest reads and the steps consume, held without a container per step (a long
        # history's groups and pairs all lived until their step, for the collector to walk):
        # the markers not yet stepped as flat pairs (event_id, through, event_id, through, ...),
        # and every command event not yet taken by its step, in event order. A step's command
        # events are the ones before the next marker (_take_group).
        self._markers: deque[int] = deque()
        self._commands: deque[dict[str, Any]] = deque()
        self._group_owner: int | None = None  # the last marker read: command events after it are its
        self._group_starts: list[dict[str, Any]] | None = None  # the taken group's ChildWorkflowStarted
        self._resolutions: deque[dict[str, Any]] = deque()
        self._terminal_event: dict[str, Any] | None = None
        self._terminal_owner: int | None = None  # the marker whose step wrote the terminal event
        self._seq = 0
        self._pending: dict[int, Pending] = {}
        self._issued_local = False  # a local activity was issued: steps look for ready ones
        self._expected: dict[int, dict[str, Any]] | None = None  # recorded commands of a replayed step
        self._new_commands: list[dict[str, Any]] = []
        self._live: tuple[int, list[dict[str, Any]]] | None = None  # last activation, not yet confirmed
        self._fatal: BaseException | None = None
        self.signals = SignalBuffer()
        self._conditions: ConditionWaits | None = None  # ctx.wait_condition's, made at its first call
        # The coroutines ctx's methods made since the step's loop last ran (check_awaited).
        self.made: list[tuple[Any, str, types.CodeType, int]] = []
        self.handlers = RunHandlers(self)  # queries and updates
        self._children: dict[int, ChildHandle[Any]] = {}
        self._cancelled_timers: set[int] = set()
        self._versions: dict[str, int] = {}
        self._mutex_keys: set[str] = set()  # keys held or awaited by ctx.mutex (runtime/mutex.py)
        self.cancel_requested = False
        self.cancel_reason: Any = None
        self._cancel_details: Any = _UNSET
        self.through = 0
        self.is_replaying = False
        self.finished = False
        self.holding = False  # the last live step's Activation.hold
        # The marker of the replayed step running now (None in a live step): a signal wait
        # begun in it began there (SignalBuffer.wait's since).
        self.step_marker: int | None = None

    # ------------------------------------------------------------------ public
    async def advance(self, new_events: list[dict[str, Any]], *, local_activities: bool = True) -> Activation:
        """Feed events not seen before; get the commands of the new batch.

        With ``local_activities=False`` a step that would run a local activity raises
        ``LocalActivitiesDeferred`` instead (deciding ahead must stay quick: see
        worker/decide_ahead.py).
        """
        if self._fatal is not None:
            raise self._fatal
        # Step while reading (_ingest) unless the run has ended or this batch ends it: a batch
        # that closes the run replays nothing (below), so its steps would be work thrown away.
        last = new_events[-1] if type(new_events) is list and new_events else None
        last_kind = last.get("event_type") if type(last) is dict else None
        stream = not (
            self.finished
            or self._terminal_event is not None
            or (type(last_kind) is str and last_kind in _TERMINAL_EVENT_NAMES)
        )
        # The synchronous part (every recorded step) runs with our loop as the running one,
        # set once here rather than by each step's run_until_idle.
        prev = _get_running_loop()
        _set_running_loop(self._loop)
        try:
            deferred = self._ingest(new_events, stream)
            if self._terminal_event is not None or self.finished:
                if deferred is not None:
                    self._fatal = None  # (a step taken before the terminal event was read)
                self.finished = True
                return Activation([], self.last_event_id, True)
            if deferred is not None:
                raise deferred
            if self._main is None:
                self._begin()
            markers = self._markers
            while markers:
                marker_id, through = markers.popleft(), markers.popleft()
                if self._live is not None:
                    self._confirm_live(marker_id, through)
                else:
                    self._replay_step(marker_id, through)
        finally:
            _set_running_loop(prev)
        if self._live is not None:
            raise HistoryMismatch(
                f"execution {self.execution_id}: the last activation "
                f"(through {self._live[0]}) was never recorded in the history"
            )
        return await self._live_step(local_activities)

    @property
    def settled(self) -> bool:
        """Whether the run has read its whole history: its last activation is recorded
        and read back (or was accepted by :meth:`recorded`), and it has not ended."""
        return self._live is None and self._fatal is None and not self.finished and self._main is not None

    @property
    def is_child(self) -> bool:
        """Whether the run is a child (its WorkflowStarted names a parent, as a child's
        continue-as-new successor's does): its parent's history copies its end."""
        return bool(self._start is not None and self._start.get("parent_id"))

    def recorded(self, last_event_id: int) -> bool:
        """Our commit of the last activation succeeded and the history now ends at
        ``last_event_id``: take its events as read, without reading them back, when
        they can only be the activation's own (see ``_SELF_RECORDING``).

        The commit wrote the marker at ``through + 1`` and one event per command
        after it; a history ending exactly there holds nothing else. Returns whether
        the run took the events; if not, they confirm the activation when read.
        """
        if self._live is None:
            return False
        through, commands = self._live
        if (
            self.last_event_id != through
            or self._markers
            or self._resolutions
            or last_event_id != through + 1 + len(commands)
        ):
            return False
        for c in commands:  # (a loop, not all() of a generator: every live step comes here)
            if c["type"] not in _SELF_RECORDING:
                return False
        self._live = None
        self.last_event_id = last_event_id
        if self.signals.waits:  # (a run that waits on no signal: one test)
            self.signals.stamp(through + 1)  # (the marker's id: see above)
        return True

    def replay_history(self, events: list[dict[str, Any]]) -> None:
        """Check a whole history, closed or not, against the code; produce nothing new.

        Every recorded step is replayed and matched (``NonDeterminismError`` on the
        first difference); a history closed by a command must end the same way.
        Resolution events after the last step are not delivered, so no new command
        is issued and no local activity runs. Used by ``harvest.testing``.
        """
        if self._main is not None or self._fatal is not None:
            raise RuntimeError("replay_history needs a fresh WorkflowRun")
        if _erased(events):
            # Erasure left markers where the inputs and results were: code run on them fails
            # somewhere of its own (a KeyError in a query handler), or worse, goes on.
            raise PayloadError(
                "the run's payloads were erased (erase_payloads): its state cannot be rebuilt, "
                "so it is neither replayed nor queried nor updated"
            )
        prev = _get_running_loop()
        _set_running_loop(self._loop)
        try:
            deferred = self._ingest(events, True)
            if deferred is not None:
                raise deferred
            if self._main is None:  # (no step was taken while reading)
                self._begin()
            markers = self._markers
            while markers:
                marker_id, through = markers.popleft(), markers.popleft()
                self._replay_step(marker_id, through, closes=marker_id == self._terminal_owner)
        finally:
            _set_running_loop(prev)
        if self.made:  # (no live step follows: the replayed steps' calls not checked yet)
            self.check_awaited()
            if self._loop.fatal_error is not None:
                self._raise_fatal(self._loop.fatal_error)
        if self._terminal_owner is not None and not self._main_task.done():
            recorded = cast("dict[str, Any]", self._terminal_event)["event_type"]
            self._raise_fatal(
                nondeterminism(
                    None,
                    recorded,
                    "a workflow still running",
                    "the code no longer ends where the history did",
                )
            )

    def close(self) -> None:
        """Drop the run: an evicted run's suspended coroutines are abandoned, and a run that ended
        on its main task lets go of its context (``ctx`` is None after) and its handlers."""
        # (The loop closes the coroutines of the tasks it drops unstarted: the main task of a
        # history with no workflow task yet, or of a first step that failed before it ran.)
        self._loop.close()
        self._loop.on_idle = None  # (the condition waits' reference back to the run)
        for entry in self.made:  # held to await later, never awaited: no RuntimeWarning for them
            if not _started(entry[0]):
                entry[0].close()
        self.made = []
        self._pending.clear()
        self._children.clear()
        main = self._main
        if self.ctx is not None and main is not None and main.done() and self._loop.tasks_created == 1:
            # The run ended and none of its code can run again (its one task is done; a task of
            # its own, left suspended, could still run a finally when it is finalized): break
            # its two reference cycles (run <-> ctx, run <-> handlers), so that it is freed here
            # by its reference count. Left in them, each closed run (~30 objects) waited for the
            # cyclic collector, whose passes they set off: ~4% of a canonical drain's worker CPU
            # (docs/performance.md, "Cheaper Python, eighth cut").
            self.ctx = None
            self.handlers.detach()

    @property
    def conditions(self) -> ConditionWaits:
        """The run's ``ctx.wait_condition`` waits (checked by the loop whenever it is idle)."""
        conditions = self._conditions
        if conditions is None:
            conditions = self._conditions = ConditionWaits(self)
        return conditions

    def awaited_conditions(self) -> list[str]:
        """The predicates the run's pending ``ctx.wait_condition`` calls wait on, oldest first."""
        conditions = self._conditions
        return [] if conditions is None else conditions.awaited()

    def holds_wakeups(self) -> bool:
        """Whether the run, blocked, waits for all of its open activities at once: nothing of
        its code runs until the last of their results is in, or one fails.

        That is so when every pending durable wait is an activity still awaited, each awaited
        by exactly one task running ``WorkflowContext.execute_activity`` itself (which only
        decodes the result after it), each such task awaited by exactly one
        ``asyncio.gather``'s child callback, the same gather for all, and that gather has no
        other child still running. Then a result that leaves another activity open only
        counts in the gather, and the database may hold the run's wake-ups until they drain
        (docs/internals.md, "Held wake-ups"). Anything else (a timer, child or signal wait
        beside them, a task of the code's own between the result and the gather,
        ``as_completed``, ``wait(FIRST_COMPLETED)``, a second gather) answers False: the
        run is woken per result batch, as without a hold. It reads asyncio's gather by its
        code object and closure; on an asyncio whose gather is not shaped so, False.
        """
        pending = self._pending
        # (One open activity: its result leaves none open, so it wakes the run anyway; unheld,
        # it may be decided ahead: worker/decide_ahead.py skips a holding run.)
        if len(pending) < 2 or _GATHER_OUTER is None:
            return False
        outer: Any = None
        for p in pending.values():
            future: Any = p.future  # (asyncio's private fields below: C or Python, the same names)
            if p.kind != "activity" or future.done():
                return False
            waiters: Any = future._callbacks
            if not waiters or len(waiters) != 1:
                return False
            task: Any = getattr(waiters[0][0], "__self__", None)  # a task's wake-up, bound to it
            if not isinstance(task, asyncio.Task) or task._fut_waiter is not future:  # type: ignore[attr-defined]
                return False
            if getattr(task.get_coro(), "cr_code", None) is not _EXECUTE_ACTIVITY_CODE:
                return False
            waiters = task._callbacks
            if not waiters or len(waiters) != 1:
                return False
            callback: Any = waiters[0][0]
            if getattr(callback, "__code__", None) is not _GATHER_DONE_CODE:
                return False
            gathering = callback.__closure__[_GATHER_OUTER].cell_contents
            if outer is None:
                outer = gathering
            elif gathering is not outer:
                return False
        if outer is None or outer.done():
            return False
        running = 0
        for child in outer._children:
            if not child.done():
                running += 1
        return running == len(pending)

    # ------------------------------------------------------------------ history
    def _ingest(self, events: list[dict[str, Any]], stream: bool = False) -> BaseException | None:
        """Read a batch: check it, queue its markers, command events and resolutions.

        With ``stream``, a step is taken as soon as its events are all read (when the next
        marker is), while they are still in the CPU's caches: a long history is then walked
        once, not twice (it did not fit in them between the batch check and the steps). The
        errors are the ones reading the whole batch first and then stepping raised: a step's
        exception is kept (returned) and stepping stops, reading goes on and an error in the
        batch raises instead; a step is only taken early when it sees exactly what it would
        have seen after the whole batch (its events all read, the run's WorkflowStarted read,
        no terminal event read: see below). The steps not taken are left queued, as before.
        """
        # The hot loop of a replay: attributes it touches per event are bound once, and
        # last_event_id is written back however the loop ends (as if set per event).
        deferred: BaseException | None = None
        last, held = self.last_event_id, self.payload_bytes
        markers, commands, resolutions = self._markers, self._commands, self._resolutions
        # Whether the last marker read is still to be stepped (its group is open): command
        # events join it. Within a batch it always is; a batch that begins with a command event
        # after the previous batch's steps continues a step already taken.
        group_open = bool(markers)
        event: Any = None  # (the one being read, for the error of a malformed one)
        try:
            for event in events:
                raw_id = event["event_id"]
                event_id = raw_id if type(raw_id) is int else int(raw_id)
                if event_id != last + 1:
                    raise HistoryMismatch(
                        f"execution {self.execution_id}: expected event {last + 1}, got {event_id}"
                    )
                last = event_id
                data = event.get("event_data") or {}
                if isinstance(data, str):
                    data = json.loads(data)
                kind = event["event_type"]
                if (
                    type(event) is not dict
                    or len(event) != 3
                    or event["event_data"] is not data
                    or raw_id is not event_id
                ):
                    # Our own copy, in our shape; an event already in it is kept as it is (the
                    # run never changes an event: one dict less per event on a long replay).
                    event = {"event_id": event_id, "event_type": kind, "event_data": data}
                field = _PAYLOAD_FIELD.get(kind)
                if field is not None:
                    held += approx_size(data.get(field))
                if kind in _COMMAND_EVENTS:
                    if not group_open:
                        if self._group_owner is None:
                            raise HistoryMismatch(
                                f"event {event_id} {kind} precedes any WorkflowTaskCompleted"
                            )
                        raise HistoryMismatch(
                            f"execution {self.execution_id}: event {event_id} {kind} belongs to the "
                            f"step of event {self._group_owner}, which was already taken"
                        )
                    if type(data["seq"]) is not int:  # a command event has a seq (_take_group reads it)
                        int(data["seq"])
                    commands.append(event)
                elif kind in _RESOLUTION_EVENTS:
                    resolutions.append(event)
                elif kind == "WorkflowTaskCompleted":
                    # The step of the marker before this one has all its events: take it now if
                    # it saw none past this one (its `through`) and the run can begin.
                    if stream and markers:
                        if markers[1] < event_id and self._start is not None:
                            # As the steps after the batch take it (advance's, and replay_history's,
                            # whose early steps never close the run: no terminal event read yet).
                            marker_id, marker_through = markers.popleft(), markers.popleft()
                            try:
                                if self._main is None:
                                    self._begin()
                                if self._live is not None:
                                    self._confirm_live(marker_id, marker_through)
                                else:
                                    self._replay_step(marker_id, marker_through)
                            except Exception as exc:  # (raised once the batch is read)
                                deferred, stream = exc, False
                        else:
                            stream = False
                    markers.append(event_id)
                    through = data["through"]
                    markers.append(through if type(through) is int else int(through))
                    self._group_owner, group_open = event_id, True
                elif kind == "WorkflowStarted":
                    if self._start is not None:
                        # The engine writes one, as event 1; a run begun with one cannot take another.
                        raise HistoryMismatch(
                            f"execution {self.execution_id}: event {event_id} is a second WorkflowStarted"
                        )
                    self._start = data
                elif kind in TERMINAL_EVENTS:
                    # Steps after this wait for the whole batch: a batch that ends the run
                    # replays nothing (advance), and a closing step must know it closes.
                    stream = False
                    self._terminal_event = event
                    if kind in _TERMINAL_COMMAND_EVENTS and not closed_by_engine(kind, data):
                        self._terminal_owner = self._group_owner
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # An event without the fields of its type (a hand-edited or foreign file: the
            # replayer's), typed as what it is rather than left to escape as a KeyError.
            where = event.get("event_id") if isinstance(event, dict) else event  # (the loop's)
            raise HistoryMismatch(
                f"execution {self.execution_id}: event {where} is malformed "
                f"({type(exc).__name__}: {exc}): not an event of a Harvest history"
            ) from exc
        finally:
            self.last_event_id, self.payload_bytes = last, held
        return deferred

    def _begin(self) -> None:
        if self._start is None:
            raise HistoryMismatch(
                f"execution {self.execution_id}: the history must begin with WorkflowStarted"
            )
        info = WorkflowInfo(
            workflow_id=str(self._workflow_id or self._start.get("workflow_id") or ""),
            execution_id=self.execution_id,
            workflow_name=self._start.get("workflow_name") or self.definition.name,
            queue=self._queue or self._start.get("task_queue") or self.definition.queue,
        )
        self.ctx = WorkflowContext(self, info)
        self._main = self._loop.create_task(self._run_main(self._start.get("input")))

    async def _run_main(self, json_input: Any) -> Any:
        fn = self.definition.fn
        args, kwargs = decode_args(fn, json_input)
        if self.definition.dag is not None:  # a DAG's workflow: its graph interpreter runs instead
            from harvest.runtime.dags import run_dag

            fn = functools.partial(run_dag, dag=self.definition.dag)
        try:
            result = await fn(self.ctx, *args, **kwargs)
        except asyncio.CancelledError as exc:
            if exc.args and exc.args[0] is not None:
                self._cancel_details = exc.args[0]
            raise
        if type(result) is types.CoroutineType:  # `return ctx.execute_activity(...)`: a missing await
            made = next((entry for entry in self.made if entry[0] is result), None)
            result.close()
            if made is not None:
                raise IllegalWorkflowOperation(never_awaited_message(*made[1:]))
            raise IllegalWorkflowOperation("the workflow returned a coroutine: did you forget `await`?")
        if self.is_replaying:  # a completion the history holds: it stands as recorded
            return encode(result, "result")
        return self._recordable_result(result)

    def _recordable_result(self, result: Any) -> Any:
        """The result as the history will hold it, checked by the converter every typed reader
        decodes it with (handle.result(), a parent's child result). A value that cannot be
        written, or that its return hint does not allow, is a bug of the workflow code a deploy
        can fix: it fails the workflow task (the loop's fatal error), retried until fixed code
        runs, instead of ending the run FAILED or COMPLETED with a result no typed read accepts."""
        fn = self.definition.fn
        returned = f"workflow {self.definition.name!r} returned {type(result).__name__} {_short_repr(result)}"
        try:
            encoded = encode(result, "result")
        except PayloadError as exc:
            why = f"{returned}, which cannot be recorded ({exc})"
        else:
            try:
                decode_result(fn, encoded)
                return encoded
            except Exception as exc:  # (not only a PayloadError: a type's own constructor may raise)
                # Whatever the converter raises, every typed read would raise it too; the
                # check's error must fail the task, never end the run FAILED as the workflow's own.
                cause = str(exc) if isinstance(exc, PayloadError) else f"{type(exc).__name__}: {exc}"
                hint = type_name(return_hint(fn))
                why = f"{returned}, which its return hint {hint} does not allow ({cause})"
        refused = PayloadError(
            f"{why}; the run is not completed: its workflow task is retried until a worker runs fixed code"
        )
        if self._loop.fatal_error is None:
            self._loop.fatal_error = refused
        raise refused

    # ------------------------------------------------------------------ steps
    def _replay_step(self, marker_id: int, through: int, closes: bool = False) -> None:
        self.is_replaying, self.through, self.step_marker = True, through, marker_id
        expected = self._expected = self._take_group()  # (the code's _match takes from it)
        starts = self._group_starts
        resolutions = self._resolutions  # _deliver(through), inline: it runs once per step
        while resolutions and resolutions[0]["event_id"] <= through:
            self._resolve(resolutions.popleft())
        main = self._main
        assert main is not None  # (_begin ran)
        loop = self._loop
        loop.run_until_idle()  # (_step_loop and _run_until_blocked_replay, inline: once per step)
        if len(self.made) > _MADE_CHECKED_AT:  # (a live step checks each time: _check_step_loop)
            self.check_awaited()
        if loop.fatal_error is not None or main.done() or self._issued_local:
            self._run_until_blocked_replay()
        self.handlers.end_of_step()
        if main.done() and not closes:
            raise NonDeterminismError(
                f"non-determinism: the workflow finished while replaying the step through "
                f"event {through}, but its history continues (event {marker_id} onwards)"
            )
        if expected:
            seq = min(expected)
            self._raise_fatal(
                nondeterminism(
                    seq,
                    describe_command(event_as_command(expected[seq])),
                    "nothing",
                    "the code no longer issues this command",
                    expected[seq],
                )
            )
        self._expected = None
        if closes and main.done():
            got = TERMINAL_COMMANDS[self._terminal_command()["type"]]
            recorded = cast("dict[str, Any]", self._terminal_event)["event_type"]
            if got != recorded:
                self._raise_fatal(nondeterminism(None, recorded, got, "the workflow now ends differently"))
        if starts is not None:
            self._apply_started(starts)

    def _take_group(self) -> dict[int, dict[str, Any]]:
        """The command events of the step whose marker was just taken, by seq: the ones read
        before the next marker. Its ``ChildWorkflowStarted`` events go to ``_group_starts``
        (None if there are none), for ``_apply_started`` once the step is confirmed."""
        commands, group = self._commands, {}
        self._group_starts, started = None, False
        if commands:
            bound = self._markers[0] if self._markers else None  # the next marker's event id
            while commands and (bound is None or commands[0]["event_id"] < bound):
                event = commands.popleft()
                seq = event["event_data"]["seq"]
                group[seq if type(seq) is int else int(seq)] = event  # (int(seq), no call for an int)
                started = started or event["event_type"] == "ChildWorkflowStarted"
        if started:
            self._group_starts = [
                event for _, event in sorted(group.items()) if event["event_type"] == "ChildWorkflowStarted"
            ]
        return group

    def _run_until_blocked_replay(self) -> None:
        """The rest of a replayed step once its loop has run once: the checks of ``_step_loop``,
        then the recorded outcomes of its ready local activities, running the loop again
        after each round, until it is blocked."""
        main = self._main
        assert main is not None  # (_begin ran)
        while True:
            self._check_step_loop()
            if main.done() or not self._issued_local:
                return
            ready = [p for p in self._pending.values() if p.kind == "local_activity" and not p.done]
            if not ready:
                return
            ready.sort(key=lambda p: p.seq)
            for p in ready:
                self._resolve_local(p, p.recorded)
            self._loop.run_until_idle()

    async def _live_step(self, local_activities: bool = True) -> Activation:
        self.is_replaying, self.through, self.step_marker = False, self.last_event_id, None
        self._new_commands = []
        self._deliver(None)
        while True:
            self._step_loop()
            # (_main, not the _main_task property: set by the first step, and its cast a call)
            if self._main.done():  # type: ignore[union-attr]
                self.finished = True
                break
            if not self._issued_local:
                break
            ready = sorted(
                (p for p in self._pending.values() if p.kind == "local_activity" and not p.done),
                key=lambda p: p.seq,
            )
            if not ready:
                break
            if not local_activities:
                raise LocalActivitiesDeferred(
                    f"execution {self.execution_id}: the step runs "
                    f"{len(ready)} local activit{'y' if len(ready) == 1 else 'ies'}"
                )
            values = await asyncio.gather(*(self._execute_local(p) for p in ready))
            for p, value in zip(ready, values, strict=False):
                self._new_commands.append(
                    {"type": "record_marker", "seq": p.seq, "kind": "local_activity", "value": value}
                )
                self._resolve_local(p, value)
        self.handlers.end_of_step()
        commands = sorted(self._new_commands, key=lambda c: c["seq"])
        self._new_commands = []
        awaiting = None
        if self.finished:
            commands.append(self._terminal_command())
            self.holding = False
        else:
            self.holding = self.holds_wakeups()
            if self.signals.waits:
                awaiting = self.signals.awaiting()
        self._live = (self.last_event_id, commands)
        return Activation(commands, self.last_event_id, self.finished, self.holding, awaiting)

    def _confirm_live(self, marker_id: int, through: int) -> None:
        live_through, commands = cast("tuple[int, list[dict[str, Any]]]", self._live)
        recorded = self._take_group()
        starts = self._group_starts
        issued = {c["seq"]: c for c in commands if "seq" in c}
        if (
            through != live_through
            or set(recorded) != set(issued)
            or not all(same(issued[s], event_as_command(recorded[s])) for s in issued)
        ):
            raise HistoryMismatch(
                f"execution {self.execution_id}: the history's step at event "
                f"{marker_id} (through {through}) is not the activation this "
                f"cached run produced (through {live_through})"
            )
        self._live = None
        if self.signals.waits:
            self.signals.stamp(marker_id)
        if starts is not None:
            self._apply_started(starts)

    def _apply_started(self, starts: list[dict[str, Any]]) -> None:
        """A confirmed step's ``ChildWorkflowStarted`` events reach their handles, in seq order."""
        if not self._children:
            return  # no handle to reach
        for event in starts:
            handle = self._children.get(int(event["event_data"]["seq"]))
            if handle is not None:
                handle._set_started(event["event_data"])

    @property
    def _main_task(self) -> asyncio.Task[Any]:
        """The workflow function's task: set by the first step (``_begin``), read after it."""
        return cast("asyncio.Task[Any]", self._main)

    def _step_loop(self) -> None:
        self._loop.run_until_idle()
        self._check_step_loop()

    def _check_step_loop(self) -> None:
        """After the loop ran: a fatal error of the loop or a non-determinism error that
        ended the workflow ends the run."""
        loop = self._loop
        if self.made:
            self.check_awaited()
        if loop.fatal_error is not None:
            self._fatal = loop.fatal_error
            raise self._fatal
        main = self._main
        assert main is not None  # (_begin ran)
        if main.done() and not main.cancelled() and isinstance(main.exception(), NonDeterminismError):
            self._fatal = main.exception()
            raise cast(BaseException, self._fatal)

    def check_awaited(self) -> None:
        """Once the step's loop has run: a coroutine a ``ctx`` method made that never started and
        that nothing but ``made`` holds was dropped unawaited (``ctx.sleep("1h")`` as a statement):
        the loop's fatal error, an ``IllegalWorkflowOperation`` naming the call. One still held
        (to await later) is looked at again after the next step; one that started, never again."""
        held = []
        for entry in self.made:  # (no local names the coroutine: _references counts who holds it)
            if _started(entry[0]):
                continue  # it ran (or runs): awaited, gathered or made a task
            if _references(entry) > _UNHELD:
                held.append(entry)
                continue
            entry[0].close()  # (Python's own RuntimeWarning would point at unrelated code)
            if self._loop.fatal_error is None:
                self._loop.fatal_error = IllegalWorkflowOperation(never_awaited_message(*entry[1:]))
        self.made = held

    def _terminal_command(self) -> dict[str, Any]:
        task = self._main_task
        if task.cancelled():
            if self.cancel_requested:
                details = self.cancel_reason if self._cancel_details is _UNSET else self._cancel_details
                try:
                    details = encode(details, "details")
                except PayloadError:
                    details = str(details)
                return {"type": "cancel_workflow", "details": details}
            return {
                "type": "fail_workflow",
                "failure": {
                    "error_type": "CancelledError",
                    "message": "the workflow was cancelled",
                    "non_retryable": True,
                    "details": None,
                },
            }
        exc = task.exception()
        if exc is None:
            return {"type": "complete_workflow", "result": task.result()}
        if isinstance(exc, ContinueAsNew):
            # Signals delivered but not yet read go to the next run, in order.
            return {"type": "continue_as_new", "input": exc.input, "signals": self.signals.pending()}
        failure = failure_json(exc)
        stack = failure_traceback(exc)  # (where the workflow's code raised it: its own frames)
        if stack is not None:
            failure = {**failure, "traceback": stack}
        return {"type": "fail_workflow", "failure": failure}

    # ------------------------------------------------------------------ resolution
    def _deliver(self, through: int | None) -> None:
        # _ingest queues resolutions in event-id order, so the ones a step saw are a
        # prefix: stop at the first past `through` (walking the rest made replay
        # quadratic in the history's length).
        while self._resolutions and (through is None or self._resolutions[0]["event_id"] <= through):
            self._resolve(self._resolutions.popleft())

    def _resolve(self, event: dict[str, Any]) -> None:
        data, kind = event["event_data"], event["event_type"]
        if kind != "ActivityCompleted":  # (the common one goes straight to its seq)
            if kind == "UpdateAccepted":
                self.handlers.admit(data)
                return
            if kind == "SignalReceived":
                self.signals.deliver(str(data.get("name")), data.get("payload"))
                return
            if kind == "WorkflowCancelRequested":
                self._request_cancel(data.get("reason"))
                return
        seq = data.get("seq", 0)
        if type(seq) is not int:  # (int(seq), no call for an int)
            seq = int(seq)
        if kind == "TimerFired" and seq in self._cancelled_timers:
            return  # it fired before our cancel_timer reached the database; the wait is over
        pending = self._pending.pop(seq, None)
        if pending is None or pending.kind != RESOLUTION_EVENTS[kind]:
            self._fatal = NonDeterminismError(
                f"non-determinism: event {event['event_id']} {kind} resolves seq {seq}, "
                f"but the code has no pending {RESOLUTION_EVENTS[kind]} at that seq"
            )
            raise self._fatal
        pending.done = True
        if pending.on_fire is not None:
            pending.on_fire()
        if pending.future.done():  # the awaiting task was cancelled; the outcome is moot
            return
        if kind == "ActivityCompleted":
            pending.future.set_result(data.get("result"))
        elif kind == "ActivityFailed":
            failure = ActivityFailure.from_json(data.get("failure") or {})
            pending.future.set_exception(ActivityError(pending.name or "?", failure))
        elif kind == "ChildWorkflowFailed":
            child_id = data.get("child_execution_id") or (
                pending.handle.child_execution_id if pending.handle else None
            )
            pending.future.set_exception(
                ChildWorkflowError(
                    str(data.get("status") or "FAILED"), data.get("failure"), child_id, pending.name
                )
            )
        elif kind in ("ExternalSignalFailed", "ExternalCancelFailed"):
            action = "signal" if kind == "ExternalSignalFailed" else "cancel"
            pending.future.set_exception(external_workflow_error(action, data))
        elif kind == "ExternalCancelDelivered":
            pending.future.set_result(not data.get("already_requested"))
        else:
            pending.future.set_result(data.get("result"))

    def _request_cancel(self, reason: Any) -> None:
        if self.cancel_requested:
            return  # once per run
        self.cancel_requested, self.cancel_reason = True, reason
        if self._main is not None and not self._main.done():
            self._main.cancel(msg=reason if isinstance(reason, str) else None)

    def _resolve_local(self, pending: Pending, value: dict[str, Any]) -> None:
        pending.done = True
        self._pending.pop(pending.seq, None)
        if pending.future.done():
            return
        if "failure" in value:
            failure = ActivityFailure.from_json(value.get("failure") or {})
            pending.future.set_exception(ActivityError(pending.name or "?", failure))
        else:
            pending.future.set_result(value.get("result"))

    async def _execute_local(self, pending: Pending) -> dict[str, Any]:
        defn = pending.defn
        if defn.fn is None:
            return {
                "name": defn.name,
                "failure": {
                    "error_type": "NotFound",
                    "non_retryable": True,
                    "details": None,
                    "message": f"local activity {defn.name!r} is not registered in this App",
                },
            }
        factory = self.activity_context_factory
        if factory is LocalActivityContext and self.ctx is not None:  # (a factory of one's own: as given)
            info = self.ctx.info
            factory = functools.partial(
                LocalActivityContext,
                workflow_id=info.workflow_id,
                workflow_name=info.workflow_name,
                queue=info.queue,
            )
        return await run_local_activity(
            defn, pending.args, self.execution_id, pending.seq, factory, self._local_sleep
        )


def _erased(events: list[dict[str, Any]]) -> bool:
    """Whether ``events`` are an erased run's: erasure replaces every start input (the run's
    ``WorkflowStarted``'s) by ``[{"_harvest_erased": true}]`` (functions/payloads.sql)."""
    for event in events:
        if event.get("event_type") == "WorkflowStarted":
            data = event.get("event_data")
            data = json.loads(data) if isinstance(data, str) else data
            inputs = (data or {}).get("input")
            return isinstance(inputs, list) and any(is_erased(arg) for arg in inputs)
    return False


def _short_repr(value: Any, limit: int = 80) -> str:
    """A value in an error: its repr, cut at ``limit`` characters."""
    try:
        text = repr(value)
    except Exception:  # a repr of its own that raises
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
