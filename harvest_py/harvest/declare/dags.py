"""DAGs: a graph of tasks (activities or child workflows) with trigger rules (docs/dags.md).

``Dag(name, ...)`` declares the graph; ``dag.task(name, fn, ...)`` adds a node and
``later.after(earlier, ...)`` an edge, which is the one way dependencies are declared. Every
mistake is refused where it is made, in one line: a cycle, a task of another DAG or an unknown
name, a bad option or trigger rule; an activity or child workflow the App does not register is
refused by ``App(dags=[...])`` (and by ``harvest preflight --app``).

A DAG run IS a workflow run: ``App(dags=[dag])`` registers ``dag.definition``, a workflow named
``dag.name`` whose code is the runtime's graph interpreter (``harvest.runtime.dags``), so a run
replays, survives a worker crash and shows in every workflow view like any other run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from harvest.core.durations import parse_duration
from harvest.core.errors import ActivityFailure, ConfigError, InvalidArgument
from harvest.declare.definitions import (
    DEFAULT_QUEUE,
    ActivityDefinition,
    RetryPolicy,
    WorkflowDefinition,
    check_flag,
    check_priority,
)

__all__ = ["TRIGGER_RULES", "Dag", "DagTask", "SkipTask"]

# Airflow's names and meanings (docs/dags.md, "Trigger rules").
TRIGGER_RULES = (
    "all_success",
    "all_failed",
    "all_done",
    "one_success",
    "one_failed",
    "none_failed",
    "none_skipped",
    "always",
)
# What a task may set for itself or take from the DAG's default_args.
ACTIVITY_OPTIONS = (
    "retry",
    "start_to_close",
    "schedule_to_close",
    "heartbeat_timeout",
    "queue",
    "priority",
    "dead_letter",
)
CHILD_OPTIONS = ("retry", "queue")
DEFAULT_ARGS = (*ACTIVITY_OPTIONS, "trigger_rule")
# Task and DAG names: no '/', which separates a child's workflow id from its task name.
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]*$")


class SkipTask(ActivityFailure):
    """Raise it from a DAG task's activity (or child workflow) to end the task ``skipped``
    instead of failed: its downstream tasks see a skipped upstream (docs/dags.md)."""

    def __init__(self, message: str = "skipped"):
        super().__init__("SkipTask", message, non_retryable=True)


def _describe(schedule: Any) -> str:
    """A schedule as harvest.dags stores it for people to read: a Schedule's own words
    ("cron 0 3 * * * UTC", "every 900s", as `schedule list` spells them), else its str()."""
    describe = getattr(schedule, "describe", None)
    return cast(str, describe()) if callable(describe) else str(schedule)


def _check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise InvalidArgument(
            f"{what}: {value!r} is not a valid name (letters, digits and _ . : -, no '/'; not empty)"
        )
    return value


def _options(
    dag: str, task: str, options: Mapping[str, Any], allowed: tuple[str, ...], kind: str
) -> dict[str, Any]:
    out = {}
    for key, value in options.items():
        if key not in allowed:
            raise InvalidArgument(
                f"dag {dag!r} task {task!r}: option {key!r} does not apply to {kind}; "
                f"accepted: {list(allowed)}"
            )
        if value is None:
            continue
        where = f"dag {dag!r} task {task!r}: {key}"
        if key == "retry":
            if not isinstance(value, RetryPolicy):
                raise InvalidArgument(f"{where}: expected a RetryPolicy, got {type(value).__name__}")
        elif key in ("start_to_close", "schedule_to_close", "heartbeat_timeout"):
            value = parse_duration(value, where, positive=True)
        elif key == "queue":
            if not isinstance(value, str) or not value.strip():
                raise InvalidArgument(f"{where}: expected a non-empty string, got {value!r}")
        elif key == "priority":
            check_priority(value, where)
        elif key == "dead_letter":
            check_flag(value, where)
        out[key] = value
    return out


class DagTask:
    """One node of a DAG: what it runs, with which arguments, options and trigger rule.

    Made by :meth:`Dag.task`; ``task.after(*upstream)`` declares what it waits for.
    """

    def __init__(
        self,
        dag: Dag,
        name: str,
        kind: str,
        target: str,
        definition: ActivityDefinition | WorkflowDefinition | None,
        args: Any,
        trigger_rule: str,
        options: dict[str, Any],
    ):
        self.dag = dag
        self.name = name
        self.kind = kind  # "activity" | "workflow"
        self.target = target  # the activity's or child workflow's registered name
        self.definition = definition
        self.args = args
        self.trigger_rule = trigger_rule
        self.options = options
        self.upstream: list[str] = []

    def after(self, *tasks: DagTask | str) -> DagTask:
        """This task waits for ``tasks`` (tasks of this DAG, or their names); returns itself.

        Refused at once (``InvalidArgument``): a task of another DAG, a name this DAG has not
        declared, or an edge that would close a cycle.
        """
        if self.dag._definition is not None:
            raise InvalidArgument(
                f"dag {self.dag.name!r}: {self.name}.after(...) once an App registered the DAG; "
                "declare every edge before App(dags=[...])"
            )
        for item in tasks:
            name = self.dag._resolve(item, f"{self.name}.after(...)")
            if name in self.upstream:
                continue
            path = self.dag._path(name, self.name)
            if path is not None:
                cycle = " -> ".join([self.name, *path])  # each waits for the next
                raise InvalidArgument(
                    f"dag {self.dag.name!r}: {self.name}.after({name}) would make a cycle ({cycle}); "
                    "a DAG has no cycles"
                )
            self.upstream.append(name)
        self.dag._order = None
        return self

    def arguments(self, conf: Any, upstream: dict[str, Any]) -> list[Any]:
        """The positional arguments of this task's activity or child in a run with ``conf``,
        given the results of its successful upstream tasks (deterministic: no I/O)."""
        if self.args is None:
            return [conf]
        if callable(self.args):
            made = self.args(conf, upstream)
            if not isinstance(made, list | tuple):
                raise InvalidArgument(
                    f"dag {self.dag.name!r} task {self.name!r}: args(conf, upstream) must return a list "
                    f"or tuple of arguments, got {type(made).__name__}"
                )
            return list(made)
        return list(self.args)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task": self.name,
            "kind": self.kind,
            "target": self.target,
            "upstream": list(self.upstream),
            "trigger_rule": self.trigger_rule,
        }
        retry = self.options.get("retry")
        if retry is not None:
            out["retry"] = retry.to_json()
        return out

    def __repr__(self) -> str:
        return f"DagTask({self.dag.name}.{self.name} runs {self.kind} {self.target!r})"


class Dag:
    """A DAG of tasks, run as the workflow named ``name``.

    ``schedule`` (a :class:`harvest.Schedule`, or None) fires the DAG: the App turns it into a
    schedule of kind ``dag`` that starts this workflow.
    ``default_args`` sets task options for every task (``retry``, ``start_to_close``,
    ``schedule_to_close``, ``heartbeat_timeout``, ``queue``, ``priority``, ``dead_letter``,
    ``trigger_rule``); a task's own keywords win. ``max_active_runs`` bounds the RUNNING runs a
    trigger may add (None: no bound). ``queue`` is the run's workflow queue and its tasks' default.
    """

    def __init__(
        self,
        name: str,
        *,
        schedule: Any = None,
        default_args: Mapping[str, Any] | None = None,
        max_active_runs: int | None = None,
        queue: str | None = None,
        description: str | None = None,
    ):
        self.name = _check_name(name, "dag name")
        if max_active_runs is not None and (
            not isinstance(max_active_runs, int) or isinstance(max_active_runs, bool) or max_active_runs < 1
        ):
            raise InvalidArgument(
                f"dag {name!r}: max_active_runs must be an int >= 1 or None, got {max_active_runs!r}"
            )
        if queue is not None and (not isinstance(queue, str) or not queue.strip()):
            raise InvalidArgument(f"dag {name!r}: queue must be a non-empty string, got {queue!r}")
        defaults = dict(default_args or {})
        unknown = sorted(set(defaults) - set(DEFAULT_ARGS))
        if unknown:
            raise InvalidArgument(
                f"dag {name!r}: default_args {unknown} are not task options; accepted: {list(DEFAULT_ARGS)}"
            )
        rule = defaults.pop("trigger_rule", "all_success")
        self.default_trigger_rule = self._rule(rule, "default_args")
        self.default_args = _options(name, "*", defaults, ACTIVITY_OPTIONS, "a task")
        self.schedule = schedule
        self.max_active_runs = max_active_runs
        self.queue = queue or DEFAULT_QUEUE
        self.description = description
        self.tasks: dict[str, DagTask] = {}
        self._order: list[str] | None = None
        self._definition: WorkflowDefinition | None = None

    def as_schedule(self) -> Any:
        """The schedule of kind ``dag`` that fires this DAG (``App`` registers it): named and
        starting the DAG's workflow, bounded by the DAG's ``max_active_runs`` (no bound: every
        slot starts a run). The tick skips a slot while the DAG is paused (reason ``dag_paused``)."""
        from harvest.declare.schedules import WorkflowSchedule

        bounded = self.max_active_runs is not None
        return WorkflowSchedule(
            name=self.name,
            schedule=self.schedule,
            workflow=self.name,
            kind="dag",
            queue=self.queue,
            max_active_runs=self.max_active_runs if self.max_active_runs is not None else 1,
            overlap="skip" if bounded else "allow_all",
        )

    def _rule(self, rule: Any, where: str) -> str:
        if rule not in TRIGGER_RULES:
            raise InvalidArgument(
                f"dag {self.name!r} {where}: trigger_rule {rule!r} is not one of {list(TRIGGER_RULES)}"
            )
        return cast(str, rule)

    def task(
        self,
        name: str,
        run: Any,
        *,
        args: Iterable[Any] | Callable[[Any, dict[str, Any]], Iterable[Any]] | None = None,
        trigger_rule: str | None = None,
        **options: Any,
    ) -> DagTask:
        """Add a task named ``name`` that runs ``run``: an ``@activity`` function (or its
        registered name, or its definition) or an ``@workflow`` function (a child workflow).

        ``args``: None calls it with the run's conf (one argument); a list gives fixed
        arguments; a callable ``args(conf, upstream)`` (``upstream``: the results of its
        successful upstream tasks by name) returns them, and must be deterministic.
        ``options``: for an activity ``retry``, ``start_to_close``, ``schedule_to_close``,
        ``heartbeat_timeout``, ``queue``, ``priority``, ``dead_letter`` (default False: a final
        failure fails the task, it is not parked); for a child ``retry`` (the child is started
        again, each attempt a new workflow) and ``queue``.
        """
        _check_name(name, f"dag {self.name!r} task name")
        if name in self.tasks:
            raise InvalidArgument(f"dag {self.name!r}: task {name!r} is declared twice")
        if self._definition is not None:
            raise InvalidArgument(f"dag {self.name!r}: tasks cannot be added once an App registered the DAG")
        kind, target, definition = self._target(name, run)
        if kind == "activity" and definition is not None and definition.local:
            raise InvalidArgument(
                f"dag {self.name!r} task {name!r}: activity {target!r} is local; a DAG task runs a "
                "regular activity"
            )
        if args is not None and not callable(args):
            if isinstance(args, str | bytes | Mapping) or not isinstance(args, Iterable):
                raise InvalidArgument(
                    f"dag {self.name!r} task {name!r}: args must be a list, a tuple or a callable "
                    f"(conf, upstream) -> list, got {type(args).__name__}"
                )
            args = list(args)
        allowed = ACTIVITY_OPTIONS if kind == "activity" else CHILD_OPTIONS
        what = "an activity task" if kind == "activity" else "a child workflow task"
        merged = {k: v for k, v in self.default_args.items() if k in allowed}
        merged.update(_options(self.name, name, options, allowed, what))
        if kind == "activity":
            merged.setdefault("dead_letter", False)
        rule = (
            self._rule(trigger_rule, f"task {name!r}")
            if trigger_rule is not None
            else self.default_trigger_rule
        )
        task = DagTask(self, name, kind, target, definition, args, rule, merged)
        self.tasks[name] = task
        self._order = None
        return task

    def _target(self, task: str, run: Any) -> tuple[str, str, Any]:
        if isinstance(run, str):
            if not run.strip():
                raise InvalidArgument(f"dag {self.name!r} task {task!r}: the activity name is empty")
            return "activity", run, None
        if isinstance(run, ActivityDefinition):
            return "activity", run.name, run
        if isinstance(run, WorkflowDefinition):
            return "workflow", run.name, run
        activity = getattr(run, "__harvest_activity__", None)
        if isinstance(activity, ActivityDefinition):
            return "activity", activity.name, activity
        workflow = getattr(run, "__harvest_workflow__", None)
        if isinstance(workflow, WorkflowDefinition):
            return "workflow", workflow.name, workflow
        raise InvalidArgument(
            f"dag {self.name!r} task {task!r}: {run!r} is neither an @activity nor an @workflow "
            "function (nor an activity name)"
        )

    def _resolve(self, item: Any, where: str) -> str:
        if isinstance(item, DagTask):
            if item.dag is not self or self.tasks.get(item.name) is not item:
                raise InvalidArgument(
                    f"dag {self.name!r}: {where} names task {item.name!r} of dag {item.dag.name!r}; "
                    "a task waits only for tasks of its own DAG"
                )
            return item.name
        if isinstance(item, str) and item in self.tasks:
            return item
        raise InvalidArgument(
            f"dag {self.name!r}: {where} names unknown task {item!r}; "
            f"declared: {sorted(self.tasks) or 'none'}"
        )

    def _path(self, start: str, goal: str) -> list[str] | None:
        """The upstream path from ``start`` back to ``goal`` (both included), if there is one."""
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        seen: set[str] = set()
        while stack:
            name, path = stack.pop()
            if name == goal:
                return path
            if name in seen:
                continue
            seen.add(name)
            for up in self.tasks[name].upstream:
                stack.append((up, [*path, up]))
        return None

    @property
    def order(self) -> list[str]:
        """The tasks in a topological order (declaration order among the ready ones)."""
        if self._order is None:
            remaining = {name: set(t.upstream) for name, t in self.tasks.items()}
            order: list[str] = []
            while remaining:
                ready = [name for name, ups in remaining.items() if not ups]
                if not ready:  # after() refuses cycles, so this is a defect
                    raise ConfigError(f"dag {self.name!r} has a cycle among {sorted(remaining)}")
                for name in ready:
                    order.append(name)
                    del remaining[name]
                for ups in remaining.values():
                    ups.difference_update(ready)
            self._order = order
        return self._order

    def queues(self) -> set[str]:
        """The queues its tasks name themselves (the App's workers poll them too)."""
        return {t.options["queue"] for t in self.tasks.values() if t.options.get("queue")}

    def downstream(self, name: str) -> list[str]:
        return [t.name for t in self.tasks.values() if name in t.upstream]

    def problems(self, activities: Mapping[str, Any], workflows: Mapping[str, Any]) -> list[str]:
        """What an App with these activities and workflows lacks to run this DAG (one line
        each): an unregistered activity or child workflow, a task registered under another
        function, a cycle, no task at all."""
        out = []
        if not self.tasks:
            out.append(f"dag {self.name!r} has no task")
        try:
            _ = self.order
        except ConfigError as exc:
            out.append(str(exc))
        for task in self.tasks.values():
            table, what = (
                (activities, "activity") if task.kind == "activity" else (workflows, "child workflow")
            )
            registered = table.get(task.target)
            if registered is None:
                where = "App(activities=[...])" if task.kind == "activity" else "App(workflows=[...])"
                out.append(
                    f"dag {self.name!r} task {task.name!r} runs {what} {task.target!r}, which the App does "
                    f"not register; add it to {where}"
                )
            elif task.definition is not None and getattr(registered, "fn", None) is not task.definition.fn:
                out.append(
                    f"dag {self.name!r} task {task.name!r} runs {what} {task.target!r}, but the App "
                    "registers another function under that name"
                )
            elif task.kind == "activity" and getattr(registered, "local", False):
                out.append(f"dag {self.name!r} task {task.name!r}: activity {task.target!r} is local")
        return out

    @property
    def definition(self) -> WorkflowDefinition:
        """The workflow this DAG runs as (name ``self.name``), made once."""
        if self._definition is None:
            self._definition = WorkflowDefinition(
                name=self.name, fn=_dag_workflow, queue=self.queue, dag=self
            )
        return self._definition

    def catalog(self) -> dict[str, Any]:
        """The DAG as ``harvest.register_dags`` stores it (``harvest dag list``, the run view)."""
        return {
            "dag_name": self.name,
            "queue": self.queue,
            "max_active_runs": self.max_active_runs,
            "description": self.description,
            "schedule": None if self.schedule is None else _describe(self.schedule),
            "tasks": [self.tasks[name].to_json() for name in self.order],
        }

    def __repr__(self) -> str:
        return f"Dag({self.name!r}, tasks={list(self.tasks)})"


async def _dag_workflow(ctx: Any, conf: Any = None, retry: dict[str, Any] | None = None) -> dict[str, Any]:
    """The signature of every DAG's workflow: ``conf`` (any JSON; None reads as ``{}``) and
    ``retry`` (``{"retry_of": execution id, "results": {task: result}}``, set by a retry).
    The worker's runtime runs the graph interpreter in its place (``WorkflowDefinition.dag``)."""
    raise RuntimeError("a DAG runs on a worker: start it with harvest dag trigger or harvest.trigger_dag")
