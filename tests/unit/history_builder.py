"""A fake history: writes the events the SQL API would write, with no database.

``HistoryBuilder`` turns a run's commands into events exactly as
``complete_workflow_task`` does (``WorkflowTaskCompleted{through}`` first, then
one event per command, including ``TimerCancelled``, ``ChildWorkflowStarted``,
``WorkflowCancelled`` and ``WorkflowContinuedAsNew``) and adds resolution events
(activity and child outcomes, timers, signals, cancel requests) by hand. ``Engine`` drives a
workflow to its end with a caller-chosen order of results, and can check at
every task that a fresh run replaying the full history returns the same
commands as the cached (warm) run.
"""

from __future__ import annotations

import datetime as _dt
import random
from collections.abc import Callable
from typing import Any

from harvest.runtime import WorkflowRun

FIXED_NOW = _dt.datetime(2026, 11, 29, 9, 0, tzinfo=_dt.UTC)


class FixedRandom(random.Random):
    """Every run sees the same "random" numbers, so cold and warm runs compare equal."""

    def random(self) -> float:
        return 0.25

    def getrandbits(self, k: int) -> int:
        return (1 << (k - 1)) | 12345


def fixed_clock() -> _dt.datetime:
    return FIXED_NOW


class HistoryBuilder:
    def __init__(
        self,
        workflow_name: str,
        input: list | None = None,
        workflow_id: str = "wf-1",
        task_queue: str = "default",
    ):
        self.events: list[dict] = []
        self.workflow_id = workflow_id
        self.add(
            "WorkflowStarted",
            workflow_name=workflow_name,
            workflow_id=workflow_id,
            input=list(input or []),
            task_queue=task_queue,
        )

    @property
    def last_id(self) -> int:
        return len(self.events)

    def add(self, event_type: str, **data: Any) -> dict:
        event = {"event_id": self.last_id + 1, "event_type": event_type, "event_data": data}
        self.events.append(event)
        return event

    def since(self, event_id: int) -> list[dict]:
        """Events with ids above ``event_id`` (what a cached run has not seen)."""
        return [e for e in self.events if e["event_id"] > event_id]

    def complete_task(self, through: int, commands: list[dict], worker_id: str = "w1") -> list[dict]:
        """What ``complete_workflow_task(through, commands)`` appends."""
        start = self.last_id
        self.add("WorkflowTaskCompleted", through=through, worker_id=worker_id)
        for c in commands:
            t = c["type"]
            if t == "schedule_activity":
                self.add(
                    "ActivityScheduled",
                    seq=c["seq"],
                    name=c["name"],
                    input=c["input"],
                    queue=c["queue"],
                    options=c["options"],
                )
            elif t == "start_timer":
                self.add("TimerStarted", seq=c["seq"], fire_at="2026-11-29T10:00:00+00:00")
            elif t == "record_marker":
                self.add("MarkerRecorded", seq=c["seq"], kind=c["kind"], value=c["value"])
            elif t == "complete_workflow":
                self.add("WorkflowCompleted", result=c["result"])
            elif t == "fail_workflow":
                self.add("WorkflowFailed", failure=c["failure"])
            elif t == "cancel_timer":
                self.add("TimerCancelled", seq=c["seq"], timer_seq=c["timer_seq"])
            elif t == "start_child_workflow":
                self.add(
                    "ChildWorkflowStarted",
                    seq=c["seq"],
                    workflow_name=c["workflow_name"],
                    workflow_id=c["workflow_id"] or f"{self.workflow_id}/{c['seq']}",
                    child_execution_id=self.child_execution_id(c["seq"]),
                    parent_close_policy=c["parent_close_policy"],
                )
            elif t == "cancel_workflow":
                self.add("WorkflowCancelled", details=c["details"])
            elif t == "continue_as_new":
                self.add("WorkflowContinuedAsNew", new_execution_id="exec-next", input=c["input"])
            elif t == "complete_update":
                self.add(
                    "UpdateCompleted",
                    seq=c["seq"],
                    update_id=c["update_id"],
                    result=c.get("result"),
                    failure=c.get("failure"),
                )
            elif t == "signal_external_workflow":
                self.add(
                    "ExternalSignalRequested",
                    seq=c["seq"],
                    execution_id=c["execution_id"],
                    workflow_id=c["workflow_id"],
                    workflow_name=c["workflow_name"],
                    signal_name=c["signal_name"],
                    payload=c["payload"],
                )
            elif t == "cancel_external_workflow":
                self.add(
                    "ExternalCancelRequested",
                    seq=c["seq"],
                    execution_id=c["execution_id"],
                    workflow_id=c["workflow_id"],
                    workflow_name=c["workflow_name"],
                    reason=c["reason"],
                )
            else:
                raise AssertionError(f"unknown command {c}")
        return self.since(start)

    def activity_completed(self, seq: int, result: Any, attempt: int = 1) -> dict:
        return self.add("ActivityCompleted", seq=seq, result=result, attempt=attempt)

    def activity_failed(
        self,
        seq: int,
        error_type: str = "Boom",
        message: str = "it broke",
        attempt: int = 3,
        details: Any = None,
    ) -> dict:
        return self.add(
            "ActivityFailed",
            seq=seq,
            attempt=attempt,
            failure={
                "error_type": error_type,
                "message": message,
                "non_retryable": False,
                "details": details,
            },
        )

    def timer_fired(self, seq: int) -> dict:
        return self.add("TimerFired", seq=seq)

    # the new resolution events (signals, cancellation, children)
    @staticmethod
    def child_execution_id(seq: int) -> str:
        return f"child-exec-{seq}"

    def signal(self, name: str, payload: Any = None, signal_id: str | None = None) -> dict:
        return self.add(
            "SignalReceived", name=name, payload=payload, signal_id=signal_id or f"sig-{self.last_id + 1}"
        )

    def update_accepted(self, update_id: str, name: str, input: Any = None) -> dict:
        return self.add("UpdateAccepted", update_id=update_id, name=name, input=input)

    def mutex_acquired(self, seq: int, key: str) -> dict:
        return self.add("MutexAcquired", seq=seq, key=key)

    def cancel_requested(self, reason: str | None = "user asked") -> dict:
        return self.add("WorkflowCancelRequested", reason=reason)

    def external_delivered(
        self, seq: int, kind: str, execution_id: str, already_requested: bool = False
    ) -> dict:
        """The outcome of an external signal (kind "signal") or cancel ("cancel") that arrived."""
        if kind == "signal":
            return self.add("ExternalSignalDelivered", seq=seq, execution_id=execution_id)
        return self.add(
            "ExternalCancelDelivered", seq=seq, execution_id=execution_id, already_requested=already_requested
        )

    def external_failed(self, seq: int, kind: str, reason: str, execution_id: str | None = None) -> dict:
        event_type = "ExternalSignalFailed" if kind == "signal" else "ExternalCancelFailed"
        return self.add(
            event_type, seq=seq, execution_id=execution_id, reason=reason, message=f"it is {reason}"
        )

    def child_completed(self, seq: int, result: Any) -> dict:
        return self.add(
            "ChildWorkflowCompleted", seq=seq, child_execution_id=self.child_execution_id(seq), result=result
        )

    def child_failed(
        self, seq: int, status: str = "FAILED", error_type: str = "ValueError", message: str = "child broke"
    ) -> dict:
        failure = (
            None
            if status == "TERMINATED"
            else {"error_type": error_type, "message": message, "non_retryable": True, "details": None}
        )
        return self.add(
            "ChildWorkflowFailed",
            seq=seq,
            child_execution_id=self.child_execution_id(seq),
            status=status,
            failure=failure,
        )


