"""The registry surface: ``@workflow``, ``@activity``, ``RetryPolicy`` and ``App``.

Decorators return the user's own function, only tagged with a definition
object, so the function stays callable and testable as written; ``App`` is the
one place a worker learns which names map to which code.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast, overload

from harvest.core.durations import Duration, parse_duration, plain_number
from harvest.core.errors import ActivityFailure, ConfigError, InvalidArgument, NotFound
from harvest.declare import flow_control as _flow

__all__ = [
    "DEFAULT_QUEUE",
    "ActivityDefinition",
    "App",
    "RetryPolicy",
    "WorkflowDefinition",
    "activity",
    "check_priority",
    "workflow",
]

DEFAULT_QUEUE = "default"

# What the decorators give back: the decorated function itself, its type unchanged, so a checker
# sees its own signature (docs/workflows.md "Types"). A workflow must be an ``async def``.
WorkflowFn = TypeVar("WorkflowFn", bound=Callable[..., Coroutine[Any, Any, Any]])
ActivityFn = TypeVar("ActivityFn", bound=Callable[..., Any])

# Task priorities: higher is claimed first. Bounded so priority ageing cannot overflow an integer.
PRIORITY_RANGE = (-1_000_000, 1_000_000)


def check_priority(value: Any, what: str = "priority") -> int:
    """An int (not a bool, not a string) within PRIORITY_RANGE."""
    low, high = PRIORITY_RANGE
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(
            f"{what}: expected an int from {low} to {high}, got {type(value).__name__} {value!r}"
        )
    if not low <= value <= high:
        raise InvalidArgument(f"{what}: {value} is out of range {low} to {high}")
    return value


def check_flag(value: Any, what: str) -> bool:
    """True or False, nothing truthy: ``local="no"`` would otherwise read as True."""
    if not isinstance(value, bool):
        raise InvalidArgument(f"{what}: expected True or False, got {type(value).__name__} {value!r}")
    return value


def _opt_duration(value: Any, what: str, *, positive: bool = False) -> float | None:
    return None if value is None else parse_duration(value, what, positive=positive)


def _num(x: float | None) -> float | int | None:
    """Integral seconds are written as ints, matching the wire examples."""
    if x is None:
        return None
    if type(x) is float:  # (the usual: no float() copy)
        return int(x) if x.is_integer() else x
    return int(x) if float(x).is_integer() else x


def _error_type_name(entry: Any) -> str:
    """One entry of ``non_retryable_errors``: a failure's error_type or text, as a string. A
    class or a number would be kept as a text no failure ever has, and silently never match."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, type) and issubclass(entry, BaseException):
        raise InvalidArgument(
            f"non_retryable_errors: list error types by name ({entry.__name__!r}), not the class "
            f"{entry.__name__}: a failure is matched by its error_type, its class's name"
        )
    raise InvalidArgument(
        f"non_retryable_errors: expected error type names (strings), got {type(entry).__name__} {entry!r}"
    )


def _error_type_names(entries: Any) -> list[str]:
    """``non_retryable_errors``: a list (any iterable) of error type names. A string iterated
    by letter ("ValueError": 'V', 'a', ...) and matched nothing; a class or None was "'type'
    object is not iterable" from inside the policy."""
    if isinstance(entries, str) or not isinstance(entries, Iterable):
        example = entries.__name__ if isinstance(entries, type) else entries
        hint = f": non_retryable_errors=[{example!r}]" if isinstance(example, str) else ""
        raise InvalidArgument(
            f"non_retryable_errors: expected a list of error types, got {type(entries).__name__} "
            f"{entries!r}{hint}"
        )
    return [_error_type_name(e) for e in entries]


