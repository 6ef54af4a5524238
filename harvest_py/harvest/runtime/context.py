"""``WorkflowContext``: the ``ctx`` a workflow receives.

Every method that touches the outside world goes through a numbered command
(``seq``), so a replay can match it against the history: activities and timers
wait on durable events, and ``now``/``random``/``uuid4``/``side_effect`` are
recorded once as markers and read back afterwards.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import functools
import logging
import sys
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar, TypeVarTuple, Unpack, overload

from harvest.core.deprecation import queue_alias, renamed_attribute
from harvest.core.durations import Duration, parse_duration
from harvest.core.errors import InvalidArgument, SignalTimeout
from harvest.core.payload import (
    check_text,
    decode,
    decode_result,
    encode,
    encode_args,
    encode_checked_args,
    return_hint,
)
from harvest.declare.definitions import (
    ActivityDefinition,
    ActivityOptions,
    WorkflowDefinition,
    bound_activity,
)
from harvest.declare.flow_control import keys_under_codecs
from harvest.runtime.children import ChildPlacement
from harvest.runtime.external import external_target

if TYPE_CHECKING:
    from harvest.runtime.children import ChildHandle
    from harvest.runtime.mutex import WorkflowMutex
    from harvest.runtime.run import WorkflowRun

__all__ = ["DEFAULT_VERSION", "ContinueAsNew", "WorkflowContext", "WorkflowInfo"]

# The typing of calls by function (docs/workflows.md "Types"): ``Args`` are the positional
# arguments after the ctx, checked against the function passed; ``ResultT`` its result
# (an ``async def``'s awaited value). By name, or by definition, the result is ``Any``.
ResultT = TypeVar("ResultT")
Args = TypeVarTuple("Args")
T = TypeVar("T")

P = ParamSpec("P")


def _activity_input(
    name: str, fn: Callable[..., Any] | None, args: tuple[Any, ...], replaying: bool
) -> list[Any]:
    """The activity call's input as the wire holds it, checked against the function's hints
    when the workflow has it (by reference, or a name its App registers): an argument that does
    not fit fails here, in the workflow, as a PayloadError naming the activity, the parameter,
    the type expected and the value got, instead of reaching a worker that cannot run it.
    Not on replay (``replaying``: the call is a recorded step): the history holds what happened
    to it, scheduled by a release that did not check, or under annotations changed since, and
    failing it now would fail an in-flight run at a call it already made."""
    if fn is None or replaying:
        return encode_args(fn, args)
    return encode_checked_args(fn, args, f"activity {name}")


def _refuse_key_under_codecs(run: WorkflowRun, defn: ActivityDefinition) -> NoReturn:
    """An activity scheduled with a fairness key path while the worker's codecs store its input
    encoded: the key never resolves, so the fairness never applies (docs/payloads.md)."""
    keys = [f"activity {defn.name!r} fairness_key {defn.fairness_key!r}"]
    fix = "leave fairness_key= out of the call, or run the workflow in an App without codecs"
    raise run.refuse_call("execute_activity", InvalidArgument(keys_under_codecs("codecs", keys, fix)))


def _must_await(method: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """Note each coroutine a ``ctx`` method returns, for ``WorkflowRun.check_awaited``.

    ``ctx.execute_activity(...)`` without ``await`` issues nothing (the command is issued when
    the coroutine first runs), so the activity silently never ran and the run went on; Python's
    only trace was a RuntimeWarning in the worker's stderr, pointing at whatever freed the
    coroutine. The run keeps each new coroutine with its caller's code and instruction until
    the step's loop has run; one that never started and that nothing else holds was dropped
    unawaited, and fails the workflow task (``IllegalWorkflowOperation``) naming the method and
    the line. The coroutine itself is returned (no wrapper): awaiting it costs nothing more.
    """
    name = method.__name__

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, T]:
        coro = method(*args, **kwargs)
        caller = sys._getframe(1)  # (its code and instruction: the line is found only for an error)
        ctx: Any = args[0]  # (not typing.cast: a call, on every ctx call)
        ctx._run.made.append((coro, name, caller.f_code, caller.f_lasti))
        return coro

    return call


def never_awaited_message(method: str, code: Any, lasti: int) -> str:
    """What a ``ctx`` call dropped unawaited (or returned as the result) is told, with its line."""
    line = next((ln for start, end, ln in code.co_lines() if start <= lasti < end and ln), None)
    where = f" at {code.co_filename.rsplit('/', 1)[-1]}:{line}" if line else ""
    return (
        f"ctx.{method}(...){where} was never awaited, so it did nothing: write "
        f"`await ctx.{method}(...)` (or hand it to asyncio.gather / asyncio.create_task)"
    )


# What Harvest's checks of a ``ctx`` call's own arguments raise (an option, a duration, a name,
# a parameter's type), each turned into a WorkflowCallError by ``CommandIssuer.refuse_call``:
# the workflow task fails, not the run (docs/workflows.md, "Do not, inside a workflow"). The
# values it passes on (activity and child arguments, payloads) are checked outside these blocks:
# a PayloadError there is the run's data, and fails the run.
CALL_ERRORS = (InvalidArgument, TypeError)

# ``ctx.version`` returns it when replaying a history recorded before the call existed.
DEFAULT_VERSION = -1
PARENT_CLOSE_POLICIES = ("terminate", "request_cancel", "abandon")


class ContinueAsNew(BaseException):
    """Raised by ``ctx.continue_as_new``: ends the run with a ``continue_as_new`` command.

    A ``BaseException`` so that ``except Exception`` in workflow code does not swallow it.
    """

    def __init__(self, input: list[Any]):
        super().__init__(f"continue as new with {input!r:.80}")
        self.input = input


# A schedule's run has the workflow id sched:{name}:{unix seconds} (functions/schedules.sql).
SCHEDULE_ID_PREFIX = "sched:"


@dataclass(frozen=True)
class WorkflowInfo:
    workflow_id: str
    execution_id: str
    workflow_name: str
    queue: str

    task_queue = renamed_attribute("queue", "WorkflowInfo.task_queue")

    @property
    def schedule_slot(self) -> tuple[str, _dt.datetime] | None:
        """(the schedule's name, the slot) when a schedule fired this run, read from its
        workflow id, ``sched:{name}:{unix seconds}`` (docs/schedules.md): the same in every
        replay and for a continue-as-new successor. None for any other id."""
        if not self.workflow_id.startswith(SCHEDULE_ID_PREFIX):
            return None
        name, _, seconds = self.workflow_id[len(SCHEDULE_ID_PREFIX) :].rpartition(":")
        if not name or not seconds.isdigit():
            return None
        return name, _dt.datetime.fromtimestamp(int(seconds), _dt.UTC)


class _ReplayAwareLogger(logging.LoggerAdapter[logging.Logger]):
    """``ctx.logger``: drops the lines of a replayed step (WorkflowContext.is_replaying)."""

    def __init__(self, ctx: WorkflowContext):
        super().__init__(logging.getLogger("harvest.workflow"), {})
        self._ctx = ctx

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        info = self._ctx.info
        extra = {
            "execution_id": info.execution_id,
            "workflow_id": info.workflow_id,
            "workflow": info.workflow_name,
        }
        kwargs["extra"] = {**extra, **(kwargs.get("extra") or {})}
        return msg, kwargs

    def isEnabledFor(self, level: int) -> bool:
        return not self._ctx.is_replaying and self.logger.isEnabledFor(level)


# What an activity's ctx has and a workflow's has not (worker/activities.py, ActivityContext):
# a workflow that reaches for one has most likely called an activity function directly.
_ACTIVITY_ONLY = frozenset(
    {
        "idempotency_key",
        "attempt",
        "heartbeat",
        "aheartbeat",
        "heartbeat_details",
        "task_token",
        "complete_async",
        "activity_name",
        "cancel_requested",
        "record_llm_call",
        "arecord_llm_call",
    }
)


class WorkflowContext:
    """Deterministic access to activities, timers, time and randomness."""

    def __init__(self, run: WorkflowRun, info: WorkflowInfo):
        self._run = run
        self.info = info

    if not TYPE_CHECKING:  # hidden from checkers, which would otherwise accept any ctx.<name>

        def __getattr__(self, name: str) -> Any:
            """Only for a name the context does not have: the usual AttributeError, with the
            likely cause when the name is an activity context's."""
            if name in _ACTIVITY_ONLY:
                raise AttributeError(
                    f"'WorkflowContext' object has no attribute {name!r}: ctx.{name} is an "
                    "activity's, so an activity function was called directly in the workflow "
                    "(its code then runs inline, unrecorded, and again on every replay); run it "
                    "with `await ctx.execute_activity(fn, *args)`"
                )
            raise AttributeError(f"'WorkflowContext' object has no attribute {name!r}")

    # ------------------------------------------------------------------ identity
    @property
    def workflow_id(self) -> str:
        return self.info.workflow_id

    @property
    def execution_id(self) -> str:
        return self.info.execution_id

    @property
    def workflow_name(self) -> str:
        return self.info.workflow_name

    @property
    def queue(self) -> str:
        """The queue this run's workflow tasks go to (its activities' and children's default)."""
        return self.info.queue

    task_queue = renamed_attribute("queue", "ctx.task_queue")

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger for workflow code that writes each line once per run: lines of a step being
        replayed are dropped. Lines carry ``execution_id``, ``workflow_id`` and ``workflow``."""
        logger = self.__dict__.get("_logger")
        if logger is None:
            logger = self.__dict__["_logger"] = _ReplayAwareLogger(self)
        return logger

    @property
    def is_replaying(self) -> bool:
        """True while the code re-runs a step already in the history (e.g. to skip logging)."""
        return self._run.is_replaying

    def history_event_count(self) -> int:
        """Events loaded when the current step ran: the same on replay as on the original run.

        (A live step has seen the whole history; a replayed step counts up to its
        ``through``, which is what the original run had loaded.)
        """
        return self._run.through

    # ------------------------------------------------------------------ activities
    @overload
    async def execute_activity(
        self,
        activity: Callable[[Any, *Args], Awaitable[ResultT]],
        *args: *Args,
        **options: Unpack[ActivityOptions],
    ) -> ResultT: ...
    @overload
    async def execute_activity(
        self, activity: Callable[[Any, *Args], ResultT], *args: *Args, **options: Unpack[ActivityOptions]
    ) -> ResultT: ...
    @overload
    async def execute_activity(
        self, activity: str | ActivityDefinition, *args: Any, **options: Unpack[ActivityOptions]
    ) -> Any: ...
    @_must_await
    async def execute_activity(self, activity: Any, *args: object, **options: Any) -> Any:
        """Schedule an activity and wait for its result.

        ``activity`` is a decorated function (the result is decoded by its return hint)
        or a registered name (the raw JSON result). ``options`` override the
        definition's (``start_to_close``, ``retry``, ``queue``, ...). A final failure
        raises ``ActivityError``.
        """
        defn, fn = self._resolve(activity, "execute_activity")
        if defn.local:
            return await self._local(defn, fn, args, options)
        raw = await self._schedule_activity(defn, fn, args, options)
        return decode_result(fn, raw) if fn is not None else raw

    def _schedule_activity(
        self,
        defn: ActivityDefinition,
        fn: Callable[..., Any] | None,
        args: tuple[Any, ...],
        options: dict[str, Any],
        tag: dict[str, Any] | None = None,
    ) -> Any:
        """Issue ``schedule_activity``; the future of its raw JSON result. ``tag`` joins the
        recorded options (a DAG's task name: runtime/dags.py), never what replay compares."""
        run = self._run
        if options:
            defn = self._with_options(defn, options, "execute_activity")
        command = {
            "type": "schedule_activity",
            "seq": run.next_seq(),
            "name": defn.name,
            "input": _activity_input(defn.name, fn, args, run.matching()),
            "queue": defn.queue or self.info.queue,
        }
        if not run.matching():  # a replay compares the name only; the options cannot fail
            if run.inputs_encoded and defn.fairness_key is not None:
                _refuse_key_under_codecs(run, defn)
            options = defn.options_json()  # (a new dict each call: the tag joins it in place)
            if tag:
                options.update(tag)
            command["options"] = options
        return run.issue(command, "activity", defn.name)

    @overload
    async def execute_local_activity(
        self,
        activity: Callable[[Any, *Args], Awaitable[ResultT]],
        *args: *Args,
        **options: Unpack[ActivityOptions],
    ) -> ResultT: ...
    @overload
    async def execute_local_activity(
        self, activity: Callable[[Any, *Args], ResultT], *args: *Args, **options: Unpack[ActivityOptions]
    ) -> ResultT: ...
    @overload
    async def execute_local_activity(
        self, activity: str | ActivityDefinition, *args: Any, **options: Unpack[ActivityOptions]
    ) -> Any: ...
    @_must_await
    async def execute_local_activity(self, activity: Any, *args: object, **options: Any) -> Any:
        """Run an activity inline in this workflow task; its outcome is recorded as a marker."""
        defn, fn = self._resolve(activity, "execute_local_activity")
        return await self._local(defn, fn, args, options)

    async def _local(
        self,
        defn: ActivityDefinition,
        fn: Callable[..., Any] | None,
        args: tuple[Any, ...],
        options: dict[str, Any],
    ) -> Any:
        # Run what the App registers under the name, as a worker runs a regular activity by
        # name (the same definition, or a test kit's mock of it: harvest.testing).
        registered = self._run.find_activity(defn.name)
        if registered is not None:
            defn = registered
        if options:
            defn = self._with_options(defn, options, "execute_local_activity")
        # Fail here, as a regular activity would, on a bad argument (not on replay: its marker says).
        _activity_input(defn.name, fn, args, self._run.matching())
        future = self._run.issue_local(defn, args)
        raw = await future
        return decode_result(fn, raw) if fn is not None else raw

    def _with_options(
        self, defn: ActivityDefinition, options: dict[str, Any], method: str
    ) -> ActivityDefinition:
        try:
            return defn.with_options(**options)
        except CALL_ERRORS as exc:
            raise self._run.refuse_call(method, exc) from None

    def _resolve(self, activity: Any, method: str) -> tuple[ActivityDefinition, Callable[..., Any] | None]:
        if isinstance(activity, str):
            defn = self._run.find_activity(activity)
            if defn is None:  # not ours: the worker serving that name reports unknown names
                return ActivityDefinition(name=activity, fn=None), None  # type: ignore[arg-type]
            return defn, defn.fn
        if isinstance(activity, ActivityDefinition):
            return activity, activity.fn
        defn = getattr(activity, "__harvest_activity__", None)
        if isinstance(defn, ActivityDefinition):
            defn = bound_activity(defn, activity)  # an instance's method runs bound
            return defn, defn.fn
        raise self._run.refuse_call(
            method,
            TypeError(f"{activity!r} is neither an activity name nor a function decorated with @activity"),
        )

    # ------------------------------------------------------------------ timers
    @_must_await
    async def sleep(self, duration: Any) -> None:
        """A durable timer: ``await ctx.sleep("1h")`` survives restarts."""
        try:
            seconds = parse_duration(duration, "duration")
        except InvalidArgument as exc:
            raise self._run.refuse_call("sleep", exc) from None
        command = {"type": "start_timer", "seq": self._run.next_seq(), "duration": _secs(seconds)}
        await self._run.issue(command, "timer", None)

    # ------------------------------------------------------------------ markers
    def now(self) -> _dt.datetime:
        """The current time (UTC), recorded: each call records its own value (a ``now``
        marker), and a replay reads the recorded one back."""
        value = self._run.marker("now", lambda: self._run.clock().astimezone(_dt.UTC).isoformat())
        when = _dt.datetime.fromisoformat(value)
        self._run.set_logical_time(when.timestamp())
        return when

    def random(self) -> float:
        """A float in [0, 1), recorded so replays see the same number."""
        return float(self._run.marker("random", self._run.rng.random))

    def uuid4(self) -> uuid.UUID:
        """A random UUID, recorded so replays see the same one."""
        return uuid.UUID(
            self._run.marker("uuid4", lambda: str(uuid.UUID(int=self._run.rng.getrandbits(128), version=4)))
        )

    def side_effect(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` once and record its JSON-encodable result; replays read it back.

        ``fn`` must not fail: an exception fails the workflow task (which is retried),
        because a failure that is not recorded cannot be replayed.
        """
        value = self._run.marker("side_effect", lambda: encode(self._run.call_side_effect(fn), "side_effect"))
        decoded: T = decode(value, return_hint(fn), "side_effect")
        return decoded

    # ------------------------------------------------------------------ signals
    @overload
    async def wait_for_signal(self, name: str, timeout: Any = None, *, type_hint: type[T]) -> T: ...
    @overload
    async def wait_for_signal(self, name: str, timeout: Any = None, *, type_hint: Any = Any) -> Any: ...
    @_must_await
    async def wait_for_signal(self, name: str, timeout: Any = None, *, type_hint: Any = Any) -> Any:
        """The oldest buffered payload of signal ``name``, or wait for the next one.

        Signals are buffered per name in arrival order. With ``timeout`` (seconds or
        ``"1h"``) a durable timer races the signal: if the signal wins, the timer is
        cancelled (a ``cancel_timer`` command); if the timer wins, ``SignalTimeout``
        is raised and a later signal stays buffered. A buffered signal is returned
        at once, with no timer. ``type_hint`` decodes the JSON payload.
        """
        try:
            if not isinstance(name, str) or not name:
                raise InvalidArgument(f"name must be a non-empty string, got {name!r}")
            seconds = None if timeout is None else parse_duration(timeout, "timeout")
        except InvalidArgument as exc:
            raise self._run.refuse_call("wait_for_signal", exc) from None
        run = self._run
        found, payload = run.signals.take(name)
        if not found:
            waiter = asyncio.get_running_loop().create_future()
            wait = run.signals.wait(name, waiter, run.step_marker)
            timer_seq = None
            if seconds is not None:
                timer_seq = wait[1] = run.next_seq()

                def timed_out() -> None:
                    if not waiter.done():
                        waiter.set_exception(SignalTimeout(name, seconds, run.signals.unread(but=name)))

                run.issue(
                    {"type": "start_timer", "seq": timer_seq, "duration": _secs(seconds)},
                    "timer",
                    None,
                    on_fire=timed_out,
                )
            try:
                payload = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    run.signals.put_back(name, waiter.result())  # delivered, never seen
                raise
            if timer_seq is not None and run.timer_pending(timer_seq):
                run.cancel_timer(timer_seq)
        return decode(payload, type_hint, f"signal {name!r}")

    # ------------------------------------------------------------------ conditions
    @_must_await
    async def wait_condition(self, predicate: Callable[[], bool], timeout: Duration | None = None) -> None:
        """Wait until ``predicate()`` is true: the workflow's own state says so.

        ``predicate`` is a plain function reading state the code keeps (``ctx.state``, a
        variable an update handler sets). It is evaluated now (true: return at once, with no
        command) and then each time the run's code is blocked after something ran (an update
        handler, an activity, timer or child result, a signal taken), so no polling is needed.
        With ``timeout`` (seconds, ``"1h"`` or a timedelta) a durable timer races it: if the
        condition holds first the timer is cancelled (a ``cancel_timer`` command); if the timer
        fires and the condition still does not hold once that step's code has run,
        ``ConditionTimeout`` (a ``TimeoutError``) is raised. A predicate that raises, returns an
        awaitable or issues a command fails the workflow task (``WorkflowCallError``).
        """
        run = self._run
        try:
            if not callable(predicate):
                raise TypeError(f"predicate must be a function taking no argument, got {predicate!r}")
            seconds = None if timeout is None else parse_duration(timeout, "timeout")
        except CALL_ERRORS as exc:
            raise run.refuse_call("wait_condition", exc) from None
        conditions = run.conditions
        if conditions.holds(predicate):
            return
        timer_seq = None if seconds is None else run.next_seq()  # (refused first in a query)
        waiter: asyncio.Future[None] = run._loop.create_future()  # (a query's runs off the loop)
        wait = conditions.add(predicate, waiter, seconds)
        if timer_seq is not None and seconds is not None:
            command = {"type": "start_timer", "seq": timer_seq, "duration": _secs(seconds)}
            run.issue(command, "timer", None, on_fire=wait.fire)
        try:
            await waiter  # (ConditionTimeout: its timer fired, nothing to cancel)
        except BaseException:
            # A wait given up (its task cancelled, its coroutine closed: a query's that tried to
            # wait, a dropped run's) is not evaluated again: its predicate must not fail a step.
            conditions.drop(wait)
            raise
        if timer_seq is not None and run.timer_pending(timer_seq):
            run.cancel_timer(timer_seq)

    def pending_signals(self, name: str | None = None) -> int:
        """How many signals (of ``name``, or of any name) are buffered and not yet taken."""
        return self._run.signals.count(name)

    # ------------------------------------------------------------------ other workflows
    @_must_await
    async def signal_external_workflow(self, target: Any, signal_name: str, payload: Any = None) -> None:
        """Send signal ``signal_name`` with ``payload`` to another workflow (durable command).

        ``target`` is an execution id (a string or ``uuid.UUID``), a ``ChildHandle``, or
        ``ExternalWorkflow(workflow_id=..., workflow_name=None)`` for the run of a business
        key. The target receives it as a client's signal (its history names this run as
        ``sender_execution_id``). Returns once it is delivered; raises
        ``ExternalWorkflowNotFound``, ``ExternalWorkflowNotRunning`` or another
        ``ExternalWorkflowError`` when it could not be (docs/messages.md).
        """
        try:
            if not isinstance(signal_name, str) or not signal_name.strip():
                raise InvalidArgument(f"signal_name must be a non-empty string, got {signal_name!r}")
            where = external_target(target)
        except CALL_ERRORS as exc:
            raise self._run.refuse_call("signal_external_workflow", exc) from None
        check_text(signal_name, "signal_external_workflow: signal_name")  # (text: see start_child_workflow)
        command = {
            "type": "signal_external_workflow",
            "seq": 0,
            **where.fields(),
            "signal_name": signal_name,
            "payload": encode(payload, f"signal {signal_name!r}"),
        }
        command["seq"] = self._run.next_seq()
        await self._run.issue(command, "external", signal_name)

    @_must_await
    async def cancel_external_workflow(self, target: Any, reason: str | None = None) -> bool:
        """Ask another workflow to cancel, as ``handle.cancel(reason)`` does (durable command).

        ``target`` as for :meth:`signal_external_workflow`. Returns True when this request
        cancelled it, False when a cancel was already requested; raises an
        ``ExternalWorkflowError`` when the target was not found or has ended.
        """
        try:
            if reason is not None and not isinstance(reason, str):
                raise InvalidArgument(f"reason must be a string or None, got {reason!r}")
            where = external_target(target)
        except CALL_ERRORS as exc:
            raise self._run.refuse_call("cancel_external_workflow", exc) from None
        command = {
            "type": "cancel_external_workflow",
            "seq": self._run.next_seq(),
            **where.fields(),
            "reason": reason,
        }
        return bool(await self._run.issue(command, "external", None))

    # ------------------------------------------------------------------ durable mutex
    def mutex(self, key: str) -> WorkflowMutex:
        """A durable named lock: ``async with ctx.mutex("invoice:17"): ...``.

        One holder per key among the runs of this database, FIFO waiters; released
        when the block exits and, whatever happens, when the run ends
        (docs/flow-control.md). Not re-entrant.
        """
        from harvest.runtime.mutex import WorkflowMutex

        return WorkflowMutex(self._run, key)

    # ------------------------------------------------------------------ cancellation
    def is_cancel_requested(self) -> bool:
        """True once ``WorkflowCancelRequested`` reached the workflow (it raised CancelledError)."""
        return self._run.cancel_requested

    # ------------------------------------------------------------------ children
    @overload
    async def start_child_workflow(
        self,
        workflow: Callable[[Any, *Args], Awaitable[ResultT]],
        *args: *Args,
        workflow_id: str | None = None,
        queue: str | None = None,
        parent_close_policy: str = "terminate",
        task_queue: str | None = None,
        placement: ChildPlacement | None = None,
    ) -> ChildHandle[ResultT]: ...
    @overload
    async def start_child_workflow(
        self,
        workflow: str | WorkflowDefinition,
        *args: Any,
        workflow_id: str | None = None,
        queue: str | None = None,
        parent_close_policy: str = "terminate",
        task_queue: str | None = None,
        placement: ChildPlacement | None = None,
    ) -> ChildHandle[Any]: ...
    @_must_await
    async def start_child_workflow(
        self,
        workflow: Any,
        *args: object,
        workflow_id: str | None = None,
        queue: str | None = None,
        parent_close_policy: str = "terminate",
        task_queue: str | None = None,
        placement: ChildPlacement | None = None,
    ) -> ChildHandle[Any]:
        """Start a child workflow (command ``start_child_workflow``) and return its handle.

        ``workflow`` is a ``@workflow`` function or definition (its arguments are encoded
        and its result decoded by its hints) or a registered name. ``workflow_id`` None
        lets the database mint ``<parent workflow_id>/<seq>``; ``queue`` None uses
        the child definition's queue when it is known here, else the parent's.
        ``parent_close_policy``: ``terminate``, ``request_cancel`` or ``abandon``.
        ``task_queue`` is the deprecated spelling of ``queue``. ``placement`` (a
        :class:`ChildPlacement`; None: the parent's shard) puts the child on another shard.
        """
        try:
            queue = queue_alias(queue, task_queue)
            if placement is not None and not isinstance(placement, ChildPlacement):
                raise InvalidArgument(f"placement: expected a ChildPlacement or None, got {placement!r}")
            if parent_close_policy not in PARENT_CLOSE_POLICIES:
                allowed = list(PARENT_CLOSE_POLICIES)
                raise InvalidArgument(f"parent_close_policy: {parent_close_policy!r} is not one of {allowed}")
            if workflow_id is not None and (not isinstance(workflow_id, str) or not workflow_id):
                raise InvalidArgument(
                    f"workflow_id: expected a non-empty string or None, got {workflow_id!r}"
                )
            if queue is not None and (not isinstance(queue, str) or not queue):
                raise InvalidArgument(f"queue: expected a non-empty string or None, got {queue!r}")
            name, defn = self._resolve_workflow(workflow)
        except CALL_ERRORS as exc:
            raise self._run.refuse_call("start_child_workflow", exc) from None
        # Text PostgreSQL cannot store (a NUL) may come from the run's data: the call's own error,
        # which the code may catch, as a PayloadError of an argument is.
        for what, text in (("child workflow name", name), ("workflow_id", workflow_id), ("queue", queue)):
            if text is not None:
                check_text(text, what)
        fn = defn.fn if defn is not None else None
        command = {
            "type": "start_child_workflow",
            "seq": 0,
            "workflow_name": name,
            "input": encode_args(fn, args),
            "workflow_id": workflow_id,
            # The command field keeps its recorded spelling (CONTRIBUTING.md "Names").
            "task_queue": queue or (defn.queue if defn is not None else None),
            "parent_close_policy": parent_close_policy,
        }
        placed = placement.as_command() if placement is not None else None
        if placed is not None:  # resolved to a shard by the worker, once (worker/placement.py)
            command["placement"] = placed
        command["seq"] = self._run.next_seq()
        return self._run.start_child(command, lambda raw: decode_result(fn, raw))

    @overload
    async def execute_child_workflow(
        self,
        workflow: Callable[[Any, *Args], Awaitable[ResultT]],
        *args: *Args,
        workflow_id: str | None = None,
        queue: str | None = None,
        parent_close_policy: str = "terminate",
        task_queue: str | None = None,
        placement: ChildPlacement | None = None,
    ) -> ResultT: ...
    @overload
    async def execute_child_workflow(
        self,
        workflow: str | WorkflowDefinition,
        *args: Any,
        workflow_id: str | None = None,
        queue: str | None = None,
        parent_close_policy: str = "terminate",
        task_queue: str | None = None,
        placement: ChildPlacement | None = None,
    ) -> Any: ...
    @_must_await
    async def execute_child_workflow(
        self,
        workflow: Any,
        *args: object,
        workflow_id: str | None = None,
        queue: str | None = None,
        parent_close_policy: str = "terminate",
        task_queue: str | None = None,
        placement: ChildPlacement | None = None,
    ) -> Any:
        """Start a child workflow and wait for its result; ``ChildWorkflowError`` if it failed."""
        handle = await self.start_child_workflow(
            workflow,
            *args,
            workflow_id=workflow_id,
            queue=queue_alias(queue, task_queue),
            parent_close_policy=parent_close_policy,
            placement=placement,
        )
        return await handle.result()

    def _resolve_workflow(self, workflow: Any) -> tuple[str, WorkflowDefinition | None]:
        if isinstance(workflow, str):
            if not workflow:
                raise InvalidArgument("child workflow name must be a non-empty string")
            return workflow, self._run.find_workflow(workflow)
        defn = (
            workflow
            if isinstance(workflow, WorkflowDefinition)
            else getattr(workflow, "__harvest_workflow__", None)
        )
        if not isinstance(defn, WorkflowDefinition):
            raise TypeError(
                f"{workflow!r} is neither a workflow name nor a function decorated with @workflow"
            )
        return defn.name, defn

    # ------------------------------------------------------------------ continue-as-new
    def continue_as_new(self, *args: Any, **kwargs: Any) -> NoReturn:
        """End this run and start a fresh one (same workflow id, name and queue) with ``args``.

        Raises ``ContinueAsNew`` (a ``BaseException``): ``ctx.continue_as_new(x)``,
        ``await ctx.continue_as_new(x)`` and ``return ctx.continue_as_new(x)`` all work.
        The arguments are encoded by this workflow function's parameter hints.
        """
        raise ContinueAsNew(encode_args(self._run.definition.fn, args, kwargs))

    def should_continue_as_new(self) -> bool:
        """True when the history holds more events than the run's threshold (default 10,000).

        Recorded as a ``continue_as_new_suggested`` marker, so a replay gets the same answer.
        """
        return bool(
            self._run.marker(
                "continue_as_new_suggested",
                lambda: self.history_event_count() > self._run.continue_as_new_threshold,
            )
        )

    # ------------------------------------------------------------------ versioning
    def version(self, change_id: str, min_supported: int, max_supported: int) -> int:
        """Which version of a code change this run follows (Temporal's ``getVersion``).

        - First execution: records a ``version`` marker ``{change_id, version:
          max_supported}`` and returns ``max_supported``.
        - Replay: returns the recorded version. A recorded version outside
          ``[min_supported, max_supported]`` raises ``NonDeterminismError`` (the
          code dropped support for runs still in flight).
        - Replay of a history recorded before this call was added (the recorded
          command at this position is not a ``version`` marker for ``change_id``):
          returns ``DEFAULT_VERSION`` (-1) *without consuming a seq*, but only when
          ``min_supported == DEFAULT_VERSION``; otherwise ``NonDeterminismError``.
        - The same ``change_id`` asked again in the same run returns the first
          answer without a second marker.
        """
        try:
            if not isinstance(change_id, str) or not change_id:
                raise InvalidArgument(f"change_id must be a non-empty string, got {change_id!r}")
            for what, v in (("min_supported", min_supported), ("max_supported", max_supported)):
                if not isinstance(v, int) or isinstance(v, bool) or v < DEFAULT_VERSION:
                    raise InvalidArgument(f"{what} must be an int >= {DEFAULT_VERSION}, got {v!r}")
            if min_supported > max_supported:
                raise InvalidArgument(f"min_supported {min_supported} > max_supported {max_supported}")
        except InvalidArgument as exc:
            raise self._run.refuse_call("version", exc) from None
        return self._run.version(change_id, min_supported, max_supported)

    # ------------------------------------------------------------------ queries and updates
    @property
    def state(self) -> dict[str, Any]:
        """A dict the workflow keeps its queryable state in (rebuilt by replay, never stored);
        declarative ``@query`` / ``@update`` handlers read and change it through their ctx."""
        return self._run.handlers.state

    def register_query_handler(self, name: str, fn: Callable[..., Any]) -> None:
        """Answer query ``name`` with ``fn(ctx)`` or ``fn(ctx, arg)`` from now on (read-only)."""
        try:
            self._run.handlers.register_query(name, fn)
        except CALL_ERRORS as exc:
            raise self._run.refuse_call("register_query_handler", exc) from None

    def register_update_handler(
        self, name: str, fn: Callable[..., Any], validator: Callable[..., Any] | None = None
    ) -> None:
        """Handle update ``name`` with ``fn(ctx[, arg])`` (it may await, like workflow code);
        ``validator(ctx[, arg])`` rejects an update by raising, before anything is recorded."""
        try:
            self._run.handlers.register_update(name, fn, validator)
        except CALL_ERRORS as exc:
            raise self._run.refuse_call("register_update_handler", exc) from None

    @_must_await
    async def drain_admitted_updates(self) -> None:
        """Wait until every accepted update's handler has finished (call it before returning)."""
        await self._run.handlers.drain()

    def __repr__(self) -> str:
        return (
            f"WorkflowContext(workflow={self.workflow_name!r}, "
            f"workflow_id={self.workflow_id!r}, execution_id={self.execution_id!r})"
        )


def _secs(seconds: float) -> float | int:
    """Integral seconds are written as ints, matching the wire examples."""
    return int(seconds) if float(seconds).is_integer() else seconds