# Every run new_run made, closed after each test (tests/unit/conftest.py). Closing a run is its
# owner's duty (the worker and the replayer close theirs); a test's run dropped unclosed (a cold
# replay of Engine.task, a run whose advance raised) kept coroutines that never started, which
# Python warned about ("coroutine ... was never awaited") at a later test's collection.
made_runs: list[WorkflowRun] = []


def new_run(app: Any, wf: Any, **kwargs: Any) -> WorkflowRun:
    kwargs.setdefault("clock", fixed_clock)
    kwargs.setdefault("rng", FixedRandom())
    run = WorkflowRun(app, wf, "exec-1", **kwargs)
    made_runs.append(run)
    return run


def close_made_runs() -> None:
    while made_runs:
        made_runs.pop().close()


# An outcome: ("result", value) | ("fail", error_type) | ("fire",)
Resolver = Callable[[list[dict]], list[tuple[dict, tuple]]]


def resolve_all_in_order(outstanding: list[dict]) -> list[tuple[dict, tuple]]:
    return [(c, _default_outcome(c)) for c in outstanding]


def resolve_all_reversed(outstanding: list[dict]) -> list[tuple[dict, tuple]]:
    return list(reversed(resolve_all_in_order(outstanding)))


def resolve_one_at_a_time(outstanding: list[dict]) -> list[tuple[dict, tuple]]:
    return resolve_all_in_order(outstanding)[-1:]


