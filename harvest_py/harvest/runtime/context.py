"""``WorkflowContext``: the ``ctx`` a workflow receives.

Every method that touches the outside world goes through a numbered command
(``seq``), so a replay can match it against the history: activities and timers
wait on durable events, and ``now``/``random``/``uuid4``/``side_effect`` are
recorded once as markers and read back afterwards.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harvest.definitions import ActivityDefinition, parse_duration
from harvest.payload import decode, decode_result, encode, encode_args, return_hint

if TYPE_CHECKING:
    from harvest.runtime.run import WorkflowRun

__all__ = ["WorkflowContext", "WorkflowInfo"]


@dataclass(frozen=True)
class WorkflowInfo:
    workflow_id: str
    execution_id: str
    workflow_name: str
    task_queue: str


class WorkflowContext:
    """Deterministic access to activities, timers, time and randomness."""

    def __init__(self, run: WorkflowRun, info: WorkflowInfo):
        self._run = run
        self.info = info

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
    def task_queue(self) -> str:
        return self.info.task_queue

    @property
    def is_replaying(self) -> bool:
        """True while the code re-runs a step already in the history (e.g. to skip logging)."""
        return self._run.is_replaying

    def history_event_count(self) -> int:
        """Events the current step has seen; the same on replay as on the original run."""
        return self._run.through

    # ------------------------------------------------------------------ activities
    async def execute_activity(self, activity: Any, *args: Any, **options: Any) -> Any:
        """Schedule an activity and wait for its result.

        ``activity`` is a decorated function (the result is decoded by its return hint)
        or a registered name (the raw JSON result). ``options`` override the
        definition's (``start_to_close``, ``retry``, ``queue``, ...). A final failure
        raises ``ActivityError``.
        """
        defn, fn = self._resolve(activity)
        if defn.local:
            return await self._local(defn, fn, args, options)
        if options:
            defn = defn.with_options(**options)
        command = {"type": "schedule_activity", "seq": self._run.next_seq(), "name": defn.name,
                   "input": encode_args(fn, args), "queue": defn.queue or self.task_queue,
                   "options": defn.options_json()}
        future = self._run.issue(command, "activity", defn.name)
        raw = await future
        return decode_result(fn, raw) if fn is not None else raw

    async def execute_local_activity(self, activity: Any, *args: Any, **options: Any) -> Any:
        """Run an activity inline in this workflow task; its outcome is recorded as a marker."""
        defn, fn = self._resolve(activity)
        return await self._local(defn, fn, args, options)

    async def _local(self, defn: ActivityDefinition, fn: Callable | None, args: tuple,
                     options: dict) -> Any:
        if options:
            defn = defn.with_options(**options)
        encode_args(fn, args)  # fail here, as a regular activity would, on a bad argument
        future = self._run.issue_local(defn, args)
        raw = await future
        return decode_result(fn, raw) if fn is not None else raw

    def _resolve(self, activity: Any) -> tuple[ActivityDefinition, Callable | None]:
        if isinstance(activity, str):
            defn = self._run.find_activity(activity)
            if defn is None:  # not ours: the worker serving that name reports unknown names
                return ActivityDefinition(name=activity, fn=None), None  # type: ignore[arg-type]
            return defn, defn.fn
        if isinstance(activity, ActivityDefinition):
            return activity, activity.fn
        defn = getattr(activity, "__harvest_activity__", None)
        if isinstance(defn, ActivityDefinition):
            return defn, defn.fn
        raise TypeError(f"execute_activity: {activity!r} is neither an activity name nor a "
                        "function decorated with @activity")

    # ------------------------------------------------------------------ timers
    async def sleep(self, duration: Any) -> None:
        """A durable timer: ``await ctx.sleep("1h")`` survives restarts."""
        seconds = parse_duration(duration, "sleep")
        seconds_json: float | int = int(seconds) if seconds.is_integer() else seconds
        command = {"type": "start_timer", "seq": self._run.next_seq(), "duration": seconds_json}
        await self._run.issue(command, "timer", None)

    # ------------------------------------------------------------------ markers
    def now(self) -> _dt.datetime:
        """The current time (UTC), fixed at its first evaluation."""
        value = self._run.marker("now", lambda: self._run.clock().astimezone(
            _dt.UTC).isoformat())
        when = _dt.datetime.fromisoformat(value)
        self._run.set_logical_time(when.timestamp())
        return when

    def random(self) -> float:
        """A float in [0, 1), recorded so replays see the same number."""
        return float(self._run.marker("random", self._run.rng.random))

    def uuid4(self) -> uuid.UUID:
        """A random UUID, recorded so replays see the same one."""
        return uuid.UUID(self._run.marker("uuid4", lambda: str(uuid.UUID(
            int=self._run.rng.getrandbits(128), version=4))))

    def side_effect(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` once and record its JSON-encodable result; replays read it back.

        ``fn`` must not fail: an exception fails the workflow task (which is retried),
        because a failure that is not recorded cannot be replayed.
        """
        value = self._run.marker("side_effect", lambda: encode(self._run.call_side_effect(fn),
                                                              "side_effect"))
        return decode(value, return_hint(fn), "side_effect")

    def __repr__(self) -> str:
        return (f"WorkflowContext(workflow={self.workflow_name!r}, "
                f"workflow_id={self.workflow_id!r}, execution_id={self.execution_id!r})")