class ActivityOptions(TypedDict, total=False):
    """The per-call options of ``ctx.execute_activity`` / ``execute_local_activity`` (its
    keywords), typed so a checker refuses a misspelt one (``start_to_clse``), which otherwise
    failed the run at its first step. The keys are ``ActivityDefinition.OVERRIDABLE``."""

    start_to_close: Duration
    schedule_to_close: Duration | None
    heartbeat_timeout: Duration | None
    retry: RetryPolicy | None
    queue: str | None
    priority: int
    dead_letter: bool
    priority_aging_secs: Duration | None
    fairness_key: str | None


# A retry policy's cap on the wait between attempts, unless it names one (or its first wait is
# longer).
DEFAULT_MAX_INTERVAL = 100.0


@dataclass
class RetryPolicy:
    """How often and how fast a failed activity is retried (all times in seconds)."""

    max_attempts: int = 3
    initial_interval: float = 1.0
    backoff: float = 2.0
    # Unset (None): DEFAULT_MAX_INTERVAL, or initial_interval when that is longer (__post_init__);
    # always a number once the policy is made.
    max_interval: float = cast(float, None)
    non_retryable_errors: list[str] = field(default_factory=list)

    if TYPE_CHECKING:
        # What the constructor takes (the fields are what it makes of it): durations in any
        # form, max_interval None (the documented default), any iterable of error type names.
        def __init__(
            self,
            max_attempts: int = 3,
            initial_interval: Duration = 1.0,
            backoff: float = 2.0,
            max_interval: Duration | None = None,
            non_retryable_errors: Iterable[str] = (),
        ) -> None: ...

    def __post_init__(self) -> None:
        if (
            not isinstance(self.max_attempts, int)
            or isinstance(self.max_attempts, bool)
            or not 1 <= self.max_attempts <= 1_000_000
        ):
            raise InvalidArgument(f"max_attempts: {self.max_attempts!r} must be an int from 1 to 1000000")
        self.initial_interval = parse_duration(self.initial_interval, "initial_interval", positive=True)
        if self.max_interval is None:
            # The default cap never undercuts the first interval asked for: with a fixed 100 s,
            # initial="1h" made every retry wait 100 s.
            self.max_interval = max(DEFAULT_MAX_INTERVAL, self.initial_interval)
        self.max_interval = parse_duration(self.max_interval, "max_interval", positive=True)
        if self.max_interval < self.initial_interval:
            # The cap wins (delay() = min(...)): every retry would wait max_interval, silently
            # shorter than the first interval asked for.
            raise InvalidArgument(
                f"max_interval ({plain_number(self.max_interval)}s) is shorter than "
                f"initial_interval ({plain_number(self.initial_interval)}s): every retry would wait "
                "max_interval; give a max_interval (RetryPolicy.exponential's maximum=) at least "
                "as long, or none"
            )
        if (
            not isinstance(self.backoff, (int, float))
            or isinstance(self.backoff, bool)
            or not 1 <= self.backoff <= 100
        ):
            raise InvalidArgument(f"backoff: {self.backoff!r} must be a number from 1 to 100")
        self.backoff = float(self.backoff)
        self.non_retryable_errors = _error_type_names(self.non_retryable_errors)

    @classmethod
    def exponential(
        cls,
        max_attempts: int = 3,
        initial: Duration = "1s",
        backoff: float = 2.0,
        maximum: Duration | None = None,
        non_retryable_errors: Iterable[str] = (),
    ) -> RetryPolicy:
        """``maximum`` None: 100 s, or ``initial`` when that is longer."""
        return cls(
            max_attempts,
            parse_duration(initial, "initial", positive=True),
            backoff,
            cast(float, None) if maximum is None else parse_duration(maximum, "maximum", positive=True),
            _error_type_names(non_retryable_errors),
        )

    @classmethod
    def none(cls) -> RetryPolicy:
        """A single attempt: the first failure is final."""
        return cls(max_attempts=1)

    def delay(self, attempt: int, failure: ActivityFailure | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based): the failure's own
        ``next_retry_delay`` when it gives one (a 429's Retry-After), else the backoff."""
        if failure is not None and failure.next_retry_delay is not None:
            return failure.next_retry_delay
        return min(self.initial_interval * self.backoff ** max(attempt - 1, 0), self.max_interval)

    def should_retry(self, failure: ActivityFailure, attempt: int) -> bool:
        """The resolution order of docs/activities.md (Retries): flag, then error_type, then the
        full text, the message or "ErrorType: message". The rule of
        harvest._fail_activity_attempt (functions/activities.sql), for what runs in Python
        (local activities, DAG steps)."""
        if attempt >= self.max_attempts or failure.non_retryable:
            return False
        listed = self.non_retryable_errors
        return not (
            failure.error_type in listed
            or failure.message in listed
            or f"{failure.error_type}: {failure.message}" in listed
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "initial_interval": _num(self.initial_interval),
            "backoff": self.backoff,
            "max_interval": _num(self.max_interval),
            "non_retryable_errors": list(self.non_retryable_errors),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> RetryPolicy:
        data = data or {}
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class ActivityDefinition:
    """Everything the engine needs to schedule and run one activity."""

    name: str
    fn: Callable[..., Any]
    start_to_close: float = 300.0
    schedule_to_close: float | None = None
    heartbeat_timeout: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    queue: str | None = None
    local: bool = False
    priority: int = 0
    dead_letter: bool = True
    is_async: bool = True
    # Where a plain `def` runs: "thread" (the worker's activity thread pool) or "process" (its
    # process pool, for CPU-bound work; docs/activities.md "Which executor"). None: thread.
    executor: str | None = None
    # Flow control (docs/flow-control.md): a cap on in-flight attempts per key, a rate limit.
    max_concurrent: int | None = None
    concurrency_key: str | None = None
    rate_limit: Any = None
    # Claim order (docs/flow-control.md): priority ageing and a fairness key path.
    priority_aging_secs: float | None = None
    fairness_key: str | None = None

    OVERRIDABLE = (
        "start_to_close",
        "schedule_to_close",
        "heartbeat_timeout",
        "retry",
        "queue",
        "priority",
        "dead_letter",
        "priority_aging_secs",
        "fairness_key",
    )

    def options_json(self) -> dict[str, Any]:
        """The ``options`` object of a ``schedule_activity`` command."""
        options = {
            "start_to_close": _num(self.start_to_close),
            "schedule_to_close": _num(self.schedule_to_close),
            "heartbeat_timeout": _num(self.heartbeat_timeout),
            "retry": self.retry.to_json(),
            "priority": self.priority,
            "dead_letter": self.dead_letter,
        }
        if (  # (_flow_options' tests: with none set, no call and no dict to merge)
            self.max_concurrent is not None
            or self.rate_limit is not None
            or self.priority_aging_secs is not None
            or self.fairness_key is not None
        ):
            options.update(self._flow_options())
        return options

    def _flow_options(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.max_concurrent is not None:
            out["max_concurrent"] = self.max_concurrent
            out["concurrency_key"] = self.concurrency_key or self.name
        if self.rate_limit is not None:
            out["rate_limit"] = self.rate_limit.to_json()
        if self.priority_aging_secs is not None:
            out["priority_aging_secs"] = self.priority_aging_secs
        if self.fairness_key is not None:
            out["fairness_key"] = self.fairness_key
        return out

    def with_options(self, **overrides: Any) -> ActivityDefinition:
        """A copy with per-call overrides (``start_to_close="10s"``, ``queue=...``)."""
        unknown = sorted(set(overrides) - set(self.OVERRIDABLE))
        if unknown:
            raise TypeError(self._unknown_options(unknown))
        return dataclasses.replace(self, **_normalize_options(overrides))

    def _unknown_options(self, unknown: list[str]) -> str:
        """The error of options that are none: each named as the slip it most likely is (one of
        the activity's own parameters passed by keyword, or a misspelt option)."""
        import difflib

        try:
            params = list(inspect.signature(self.fn).parameters)[1:]  # (ctx excluded)
        except (TypeError, ValueError):
            params = []
        described = []
        for name in unknown:
            if name in params:
                described.append(
                    f"{name!r} is a parameter of {self.name}: pass the activity's arguments "
                    "positionally; the keywords of ctx.execute_activity are its options"
                )
                continue
            near = difflib.get_close_matches(name, self.OVERRIDABLE, n=1)
            described.append(f"{name!r} (did you mean {near[0]}?)" if near else repr(name))
        return f"unknown activity option(s): {'; '.join(described)}; accepted: {list(self.OVERRIDABLE)}"


def _normalize_options(opts: dict[str, Any]) -> dict[str, Any]:
    out = dict(opts)
    if "start_to_close" in out:
        out["start_to_close"] = parse_duration(out["start_to_close"], "start_to_close", positive=True)
    for key in ("schedule_to_close", "heartbeat_timeout"):
        if key in out:
            out[key] = _opt_duration(out[key], key, positive=True)
    if "retry" in out:
        if out["retry"] is None:
            out["retry"] = RetryPolicy()
        elif not isinstance(out["retry"], RetryPolicy):
            raise TypeError(f"retry: expected a RetryPolicy, got {type(out['retry']).__name__}")
    if "priority" in out:
        check_priority(out["priority"])
    if "dead_letter" in out:
        check_flag(out["dead_letter"], "dead_letter")
    if "queue" in out and out["queue"] is not None:
        _check_name(out["queue"], "queue")
    if out.get("priority_aging_secs") is not None:
        out["priority_aging_secs"] = parse_duration(out["priority_aging_secs"], "priority_aging_secs")
        if out["priority_aging_secs"] <= 0:
            raise InvalidArgument("priority_aging_secs: must be positive (seconds per priority step)")
    if out.get("fairness_key") is not None:
        _flow.check_key_path(out["fairness_key"], "fairness_key")
    return out


@dataclass
class WorkflowDefinition:
    """A workflow's registered name, code and task queue."""

    name: str
    fn: Callable[..., Any]
    queue: str = DEFAULT_QUEUE
    concurrency: Any = None  # harvest.declare.flow_control.Concurrency
    quota: Any = None  # harvest.declare.flow_control.Quota
    throttle: Any = None  # harvest.declare.flow_control.Throttle
    debounce: Any = None  # harvest.declare.flow_control.Debounce
    batch: Any = None  # harvest.declare.flow_control.Batch
    # What the workflow calls, declared so `harvest preflight` can prove the App
    # registers all of it before a deploy (None: not declared, not checked).
    declared_activities: tuple[str, ...] | None = None
    declared_children: tuple[str, ...] | None = None
    # A DAG's workflow (harvest.declare.dags.Dag): the runtime runs its graph interpreter.
    dag: Any = None

    def __post_init__(self) -> None:
        # Names also for a definition registered by hand (App takes one), given functions or
        # names: preflight compares names (idempotent for @workflow's, already names).
        self.declared_activities = _declared(self.declared_activities, "__harvest_activity__", "activities")
        self.declared_children = _declared(self.declared_children, "__harvest_workflow__", "children")


def _declared(items: Iterable[Any] | None, attr: str, what: str) -> tuple[str, ...] | None:
    """Names of declared dependencies: a decorated function gives its registered name."""
    if items is None:
        return None
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        # (a string iterates by letter: each letter would be declared, and preflight fail on it)
        example = getattr(items, "__name__", None) or repr(items)
        raise TypeError(
            f"@workflow({what}=...) takes a list of functions or names: @workflow({what}=[{example}])"
        )
    names = []
    for item in items:
        definition = getattr(item, attr, None)
        if definition is not None:
            names.append(definition.name)
        elif isinstance(item, str) and item.strip():
            names.append(item)
        else:
            raise TypeError(f"@workflow({what}=...): {item!r} is neither a decorated function nor a name")
    return tuple(names)


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgument(f"{what}: expected a non-empty string, got {name!r}")
    return name


def _label(fn: Any) -> str:
    """How a message names ``fn``: its qualified name, or (a functools.partial, a callable
    object, which have none) its repr."""
    return getattr(fn, "__qualname__", None) or repr(fn)


def _check_takes_ctx(fn: Callable[..., Any], kind: str) -> None:
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        define = "async def" if inspect.iscoroutinefunction(fn) else "def"  # (a workflow is async)
        raise TypeError(
            f"@{kind} {_label(fn)}: the first parameter must be the "
            f"context (e.g. `{define} {getattr(fn, '__name__', 'handler')}(ctx, ...)`)"
        )


def _declared_name(fn: Any, name: str | None, kind: str) -> str:
    """The name ``fn`` registers under: ``name=``, else its ``__name__``, which a
    functools.partial or a callable object has not (an AttributeError from inside, before)."""
    if name is None and not isinstance(getattr(fn, "__name__", None), str):
        raise TypeError(f"@{kind} {_label(fn)} has no __name__: pass name=, as in @{kind}(name='...')")
    return _check_name(name if name is not None else fn.__name__, f"{kind} name")


def _mark(fn: Any, attr: str, definition: Any, kind: str) -> None:
    """Hang ``definition`` on ``fn``, refused with a TypeError when ``fn`` takes no attributes
    (a builtin: an AttributeError from inside, before)."""
    try:
        setattr(fn, attr, definition)
    except AttributeError:
        what = "the builtin " if inspect.isbuiltin(fn) else ""
        raise TypeError(
            f"@{kind} cannot mark {what}{_label(fn)} (it takes no attributes): wrap it in a def "
            f"that calls it, as in `def {getattr(fn, '__name__', 'call')}(ctx, *args): ...`"
        ) from None


@overload
def workflow(fn: WorkflowFn) -> WorkflowFn: ...
@overload
def workflow(
    fn: None = None,
    *,
    name: str | None = None,
    queue: str | None = None,
    concurrency: Any = None,
    quota: Any = None,
    throttle: Any = None,
    debounce: Any = None,
    batch: Any = None,
    activities: Iterable[Any] | None = None,
    children: Iterable[Any] | None = None,
) -> Callable[[WorkflowFn], WorkflowFn]: ...
def workflow(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    queue: str | None = None,
    concurrency: Any = None,
    quota: Any = None,
    throttle: Any = None,
    debounce: Any = None,
    batch: Any = None,
    activities: Iterable[Any] | None = None,
    children: Iterable[Any] | None = None,
) -> Any:
    """Mark an ``async def`` as a workflow; usable bare or as ``@workflow(name=..., queue=...)``.

    ``activities=`` and ``children=`` declare what it calls (functions or names), so
    ``harvest preflight --app`` can refuse a deploy whose App misses one.
    """

    def wrap(f: Any) -> Any:  # typed by the overloads above
        if not inspect.iscoroutinefunction(f):
            raise TypeError(
                f"@workflow {getattr(f, '__qualname__', f)!r} must be an "
                "`async def` (workflows are deterministic coroutines)"
            )
        _check_takes_ctx(f, "workflow")
        definition = WorkflowDefinition(
            name=_declared_name(f, name, "workflow"),
            fn=f,
            queue=_check_name(queue, "queue") if queue is not None else DEFAULT_QUEUE,
            **_flow.workflow_policies(concurrency, quota),
            **_flow.start_gates(throttle, debounce, batch),
            declared_activities=_declared(activities, "__harvest_activity__", "activities"),
            declared_children=_declared(children, "__harvest_workflow__", "children"),
        )
        _mark(f, "__harvest_workflow__", definition, "workflow")
        return f

    return wrap(fn) if fn is not None else wrap


@overload
def activity(fn: ActivityFn) -> ActivityFn: ...
@overload
def activity(
    fn: None = None,
    *,
    start_to_close: Any = 300.0,
    schedule_to_close: Any = None,
    heartbeat_timeout: Any = None,
    retry: RetryPolicy | None = None,
    queue: str | None = None,
    local: bool = False,
    name: str | None = None,
    priority: int = 0,
    dead_letter: bool = True,
    max_concurrent: int | None = None,
    concurrency_key: str | None = None,
    rate_limit: Any = None,
    priority_aging_secs: Any = None,
    fairness_key: str | None = None,
    executor: str | None = None,
) -> Callable[[ActivityFn], ActivityFn]: ...
def activity(
    fn: Callable[..., Any] | None = None,
    *,
    start_to_close: Any = 300.0,
    schedule_to_close: Any = None,
    heartbeat_timeout: Any = None,
    retry: RetryPolicy | None = None,
    queue: str | None = None,
    local: bool = False,
    name: str | None = None,
    priority: int = 0,
    dead_letter: bool = True,
    max_concurrent: int | None = None,
    concurrency_key: str | None = None,
    rate_limit: Any = None,
    priority_aging_secs: Any = None,
    fairness_key: str | None = None,
    executor: str | None = None,
) -> Any:
    """Mark a function as an activity; ``async def`` runs on the loop, plain ``def`` in the
    worker's thread pool, or in its process pool with ``executor="process"`` (CPU-bound work:
    the function and its arguments must pickle; docs/activities.md "Which executor")."""
    if executor not in (None, "thread", "process"):
        raise InvalidArgument(
            f"@activity(executor={executor!r}): use 'thread' or 'process' (or leave it out)"
        )
    flow = _flow.activity_policies(max_concurrent, concurrency_key, rate_limit)
    options = _normalize_options(
        {
            "start_to_close": start_to_close,
            "schedule_to_close": schedule_to_close,
            "heartbeat_timeout": heartbeat_timeout,
            "retry": retry,
            "queue": queue,
            "priority": priority,
            "dead_letter": dead_letter,
            "priority_aging_secs": priority_aging_secs,
            "fairness_key": fairness_key,
        }
    )

    def wrap(f: Any) -> Any:  # typed by the overloads above
        if not callable(f):
            raise TypeError(f"@activity expects a function, got {f!r}")
        if inspect.isclass(f):
            raise TypeError(f"@activity expects a function, got the class {f.__qualname__}")
        _check_takes_ctx(f, "activity")
        if inspect.isgeneratorfunction(f) or inspect.isasyncgenfunction(f):
            raise TypeError(
                f"@activity {_label(f)} is a generator function: an activity's result is what "
                "it returns (its rows as a list, say); a generator would be its result, which "
                "cannot be stored"
            )
        if executor is not None and inspect.iscoroutinefunction(f):
            raise TypeError(
                f"@activity(executor={executor!r}) on async def {_label(f)}: an async activity runs "
                "on the worker's event loop; make it a plain def to run it in a thread or a process"
            )
        if executor == "process" and "<locals>" in _label(f):
            raise TypeError(
                f"@activity(executor='process') on {_label(f)}: a process runs a function it can "
                "import by name; define it at the top level of a module"
            )
        definition = ActivityDefinition(
            name=_declared_name(f, name, "activity"),
            fn=f,
            local=check_flag(local, "local"),
            is_async=inspect.iscoroutinefunction(f),
            executor=executor,
            **options,
            **flow,
        )
        _mark(f, "__harvest_activity__", definition, "activity")
        return f

    return wrap(fn) if fn is not None else wrap


def _describe(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _require_list(option: str, value: Any) -> None:
    """App(workflows=checkout) (one function, or a name: a string iterates by letter) is refused
    saying the list it takes, rather than "'function' object is not iterable"."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        example = getattr(value, "__name__", None) or "..."
        raise TypeError(f"App({option}=...) takes a list: App({option}=[{example}])")


def require_app(value: Any, who: str) -> App:
    """``value`` if it is an App, else a TypeError saying how to make one (a list of workflows,
    or the CLI's "module:attr" string, is the usual slip)."""
    if not isinstance(value, App):
        raise TypeError(
            f"{who}() takes an App, got {type(value).__name__}: register your code in one, "
            "App(workflows=[...], activities=[...])"
        )
    return value


class App:
    """The registry a worker runs: workflows and activities by name.

    Later registries (queries, updates) join as keyword-only arguments here.
    """

    def __init__(
        self,
        workflows: Iterable[Any] = (),
        activities: Iterable[Any] = (),
        *,
        queries: Iterable[Any] = (),
        updates: Iterable[Any] = (),
        schedules: Iterable[Any] = (),
        dags: Iterable[Any] = (),
        codecs: Any = None,
    ) -> None:
        self.workflows: dict[str, WorkflowDefinition] = {}
        self.activities: dict[str, ActivityDefinition] = {}
        for option, given in (
            ("workflows", workflows),
            ("activities", activities),
            ("queries", queries),
            ("updates", updates),
            ("schedules", schedules),
            ("dags", dags),
        ):
            _require_list(option, given)
        for item in workflows:
            self._add(self.workflows, _as_workflow(item), "workflow")
        for item in activities:
            self._add(self.activities, _as_activity(item), "activity")
        # DAGs (declare/dags.py): each is registered as the workflow of its name.
        self.dags: dict[str, Any] = _register_dags(self, dags)
        _flow.check_shared_keys(self.activities.values())
        from harvest.declare.messages import register_handlers  # @query / @update (declare/messages.py)

        # workflow name -> handler name -> HandlerDefinition
        self.queries, self.updates = register_handlers(self.workflows, queries, updates)
        from harvest.declare.schedules import check_input as check_schedule_input
        from harvest.declare.schedules import register_schedules  # App(schedules=) (declare/schedules.py)

        # A DAG's own schedule= is a schedule of kind "dag" named after it (docs/dags.md).
        dag_schedules = [dag.as_schedule() for dag in self.dags.values() if dag.schedule is not None]
        self.schedules = register_schedules([*schedules, *dag_schedules])
        for item in self.schedules.values():
            check_schedule_input(item, self.workflows.get(item.workflow_name))
        # The payload policy of this App's workers (docs/payloads.md): a list of codecs or a
        # harvest.core.codecs.Payloads (codecs, offload threshold, store).
        from harvest.core.codecs import Payloads

        self.payloads = Payloads.of(codecs)
        _flow.refuse_keys_under_codecs(self, self.payloads, "App(codecs=...)")

    def handlers(self, workflow: Any) -> dict[str, Any]:
        """The queries and updates declared for ``workflow`` (see ``harvest.describe_handlers``)."""
        from harvest.declare.messages import describe_handlers

        return describe_handlers(self, workflow)

    @staticmethod
    def _add(table: dict[str, Any], defn: Any, kind: str) -> None:
        existing = table.get(defn.name)
        if existing is not None:
            if existing.fn == defn.fn:  # (==: an instance's method is a new object at each access)
                return  # the same function listed twice is harmless
            raise ConfigError(
                f"duplicate {kind} name {defn.name!r}: registered by "
                f"{_describe(existing.fn)} and {_describe(defn.fn)}"
            )
        table[defn.name] = defn

    def workflow(self, name: Any) -> WorkflowDefinition:
        key = _name_of(name, "__harvest_workflow__")
        try:
            return self.workflows[key]
        except KeyError:
            raise NotFound(
                f"no workflow named {key!r} is registered; known: {sorted(self.workflows) or 'none'}"
            ) from None

    def activity(self, name: Any) -> ActivityDefinition:
        key = _name_of(name, "__harvest_activity__")
        try:
            return self.activities[key]
        except KeyError:
            raise NotFound(
                f"no activity named {key!r} is registered; known: {sorted(self.activities) or 'none'}"
            ) from None

    def find_activity(self, name: str) -> ActivityDefinition | None:
        return self.activities.get(name)

    def flow_policies(self) -> dict[str, Any]:
        """The JSON ``harvest.declare_flow_policies`` takes (a worker declares it at start-up)."""
        return _flow.policies_json(self)

    @property
    def queues(self) -> set[str]:
        """Every queue a worker for this app must poll (local activities need none)."""
        out = {w.queue for w in self.workflows.values()}
        out.update(a.queue for a in self.activities.values() if a.queue and not a.local)
        for dag in self.dags.values():  # a DAG task's own queue option
            out.update(dag.queues())
        return out

    def __repr__(self) -> str:
        return f"App(workflows={sorted(self.workflows)}, activities={sorted(self.activities)})"


def _register_dags(app: App, dags: Iterable[Any]) -> dict[str, Any]:
    """Check each DAG against the App (declare/dags.py ``Dag.problems``) and register its workflow."""
    out: dict[str, Any] = {}
    for dag in dags:
        definition = getattr(dag, "definition", None)
        if not isinstance(definition, WorkflowDefinition) or definition.dag is not dag:
            raise TypeError(f"App(dags=...): {dag!r} is not a harvest.Dag")
        problems = dag.problems(app.activities, app.workflows)
        if problems:
            raise ConfigError(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        app._add(app.workflows, dag.definition, "workflow")
        out[dag.name] = dag
    return out


def _name_of(item: Any, attr: str) -> str:
    if isinstance(item, str):
        return item
    defn = getattr(item, attr, None) or item
    return getattr(defn, "name", str(item))


def _as_workflow(item: Any) -> WorkflowDefinition:
    if isinstance(item, WorkflowDefinition):
        return item
    defn = getattr(item, "__harvest_workflow__", None)
    if not isinstance(defn, WorkflowDefinition):
        if isinstance(getattr(item, "__harvest_activity__", None), ActivityDefinition):
            raise TypeError(
                f"App(workflows=...): {_describe(item)} is an @activity, not a @workflow: "
                "pass it in App(activities=[...])"
            )
        raise TypeError(f"App(workflows=...): {_describe(item)} is not decorated with @workflow")
    return defn


def _as_activity(item: Any) -> ActivityDefinition:
    if isinstance(item, ActivityDefinition):
        return item
    defn = getattr(item, "__harvest_activity__", None)
    if not isinstance(defn, ActivityDefinition):
        if isinstance(getattr(item, "__harvest_workflow__", None), WorkflowDefinition):
            raise TypeError(
                f"App(activities=...): {_describe(item)} is a @workflow, not an @activity: "
                "pass it in App(workflows=[...])"
            )
        raise TypeError(f"App(activities=...): {_describe(item)} is not decorated with @activity")
    if not inspect.ismethod(item) and list(inspect.signature(defn.fn).parameters)[:1] == ["self"]:
        # The method unbound (Payments.charge) would take the ctx as `self`.
        raise TypeError(
            f"{_describe(defn.fn)} takes `self`: register the method of an instance, "
            "App(activities=[instance.charge]), and call it as ctx.execute_activity(instance.charge, ...)"
        )
    return bound_activity(defn, item)


def bound_activity(defn: ActivityDefinition, item: Any) -> ActivityDefinition:
    """The definition of ``item``, an @activity function or an instance's @activity method:
    a method runs bound (its instance holds what the activities share, a client, a gateway),
    so ``ctx`` is its first argument after ``self``, as for a function."""
    return dataclasses.replace(defn, fn=item) if inspect.ismethod(item) else defn