def _default_outcome(command: dict) -> tuple:
    if command["type"] == "start_timer":
        return ("fire",)
    return ("result", {"echo": command.get("input"), "seq": command["seq"]})


OUTSTANDING = (
    "schedule_activity",
    "start_timer",
    "start_child_workflow",
    "signal_external_workflow",
    "cancel_external_workflow",
)
EXTERNAL = {"signal_external_workflow": "signal", "cancel_external_workflow": "cancel"}


class Engine:
    """Drive one workflow to its end, optionally proving cold == warm at every task."""

    def __init__(
        self,
        app: Any,
        wf: Any,
        input: list | None = None,
        resolver: Resolver = resolve_all_in_order,
        check_cold: bool = True,
        history: HistoryBuilder | None = None,
        trust_own_commits: bool = False,
        **run_kwargs: Any,
    ):
        name = wf.__harvest_workflow__.name
        # As the worker does after a successful commit (WorkflowRun.recorded): the warm
        # run skips reading back the events its own commit wrote, where it can.
        self.trust_own_commits = trust_own_commits
        self.recorded = 0
        self.app, self.wf, self.resolver = app, wf, resolver
        self.check_cold, self.run_kwargs = check_cold, run_kwargs
        self.history = history or HistoryBuilder(name, input)
        self.run = new_run(app, wf, **run_kwargs)
        self.seen = 0
        self.outstanding: list[dict] = []
        self.activations: list = []

    async def task(self, in_flight: Callable[[HistoryBuilder], Any] | None = None):
        """One workflow task: warm advance, compare with a cold replay, commit."""
        act = await self.run.advance(self.history.since(self.seen))
        self.seen = self.history.last_id
        if self.check_cold:
            cold = await new_run(self.app, self.wf, **self.run_kwargs).advance(list(self.history.events))
            assert cold.commands == act.commands, (cold.commands, act.commands)
            assert cold.through == act.through and cold.finished == act.finished
        if in_flight is not None:
            in_flight(self.history)  # events arriving while the task is in flight
        self.history.complete_task(act.through, act.commands)
        if self.trust_own_commits and not act.finished and self.run.recorded(self.history.last_id):
            self.seen = self.history.last_id
            self.recorded += 1
        self.outstanding += [c for c in act.commands if c["type"] in OUTSTANDING]
        cancelled = {c["timer_seq"] for c in act.commands if c["type"] == "cancel_timer"}
        self.outstanding = [c for c in self.outstanding if c["seq"] not in cancelled]
        self.activations.append(act)
        return act

    def resolve(self) -> None:
        for command, outcome in self.resolver(list(self.outstanding)):
            self.outstanding.remove(command)
            child = command["type"] == "start_child_workflow"
            external = EXTERNAL.get(command["type"])
            target = command.get("execution_id") or f"run-of-{command.get('workflow_id')}"
            if external and outcome[0] == "fail":
                self.history.external_failed(command["seq"], external, outcome[1], target)
            elif external:
                self.history.external_delivered(command["seq"], external, target)
            elif outcome[0] == "fire":
                self.history.timer_fired(command["seq"])
            elif outcome[0] == "fail" and child:
                self.history.child_failed(command["seq"], error_type=outcome[1])
            elif outcome[0] == "fail":
                self.history.activity_failed(command["seq"], outcome[1])
            elif child:
                self.history.child_completed(command["seq"], outcome[1])
            else:
                self.history.activity_completed(command["seq"], outcome[1])

    async def run_to_end(self, max_tasks: int = 50):
        for _ in range(max_tasks):
            act = await self.task()
            if act.finished:
                final = await self.run.advance(self.history.since(self.seen))
                assert final.finished and final.commands == []
                return act.commands[-1]
            self.resolve()
        raise AssertionError("workflow did not finish")
