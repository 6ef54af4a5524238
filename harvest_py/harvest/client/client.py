"""Start workflows and wait for their results, over the SQL API only.

``Client`` is synchronous, ``AsyncClient`` is for asyncio code; both hand out
handles. ``handle.result()`` waits on LISTEN/NOTIFY (channel ``harvest_done``),
never by polling. Pass ``connection=`` to ``start_workflow`` to start inside your
own transaction: the business write and the start commit or roll back together.

Over one database (``Client(dsn)``) or over shards (``Client(shards=ShardPools)``):
a sharded client places each start (hash, or a ``shard_id`` / ``residency_key`` pin)
and sends every call about an execution to the shard it lives on: the shard its id carries,
then the forwarding pointer of a run a rebalance moved (harvest/client/routing.py,
docs/sharding.md "Routing").
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import inspect
import json
import threading
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, Literal, Protocol, Self, TypeVar, TypeVarTuple, cast, overload

from harvest.client import messages as messaging
from harvest.client import payloads as payload_policy
from harvest.client import routing
from harvest.client.batch import BATCH_STEP, StepKeywords, step_keywords
from harvest.client.outage import Outage
from harvest.core import payload
from harvest.core.codecs import Payloads
from harvest.core.deprecation import queue_alias
from harvest.core.durations import Duration, parse_duration, plain_number
from harvest.core.errors import (
    ActivityFailure,
    DatabaseUnavailable,
    ExecutionMigrated,
    HarvestError,
    InvalidArgument,
    NotFound,
    PayloadError,
    ShardUnavailable,
    StaleTask,
    TimeoutError_,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotRunning,
    WorkflowTerminated,
    WorkflowTimedOut,
    failure_line,
)
from harvest.core.ids import shard_of
from harvest.core.json_values import json_default
from harvest.core.receipts import SignalReceipt
from harvest.core.statuses import LIVE_STATUSES
from harvest.core.stepper import Do as _Do
from harvest.core.stepper import Flow as _Flow
from harvest.core.stepper import adrive as _adrive
from harvest.core.stepper import drive as _drive
from harvest.core.task_token import TaskToken
from harvest.db import channels, pooler, sqlapi
from harvest.db.connection import caller_connection, connect, connect_async, one_line, resolve_dsn
from harvest.db.group_commit import GroupCommit
from harvest.db.migrate import check_schema as verify_schema
from harvest.db.migrate import check_schema_async
from harvest.db.notify import NotificationHub, ThreadNotificationHub
from harvest.db.pools import connections_by, never_sent, open_async_pool, open_pool
from harvest.db.sqlapi import AsyncSqlApi, SqlApi, translated_errors
from harvest.db.steps import (
    InTransaction,
    Notified,
    Sql,
    Steps,
    arun_steps,
    arun_steps_on_hub,
    bounded_by,
    run_steps,
    run_steps_on_hub,
)
from harvest.declare import flow_control
from harvest.declare.definitions import WorkflowDefinition, check_priority
from harvest.shard.fanout import CHILDREN_PAGE, COMPLETE, UNAVAILABLE, AsyncShardReads, ShardReads
from harvest.telemetry import tracing

# A handle's result type, and the positional arguments of the workflow function a start is
# typed by (docs/workflows.md "Types"); a start by name gives a WorkflowHandle[Any].
ResultT = TypeVar("ResultT")
T = TypeVar("T")
Args = TypeVarTuple("Args")
_Method = TypeVar("_Method", bound=Callable[..., Any])

REUSE_POLICIES = (
    "allow_duplicate",
    "allow_duplicate_failed_only",
    "reject_duplicate",
    "terminate_if_running",
)
CONFLICT_POLICIES = ("unspecified", "use_existing", "fail", "terminate_existing")

# The handle's calls whose arguments after the run are (reason[, operator_id]), checked as text.
_REASONED = frozenset(
    {sqlapi.cancel_workflow, sqlapi.terminate_workflow, sqlapi.pause_workflow, sqlapi.resume_workflow}
)


def _resolve_workflow(workflow: Any) -> tuple[str, WorkflowDefinition | None]:
    definition = getattr(workflow, "__harvest_workflow__", None)
    if isinstance(workflow, WorkflowDefinition):
        definition = workflow
    if definition is not None:
        return definition.name, definition
    if isinstance(workflow, str) and workflow:
        return payload_policy.text(workflow, "workflow name"), None
    raise TypeError(f"start_workflow needs a @workflow function or its name, got {workflow!r}")


def _outcome(execution: dict[str, Any], definition: WorkflowDefinition | None) -> Any:
    """The decoded result of a terminal execution, or its typed exception."""
    status, execution_id = execution["status"], str(execution["id"])
    if status == "CONTINUED_AS_NEW":
        raise _ContinuedAsNew(str(execution["output"]["continued_as_new"]))
    if status in ("MIGRATED", "MIGRATING"):
        # A shard rebalance moved the run (docs/sharding.md, "Rebalancing"): not an end.
        shard = execution.get("migrated_to_shard")
        raise ExecutionMigrated(
            f"workflow {execution_id} moved to shard {shard}: read its result there "
            "(ShardPools.call_routed follows the forwarding pointer)"
            if shard is not None
            else f"workflow {execution_id} is being moved to this shard; retry",
            "migrated",
            execution_id,
            shard,
        )
    if status == "COMPLETED":
        return payload.decode_result(definition.fn if definition else None, execution["output"])
    failure = execution.get("failure") or {}
    reason = failure.get("message", "")
    if status == "FAILED":
        raise WorkflowFailed(execution_id, failure)
    if status == "CANCELLED":
        raise WorkflowCancelled(f"workflow {execution_id} was cancelled: {_cancel_reason(failure, reason)}")
    if status == "TERMINATED":
        raise WorkflowTerminated(f"workflow {execution_id} was terminated: {reason}")
    if status == "TIMED_OUT":
        raise WorkflowTimedOut(f"workflow {execution_id} timed out: {reason}")
    raise WorkflowFailed(execution_id, {"error_type": status, "message": f"run ended {status}"})


def _cancel_reason(failure: dict[str, Any], message: str) -> str:
    """A cancelled run's reason: its details (the cancel's reason unless the workflow gave its
    own), decoded. The stored message is their text as the worker's codecs left them, an
    envelope's or an offload reference's JSON under codecs (functions/decide.sql)."""
    details = failure.get("details")
    if details is None:
        return message
    return details if isinstance(details, str) else json.dumps(details, default=json_default)


def _not_deferred(handle: Any) -> None:
    if handle.deferred:
        raise InvalidArgument(
            f"start of workflow_id {handle.workflow_id!r} was deferred by a throttle, "
            "debounce or batch: it has no execution yet (the worker's scanner starts "
            "it later under that workflow_id)"
        )


# How many continue-as-new hops one signal/cancel/terminate/pause/resume call follows, from the
# newest run its handle reached (docs/workflows.md, "Continue-as-new"): a bound on one call's walk
# (two round trips a hop), not on the chain.
_MAX_CHAIN = 100

# result() re-reads the run this often while it waits, in case a close raced its mark.
_RESULT_REREAD_SECS = 5.0
# How long a wait lets its client's LISTEN connection come up before it reads without it
# (a wait of a shorter timeout: that long).
_HUB_START_SECS = 5.0


def _hub_start_secs(within: float | None) -> float:
    return _HUB_START_SECS if within is None else max(0.0, min(_HUB_START_SECS, within))


def _left(deadline: float | None) -> float | None:
    """What is left of a wait's time (None: no deadline)."""
    return None if deadline is None else deadline - time.monotonic()


def _successor(execution: dict[str, Any]) -> str | None:
    """The next run's id when this one continued as new."""
    if execution.get("status") != "CONTINUED_AS_NEW":
        return None
    return str((execution.get("output") or {}).get("continued_as_new") or "") or None


class _ContinuedAsNew(Exception):
    """Internal: the run rotated; result() follows the chain to its successor."""

    def __init__(self, next_execution_id: str):
        self.next_execution_id = next_execution_id


class _Hop(Exception):
    """Internal: a continue-as-new chain goes on on another shard; the handle reconnects there.
    ``after``: the run that continued as new as it (its NotFound is a broken chain)."""

    def __init__(self, execution_id: str, after: str | None = None):
        self.execution_id = execution_id
        self.after = after


def _same_shard(route: Any, run: str, successor: str) -> bool:
    return route is None or route(run) == route(successor)


class Page(list[dict[str, Any]]):
    """Rows read over every shard (a list of them) and how complete they are: ``status``
    ``"complete"``, or ``"partial"`` with the shards that could not be read in
    ``unavailable_shards`` (a sharded client reads every shard, docs/sharding.md); and, for a
    page, ``next_cursor``, the cursor of the next page (None: this was the last)."""

    def __init__(
        self,
        rows: Iterable[dict[str, Any]] = (),
        status: str = COMPLETE,
        unavailable_shards: Iterable[int] = (),
        next_cursor: str | None = None,
    ):
        super().__init__(rows)
        self.status = status
        self.unavailable_shards: list[int] = list(unavailable_shards)
        self.next_cursor = next_cursor


class Children(Page):
    """An execution's children (a :class:`Page` of rows). A page of them (``children_page``)
    also has ``truncated``, whether a page deeper than the direct children stopped its walk at
    ``max_nodes``."""

    def __init__(
        self,
        rows: Iterable[dict[str, Any]] = (),
        status: str = COMPLETE,
        unavailable_shards: Iterable[int] = (),
        next_cursor: str | None = None,
        truncated: bool | None = None,
    ):
        super().__init__(rows, status, unavailable_shards, next_cursor)
        self.truncated = truncated


@dataclasses.dataclass(frozen=True)
class StartOptions:
    """How to start a run, apart from the workflow's own arguments (docs/workflows.md,
    "Starting a run"): ``client.start_workflow(fn, *args, options=StartOptions(...), **kwargs)``.
    With ``options=``, every other keyword argument is the workflow's, whatever its name
    (``priority=``, ``workflow_id=``, ``queue=``). Reuse one for many starts, or derive one with
    :meth:`replace`.

    ``connection``: start inside your transaction on that connection (see
    :meth:`Client.start_workflow`)."""

    workflow_id: str | None = None
    queue: str | None = None
    reuse_policy: str = "allow_duplicate"
    conflict_policy: str = "unspecified"
    search_attributes: dict[str, Any] | None = None
    priority: int = 0
    execution_timeout: Duration | None = None
    run_timeout: Duration | None = None
    shard_id: int | None = None
    residency_key: str | None = None
    connection: Any = None

    def replace(self, **changes: Any) -> StartOptions:
        return dataclasses.replace(self, **changes)


# The start options start_workflow still takes as keyword arguments when no options= is given
# (and task_queue=, the old spelling of queue=).
_START_KEYWORDS = frozenset(f.name for f in dataclasses.fields(StartOptions)) | {"task_queue"}


def _split_start(workflow: Any, options: Any, kwargs: dict[str, Any]) -> tuple[StartOptions, dict[str, Any]]:
    """``(start options, the workflow's keyword arguments)`` of a start_workflow call.

    ``options=StartOptions(...)``: every keyword argument is the workflow's. Without it, the
    start options' names are taken as start options, as they always were; one that is also a
    parameter of the workflow warns (DeprecationWarning): pass ``options=`` so it reaches the
    workflow. An ``options=`` that is not a StartOptions is the workflow's own argument."""
    if isinstance(options, StartOptions):
        return options, kwargs
    if options is not None:
        kwargs = {**kwargs, "options": options}
    given = {name: kwargs.pop(name) for name in list(kwargs) if name in _START_KEYWORDS}
    task_queue = given.pop("task_queue", None)
    if task_queue is not None:
        given["queue"] = queue_alias(given.get("queue"), task_queue, stacklevel=6)
    definition = _resolve_workflow(workflow)[1]
    if definition is not None and given:
        shadowed = sorted(set(given) & set(inspect.signature(definition.fn).parameters))
        if shadowed:
            warnings.warn(
                f"{', '.join(n + '=' for n in shadowed)} went to the start, not to {definition.name}'s "
                f"parameter(s) of that name: pass the start's with options=StartOptions(...) and "
                "every keyword argument goes to the workflow",
                DeprecationWarning,
                stacklevel=5,  # the caller of start_workflow (or execute_workflow), through _prepare_start
            )
    return StartOptions(**given), kwargs


def _start_call(
    name: str,
    encoded: list[Any],
    workflow_id: str | None,
    queue: str | None,
    reuse_policy: str,
    conflict_policy: str,
    search_attributes: dict[str, Any] | None,
    priority: int,
    execution_timeout: Any,
    run_timeout: Any,
) -> dict[str, Any]:
    return {
        "workflow_name": name,
        "input": encoded,
        "workflow_id": workflow_id,
        "queue": queue,
        "reuse_policy": reuse_policy,
        "conflict_policy": conflict_policy,
        "search_attributes": _search_attributes(search_attributes),
        "priority": check_priority(priority),
        "execution_timeout": None
        if execution_timeout is None
        else parse_duration(execution_timeout, "execution_timeout", positive=True),
        "run_timeout": None
        if run_timeout is None
        else parse_duration(run_timeout, "run_timeout", positive=True),
    }


def _search_attributes(values: dict[str, Any] | None) -> Any:
    encoded = payload.encode(values or {}, "search_attributes")
    if encoded:
        payload.check_storable(encoded, "search_attributes")
    return encoded


def _limit(value: int | None) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise InvalidArgument(f"max_payload_bytes must be a positive number of bytes, got {value!r}")
    return value


def _on_current_run(handle: Any, execution_id: str, call: Any, *args: Any) -> Steps[Any]:
    """Apply ``call`` (a declaration of harvest.db.sqlapi: run id first, then ``args``) to the
    run that is current now: a run that continued as new hands signals, cancels and
    terminations on to its successor. Returns the call's answer; the handle keeps the run it
    acted on (the next such call starts there). One loop for both clients (harvest.db.steps); a
    successor on another shard raises _Hop for the handle to go on there (:func:`_chain`)."""
    route = handle.client._target.route
    run = execution_id
    previous: str | None = None  # the run that continued as new as ``run`` (None: the first)
    workflow_id = None
    for _ in range(_MAX_CHAIN):
        try:
            answer = yield Sql(call, run, *args)
            handle._current_run = run
            return answer
        except ExecutionMigrated:
            if run == execution_id:
                raise
            raise _Hop(run, previous) from None  # a successor a rebalance moved: routed by its own id
        except NotFound:
            if previous is None:
                raise
            raise chain_broken_error(previous, run) from None
        except WorkflowNotRunning:
            row = yield Sql(sqlapi.get_execution, run)
            workflow_id = row.get("workflow_id")
            successor = _successor(row)
            if successor is None:
                raise
            if not _same_shard(route, run, successor):
                raise _Hop(successor, run) from None
            previous, run = run, successor
    raise _chain_too_long(execution_id, workflow_id or handle.workflow_id)


def _chain(handle: Any, run: str, act: Callable[[str], T], keep: bool = False) -> T:
    """``act(run)``, then ``act`` on each run a _Hop names (a continue-as-new successor on another
    shard, or one a rebalance moved), at most _MAX_CHAIN; ``keep``: the handle keeps the run it
    hopped to (the newest run of the chain its calls reached)."""
    after = None
    for _ in range(_MAX_CHAIN):
        try:
            return act(run)
        except NotFound:
            if after is None:
                raise
            if keep:  # (not the run that is gone: the next call says the same)
                handle._current_run = after
            raise chain_broken_error(after, run) from None
        except _Hop as hop:
            run, after = hop.execution_id, hop.after
            if keep:
                handle._current_run = run
    raise _chain_too_long(handle.execution_id, handle.workflow_id)


async def _achain(handle: Any, run: str, act: Callable[[str], Awaitable[T]], keep: bool = False) -> T:
    """:func:`_chain` for AsyncWorkflowHandle."""
    after = None
    for _ in range(_MAX_CHAIN):
        try:
            return await act(run)
        except NotFound:
            if after is None:
                raise
            if keep:  # (not the run that is gone: the next call says the same)
                handle._current_run = after
            raise chain_broken_error(after, run) from None
        except _Hop as hop:
            run, after = hop.execution_id, hop.after
            if keep:
                handle._current_run = run
    raise _chain_too_long(handle.execution_id, handle.workflow_id)


def _chain_too_long(execution_id: str | None, workflow_id: str | None) -> WorkflowNotRunning:
    """What a call says when the chain rotated past _MAX_CHAIN: what happened, and the business key
    that names the current run in one lookup (the walk by execution id costs a read a run)."""
    key = repr(workflow_id) if workflow_id else "..."
    return WorkflowNotRunning(
        f"workflow {execution_id} continued as new more than {_MAX_CHAIN} times past the run this handle "
        f"last reached, more hops than one call follows: act on its current run by its workflow_id {key} "
        f"(client.get_handle(workflow_id={key}), ExternalWorkflow(workflow_id={key}) from a workflow)"
    )


def chain_broken_error(last: str, missing: str) -> NotFound:
    """What a call says when the chain's last run continued as new and its successor is gone
    (erased by hand, or purged): no run of the chain is current, and none will be, so the walk
    ends here (it said only that the successor does not exist, a run the caller never named)."""
    exc = NotFound(
        f"the continue-as-new chain ends at run {last}, which continued as new as run {missing}, and "
        f"that run does not exist (erased or purged): no run of the chain is current, and none will be"
    )
    exc.broken_chain_last_run = last  # type: ignore[attr-defined]  # (_Handle._not_found adds no hint)
    return exc


class ResultWatch(Protocol):
    """Who watches a client's result waits (the test kit, harvest.testing.WorkflowEnvironment,
    which knows when nothing in its database can run): ``client._result_watch``.

    ``bound``: how long a result() given no timeout waits (None: for ever); ``stuck(run,
    waiter)``: why that run cannot go on for that wait, or None (asked at each read of the run
    while it is live); ``bound_note(run)``: what the error of a wait the bound ended adds."""

    bound: float | None

    def stuck(self, execution_id: str, waiter_id: str) -> str | None: ...

    def bound_note(self, execution_id: str) -> str: ...


class _Marks:
    """The runs a result wait has marked itself waiting for (``harvest.wait_for_result`` of a
    live run) and not yet read as ended (that read drops the waiter's mark, as the close does):
    the wait calls ``stop_waiting_for_result`` at the end only when one is left."""

    __slots__ = ("runs", "waiter_id")

    def __init__(self, waiter_id: str):
        self.waiter_id = waiter_id
        self.runs: set[str] = set()

    def cleanup(self) -> Sql | None:
        # Best effort (a run's close drops the mark too): no waiting out a busy or lost pool.
        if not self.runs:
            return None
        return Sql(sqlapi.stop_waiting_for_result, self.waiter_id).by(time.monotonic())


def _read_run(handle: Any, execution_id: str, waiter_id: str) -> Steps[dict[str, Any]]:
    """The run, read by a result wait (which marks the waiter: a closing run then notifies), its
    output and failure as the worker's codecs wrote them (an offloaded one: read too)."""
    execution = yield Sql(sqlapi.wait_for_result, execution_id, waiter_id)
    if execution["status"] in ("COMPLETED", "FAILED"):
        payloads = handle.client.payloads
        execution = {
            **execution,
            "output": (yield from payload_policy.decoded(payloads, execution.get("output"))),
            "failure": (yield from payload_policy.decoded(payloads, execution.get("failure"))),
        }
    elif execution["status"] == "CANCELLED":
        # The reason decoded for WorkflowCancelled when this client can; one without the key
        # (no codecs, not that key) gets it as stored: the cancel is the answer, not a
        # PayloadKeyMissing, as before it was decoded.
        try:
            failure = yield from payload_policy.decoded(handle.client.payloads, execution.get("failure"))
        except PayloadError:
            failure = execution.get("failure")
        execution = {**execution, "failure": failure}
    return cast("dict[str, Any]", execution)


def _result_steps(
    handle: Any,
    execution_id: str,
    marks: _Marks,
    deadline: float | None,
    timeout: Duration | None,
    route: Any = None,
    marked: Callable[[], bool] | None = None,
) -> Steps[Any]:
    """Wait for the run (and any continue-as-new successors) to end; return or raise. One loop
    for both clients (harvest.db.steps); a successor on another shard (``route``) raises _Hop
    for the handle to wait there, under the same deadline. ``marked``: the run's start marked
    this waiter (Client.execute_workflow); asked once the wait is registered with the hub,
    True when the hub has missed no notification since the start, and the first read then
    waits for the close's notification instead of marking."""
    first = execution_id
    previous: str | None = None  # the run that continued as new as ``execution_id`` (None: the first)
    if marked is not None and marked():
        marks.runs.add(execution_id)
        left = _left(deadline)
        yield Notified(
            execution_id, _RESULT_REREAD_SECS if left is None else max(0.0, min(left, _RESULT_REREAD_SECS))
        )
    outage = Outage(f"the result wait for workflow {handle.execution_id}")
    while True:
        try:
            execution = yield from bounded_by(_read_run(handle, execution_id, marks.waiter_id), deadline)
        except NotFound:
            if previous is None:
                raise
            raise chain_broken_error(previous, execution_id) from None
        except Exception as exc:
            if not outage.began(exc):
                raise
            pause = outage.pause_until(deadline)
            if pause is None:
                # No call to drop the mark on the way out (it would wait for a connection
                # again): the run's close drops it.
                marks.runs.clear()
                raise TimeoutError_(
                    f"no outcome of workflow {handle.execution_id} within {_seconds(timeout)}s "
                    f"({outage.reason()})"
                ) from exc
            # The hub wakes the wait when its LISTEN connection is back, the pause otherwise.
            yield Notified(execution_id, pause)
            continue
        outage.ended()
        if execution["status"] in LIVE_STATUSES:
            marks.runs.add(execution_id)
        else:
            marks.runs.discard(execution_id)
        if execution["status"] not in LIVE_STATUSES:  # a paused run has not ended
            try:
                return _outcome(execution, handle.definition)
            except ExecutionMigrated:
                if execution_id == first or route is None:
                    raise
                raise _Hop(execution_id, previous) from None  # a successor a rebalance moved
            except _ContinuedAsNew as rotated:
                successor = rotated.next_execution_id
                if not _same_shard(route, execution_id, successor):
                    raise _Hop(successor, execution_id) from None
                previous, execution_id = execution_id, successor
                continue
            except WorkflowFailed as failed:
                # In a test (the kit's clients), where the workflow's code raised is what the
                # test's report needs: pytest prints a note under the error's line.
                if getattr(handle.client, "_result_watch", None) is not None and failed.traceback:
                    failed.add_note(f"the workflow's traceback:\n{failed.traceback}")
                raise
        watch: ResultWatch | None = getattr(handle.client, "_result_watch", None)
        stuck = watch.stuck(execution_id, marks.waiter_id) if watch is not None else None
        if stuck is not None:  # (its mark stays for the cleanup to drop, as on a timeout)
            raise TimeoutError_(f"workflow {handle.execution_id} cannot go on: {stuck}")
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            why = yield from _why_stuck(execution_id)
            if timeout is None and watch is not None:  # no timeout given: the watch's bound ran out
                raise still_running(
                    handle.execution_id, watch.bound, f"{why}; {watch.bound_note(execution_id)}"
                )
            raise still_running(handle.execution_id, timeout, why)
        # Wake on our id; a periodic re-read covers a close that raced our mark.
        yield Notified(
            execution_id, _RESULT_REREAD_SECS if remaining is None else min(remaining, _RESULT_REREAD_SECS)
        )


def _why_stuck(execution_id: str) -> Steps[str]:
    """Why a run a result wait gave up on cannot go on, from its stack ("; " and the reasons),
    or "" when nothing says it is stuck (merely slow, or waiting for a timer or a signal).
    Without it, an activity no worker registers or workflow code failing on every attempt
    read as a plain timeout, the reason only in a worker's log. Read once, after the wait."""
    try:
        stack = yield Sql(sqlapi.get_execution_stack, execution_id)
    except Exception:  # a hint only: the timeout is the answer
        return ""
    return why_stuck(stack)


def still_running(execution_id: Any, timeout: Any, why: str) -> TimeoutError_:
    """The error of a result wait that ran out, on every transport: the timeout in seconds
    (it may have been given as "200ms" or a timedelta), then why_stuck's reasons."""
    return TimeoutError_(f"workflow {execution_id} is still running after {_seconds(timeout)}s{why}")


def _seconds(timeout: Any) -> str:
    """A result wait's timeout as seconds in a message, however it was given ("200ms": 0.2)."""
    return plain_number(parse_duration(timeout, "timeout"))


def no_poller(queue: str) -> str:
    """What a run's stack says of a workflow task on a queue no live worker polls."""
    return (
        f"no live worker polls queue {queue!r}: start a worker whose App uses it "
        "(@workflow(queue=...) or @activity(queue=...))"
    )


def why_stuck(stack: dict[str, Any]) -> str:
    """The reasons a run's stack (get_execution_stack) says it cannot go on, each after "; ",
    or "". One wording for every transport (the CLI over HTTP reads the stack route)."""
    reasons = []
    task = stack.get("workflow_task") or {}
    if task.get("live_workers") == 0 and task.get("status") == "pending":  # (absent: an older server)
        reasons.append(f"its workflow task waits: {no_poller(task['queue'])}")
    if task.get("last_failure"):
        reasons.append(
            f"its workflow task fails (attempt {task.get('attempt')}: "
            f"{failure_line(task['last_failure'])}); it is retried until a worker runs fixed code"
        )
    for activity in stack.get("pending_activities") or ():
        failure, name = activity.get("last_failure"), activity.get("name")
        if activity.get("status") == "dead_lettered":
            reasons.append(
                f"its activity {name!r} is dead-lettered after {activity.get('attempt')} attempt(s) "
                f"({failure_line(failure)}): fix the cause, then "
                f"`harvest dlq replay {activity.get('dead_letter_id')}`"
            )
        elif failure:
            reasons.append(
                f"its activity {name!r} failed attempt {activity.get('attempt')} ({failure_line(failure)})"
            )
    awaited = [w["name"] for w in stack.get("awaited_signals") or ()]  # (absent: an older server)
    if awaited:
        reasons.append(f"it waits for signal {', '.join(repr(n) for n in dict.fromkeys(awaited))}")
    return "".join(f"; {reason}" for reason in reasons)


def _failure_report(client: Any, error: BaseException | ActivityFailure) -> dict[str, Any]:
    """An activity failure as fail_activity stores it ({error_type, message, non_retryable, details}),
    its details through the client's codecs as a worker's are."""
    failure = error if isinstance(error, ActivityFailure) else ActivityFailure.from_exception(error)
    report = failure.to_json()
    report["details"] = payload.encode(report["details"], "details")
    report = client.payloads.chain.encode_failure(report)
    payload.check_size(report, "the activity failure", client.max_payload_bytes)
    return cast("dict[str, Any]", report)


def _with_start_call(
    client: Any, workflow: Any, args: tuple[Any, ...], kwargs: dict[str, Any], queue: str | None
) -> tuple[WorkflowDefinition | None, dict[str, Any]]:
    """The start half of a signal_with_start or update_with_start call (the workflow_id, the
    message and the search attributes go in after it)."""
    name, definition, encoded, queue = _start_args(client, workflow, args, kwargs, queue)
    return definition, {"workflow_name": name, "input": encoded, "queue": queue}


def _signal_with_start_call(
    client: Any,
    workflow: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    workflow_id: str,
    signal: str,
    signal_payload: Any,
    queue: str | None,
    search_attributes: dict[str, Any] | None,
) -> tuple[WorkflowDefinition | None, dict[str, Any]]:
    payload_policy.text(workflow_id, "workflow_id", optional=False)
    payload_policy.text(signal, "signal name", optional=False)
    definition, call = _with_start_call(client, workflow, args, kwargs, queue)
    label = f"the payload of signal {signal}"
    signal_encoded = payload_policy.written(
        client.payloads, signal_payload, "signal_payload", label, client.max_payload_bytes
    )
    return definition, {
        **call,
        "workflow_id": workflow_id,
        "signal_name": signal,
        "payload": signal_encoded,
        "search_attributes": _search_attributes(search_attributes),
    }


def _update_with_start_call(
    client: Any,
    workflow: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    workflow_id: str,
    update: str,
    update_arg: Any,
    update_id: str | None,
    queue: str | None,
    search_attributes: dict[str, Any] | None,
) -> tuple[WorkflowDefinition | None, dict[str, Any]]:
    payload_policy.text(workflow_id, "workflow_id", optional=False)
    payload_policy.text(update, "update name", optional=False)
    payload_policy.text(update_id, "update_id")
    definition, call = _with_start_call(client, workflow, args, kwargs, queue)
    label = f"the argument of update {update}"
    arg = payload_policy.written(client.payloads, update_arg, "update_arg", label, client.max_payload_bytes)
    return definition, {
        **call,
        "workflow_id": workflow_id,
        "name": update,
        "arg": arg,
        "update_id": update_id,
        "search_attributes": _search_attributes(search_attributes),
    }


def _start_option_hint(kwargs: dict[str, Any]) -> str:
    """A keyword the workflow refused that looks like a misspelt start option (workflow_idd=):
    it went to the workflow's arguments, so say which option was likely meant."""
    for name in kwargs:
        near = difflib.get_close_matches(name, sorted(_START_KEYWORDS - {"task_queue"}), n=1, cutoff=0.8)
        if near:
            return f" ({name!r}: did you mean the start option {near[0]}=?)"
    return ""


def _refuse_keys_under_codecs(client: Any, name: str, definition: WorkflowDefinition | None) -> None:
    """A start under the client's codecs of a workflow whose gates read a key path from its input
    (its definition, or the client's App's by name): the database holds the input encoded, so the
    key never resolves and the gate never applies; the App's boot check cannot see the client's
    codecs (an App declared without codecs), so the start is refused here."""
    if definition is None and client.app is not None:
        definition = client.app.workflows.get(name)
    keys = flow_control.workflow_keys(definition) if definition is not None else []
    if keys:
        raise InvalidArgument(
            flow_control.keys_under_codecs(
                "Client(codecs=...)",
                keys,
                "start it from a Client without codecs, or declare the gate without key= (one "
                "gate for every run)",
            )
        )


def _start_args(
    client: Any, workflow: Any, args: tuple[Any, ...], kwargs: dict[str, Any], queue: str | None
) -> tuple[str, WorkflowDefinition | None, list[Any], str | None]:
    name, definition = _resolve_workflow(workflow)
    payload_policy.text(queue, "queue")
    if queue is not None and not queue.strip():
        # As the SQL's start refuses it ('task queue is empty'); it read as no queue here.
        raise InvalidArgument(
            f"queue {queue!r} is empty: name a queue, or leave it out for the workflow's own"
        )
    try:
        encoded = payload.encode_args(definition.fn if definition else None, args, kwargs)
    except TypeError as exc:
        # Only a binding error gets the hint; a PayloadError (a TypeError too) keeps its class.
        hint = _start_option_hint(kwargs) if type(exc) is TypeError else ""
        if not hint:
            raise
        raise TypeError(f"{exc}{hint}") from None
    if definition is not None and definition.batch is None:
        # Decoded as the worker will decode them: an argument its hints refuse (a str for an
        # Order) is this call's PayloadError, not a run that fails at its first task. (A
        # batch's run takes the list of its starts' arguments, not one start's: unchecked.)
        payload.decode_args(definition.fn, encoded)
    chain, payloads = client.payloads.chain, client.payloads
    if chain:  # each argument encoded: the input stays a JSON array (docs/payloads.md)
        _refuse_keys_under_codecs(client, name, definition)
        encoded = chain.encode_args(encoded)
    # What the history holds is checked: an argument the client offloads is its reference.
    limit = client.max_payload_bytes
    payload.check_size(payload_policy.as_written(payloads, encoded), f"the input of workflow {name}", limit)
    # By name, with no queue: None, and the database starts it on the queue the fleet's workers
    # registered it on (functions/start.sql, _start_queue), as no definition here says where it runs.
    queue = queue or (definition.queue if definition else None)
    return name, definition, encoded, queue


def _shard_or_none(execution_id: Any) -> int | None:
    try:
        return shard_of(execution_id)
    except ValueError:
        return None


def _moved_run(target: Any, exc: ExecutionMigrated) -> str:
    """The execution id a ``*_with_start`` met as a seal on the key's shard (the run a rebalance
    moved, attached to by its business key): a sharded client goes on by that id, where the run
    lives; anything else (one database, another refusal) is raised as it is."""
    if not target.sharded or exc.reason != "migrated" or exc.execution_id is None:
        raise exc
    return str(exc.execution_id)


def _marked_by_start(row: dict[str, Any]) -> bool:
    """Whether start_workflows marked the start's ``result_waiter``: on a run it created."""
    return (
        bool(row.get("started_fresh"))
        and row.get("status") == "RUNNING"
        and row.get("execution_id") is not None
    )


def _listening_since(hub: Any) -> int | None:
    """The hub's token before a start (None: a hub that cannot say, or not listening)."""
    since = getattr(hub, "listening_since", None)
    return None if since is None else cast("int | None", since())


def _unmissed(hub: Any, token: int | None) -> Callable[[], bool]:
    """Asked once a wait is registered: has the hub missed no notification since ``token``?"""
    return lambda: token is not None and _listening_since(hub) == token


def _refuse_if_closed(client: Any) -> None:
    """A closed client opens nothing more: a wait after close() would open a LISTEN connection
    (and, for a Client, its thread) that nothing closes any more."""
    if client._closed:
        raise InvalidArgument(f"this {type(client).__name__} is closed: make a new one")


def _within(timeout: Duration | None) -> float | None:
    """A wait's timeout in seconds (None: none), however it was given ("30s", a timedelta)."""
    return None if timeout is None else parse_duration(timeout, "timeout")


def _deadline(timeout: Duration | None) -> float | None:
    """When a wait of ``timeout`` seconds (None: none) ends. A NaN, a negative or a non-number
    is an InvalidArgument, as for query() and update(): NaN passed every comparison and waited
    for good."""
    return None if timeout is None else time.monotonic() + parse_duration(timeout, "timeout")


def _some_read(merged: Any, what: str) -> None:
    """DatabaseUnavailable when no shard could be read for ``what`` (a partial read is an answer)."""
    if merged.status == UNAVAILABLE:
        shards = ", ".join(str(s) for s in merged.unavailable_shards)
        raise DatabaseUnavailable(f"no shard could be read for the {what} (shard(s) {shards}); retry")


def _children(merged: Any) -> Children:
    _some_read(merged, "children")
    return Children(
        merged.value, merged.status, merged.unavailable_shards, merged.next_cursor, merged.truncated
    )


def _page(merged: Any, what: str) -> Page:
    """A fan-out read's answer as a :class:`Page` (list_workflows_page, count_workflows)."""
    _some_read(merged, what)
    return Page(merged.value, merged.status, merged.unavailable_shards, merged.next_cursor)


def _next_cursor(page: Page, what: str = "children") -> str | None:
    """Where an iteration (iter_children, list_workflows) goes after ``page``. A page that
    brought nothing while a shard was not read would come back the same for as long as that
    shard is away (its rows keep their place in the cursor): the iteration stops there, naming
    it, rather than spin."""
    if page.next_cursor is not None and not page and page.unavailable_shards:
        shards = ", ".join(str(s) for s in page.unavailable_shards)
        raise DatabaseUnavailable(
            f"the {what} on shard(s) {shards} could not be read; the others were given: retry for the rest"
        )
    return page.next_cursor


def _list_filters(args: dict[str, Any]) -> dict[str, Any]:
    """list_workflows(_page)'s and count_workflows' keywords (their ``locals()``) as the fan-out
    plan takes them: ``failing`` only when given, as the CLI passes it."""
    filters = {k: v for k, v in args.items() if k != "self"}
    filters["search_attributes"] = list(filters["search_attributes"] or ())
    if filters["failing"] is None:
        del filters["failing"]
    return filters


# -- one place for both clients ------------------------------------------------------------------
# Each piece of client logic is written once: as steps (harvest.db.steps: SQL calls, driven on a
# SqlApi or an AsyncSqlApi) or, where it calls the client's own methods, as a flow (below), and
# each client runs it with a driver of a few lines. The hot paths (a plain start, result(),
# signal()) call their steps' drivers directly: no flow per call.


def _one_call(call: Any, *args: Any) -> Steps[Any]:
    """Steps of one SQL call."""
    return (yield Sql(call, *args))


def _on_shard(target: Any, shard: int, steps: Steps[T]) -> T:
    """Drive ``steps`` on one connection of ``shard`` of a synchronous target."""
    with routing.api(target, shard) as sql:
        return run_steps(steps, sql)


def _follow(target: Any, execution_id: Any, make: Callable[[], Steps[Any]]) -> Any:
    """Drive ``make()``'s steps on the shard ``execution_id`` lives on (``target.follow``: its
    id's shard, then a rebalance's forwarding pointer, each with steps afresh)."""
    return target.follow(execution_id, lambda shard: _on_shard(target, shard, make()))


def _afollow(target: Any, execution_id: Any, make: Callable[[], Steps[Any]]) -> Any:
    """:func:`_follow` on an asyncio target (each call on a pooled connection): an awaitable."""
    return target.follow(execution_id, lambda shard: arun_steps(make(), target.sql(shard)))


def _scope(target: Any, connection: Any, shard: int | None) -> Any:
    """``connection`` as a scope (the caller's: nothing to give back), or a connection of
    ``shard`` (None: a one-database client's) of a sync or an asyncio target."""
    if connection is not None:
        return contextlib.nullcontext(connection)
    return target.connection(routing.ONE if shard is None else shard)


def _in_transaction(target: Any, connection: Any, shard: int | None, steps: Steps[T]) -> T:
    """Drive ``steps`` in a transaction of their own on ``connection`` (a savepoint inside the
    caller's), or, given none, on a connection of ``shard`` (None: a one-database client's)."""
    with _scope(target, connection, shard) as conn, conn.transaction():
        return run_steps(steps, SqlApi(conn))


async def _ain_transaction(target: Any, connection: Any, shard: int | None, steps: Steps[T]) -> T:
    """:func:`_in_transaction` on an asyncio target or connection."""
    async with _scope(target, connection, shard) as conn, conn.transaction():
        return await arun_steps(steps, AsyncSqlApi.on_connection(conn))


def _prepare_start(
    client: Any,
    workflow: Any,
    args: tuple[object, ...],
    options: Any,
    kwargs: dict[str, Any],
    declared: Any = None,
) -> tuple[str, WorkflowDefinition | None, str | None, StartOptions, routing.Placement, dict[str, Any]]:
    """A start_workflow call checked, encoded and placed: ``(name, definition, queue, options,
    placement, call)``, ``call`` being harvest.start_workflow's arguments. ``declared``: a start
    by name's debounce or batch (routing.declaration_by_name), placed as the function's."""
    opts, kwargs = _split_start(workflow, options, kwargs)
    for what in ("workflow_id", "reuse_policy", "conflict_policy"):
        payload_policy.text(getattr(opts, what), what)
    caller_connection(opts.connection, asynchronous=isinstance(client, AsyncClient))
    name, definition, encoded, queue = _start_args(client, workflow, args, kwargs, opts.queue)
    placement = routing.place_start(
        client._target,
        name,
        opts.workflow_id,
        opts.shard_id,
        opts.residency_key,
        definition or declared,
        encoded,
    )
    call = _start_call(
        name,
        encoded,
        placement.workflow_id,
        queue,
        opts.reuse_policy,
        opts.conflict_policy,
        opts.search_attributes,
        opts.priority,
        opts.execution_timeout,
        opts.run_timeout,
    )
    return name, definition, queue, opts, placement, call


def _start_steps(
    call: dict[str, Any], placement: routing.Placement, payloads: Payloads, where: list[int]
) -> Steps[dict[str, Any]]:
    """A start in a transaction of its own on one connection (a savepoint inside the caller's):
    the input's arguments at ``where`` stored first, with no run, and handed to the run it
    started (docs/payloads.md); a pin the database deferred by a debounce or a batch refused, so
    that the refusal rolls the start back."""
    owned: list[str] = []
    if where:
        values, owned = yield from payload_policy.offloaded(payloads, None, call["input"], where)
        call = {**call, "input": values}
    row = yield Sql(sqlapi.start_workflow, **call, shard=placement.shard)
    name = call["workflow_name"]
    if placement.pinned and routing.pin_was_deferred(name, placement, row):
        # (Its workflow id's held-back starts only: never a whole backlog in a start's transaction.)
        pending = yield Sql(
            sqlapi.list_pending_starts, name, limit=10_000, workflow_id=str(row["workflow_id"])
        )
        routing.refuse_pending(name, row, pending)
    if owned and row.get("execution_id") is not None:
        yield Sql(sqlapi.set_payloads_execution, owned, str(row["execution_id"]))
    return cast("dict[str, Any]", row)


def _trace_started(trace: Any, row: dict[str, Any], name: str, queue: str | None) -> None:
    if trace is tracing.OFF:
        return  # (tracing off: no attributes to build for a trace that records nothing)
    attributes = {"harvest.workflow": name, "harvest.started_fresh": row["started_fresh"]}
    if queue is not None:  # (None: the database chose it from the registrations)
        attributes["harvest.queue"] = queue
    trace.started(row["execution_id"], attributes)


def _start_answer(
    client: Any, handle_cls: Any, row: dict[str, Any], definition: Any, placement: Any, call: dict[str, Any]
) -> tuple[Any, bool]:
    """A start's handle, and whether the start marked the caller waiting for its result."""
    handle = handle_cls(
        client, row["execution_id"], row["workflow_id"], definition, row["started_fresh"], placement.shard
    )
    return handle, "result_waiter" in call and _marked_by_start(row)


def _signal_with_start_steps(call: dict[str, Any], payloads: Payloads) -> Steps[dict[str, Any]]:
    """harvest.signal_with_start; with a start argument or the signal's payload over the offload
    threshold: stored with no run, then the call, then the rows handed to the run it signalled
    (started or not), in one transaction (docs/payloads.md): a refused call leaves no row."""
    values = [*call["input"], call["payload"]]
    if not payload_policy.offload_plan(payloads, values):
        return cast("dict[str, Any]", (yield Sql(sqlapi.signal_with_start, **call)))

    def offloaded() -> Steps[dict[str, Any]]:
        stored, owned = yield from payload_policy.offloaded(payloads, None, values)
        row = yield Sql(sqlapi.signal_with_start, **{**call, "input": stored[:-1], "payload": stored[-1]})
        if owned:
            yield Sql(sqlapi.set_payloads_execution, owned, str(row["execution_id"]))
        return cast("dict[str, Any]", row)

    return cast("dict[str, Any]", (yield InTransaction(offloaded)))


def _signal_with_start_flow(
    client: Any, handle_cls: Any, definition: WorkflowDefinition | None, call: dict[str, Any]
) -> _Flow[Any]:
    """signal_with_start of both clients: where an unpinned start of the key would go."""
    target, payloads = client._target, client.payloads
    shard = routing.hashed_shard(target, call["workflow_name"], call["workflow_id"])
    with tracing.start_span(call["workflow_name"]) as trace:
        call["traceparent"] = trace.traceparent  # the run it starts and the signal: the caller's
        try:
            row = yield _Do(lambda: client._on(shard, _signal_with_start_steps(call, payloads)))
        except ExecutionMigrated as exc:
            moved = _moved_run(target, exc)  # the key's run was moved: signal it where it lives
            handle = handle_cls(client, moved, call["workflow_id"], definition, False)
            written = yield _Do(lambda: handle._at(moved, lambda: _stored(payloads, moved, call["payload"])))
            yield _Do(
                lambda: handle._on_current(
                    sqlapi.signal_workflow, call["signal_name"], written, call["traceparent"]
                )
            )
            return handle
        trace.started(
            row["execution_id"],
            {"harvest.signal": call["signal_name"], "harvest.started_fresh": row["started_fresh"]},
        )
    return handle_cls(client, row["execution_id"], row["workflow_id"], definition, row["started_fresh"])


def _update_with_start_flow(
    client: Any,
    handle_cls: Any,
    definition: WorkflowDefinition | None,
    call: dict[str, Any],
    update_arg: Any,
    options: tuple[str, Any, Any],
    send: Callable[..., Any],
) -> _Flow[tuple[Any, Any]]:
    """update_with_start of both clients (``options``: its wait, timeout and result_type;
    ``send``: messaging.update_with_start or its asyncio twin): where an unpinned start of the
    key would go."""
    wait, timeout, result_type = options
    with tracing.start_span(call["workflow_name"]) as trace:
        call["traceparent"] = trace.traceparent  # the run it starts and the update: the caller's
        try:
            row, outcome = yield _Do(lambda: send(client, call, wait, timeout, result_type))
        except ExecutionMigrated as exc:
            handle = handle_cls(
                client, _moved_run(client._target, exc), call["workflow_id"], definition, False
            )
            updated = yield _Do(
                lambda: handle.update(
                    call["name"],
                    update_arg,
                    wait=wait,
                    timeout=timeout,
                    update_id=call["update_id"],
                    result_type=result_type,
                )
            )
            return handle, updated
        trace.started(
            row["execution_id"],
            {"harvest.update": call["name"], "harvest.started_fresh": row["started_fresh"]},
        )
    return handle_cls(
        client, row["execution_id"], row["workflow_id"], definition, row["started_fresh"]
    ), outcome


def _stored(payloads: Payloads, execution_id: str | None, value: Any) -> Steps[Any]:
    """``value`` as it is written: offloaded (owned by ``execution_id``) when it is over the
    threshold, its reference then."""
    values, _owned = yield from payload_policy.offloaded(payloads, execution_id, [value])
    return values[0]


def _token_call(task_token: str, call: Any, *args: Any) -> tuple[str, Callable[[], Steps[Any]]]:
    """Where an activity call by task token goes (its run's id) and its steps there."""
    token = TaskToken.parse(task_token)
    return token.execution_id, lambda: _one_call(call, str(token), *args)


def _token_payload(client: Any, value: Any, what: str) -> Any:
    """A payload sent by task token, through the client's codecs (a worker's own calls encode
    the same payloads with its codecs) and within the payload limit."""
    encoded = client.payloads.chain.encode(payload.encode(value))
    payload.check_size(encoded, what, client.max_payload_bytes)
    return encoded


def _activity_result(client: Any, result: Any) -> Any:
    return _token_payload(client, result, "the activity result")


def _completed_with(client: Any, task_token: str, result: Any, events: list[dict[str, Any]]) -> bool:
    """Whether ``events`` (the token's run's history) record the token's attempt completed with
    ``result``. The database answers already_completed for a repeat it stores byte for byte;
    a codec that encodes each send anew (AES-GCM's nonce) makes a repeat look like another
    result, so a refused repeat is judged here on the decoded value."""
    token = TaskToken.parse(task_token)
    ended = ("ActivityCompleted", "ActivityFailed")
    ends = [e["event_data"] for e in events if e["event_type"] in ended]
    ends = [data for data in ends if data.get("seq") == token.seq]
    if not ends or "result" not in ends[-1] or ends[-1].get("attempt") != token.attempt:
        return False
    try:
        return bool(client.payloads.chain.decode(ends[-1]["result"]) == payload.encode(result))
    except PayloadError:  # (a key this client lacks: not shown to be the same)
        return False


def _heartbeat_details(client: Any, details: Any) -> Any:
    return None if details is None else _token_payload(client, details, "the heartbeat details")


class EagerWorker(Protocol):
    """A worker in the client's process that a signal may hand its run's woken workflow task to
    (``harvest.Worker``; docs/messages.md, "Eager signals"). The client stays below the worker
    layer: it knows the worker by these two methods only."""

    def eager_slot(self) -> tuple[str, float] | None:
        """Promise one free slot to a signal in flight: (worker id, workflow task lease in
        seconds), or None when the worker takes no task now. Every promise is settled by one
        :meth:`run_eager`."""
        ...

    def run_eager(self, task: dict[str, Any] | None) -> None:
        """Run the task the signal's transaction leased to the worker (None: none was) and
        give the promised slot back."""
        ...


class _Handle:
    """What both handles hold: one execution, and how it was started."""

    def __init__(
        self,
        client: Any,
        execution_id: str | None,
        workflow_id: str,
        definition: WorkflowDefinition | None = None,
        started_fresh: bool = True,
        shard_id: int | None = None,
    ):
        self.client = client
        # A start deferred by a throttle, debounce or batch (docs/flow-control.md) has no
        # execution yet: execution_id is None and deferred is True; workflow_id names the run.
        self.deferred = execution_id is None
        self.execution_id = str(execution_id) if execution_id is not None else None
        self.workflow_id = workflow_id
        self.definition = definition
        self.started_fresh = started_fresh
        # The shard the run lives on: the one its id carries (a throttled pinned start has no
        # id yet: the shard it was placed on).
        self.shard_id = shard_id if execution_id is None else _shard_or_none(execution_id)
        # get_handle(workflow_id=): the run is looked up at the first call (_find_run).
        self._by_key: str | None = None  # the workflow name to look under ("" for any)
        # The newest run of the continue-as-new chain a signal/cancel/terminate/pause/resume
        # reached (None: execution_id): the next such call follows the chain from there.
        self._current_run: str | None = None
        # get_handle(execution_id): the id given, which its NotFound says may be a workflow id.
        self._given_id: str | None = None

    def _not_found(self, exc: NotFound) -> None:
        """A handle given an execution id whose run is not found: the id may be a workflow id
        shaped like a UUID (one that is not was refused at get_handle, saying so). Only a lookup
        by workflow id could tell, which no index serves (the executions' lead with
        workflow_name) and an error path must not scan for: the NotFound says how to look a run
        up by its workflow id, unless the database said the id is one it minted before the
        cutoff of a retention sweep (harvest._execution_not_found: its message says retention
        may have deleted the run, and names the setting)."""
        given = self._given_id
        if getattr(exc, "broken_chain_last_run", None) is not None:
            return  # (the run was found, and its chain followed: the id is an execution id)
        if "retention may have deleted it" in str(exc):
            return
        # (The error names the run in canonical form; the hint, the id as it was given.)
        if given is not None and str(self.execution_id) in str(exc) and "workflow_id=" not in str(exc):
            hint = f"if {given!r} is a workflow id, not an execution id: get_handle(workflow_id={given!r})"
            exc.args = (f"{exc}; {hint}", *exc.args[1:])

    def _key_lookup(self) -> tuple[int, Steps[dict[str, Any]]]:
        """Where a handle by workflow_id looks its run up (the shard) and the steps that do."""
        name = self._by_key or None
        target = self.client._target
        if target.sharded and name is None:
            raise InvalidArgument(
                f"a sharded client finds workflow_id {self.workflow_id!r} by its workflow: "
                "get_handle(workflow_id=..., workflow=<the @workflow or its name>)"
            )
        shard = routing.hashed_shard(target, name or "", self.workflow_id)
        return shard, _one_call(sqlapi.get_execution_by_workflow_id, self.workflow_id, name)

    def _found(self, row: dict[str, Any]) -> None:
        self._current_run = None
        self.execution_id = str(row["id"])
        self.shard_id = _shard_or_none(self.execution_id)
        self._by_key = None

    # What both handles' methods do, written once: each handle drives it with its own ``_at``
    # (steps on the shard a run lives on), ``_drive`` / ``_adrive`` (flows).
    def _at(self, execution_id: str | None, make: Callable[[], Steps[Any]]) -> Any:
        raise NotImplementedError

    def _call(self, call: Any, *args: Any) -> Callable[[], Steps[Any]]:
        """Steps of ``call`` (a declaration of harvest.db.sqlapi) on this run: its id, then ``args``."""
        return lambda: _one_call(call, self.execution_id, *args)

    def _current(self, call: Any, args: tuple[Any, ...]) -> tuple[str, Callable[[str], Any]]:
        """``_on_current``'s first run (the newest its calls reached) and what it does on a run:
        ``call`` there, on the shard the run lives on."""
        if call in _REASONED:  # (reason, operator_id): text the database takes as it is
            for value, what in zip(args, ("reason", "operator_id"), strict=False):
                payload_policy.text(value, what)
        run = cast(str, self._current_run or self.execution_id)  # a found, not deferred, run
        return run, lambda run: self._at(run, functools.partial(_on_current_run, self, run, call, *args))

    def _describe(self) -> Steps[dict[str, Any]]:
        row = yield Sql(sqlapi.get_execution, self.execution_id)
        return routing.resident(row, self.client._target.sharded)

    def _history(self) -> Steps[list[dict[str, Any]]]:
        """The run's history: as it is on one database; on shards with the row's residence in
        the same statement, so a seal (a run a rebalance moved) is followed."""
        if not self.client._target.sharded:
            events = yield Sql(sqlapi.get_history, self.execution_id, 0)
            if not events:  # (every run has its WorkflowStarted: none, and it may be no run at all)
                yield Sql(sqlapi.get_execution, self.execution_id)  # NotFound (HR002), as describe()
            return cast("list[dict[str, Any]]", events)
        found = yield Sql(sqlapi.get_resident_history, self.execution_id, 0)
        if not found["residence"].get("found", True):
            raise NotFound(f"execution {self.execution_id} does not exist")
        routing.resident(found["residence"], True)
        return cast("list[dict[str, Any]]", found["events"])

    def _children(self, reads: Any, status: str | None, depth: int) -> _Flow[Children]:
        """children(): ``reads`` is the client's fan-out (ShardReads or AsyncShardReads)."""
        target = self.client._target
        if not target.sharded:
            listed = self._call(sqlapi.list_children, status, depth)
            return Children((yield _Do(lambda: self._at(self.execution_id, listed))))
        merged = yield _Do(lambda: reads(target.providers()).list_children(self.execution_id, status, depth))
        return _children(merged)

    def _children_page(
        self,
        reads: Any,
        status: str | None,
        depth: int,
        page_size: int,
        cursor: str | None,
        max_nodes: int | None,
    ) -> _Flow[Children]:
        """children_page(): the fan-out read of GET /workflows/{id}/children (one database: its
        one shard), ``page_size`` rows after ``cursor``."""
        target = self.client._target
        merged = yield _Do(
            lambda: reads(target.providers()).page_children(
                self.execution_id, status, depth, page_size, cursor, max_nodes
            )
        )
        return _children(merged)

    def _signal_encoded(self, name: str, value: Any) -> tuple[Any, Callable[[], Steps[Any]] | None]:
        """A signal's payload, encoded and checked; and, when it goes to the offload store, the
        steps that store it on the run's database, owned by the run (docs/payloads.md), and give
        its reference."""
        payload_policy.text(name, "signal name", optional=False)
        policy, label = self.client.payloads, f"the payload of signal {name}"
        encoded = payload_policy.written(policy, value, "payload", label, self.client.max_payload_bytes)
        where = payload_policy.offload_plan(policy, [encoded])
        if not where:
            return encoded, None
        run = str(self.execution_id)
        return encoded, lambda: _stored(policy, run, encoded)

    def _span(self, span: str, attribute: str, name: str) -> Any:
        """The sender's span of a signal or an update: the workflow task that reads it links to it."""
        return tracing.span(
            span, execution_id=str(self.execution_id), caller_first=True, attributes={attribute: name}
        )

    def _result_start(self, timeout: Duration | None) -> tuple[Any, str, float | None]:
        """Where a result wait starts: the client's target, the run, the deadline."""
        _not_deferred(self)
        watch: ResultWatch | None = getattr(self.client, "_result_watch", None)
        if timeout is None and watch is not None:  # a test's wait: bounded (harvest.testing)
            return self.client._target, cast(str, self.execution_id), _deadline(watch.bound)
        return self.client._target, cast(str, self.execution_id), _deadline(timeout)

    def _waiting(
        self,
        run: str,
        waiter_id: str,
        deadline: float | None,
        timeout: Duration | None,
        marked: Callable[[], bool] | None,
    ) -> tuple[Steps[Any], Callable[[], Sql | None]]:
        """result()'s steps on ``run`` and their cleanup call (a mark left behind): on the
        client's one LISTEN connection of the run's shard, registered for the run before the first
        read, each call on a pooled connection; ``marked``: see _result_steps (the first run only)."""
        marks = _Marks(waiter_id)
        route = self.client._target.route if self.client._target.sharded else None
        first = marked if run == self.execution_id else None
        return _result_steps(self, run, marks, deadline, timeout, route, first), marks.cleanup

    def __repr__(self) -> str:
        deferred = ", deferred=True" if self.deferred else ""
        return f"{type(self).__name__}({self.execution_id!r}, workflow_id={self.workflow_id!r}{deferred})"


def _handle_of(cls: Any, client: Any, execution_id: Any, workflow: Any, workflow_id: str | None) -> Any:
    """get_handle's handle: by execution id, or by workflow_id (looked up at its first call)."""
    definition = _resolve_workflow(workflow)[1] if workflow is not None else None
    if (execution_id is None) == (workflow_id is None):
        raise InvalidArgument("get_handle takes an execution_id or workflow_id=, one of the two")
    if execution_id is not None:
        try:  # (the database would refuse it with its own error, not one of Harvest's)
            # Canonical: the database reads only some of the spellings Python does (not
            # urn:uuid:, nor braces), and its errors name the run in this form.
            canonical = str(uuid.UUID(str(execution_id)))
        except ValueError:
            # (The usual slip: a workflow id passed where the execution id goes.)
            raise InvalidArgument(
                f"execution id {execution_id!r} is not a UUID; to find a run by its workflow id, "
                f"pass it by name: get_handle(workflow_id={execution_id!r})"
            ) from None
        handle = cls(client, canonical, "", definition)
        handle._given_id = str(execution_id)
        return handle
    if not isinstance(workflow_id, str) or not workflow_id:
        raise InvalidArgument(f"workflow_id must be a non-empty string, got {workflow_id!r}")
    payload_policy.text(workflow_id, "workflow_id")
    handle = cls(client, None, workflow_id, definition)
    handle.deferred = False
    handle._by_key = _resolve_workflow(workflow)[0] if workflow is not None else ""
    return handle


def _lookup_deadline(method: Callable[..., Any]) -> Callable[..., float | None]:
    """For a method with a ``timeout`` (a wait: result, query, update), the deadline its call's
    timeout sets, which the lookup of a handle by workflow_id before it keeps as the wait's own
    calls do: it waits for a pooled connection until then (at least a second), not the pool's
    30 s. None for a method without one, or a call whose timeout is None."""
    signature = inspect.signature(method)
    if "timeout" not in signature.parameters:
        return lambda *args, **kwargs: None

    def deadline(*args: Any, **kwargs: Any) -> float | None:
        timeout = signature.bind(*args, **kwargs).arguments.get(
            "timeout", signature.parameters["timeout"].default
        )
        try:
            return _deadline(timeout)
        except InvalidArgument:
            return None  # (a value the method itself refuses, saying so)

    return deadline


@contextlib.contextmanager
def _looking_up(handle: _Handle, deadline: float | None) -> Iterator[None]:
    """A handle's lookup of its run by workflow_id, waiting for a pooled connection until
    ``deadline`` (None: the pool's own wait); none by then: the run could not be looked up,
    said as such (the wait itself never began)."""
    try:
        with connections_by(deadline):
            yield
    except Exception as exc:
        if deadline is not None and never_sent(exc):
            raise DatabaseUnavailable(
                f"workflow_id {handle.workflow_id!r}: its run could not be looked up within the "
                f"call's timeout ({one_line(exc)})"
            ) from None
        raise


def _finds_run(method: _Method) -> _Method:
    """A WorkflowHandle method that first finds the run of a handle by workflow_id (and whose
    NotFound says how to look a run up by workflow id: _Handle._not_found)."""
    deadline_of = _lookup_deadline(method)

    @functools.wraps(method)
    def call(self: WorkflowHandle[Any], *args: Any, **kwargs: Any) -> Any:
        if self._by_key is not None:
            with _looking_up(self, deadline_of(self, *args, **kwargs)):
                self._found(self.client._on(*self._key_lookup()))
        try:
            return method(self, *args, **kwargs)
        except NotFound as exc:
            self._not_found(exc)
            raise

    return cast("_Method", call)


def _afinds_run(method: _Method) -> _Method:
    """:func:`_finds_run` for AsyncWorkflowHandle."""
    deadline_of = _lookup_deadline(method)

    @functools.wraps(method)
    async def call(self: AsyncWorkflowHandle[Any], *args: Any, **kwargs: Any) -> Any:
        if self._by_key is not None:
            with _looking_up(self, deadline_of(self, *args, **kwargs)):
                self._found(await self.client._on(*self._key_lookup()))
        try:
            return await method(self, *args, **kwargs)
        except NotFound as exc:
            self._not_found(exc)
            raise

    return cast("_Method", call)


class WorkflowHandle(_Handle, Generic[ResultT]):
    """One execution, seen from a synchronous client. Every call goes to the shard the run
    lives on: its id's shard, or where a rebalance moved it (a one-database client: its
    database). ``ResultT`` is what :meth:`result` returns: the workflow function's return type
    when the handle came from a start or ``get_handle`` given the function, else ``Any``."""

    client: Client

    def _at(self, execution_id: str | None, make: Callable[[], Steps[Any]]) -> Any:
        """``make()``'s steps on the shard ``execution_id`` lives on (routing.follow)."""
        return _follow(self.client._target, execution_id, make)

    def _on_current(self, call: Any, *args: Any) -> Any:
        """``call`` on the run current now, following continue-as-new across shards."""
        return _chain(self, *self._current(call, args), keep=True)

    @_finds_run
    def describe(self) -> dict[str, Any]:
        return cast("dict[str, Any]", self._at(self.execution_id, self._describe))

    @_finds_run
    def history(self) -> list[dict[str, Any]]:
        return cast("list[dict[str, Any]]", self._at(self.execution_id, self._history))

    @_finds_run
    def terminate(self, reason: str | None = None) -> None:
        """End the (current) run at once; no cleanup code runs."""
        self._on_current(sqlapi.terminate_workflow, reason)

    @_finds_run
    def signal(self, name: str, payload_value: Any = None) -> SignalReceipt:
        """Deliver a durable signal and return its event id (its SignalReceived's in the run's
        history) as a SignalReceipt: an int whose ``awaited`` says whether a pending
        ``ctx.wait_for_signal`` of the run asks for ``name`` (``awaited_signals``: the names they
        ask for). A signal no wait asks for is still delivered and buffered. Raises
        WorkflowNotRunning if the run has ended."""
        encoded, offload = self._signal_encoded(name, payload_value)
        if offload is not None:
            encoded = self._at(self.execution_id, offload)
        with self._span("harvest.workflow.signal", "harvest.signal", name):
            return cast(
                SignalReceipt, self._on_current(sqlapi.signal_workflow, name, encoded, tracing.traceparent())
            )

    @_finds_run
    def cancel(self, reason: str | None = None) -> bool:
        """Ask the run to cancel (it may clean up); False if a cancel was already requested."""
        return cast("bool", self._on_current(sqlapi.cancel_workflow, reason))

    @_finds_run
    def pause(self, reason: str | None = None, *, operator_id: str | None = None) -> bool:
        """Pause the (current) run: none of its work starts until :meth:`resume`; running work
        finishes, signals are kept (docs/lifecycle.md). False if it was paused already."""
        return cast("bool", self._on_current(sqlapi.pause_workflow, reason, operator_id))

    @_finds_run
    def resume(self, reason: str | None = None, *, operator_id: str | None = None) -> bool:
        """Resume a paused run: overdue timers fire once, kept signals arrive in order. False
        if it was running."""
        return cast("bool", self._on_current(sqlapi.resume_workflow, reason, operator_id))

    @_finds_run
    def query(self, name: str, arg: Any = None, *, timeout: Duration = 10.0, result_type: Any = Any) -> Any:
        """A worker's answer from the run's current state; nothing is written (docs/messages.md)."""
        return messaging.query(self.client, cast(str, self.execution_id), name, arg, timeout, result_type)

    @overload
    def update(
        self,
        name: str,
        arg: Any = None,
        *,
        wait: Literal["accepted"],
        timeout: Duration = 30.0,
        update_id: str | None = None,
        result_type: Any = Any,
    ) -> messaging.UpdateHandle: ...
    @overload
    def update(
        self,
        name: str,
        arg: Any = None,
        *,
        wait: str = "completed",
        timeout: Duration = 30.0,
        update_id: str | None = None,
        result_type: Any = Any,
    ) -> Any: ...
    @_finds_run
    def update(
        self,
        name: str,
        arg: Any = None,
        *,
        wait: str = "completed",
        timeout: Duration = 30.0,
        update_id: str | None = None,
        result_type: Any = Any,
    ) -> Any:
        """Validate, record and run update ``name``: its result (``wait="completed"``) or an
        ``UpdateHandle`` once it is recorded (``wait="accepted"``), whose ``update_id`` is the
        update's id (``update_id``, else the one minted) and ``result()`` its outcome."""
        with self._span("harvest.workflow.update", "harvest.update", name):
            run = cast(str, self.execution_id)
            return messaging.update(self.client, run, name, arg, wait, timeout, update_id, result_type)

    @_finds_run
    def reset(
        self,
        to_event: int,
        reason: str,
        *,
        operator_id: str | None = None,
        signal_reapply: str = "drop",
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Fork the run from a completed boundary under the current code (see docs/versioning.md).

        Returns the plan; without dry_run the source ends TERMINATED and the plan's
        ``new_execution_id`` names the fork (on the source's shard).
        """
        reset = self._call(sqlapi.reset_workflow, to_event, reason, operator_id, signal_reapply, dry_run)
        return cast("dict[str, Any]", self._at(self.execution_id, reset))

    @_finds_run
    def children(self, status: str | None = None, depth: int = 1) -> Children:
        """The run's child workflows (``depth`` levels down), optionally of one ``status``: a
        :class:`Children` list of every one of them, read in one answer (for a run with many,
        :meth:`children_page` or :meth:`iter_children`). A sharded client asks every readable
        shard (a child may live on any); its rows carry ``shard_id``, and a shard that cannot be
        read makes it ``partial``."""
        return _drive(self._children(ShardReads, status, depth))

    @_finds_run
    def children_page(
        self,
        status: str | None = None,
        depth: int = 1,
        *,
        page_size: int = CHILDREN_PAGE,
        cursor: str | None = None,
        max_nodes: int | None = None,
    ) -> Children:
        """A page of the run's children, newest first, as GET /workflows/{id}/children and
        `harvest workflow children` give it: at most ``page_size`` (1..1000) rows after
        ``cursor`` (a previous page's ``next_cursor``, given with the same ``status``,
        ``depth`` and ``max_nodes``), each with ``shard_id`` and ``depth``. ``next_cursor`` is
        None on the last page. A page deeper than the direct children walks at most
        ``max_nodes`` descendants (default 1000), and ``truncated`` says it cut. A shard that
        cannot be read makes the page ``partial``; its children come on a later page."""
        return _drive(self._children_page(ShardReads, status, depth, page_size, cursor, max_nodes))

    def iter_children(
        self,
        status: str | None = None,
        depth: int = 1,
        *,
        page_size: int = CHILDREN_PAGE,
        max_nodes: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Every child of the run (as :meth:`children_page` pages them), read a page at a time
        as the iteration reaches it. DatabaseUnavailable once only the children of a shard that
        cannot be read are left (the others were given)."""
        cursor: str | None = None
        while True:
            page = self.children_page(status, depth, page_size=page_size, cursor=cursor, max_nodes=max_nodes)
            yield from page
            cursor = _next_cursor(page)
            if cursor is None:
                return

    @_finds_run
    def result(self, timeout: Duration | None = None) -> ResultT:
        """Wait for the run (and any continue-as-new successors) to end; return or raise. It
        LISTENs on the shard the run lives on (following a rebalance's forwarding pointer), and
        on each successor's shard in turn."""
        return self._result(timeout, str(uuid.uuid4()))

    def _result(
        self, timeout: Duration | None, waiter_id: str, marked: Callable[[], bool] | None = None
    ) -> ResultT:
        """result() as ``waiter_id``; ``marked``: see _result_steps (the first run only)."""
        target, run, deadline = self._result_start(timeout)

        def wait(shard: int, run: str) -> ResultT:
            steps, cleanup = self._waiting(run, waiter_id, deadline, timeout, marked)
            listener = self.client._listener(shard, channels.DONE, _left(deadline))  # a thread of its own
            api = functools.partial(routing.api, target, shard)
            return cast(ResultT, run_steps_on_hub(steps, api, listener, cleanup=cleanup, expect=run))

        outcome: ResultT = _chain(self, run, lambda run: target.follow(run, lambda shard: wait(shard, run)))
        return outcome


def _declare_session_urls(
    dsn: str | None, shards: Any, session_urls: Mapping[int, str] | None, what: str
) -> None:
    """A client's ``session_urls`` declared before its first connection, checked as the
    Worker's (harvest.db.pooler.declare_shards): ``dsn`` is shard 0's URL of one database, else
    each shard of ``shards`` (its pools) has its URL."""
    if session_urls is None:
        return
    urls: dict[int, str] = {shard: shards.dsn(shard) for shard in shards.shards} if shards is not None else {}
    if dsn is not None:
        urls[0] = dsn
    pooler.declare_shards(urls, session_urls, what)


class Client:
    """A synchronous client, over one database or over shards.

    ``Client(dsn)``: one database; ``dsn`` defaults to ``HARVEST_DATABASE_URL``. The client
    opens a pool of ``pool_size`` connections and closes it in :meth:`close`.

    ``Client(shards=pools)``: a :class:`harvest.shard.ShardPools` (``harvest.config.shard_pools
    (load_config())`` builds one from ``[shards]``). Starts are placed by ``pools.router`` (a
    hash, or ``shard_id=`` / ``residency_key=``) and every call about an execution goes to
    the shard its id carries. The pools are the caller's: the client does not close them, and
    ``pool_size`` does not apply. ``dsn`` is None; ``router`` and ``pools`` say where calls go.
    ``check_schema`` checks the first shard that answers (the default first); each shard's
    pool checks that its database is that shard on first use.

    ``max_payload_bytes``: inputs, signal payloads and update/query arguments larger
    than this are refused here (``PayloadTooLarge``) before anything is sent; by
    default the server's own limit (``harvest.payload_limit()``), read once (from the
    first shard that answers, default shard first). The server checks again and is the
    authority.

    ``session_urls``: shard number -> *session URL* for a URL that goes through a connection
    pooler in transaction mode (``dsn`` is shard 0's; on shards, the pools' URLs): the
    database's direct or session-mode URL, where the client's LISTEN goes, as
    ``Worker(session_urls=...)`` (docs/operations.md, "Behind a connection pooler"). A shard with
    no URL here, or a value that is not a URL string, is a ConfigError.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        shards: Any = None,
        pool_size: int = 4,
        check_schema: bool = True,
        max_payload_bytes: int | None = None,
        codecs: Any = None,
        session_urls: Mapping[int, str] | None = None,
    ):
        self.max_payload_bytes = _limit(max_payload_bytes)
        # Inputs, signal payloads and update/query arguments are encoded by these codecs, and
        # results and answers decoded (a list of codecs or a Payloads; docs/payloads.md).
        self.payloads = Payloads.of(codecs)
        self.pools = shards
        if shards is not None:
            if dsn is not None:
                raise InvalidArgument("give the client a dsn or shards=, not both")
            routing.check_pools(shards, asynchronous=False)
            _declare_session_urls(None, shards, session_urls, "Client(session_urls=...)")
            self.dsn = None
            self._target: Any = routing.Sharded(shards)
            self.router = self._target.router
            self._first_connections(check_schema)
        else:
            self.dsn = resolve_dsn(dsn)
            _declare_session_urls(self.dsn, None, session_urls, "Client(session_urls=...)")
            # One connection first, schema check or not: a wrong password or a bad DSN fails here
            # at once, redacted, instead of in the pool's background retries.
            # The same connection reads the server's payload limit: no second round trip.
            with connect(self.dsn, autocommit=True) as conn:
                self._first(conn, check_schema)
            self._target = routing.OneDatabase(self.dsn, open_pool(self.dsn, max_size=pool_size))
        self.router = self._target.router
        # (shard, channel) -> a started ThreadNotificationHub: result waits share one LISTEN
        # connection per shard and channel (opened on first use, closed by close()) instead of
        # opening a connection each.
        self._hubs: dict[tuple[int, str], ThreadNotificationHub] = {}
        self._hubs_lock = threading.Lock()
        self._closed = False  # (close() sets it: a wait after it opens no listener)
        self._result_watch: ResultWatch | None = None  # the test kit's (harvest.testing)
        # An App whose workflows a start by name reads its debounce or batch from, to place a
        # burst on one shard (a server's --app sets it); None: the shards' declaration, read once
        # per name (docs/sharding.md, "Placing a start").
        self.app: Any = None

    def _first_connections(self, check_schema: bool) -> None:
        """The first shard that answers (the default first): its identity (a pool's first
        connection checks it), its schema, the payload limit. Every other shard's identity is
        checked by its pool on first use, so a shard that is down does not hold up the client."""
        for shard in routing.boot_order(self.router, self.pools.shards):
            try:
                with self.pools.connection(shard) as conn:
                    self._first(conn, check_schema)
                return
            except ShardUnavailable:
                continue

    def _first(self, conn: Any, check_schema: bool) -> None:
        """On the client's first connection: the schema checked, the server's payload limit read
        (when none was given)."""
        if check_schema:
            verify_schema(conn)
        if self.max_payload_bytes is None:
            self.max_payload_bytes = SqlApi(conn).payload_limit()

    def close(self) -> None:
        with self._hubs_lock:
            self._closed = True  # (under the lock: no wait opens a listener after this)
            hubs, self._hubs = list(self._hubs.values()), {}
        for hub in hubs:
            hub.close()
        self._target.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _listener(self, shard: int, channel: str, within: float | None = None) -> ThreadNotificationHub:
        """This client's LISTEN connection on ``channel`` of ``shard``, listening (or, after
        HUB_START_SECS without a connection, or ``within`` if sooner, trying to in the
        background: the waits' own re-reads answer meanwhile)."""
        with self._hubs_lock:
            _refuse_if_closed(self)
            hub = self._hubs.get((shard, channel))
            if hub is None:
                hub = ThreadNotificationHub(self._target.dsn_of(shard), channel)
                self._hubs[(shard, channel)] = hub
        hub.start(timeout=_hub_start_secs(within))
        return hub

    def _sql(self, shard: int | None = None) -> contextlib.AbstractContextManager[SqlApi]:
        return routing.api(self._target, self.router.default if shard is None else shard)

    def _on(self, shard: int, steps: Steps[T]) -> T:
        """Drive ``steps`` on one connection of ``shard``."""
        return _on_shard(self._target, shard, steps)

    @overload
    def start_workflow(
        self,
        workflow: Callable[[Any, *Args], Awaitable[ResultT]],
        /,
        *args: *Args,
        options: StartOptions | None = None,
        **kwargs: Any,
    ) -> WorkflowHandle[ResultT]: ...
    @overload
    def start_workflow(
        self,
        workflow: str | WorkflowDefinition,
        /,
        *args: Any,
        options: StartOptions | None = None,
        **kwargs: Any,
    ) -> WorkflowHandle[Any]: ...
    def start_workflow(
        self, workflow: Any, /, *args: object, options: StartOptions | None = None, **kwargs: Any
    ) -> WorkflowHandle[Any]:
        """Start (or attach to) a run; see docs/workflows.md for the policies.

        ``*args`` and ``**kwargs`` are the workflow's arguments; ``options=StartOptions(...)``
        says how to start it (``workflow_id``, ``queue``, ``reuse_policy``, ``conflict_policy``,
        ``search_attributes``, ``priority``, ``execution_timeout``, ``run_timeout``,
        ``shard_id``, ``residency_key``, ``connection``). Those names are still taken as start
        options when given as keyword arguments without ``options=`` (a DeprecationWarning when
        the workflow has a parameter of the same name).

        Placement (docs/sharding.md): ``shard_id=`` or ``residency_key=`` (not both) pins the
        run to a shard; without either, a sharded client hashes (name, workflow_id) over the
        writable shards. Without a ``workflow_id`` a pinned start mints one that hashes to its
        shard. ``connection=`` starts in your transaction on that connection's database (a
        pin is checked by that database: another shard's is refused with WrongShard)."""
        return self._start(workflow, args, options, kwargs)[0]

    @overload
    def execute_workflow(
        self,
        workflow: Callable[[Any, *Args], Awaitable[ResultT]],
        /,
        *args: *Args,
        options: StartOptions | None = None,
        result_timeout: Duration | None = None,
        **kwargs: Any,
    ) -> ResultT: ...
    @overload
    def execute_workflow(
        self,
        workflow: str | WorkflowDefinition,
        /,
        *args: Any,
        options: StartOptions | None = None,
        result_timeout: Duration | None = None,
        **kwargs: Any,
    ) -> Any: ...
    def execute_workflow(
        self,
        workflow: Any,
        /,
        *args: object,
        options: StartOptions | None = None,
        result_timeout: Duration | None = None,
        **kwargs: Any,
    ) -> Any:
        """Start a run and wait for its result: ``start_workflow(...)`` then ``result()``, in
        fewer steps (docs/workflows.md, "Starting a run and waiting for it").

        Takes start_workflow's arguments; ``result_timeout`` is result()'s ``timeout``
        (TimeoutError_ when the run is still going then; the run goes on). The start marks this
        caller as waiting for the run's result in its own transaction, so the wait need not mark
        itself after it: on one database, a run the start created (not one it attached to, and
        not a start given ``connection=``, offloaded input or a pinned shard) is waited for on
        the client's LISTEN connection without a first read."""
        waiter_id = str(uuid.uuid4())
        hub = (
            None
            if self._target.sharded
            else self._listener(routing.ONE, channels.DONE, _within(result_timeout))
        )
        token = _listening_since(hub)
        handle, marked = self._start(workflow, args, options, kwargs, waiter_id)
        return handle._result(result_timeout, waiter_id, _unmissed(hub, token) if marked else None)

    def _start(
        self,
        workflow: Any,
        args: tuple[object, ...],
        options: StartOptions | None,
        kwargs: dict[str, Any],
        waiter_id: str | None = None,
    ) -> tuple[WorkflowHandle[Any], bool]:
        """start_workflow; ``waiter_id``: the plain start marks it waiting for the run's result
        in its own transaction (returns whether it did)."""
        declared = routing.declaration_by_name(self._target, self.app, workflow)
        if declared is routing.ASK:
            declared = routing.read_declaration(self._target, workflow)
        name, definition, queue, opts, placement, call = _prepare_start(
            self, workflow, args, options, kwargs, declared
        )
        with tracing.start_span(name) as trace:
            # The caller's trace context, captured at start (docs/observability.md).
            call["traceparent"] = trace.traceparent
            connection = opts.connection
            offloaded = payload_policy.offload_plan(self.payloads, call["input"])
            if offloaded or placement.pinned:
                steps = _start_steps(call, placement, self.payloads, offloaded)
                row = _in_transaction(self._target, connection, placement.shard, steps)
            elif connection is not None:
                row = SqlApi(connection).start_workflow(**call)
            else:
                with routing.api(
                    self._target, routing.ONE if placement.shard is None else placement.shard
                ) as sql:
                    if waiter_id is None:
                        row = sql.start_workflow(**call, shard=placement.shard)
                    else:
                        call = {**call, "result_waiter": waiter_id}
                        if placement.shard is not None:
                            call["shard"] = placement.shard
                        row = sql.start_workflows([call])[0]
            _trace_started(trace, row, name, queue)
        return _start_answer(self, WorkflowHandle, row, definition, placement, call)

    @overload
    def signal_with_start(
        self,
        workflow: Callable[[Any, *Args], Awaitable[ResultT]],
        *args: *Args,
        workflow_id: str,
        signal: str,
        signal_payload: Any = None,
        queue: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        task_queue: str | None = None,
        **kwargs: Any,
    ) -> WorkflowHandle[ResultT]: ...
    @overload
    def signal_with_start(
        self,
        workflow: str | WorkflowDefinition,
        *args: Any,
        workflow_id: str,
        signal: str,
        signal_payload: Any = None,
        queue: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        task_queue: str | None = None,
        **kwargs: Any,
    ) -> WorkflowHandle[Any]: ...
    def signal_with_start(
        self,
        workflow: Any,
        *args: object,
        workflow_id: str,
        signal: str,
        signal_payload: Any = None,
        queue: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        task_queue: str | None = None,
        **kwargs: Any,
    ) -> WorkflowHandle[Any]:
        """Signal the running run of workflow_id, starting one first if none runs (atomically).

        On shards it goes where an unpinned start of (name, workflow_id) would: no placement."""
        queue = queue_alias(queue, task_queue)
        definition, call = _signal_with_start_call(
            self, workflow, args, kwargs, workflow_id, signal, signal_payload, queue, search_attributes
        )
        return cast(
            "WorkflowHandle[Any]", _drive(_signal_with_start_flow(self, WorkflowHandle, definition, call))
        )

    @overload
    def update_with_start(
        self,
        workflow: Callable[[Any, *Args], Awaitable[ResultT]],
        *args: *Args,
        workflow_id: str,
        update: str,
        update_arg: Any = None,
        wait: str = "completed",
        timeout: Duration = 30.0,
        update_id: str | None = None,
        queue: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        result_type: Any = Any,
        task_queue: str | None = None,
        **kwargs: Any,
    ) -> tuple[WorkflowHandle[ResultT], Any]: ...
    @overload
    def update_with_start(
        self,
        workflow: str | WorkflowDefinition,
        *args: Any,
        workflow_id: str,
        update: str,
        update_arg: Any = None,
        wait: str = "completed",
        timeout: Duration = 30.0,
        update_id: str | None = None,
        queue: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        result_type: Any = Any,
        task_queue: str | None = None,
        **kwargs: Any,
    ) -> tuple[WorkflowHandle[Any], Any]: ...
    def update_with_start(
        self,
        workflow: Any,
        *args: object,
        workflow_id: str,
        update: str,
        update_arg: Any = None,
        wait: str = "completed",
        timeout: Duration = 30.0,
        update_id: str | None = None,
        queue: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        result_type: Any = Any,
        task_queue: str | None = None,
        **kwargs: Any,
    ) -> tuple[WorkflowHandle[Any], Any]:
        """Attach to the running run of workflow_id (or start one) and update it, atomically.

        Returns ``(handle, outcome)``: the update's result, or an ``UpdateHandle`` with
        ``wait="accepted"``. On shards it goes where an unpinned start would: no placement."""
        queue = queue_alias(queue, task_queue)
        definition, call = _update_with_start_call(
            self, workflow, args, kwargs, workflow_id, update, update_arg, update_id, queue, search_attributes
        )
        options = (wait, timeout, result_type)
        flow = _update_with_start_flow(
            self, WorkflowHandle, definition, call, update_arg, options, messaging.update_with_start
        )
        return _drive(flow)

    def _by_token(self, task_token: str, call: Any, *args: Any) -> Any:
        """``call`` (a declaration of harvest.db.sqlapi) by task token, on the shard the token's run
        lives on."""
        return _follow(self._target, *_token_call(task_token, call, *args))

    def complete_activity(self, task_token: str, result: Any = None) -> str:
        """Complete an activity left to be completed elsewhere (``raise ctx.complete_async()``)
        by its ``ctx.task_token``: ``"completed"``, or ``"already_completed"`` for a repeat of
        the same completion. StaleTask once the attempt timed out, was retried or failed."""
        encoded = _activity_result(self, result)
        try:
            return cast("str", self._by_token(task_token, sqlapi.complete_activity_by_token, encoded))
        except StaleTask:
            if self.payloads.chain:
                events = self.get_handle(TaskToken.parse(task_token).execution_id).history()
                if _completed_with(self, task_token, result, events):
                    return "already_completed"
            raise

    def fail_activity(self, task_token: str, error: BaseException | ActivityFailure) -> str:
        """Fail that attempt by its task token: retried, dead-lettered or failed per the
        activity's retry policy (returns which)."""
        return cast(
            "str", self._by_token(task_token, sqlapi.fail_activity_by_token, _failure_report(self, error))
        )

    def heartbeat_activity(self, task_token: str, details: Any = None) -> bool:
        """Heartbeat it by its task token (its heartbeat timeout still applies); True when its
        run was asked to cancel."""
        encoded = _heartbeat_details(self, details)
        return cast("bool", self._by_token(task_token, sqlapi.heartbeat_activity_by_token, encoded))

    # -- acting on many runs by filter (harvest.client.batch; docs/operations.md) ---------------
    def cancel_workflows(self, *, reason: str | None = None, **batch: Any) -> dict[str, Any]:
        """Ask every live run a filter selects to cancel, on every shard; see :meth:`act_on_workflows`."""
        return self.act_on_workflows("cancel", reason=reason, **batch)

    def terminate_workflows(self, *, reason: str | None = None, **batch: Any) -> dict[str, Any]:
        """Terminate every live run a filter selects, on every shard; see :meth:`act_on_workflows`."""
        return self.act_on_workflows("terminate", reason=reason, **batch)

    def pause_workflows(self, *, reason: str | None = None, **batch: Any) -> dict[str, Any]:
        """Pause every RUNNING run a filter selects, on every shard; see :meth:`act_on_workflows`."""
        return self.act_on_workflows("pause", reason=reason, **batch)

    def resume_workflows(self, *, reason: str | None = None, **batch: Any) -> dict[str, Any]:
        """Resume every PAUSED run a filter selects, on every shard; see :meth:`act_on_workflows`."""
        return self.act_on_workflows("resume", reason=reason, **batch)

    def reset_workflows(
        self,
        *,
        reason: str,
        reset_to: str = "before_time",
        before: Any = None,
        signal_reapply: str = "drop",
        **batch: Any,
    ) -> dict[str, Any]:
        """Reset every RUNNING run a filter selects (a terminal run cannot be reset), on every
        shard, each to the point ``reset_to`` names in its own history: ``before_time`` (the last
        completed workflow task written before ``before``, the bad deploy's time; required) or
        ``first_workflow_task``; once per batch (docs/operations.md, "Resetting many runs").
        InvalidArgument for a missing or unneeded time. See :meth:`act_on_workflows`."""
        return self.act_on_workflows(
            "reset", reason=reason, reset_to=reset_to, before=before, signal_reapply=signal_reapply, **batch
        )

    def signal_workflows(self, signal_name: str, payload_value: Any = None, **batch: Any) -> dict[str, Any]:
        """Signal every live run a filter selects once per batch, on every shard; the payload is
        encoded by this client's codecs and must fit inline (not the offload store)."""
        limit = self.max_payload_bytes
        encoded = payload_policy.batch_written(self.payloads, signal_name, payload_value, limit)
        return self.act_on_workflows("signal", signal_name=signal_name, payload=encoded, **batch)

    def act_on_workflows(
        self,
        action: str,
        *,
        state: str | None = None,
        workflow_name: str | None = None,
        search_attributes: list[str] | tuple[str, ...] = (),
        created_after: Any = None,
        created_before: Any = None,
        filter: str | None = None,
        reason: str | None = None,
        signal_name: str | None = None,
        payload: Any = None,
        dry_run: bool = False,
        batch_size: int = BATCH_STEP,
        operator_id: str | None = None,
        batch_id: str | None = None,
        progress: Callable[[int, int], None] | None = None,
        workflow_id: str | None = None,
        failing: bool | None = None,
        reset_to: str = "before_time",
        before: Any = None,
        signal_reapply: str = "drop",
    ) -> dict[str, Any]:
        """``action`` (cancel, terminate, signal, pause, resume, reset) on every run the filters
        select (those of :meth:`list_workflows`, ``workflow_id`` one id's runs, ``failing`` True
        the runs whose workflow task is failing; at least one
        besides ``state``, else InvalidArgument), on every
        shard, ``batch_size`` runs a transaction; a run a rebalance moved is acted on where it
        lives. Answers the summary: matched, acted, already_ended, unchanged, failed (with
        failures), per shard (shards) and the shards not reached (unavailable_shards, status
        partial). ``dry_run``: count and a sample (execution_ids), nothing written.
        ``progress(shard, matched so far)`` after each step (a progress bar)."""
        step = step_keywords(locals())  # (first thing: locals() holds only the arguments)
        target = self._target

        def on_shard(shard: int, fn: Callable[[SqlApi], Any]) -> Any:
            with routing.api(target, shard) as sql, translated_errors():  # (HR013: ExecutionMigrated)
                return fn(sql)

        def follow(execution_id: str, fn: Callable[[SqlApi], Any]) -> tuple[int, Any]:
            return cast(
                "tuple[int, Any]", target.follow(execution_id, lambda shard: (shard, on_shard(shard, fn)))
            )

        return _drive(_batch_flow(self, on_shard, follow, action, step, progress))

    def list_workflows_page(
        self,
        *,
        state: str | None = None,
        workflow_name: str | None = None,
        search_attributes: list[str] | tuple[str, ...] = (),
        created_after: Any = None,
        created_before: Any = None,
        filter: str | None = None,
        workflow_id: str | None = None,
        failing: bool | None = None,
        order: Literal["desc", "asc"] = "desc",
        page_size: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """One page of the runs the filters select, over every shard, as GET /workflows and
        `harvest workflow list` give it (docs/workflows.md, "Listing and counting runs"): at
        most ``page_size`` (1..1000) rows, newest first (``order="asc"``: oldest first), after
        ``cursor`` (a previous page's ``next_cursor``, given with the same filters and order).
        ``state``: one status or several, comma-separated; ``search_attributes``: ``key=value``
        or a typed comparison (``amount>=10``), ANDed; ``filter``: an expression (docs/http-api.md,
        "Filter expressions"); ``workflow_id``: one id's runs; ``failing``: True, the runs whose
        workflow task is failing, False the others. Each row carries ``shard_id``.

        A shard that cannot be read makes the page ``partial`` (``unavailable_shards`` names
        it) and keeps its place in ``next_cursor``, which stays set while it is away: its runs
        come on a later page once it answers. No shard read: DatabaseUnavailable."""
        filters = _list_filters(locals())
        return _page(ShardReads(self._target.providers()).list_workflows(**filters), "workflow list")

    def list_workflows(
        self,
        *,
        state: str | None = None,
        workflow_name: str | None = None,
        search_attributes: list[str] | tuple[str, ...] = (),
        created_after: Any = None,
        created_before: Any = None,
        filter: str | None = None,
        workflow_id: str | None = None,
        failing: bool | None = None,
        order: Literal["desc", "asc"] = "desc",
        page_size: int = 50,
    ) -> Iterator[dict[str, Any]]:
        """Every run the filters select (those of :meth:`list_workflows_page`), over every
        shard, read a page of ``page_size`` at a time as the iteration reaches it. A shard that
        cannot be read for a page is read again on the next ones (its runs come when it
        answers); once only its runs are left, DatabaseUnavailable (the others were given)."""
        filters, cursor = _list_filters(locals()), None
        while True:
            page = self.list_workflows_page(**filters, cursor=cursor)
            yield from page
            cursor = _next_cursor(page, "runs")
            if cursor is None:
                return

    def count_workflows(
        self,
        *,
        group_by: Literal["status", "workflow_name", "all"] = "status",
        state: str | None = None,
        workflow_name: str | None = None,
        search_attributes: list[str] | tuple[str, ...] = (),
        created_after: Any = None,
        created_before: Any = None,
        filter: str | None = None,
        workflow_id: str | None = None,
        failing: bool | None = None,
        limit: int | None = None,
    ) -> Page:
        """How many runs the filters (those of :meth:`list_workflows_page`) select, over every
        shard, as GET /workflows/count and `harvest workflow count` give it: a row per
        ``group_by`` group (``status``, ``workflow_name``, or ``all``: both) with
        ``executions``, most first. A run a rebalance moved counts once; with no ``state``,
        every status but MIGRATED. ``limit`` (with ``group_by="status"``): each shard counts at
        most that many runs a status, and a row that reached it has ``capped`` set (at least
        that many). A shard that cannot be read makes it ``partial`` (the others' counts); no
        shard read: DatabaseUnavailable."""
        filters = _list_filters(locals())
        return _page(ShardReads(self._target.providers()).count_executions(**filters), "workflow count")

    @overload
    def get_handle(
        self,
        execution_id: str | None,
        workflow: Callable[..., Awaitable[ResultT]],
        *,
        workflow_id: str | None = None,
    ) -> WorkflowHandle[ResultT]: ...
    @overload
    def get_handle(
        self,
        execution_id: None = None,
        *,
        workflow: Callable[..., Awaitable[ResultT]],
        workflow_id: str,
    ) -> WorkflowHandle[ResultT]: ...
    @overload
    def get_handle(
        self,
        execution_id: str | None = None,
        workflow: str | WorkflowDefinition | None = None,
        *,
        workflow_id: str | None = None,
    ) -> WorkflowHandle[Any]: ...
    def get_handle(
        self, execution_id: str | None = None, workflow: Any = None, *, workflow_id: str | None = None
    ) -> WorkflowHandle[Any]:
        """A handle on a run: by ``execution_id``, or by ``workflow_id`` (its current run: the
        running one, else the newest, found at the handle's first call; ``workflow``, a
        ``@workflow`` or its name, narrows it to that workflow and types the result)."""
        return cast(
            "WorkflowHandle[Any]", _handle_of(WorkflowHandle, self, execution_id, workflow, workflow_id)
        )

    def sql(self) -> contextlib.AbstractContextManager[SqlApi]:
        """A scope yielding :class:`SqlApi` on a pooled connection (for operator calls); on
        shards, a connection of the default shard (``client.pools.api(n)`` for another)."""
        return self._sql()


class AsyncWorkflowHandle(_Handle, Generic[ResultT]):
    """One execution, seen from an asyncio client (``ResultT`` as for :class:`WorkflowHandle`)."""

    client: AsyncClient

    def _at(self, execution_id: str | None, make: Callable[[], Steps[Any]]) -> Any:
        """See :meth:`WorkflowHandle._at`: an awaitable (each call on a pooled connection)."""
        return _afollow(self.client._target, execution_id, make)

    async def _on_current(self, call: Any, *args: Any) -> Any:
        """See :meth:`WorkflowHandle._on_current`."""
        return await _achain(self, *self._current(call, args), keep=True)

    @_afinds_run
    async def describe(self) -> dict[str, Any]:
        return cast("dict[str, Any]", await self._at(self.execution_id, self._describe))

    @_afinds_run
    async def history(self) -> list[dict[str, Any]]:
        return cast("list[dict[str, Any]]", await self._at(self.execution_id, self._history))

    @_afinds_run
    async def terminate(self, reason: str | None = None) -> None:
        """See :meth:`WorkflowHandle.terminate`."""
        await self._on_current(sqlapi.terminate_workflow, reason)

    @_afinds_run
    async def signal(self, name: str, payload_value: Any = None) -> SignalReceipt:
        """See :meth:`WorkflowHandle.signal` (returns the signal's event id, a SignalReceipt)."""
        encoded, offload = self._signal_encoded(name, payload_value)
        if offload is not None:
            encoded = await self._at(self.execution_id, offload)
        with self._span("harvest.workflow.signal", "harvest.signal", name):
            eager = self.client.eager_worker
            slot = eager.eager_slot() if eager is not None else None
            if eager is None or slot is None:
                return cast(
                    SignalReceipt,
                    await self._on_current(sqlapi.signal_workflow, name, encoded, tracing.traceparent()),
                )
            handed = None
            try:
                answer = await self._on_current(
                    sqlapi.signal_workflow_eager, name, encoded, tracing.traceparent(), *slot
                )
                handed = answer["handed"]
            finally:
                eager.run_eager(handed)
            return SignalReceipt(answer["event_id"], name, answer.get("awaited_signals") or ())

    @_afinds_run
    async def cancel(self, reason: str | None = None) -> bool:
        """See :meth:`WorkflowHandle.cancel`."""
        return cast("bool", await self._on_current(sqlapi.cancel_workflow, reason))

    @_afinds_run
    async def pause(self, reason: str | None = None, *, operator_id: str | None = None) -> bool:
        """See :meth:`WorkflowHandle.pause`."""
        return cast("bool", await self._on_current(sqlapi.pause_workflow, reason, operator_id))

    @_afinds_run
    async def resume(self, reason: str | None = None, *, operator_id: str | None = None) -> bool:
        """See :meth:`WorkflowHandle.resume`."""
        return cast("bool", await self._on_current(sqlapi.resume_workflow, reason, operator_id))

    @_afinds_run
    async def query(
        self, name: str, arg: Any = None, *, timeout: Duration = 10.0, result_type: Any = Any
    ) -> Any:
        run = cast(str, self.execution_id)
        return await messaging.aquery(self.client, run, name, arg, timeout, result_type)

    @overload
    async def update(
        self,
        name: str,
        arg: Any = None,
        *,
        wait: Literal["accepted"],
        timeout: Duration = 30.0,
        update_id: str | None = None,
        result_type: Any = Any,
    ) -> messaging.AsyncUpdateHandle: ...
    @overload
    async def update(
        self,
        name: str,
        arg: Any = None,
        *,
        wait: str = "completed",
        timeout: Duration = 30.0,
        update_id: str | None = None,
        result_type: Any = Any,
    ) -> Any: ...
    @_afinds_run
    async def update(
        self,
        name: str,
        arg: Any = None,
        *,
        wait: str = "completed",
        timeout: Duration = 30.0,
        update_id: str | None = None,
        result_type: Any = Any,
    ) -> Any:
        """As :meth:`WorkflowHandle.update`; ``wait="accepted"``: an update handle whose
        ``result()`` is awaited."""
        with self._span("harvest.workflow.update", "harvest.update", name):
            run = cast(str, self.execution_id)
            return await messaging.aupdate(self.client, run, name, arg, wait, timeout, update_id, result_type)

    @_afinds_run
    async def reset(
        self,
        to_event: int,
        reason: str,
        *,
        operator_id: str | None = None,
        signal_reapply: str = "drop",
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """See :meth:`WorkflowHandle.reset`."""
        reset = self._call(sqlapi.reset_workflow, to_event, reason, operator_id, signal_reapply, dry_run)
        return cast("dict[str, Any]", await self._at(self.execution_id, reset))

    @_afinds_run
    async def children(self, status: str | None = None, depth: int = 1) -> Children:
        """See :meth:`WorkflowHandle.children`."""
        return await _adrive(self._children(AsyncShardReads, status, depth))

    @_afinds_run
    async def children_page(
        self,
        status: str | None = None,
        depth: int = 1,
        *,
        page_size: int = CHILDREN_PAGE,
        cursor: str | None = None,
        max_nodes: int | None = None,
    ) -> Children:
        """See :meth:`WorkflowHandle.children_page`."""
        return await _adrive(
            self._children_page(AsyncShardReads, status, depth, page_size, cursor, max_nodes)
        )

    async def iter_children(
        self,
        status: str | None = None,
        depth: int = 1,
        *,
        page_size: int = CHILDREN_PAGE,
        max_nodes: int | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """See :meth:`WorkflowHandle.iter_children` (``async for``)."""
        cursor: str | None = None
        while True:
            page = await self.children_page(
                status, depth, page_size=page_size, cursor=cursor, max_nodes=max_nodes
            )
            for row in page:
                yield row
            cursor = _next_cursor(page)
            if cursor is None:
                return

    @_afinds_run
    async def result(self, timeout: Duration | None = None) -> ResultT:
        """See :meth:`WorkflowHandle.result`."""
        return await self._result(timeout, str(uuid.uuid4()))

    async def _result(
        self, timeout: Duration | None, waiter_id: str, marked: Callable[[], bool] | None = None
    ) -> ResultT:
        """result() as ``waiter_id``; ``marked``: see _result_steps (the first run only)."""
        target, run, deadline = self._result_start(timeout)

        async def wait(shard: int, run: str) -> ResultT:
            # (or on the LISTEN connection the client was given: client.notifications)
            steps, cleanup = self._waiting(run, waiter_id, deadline, timeout, marked)
            listener = await self.client._listener(shard, channels.DONE, _left(deadline))
            return cast(
                ResultT,
                await arun_steps_on_hub(steps, target.sql(shard), listener, cleanup=cleanup, expect=run),
            )

        return await _achain(self, run, lambda run: target.follow(run, lambda shard: wait(shard, run)))


async def _afirst(conn: Any, check_schema: bool, limit: int | None) -> int | None:
    """:meth:`Client._first` for AsyncClient.connect: the payload limit (``limit`` when given)."""
    first = AsyncSqlApi.on_connection(conn)
    if check_schema:
        await check_schema_async(first, "this Harvest")
    return limit if limit is not None else await first.payload_limit()


class _StartBatcher(GroupCommit):
    """Concurrent starts of one AsyncClient to one shard share a transaction (harvest.start_workflows)."""

    what = "starts"

    def __init__(self, sql: AsyncSqlApi):
        super().__init__()
        self._sql = sql

    def start(self, call: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        """The future of one start's row, queued at the call (await it)."""
        return self._submit(call)

    async def _send(self, items: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        return cast("list[dict[str, Any]]", await self._sql.start_workflows([call for (call,) in items]))

    def _settle(self, batch: list[tuple[Any, ...]], rows: list[dict[str, Any]], resent: bool = False) -> None:
        by_n = {row["n"]: row for row in rows}
        for n, (_call, future) in enumerate(batch, start=1):
            if future.done():
                continue
            if n in by_n:
                future.set_result(by_n[n])
            else:
                future.set_exception(HarvestError(f"start {n}: no answer in the batch"))


class _ShardStarts:
    """One _StartBatcher per shard: a batch never spans two databases. ``batches`` and
    ``items`` add up every shard's."""

    def __init__(self, target: Any):
        self._target = target
        self._by_shard: dict[int, _StartBatcher] = {}

    def batcher(self, shard: int) -> _StartBatcher:
        batcher = self._by_shard.get(shard)
        if batcher is None:
            batcher = self._by_shard[shard] = _StartBatcher(self._target.sql(shard))
        return batcher

    def start(self, call: dict[str, Any], shard: int | None = None) -> Awaitable[dict[str, Any]]:
        """The future of one start's row, queued at the call (await it)."""
        if shard is not None:
            call = {**call, "shard": shard}
        return self.batcher(routing.ONE if shard is None else shard).start(call)

    @property
    def batches(self) -> int:
        return sum(b.batches for b in self._by_shard.values())

    @property
    def items(self) -> int:
        return sum(b.items for b in self._by_shard.values())


def _batch_flow(
    client: Any,
    on_shard: Any,
    follow: Any,
    action: str,
    step: StepKeywords,
    progress: Callable[[int, int], None] | None,
) -> _Flow[dict[str, Any]]:
    """act_on_workflows of both clients (``step``: its arguments, as a step's keywords): the batch
    on every shard the client reads (harvest.client.batch), each call through the client's
    ``on_shard`` and ``follow``; a shard's outage is named in the summary when the client is
    sharded."""
    from harvest.client.batch import batch_flow, filters_of, options_of, shard_outage
    from harvest.db.connection import failure_reason

    tally = yield from batch_flow(
        sorted(client.router.readable),
        on_shard,
        follow,
        action,
        filters_of(step),
        progress=progress,
        is_outage=shard_outage(client._target.sharded),
        failure_text=failure_reason,
        **options_of(step),
    )
    return tally.as_dict()


class AsyncClient:
    """An asyncio client; create with ``await AsyncClient.connect(dsn)`` (one database) or
    ``await AsyncClient.connect(shards=pools)`` (an :class:`harvest.shard.AsyncShardPools`,
    ``harvest.config.async_shard_pools(load_config())``; see :class:`Client`).

    Starts made concurrently (without ``connection=``) share a transaction per shard: each
    returns once its run is committed, and one that fails gets its own error. A pinned start
    (``shard_id=`` / ``residency_key=``) commits on its own.
    """

    def __init__(
        self,
        dsn: str | None,
        pool: Any,
        max_payload_bytes: int | None = None,
        *,
        shards: Any = None,
        codecs: Any = None,
        eager_worker: EagerWorker | None = None,
    ):
        self.payloads = Payloads.of(codecs)  # see Client
        self.dsn = dsn
        self.pools = shards
        # A worker in this process (one database only): a signal's own transaction hands it the
        # run's woken workflow task when the hand-off rules allow (see AsyncWorkflowHandle.signal).
        if eager_worker is not None and shards is not None:
            raise InvalidArgument("eager_worker= needs a client of one database, not shards=")
        self.eager_worker = eager_worker
        self._target: Any = (
            routing.AsyncSharded(shards)
            if shards is not None
            else routing.AsyncOneDatabase(cast(str, dsn), pool)  # AsyncClient.connect: one of the two
        )
        self.router = self._target.router
        self._starts = _ShardStarts(self._target)
        self.max_payload_bytes = _limit(max_payload_bytes)  # see Client
        # (shard, channel) -> a started harvest.db.notify.NotificationHub: result, query and
        # update waits share one LISTEN connection per shard and channel instead of opening one
        # each. By default the client's own (opened on first use, closed by close()); the HTTP
        # API gives its process's. None: query and update waits LISTEN on a connection each.
        self._hubs: dict[tuple[int, str], NotificationHub] = {}
        self._closed = False  # (close() sets it: a wait after it opens no listener)
        self._result_watch: ResultWatch | None = None  # the test kit's (harvest.testing)
        # An App whose workflows a start by name reads its debounce or batch from, to place a
        # burst on one shard (a server's --app sets it); None: the shards' declaration, read once
        # per name (docs/sharding.md, "Placing a start").
        self.app: Any = None
        self.notifications: Callable[[int, str], Awaitable[Any]] | None = self._own_listener

    async def _own_listener(self, shard: int, channel: str, within: float | None = None) -> NotificationHub:
        """This client's LISTEN connection on ``channel`` of ``shard``, listening (or, after
        HUB_START_SECS without a connection, or ``within`` if sooner, trying to in the
        background: the waits' own re-reads answer meanwhile)."""
        _refuse_if_closed(self)
        hub = self._hubs.get((shard, channel))
        if hub is None:
            hub = self._hubs[(shard, channel)] = NotificationHub(self._target.dsn_of(shard), channel)
        await hub.start(timeout=_hub_start_secs(within))
        return hub

    async def _listener(self, shard: int, channel: str, within: float | None = None) -> Any:
        """The hub a wait (of ``within`` seconds) on ``channel`` of ``shard`` registers with (see
        ``notifications``)."""
        notifications = self.notifications
        if notifications is None or notifications == self._own_listener:
            return await self._own_listener(shard, channel, within)
        return await notifications(shard, channel)

    async def _on(self, shard: int, steps: Steps[T]) -> T:
        """Drive ``steps`` on ``shard``'s pool (each call on a pooled connection)."""
        return await arun_steps(steps, self._target.sql(shard))

    @property
    def sql(self) -> AsyncSqlApi:
        """The SQL API on the pool (for operator calls): each call takes a pooled connection
        and is one transaction, so no scope is needed, unlike :meth:`Client.sql`. On shards,
        the default shard's pool (``client.pools.api(n)`` for another)."""
        return cast("AsyncSqlApi", self._target.sql(self.router.default))

    @classmethod
    async def connect(
        cls,
        dsn: str | None = None,
        *,
        shards: Any = None,
        pool_size: int = 4,
        check_schema: bool = True,
        max_payload_bytes: int | None = None,
        codecs: Any = None,
        eager_worker: EagerWorker | None = None,
        session_urls: Mapping[int, str] | None = None,
    ) -> AsyncClient:
        """``eager_worker``: a ``harvest.Worker`` running in this process on the same database.
        A signal this client sends then hands the run's woken workflow task to that worker in
        the signal's own transaction when it may (its cached run decided last, it polls the
        queue, it has a free slot: docs/messages.md, "Eager signals"), sparing the NOTIFY and
        the claim; otherwise the signal is an ordinary one. ``session_urls`` as :class:`Client`."""
        limit = _limit(max_payload_bytes)
        what = "AsyncClient.connect(session_urls=...)"
        if shards is not None:
            if eager_worker is not None:
                raise InvalidArgument("eager_worker= needs a client of one database, not shards=")
            if dsn is not None:
                raise InvalidArgument("give the client a dsn or shards=, not both")
            routing.check_pools(shards, asynchronous=True)
            _declare_session_urls(None, shards, session_urls, what)
            for shard in routing.boot_order(shards.router, shards.shards):
                try:
                    async with shards.connection(shard) as conn:
                        limit = await _afirst(conn, check_schema, limit)
                    break
                except ShardUnavailable:
                    continue
            return cls(None, None, limit, shards=shards, codecs=codecs)
        dsn = resolve_dsn(dsn)
        _declare_session_urls(dsn, None, session_urls, what)
        # One connection first, as in Client(), opened without blocking the event loop; it
        # checks the schema and reads the server's payload limit.
        conn = await connect_async(dsn, autocommit=True)
        try:
            limit = await _afirst(conn, check_schema, limit)
        finally:
            await conn.close()
        pool = await open_async_pool(dsn, max_size=pool_size)
        return cls(dsn, pool, limit, codecs=codecs, eager_worker=eager_worker)

    async def close(self) -> None:
        self._closed = True
        hubs, self._hubs = list(self._hubs.values()), {}
        for hub in hubs:
            await hub.close()
        await self._target.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @overload
    async def start_workflow(
        self,
        workflow: Callable[[Any, *Args], Awaitable[ResultT]],
        /,
        *args: *Args,
        options: StartOptions | None = None,
        **kwargs: Any,
    ) -> AsyncWorkflowHandle[ResultT]: ...
    @overload
    async def start_workflow(
        self,
        workflow: str | WorkflowDefinition,
        /,
        *args: Any,
        options: StartOptions | None = None,
        **kwargs: Any,
    ) -> AsyncWorkflowHandle[Any]: ...
    async def start_workflow(
        self, workflow: Any, /, *args: object, options: StartOptions | None = None, **kwargs: Any
    ) -> AsyncWorkflowHandle[Any]:
        """See :meth:`Client.start_workflow`."""
        return (await self._start(workflow, args, options, kwargs))[0]

    @overload
    async def execute_workflow(
        self,
        workflow: Callable[[Any, *Args], Awaitable[ResultT]],
        /,
        *args: *Args,
        options: StartOptions | None = None,
        result_timeout: Duration | None = None,
        **kwargs: Any,
    ) -> ResultT: ...
    @overload
    async def execute_workflow(
        self,
        workflow: str | WorkflowDefinition,
        /,
        *args: Any,
        options: StartOptions | None = None,
        result_timeout: Duration | None = None,
        **kwargs: Any,
    ) -> Any: ...
    async def execute_workflow(
        self,
        workflow: Any,
        /,
        *args: object,
        options: StartOptions | None = None,
        result_timeout: Duration | None = None,
        **kwargs: Any,
    ) -> Any:
        """See :meth:`Client.execute_workflow`."""
        waiter_id = str(uuid.uuid4())
        listening = not self._target.sharded
        hub = await self._listener(routing.ONE, channels.DONE, _within(result_timeout)) if listening else None
        token = _listening_since(hub)
        handle, marked = await self._start(workflow, args, options, kwargs, waiter_id)
        return await handle._result(result_timeout, waiter_id, _unmissed(hub, token) if marked else None)

    async def _start(
        self,
        workflow: Any,
        args: tuple[object, ...],
        options: StartOptions | None,
        kwargs: dict[str, Any],
        waiter_id: str | None = None,
    ) -> tuple[AsyncWorkflowHandle[Any], bool]:
        """start_workflow; ``waiter_id``: a start through the batched call marks it waiting for
        the run's result in its own transaction (returns whether it did)."""
        declared = routing.declaration_by_name(self._target, self.app, workflow)
        if declared is routing.ASK:
            declared = await routing.aread_declaration(self._target, workflow)
        name, definition, queue, opts, placement, call = _prepare_start(
            self, workflow, args, options, kwargs, declared
        )
        with tracing.start_span(name) as trace:
            # The caller's trace context, captured at start (docs/observability.md).
            call["traceparent"] = trace.traceparent
            connection = opts.connection
            offloaded = payload_policy.offload_plan(self.payloads, call["input"])
            if offloaded or placement.pinned:  # outside the shared start transaction
                steps = _start_steps(call, placement, self.payloads, offloaded)
                row = await _ain_transaction(self._target, connection, placement.shard, steps)
            elif connection is not None:
                row = await AsyncSqlApi.on_connection(connection).start_workflow(**call)
            else:
                if waiter_id is not None:
                    call = {**call, "result_waiter": waiter_id}
                row = await self._starts.start(call, placement.shard)
            _trace_started(trace, row, name, queue)
        return _start_answer(self, AsyncWorkflowHandle, row, definition, placement, call)

    @overload
    async def signal_with_start(
        self,
        workflow: Callable[[Any, *Args], Awaitable[ResultT]],
        *args: *Args,
        workflow_id: str,
        signal: str,
        signal_payload: Any = None,
        queue: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        task_queue: str | None = None,
        **kwargs: Any,
    ) -> AsyncWorkflowHandle[ResultT]: ...
    @overload
    async def signal_with_start(
        self,
        workflow: str | WorkflowDefinition,
        *args: Any,
        workflow_id: str,
        signal: str,
        signal_payload: Any = None,
        queue: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        task_queue: str | None = None,
        **kwargs: Any,
    ) -> AsyncWorkflowHandle[Any]: ...
    async def signal_with_start(
        self,
        workflow: Any,
        *args: object,
        workflow_id: str,
        signal: str,
        signal_payload: Any = None,
        queue: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        task_queue: str | None = None,
        **kwargs: Any,
    ) -> AsyncWorkflowHandle[Any]:
        """The asyncio twin of :meth:`Client.signal_with_start`."""
        queue = queue_alias(queue, task_queue)
        definition, call = _signal_with_start_call(
            self, workflow, args, kwargs, workflow_id, signal, signal_payload, queue, search_attributes
        )
        flow = _signal_with_start_flow(self, AsyncWorkflowHandle, definition, call)
        return cast("AsyncWorkflowHandle[Any]", await _adrive(flow))

    @overload
    async def update_with_start(
        self,
        workflow: Callable[[Any, *Args], Awaitable[ResultT]],
        *args: *Args,
        workflow_id: str,
        update: str,
        update_arg: Any = None,
        wait: str = "completed",
        timeout: Duration = 30.0,
        update_id: str | None = None,
        queue: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        result_type: Any = Any,
        task_queue: str | None = None,
        **kwargs: Any,
    ) -> tuple[AsyncWorkflowHandle[ResultT], Any]: ...
    @overload
    async def update_with_start(
        self,
        workflow: str | WorkflowDefinition,
        *args: Any,
        workflow_id: str,
        update: str,
        update_arg: Any = None,
        wait: str = "completed",
        timeout: Duration = 30.0,
        update_id: str | None = None,
        queue: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        result_type: Any = Any,
        task_queue: str | None = None,
        **kwargs: Any,
    ) -> tuple[AsyncWorkflowHandle[Any], Any]: ...
    async def update_with_start(
        self,
        workflow: Any,
        *args: object,
        workflow_id: str,
        update: str,
        update_arg: Any = None,
        wait: str = "completed",
        timeout: Duration = 30.0,
        update_id: str | None = None,
        queue: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        result_type: Any = Any,
        task_queue: str | None = None,
        **kwargs: Any,
    ) -> tuple[AsyncWorkflowHandle[Any], Any]:
        """The asyncio twin of :meth:`Client.update_with_start`."""
        queue = queue_alias(queue, task_queue)
        definition, call = _update_with_start_call(
            self, workflow, args, kwargs, workflow_id, update, update_arg, update_id, queue, search_attributes
        )
        options = (wait, timeout, result_type)
        flow = _update_with_start_flow(
            self, AsyncWorkflowHandle, definition, call, update_arg, options, messaging.aupdate_with_start
        )
        return await _adrive(flow)

    async def _by_token(self, task_token: str, call: Any, *args: Any) -> Any:
        """See :meth:`Client._by_token`."""
        return await _afollow(self._target, *_token_call(task_token, call, *args))

    async def complete_activity(self, task_token: str, result: Any = None) -> str:
        """See :meth:`Client.complete_activity`."""
        encoded = _activity_result(self, result)
        try:
            return cast("str", await self._by_token(task_token, sqlapi.complete_activity_by_token, encoded))
        except StaleTask:
            if self.payloads.chain:
                events = await self.get_handle(TaskToken.parse(task_token).execution_id).history()
                if _completed_with(self, task_token, result, events):
                    return "already_completed"
            raise

    async def fail_activity(self, task_token: str, error: BaseException | ActivityFailure) -> str:
        """See :meth:`Client.fail_activity`."""
        report = _failure_report(self, error)
        return cast("str", await self._by_token(task_token, sqlapi.fail_activity_by_token, report))

    async def heartbeat_activity(self, task_token: str, details: Any = None) -> bool:
        """See :meth:`Client.heartbeat_activity`."""
        encoded = _heartbeat_details(self, details)
        return cast("bool", await self._by_token(task_token, sqlapi.heartbeat_activity_by_token, encoded))

    # -- acting on many runs by filter (Client.act_on_workflows) ---------------------------------
    async def cancel_workflows(self, *, reason: str | None = None, **batch: Any) -> dict[str, Any]:
        """Ask every live run a filter selects to cancel, on every shard; see :meth:`act_on_workflows`."""
        return await self.act_on_workflows("cancel", reason=reason, **batch)

    async def terminate_workflows(self, *, reason: str | None = None, **batch: Any) -> dict[str, Any]:
        """Terminate every live run a filter selects, on every shard; see :meth:`act_on_workflows`."""
        return await self.act_on_workflows("terminate", reason=reason, **batch)

    async def pause_workflows(self, *, reason: str | None = None, **batch: Any) -> dict[str, Any]:
        """Pause every RUNNING run a filter selects, on every shard; see :meth:`act_on_workflows`."""
        return await self.act_on_workflows("pause", reason=reason, **batch)

    async def resume_workflows(self, *, reason: str | None = None, **batch: Any) -> dict[str, Any]:
        """Resume every PAUSED run a filter selects, on every shard; see :meth:`act_on_workflows`."""
        return await self.act_on_workflows("resume", reason=reason, **batch)

    async def reset_workflows(
        self,
        *,
        reason: str,
        reset_to: str = "before_time",
        before: Any = None,
        signal_reapply: str = "drop",
        **batch: Any,
    ) -> dict[str, Any]:
        """Reset every RUNNING run a filter selects; see :meth:`Client.reset_workflows`."""
        return await self.act_on_workflows(
            "reset", reason=reason, reset_to=reset_to, before=before, signal_reapply=signal_reapply, **batch
        )

    async def signal_workflows(
        self, signal_name: str, payload_value: Any = None, **batch: Any
    ) -> dict[str, Any]:
        """Signal every live run a filter selects once per batch, on every shard; the payload is
        encoded by this client's codecs and must fit inline (not the offload store)."""
        limit = self.max_payload_bytes
        encoded = payload_policy.batch_written(self.payloads, signal_name, payload_value, limit)
        return await self.act_on_workflows("signal", signal_name=signal_name, payload=encoded, **batch)

    async def act_on_workflows(
        self,
        action: str,
        *,
        state: str | None = None,
        workflow_name: str | None = None,
        search_attributes: list[str] | tuple[str, ...] = (),
        created_after: Any = None,
        created_before: Any = None,
        filter: str | None = None,
        reason: str | None = None,
        signal_name: str | None = None,
        payload: Any = None,
        dry_run: bool = False,
        batch_size: int = BATCH_STEP,
        operator_id: str | None = None,
        batch_id: str | None = None,
        progress: Callable[[int, int], None] | None = None,
        workflow_id: str | None = None,
        failing: bool | None = None,
        reset_to: str = "before_time",
        before: Any = None,
        signal_reapply: str = "drop",
    ) -> dict[str, Any]:
        """``action`` (cancel, terminate, signal, pause, resume, reset) on every run the filters
        select (those of :meth:`list_workflows`, ``workflow_id`` one id's runs, ``failing`` True
        the runs whose workflow task is failing; at least one
        besides ``state``, else InvalidArgument), on every
        shard, ``batch_size`` runs a transaction; a run a rebalance moved is acted on where it
        lives. Answers the summary: matched, acted, already_ended, unchanged, failed (with
        failures), per shard (shards) and the shards not reached (unavailable_shards, status
        partial). ``dry_run``: count and a sample (execution_ids), nothing written.
        ``progress(shard, matched so far)`` after each step (a progress bar)."""
        step = step_keywords(locals())  # (first thing: locals() holds only the arguments)
        target = self._target

        async def on_shard(shard: int, fn: Callable[[AsyncSqlApi], Awaitable[Any]]) -> Any:
            with translated_errors():  # (HR013: ExecutionMigrated)
                return await fn(target.sql(shard))

        async def follow(execution_id: str, fn: Callable[[AsyncSqlApi], Awaitable[Any]]) -> tuple[int, Any]:
            async def attempt(shard: int) -> tuple[int, Any]:
                return shard, await on_shard(shard, fn)

            return cast("tuple[int, Any]", await target.follow(execution_id, attempt))

        return await _adrive(_batch_flow(self, on_shard, follow, action, step, progress))

    async def list_workflows_page(
        self,
        *,
        state: str | None = None,
        workflow_name: str | None = None,
        search_attributes: list[str] | tuple[str, ...] = (),
        created_after: Any = None,
        created_before: Any = None,
        filter: str | None = None,
        workflow_id: str | None = None,
        failing: bool | None = None,
        order: Literal["desc", "asc"] = "desc",
        page_size: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """See :meth:`Client.list_workflows_page`."""
        filters = _list_filters(locals())
        reads = AsyncShardReads(self._target.providers())
        return _page(await reads.list_workflows(**filters), "workflow list")

    async def list_workflows(
        self,
        *,
        state: str | None = None,
        workflow_name: str | None = None,
        search_attributes: list[str] | tuple[str, ...] = (),
        created_after: Any = None,
        created_before: Any = None,
        filter: str | None = None,
        workflow_id: str | None = None,
        failing: bool | None = None,
        order: Literal["desc", "asc"] = "desc",
        page_size: int = 50,
    ) -> AsyncIterator[dict[str, Any]]:
        """See :meth:`Client.list_workflows` (``async for``)."""
        filters, cursor = _list_filters(locals()), None
        while True:
            page = await self.list_workflows_page(**filters, cursor=cursor)
            for row in page:
                yield row
            cursor = _next_cursor(page, "runs")
            if cursor is None:
                return

    async def count_workflows(
        self,
        *,
        group_by: Literal["status", "workflow_name", "all"] = "status",
        state: str | None = None,
        workflow_name: str | None = None,
        search_attributes: list[str] | tuple[str, ...] = (),
        created_after: Any = None,
        created_before: Any = None,
        filter: str | None = None,
        workflow_id: str | None = None,
        failing: bool | None = None,
        limit: int | None = None,
    ) -> Page:
        """See :meth:`Client.count_workflows`."""
        filters = _list_filters(locals())
        reads = AsyncShardReads(self._target.providers())
        return _page(await reads.count_executions(**filters), "workflow count")

    @overload
    def get_handle(
        self,
        execution_id: str | None,
        workflow: Callable[..., Awaitable[ResultT]],
        *,
        workflow_id: str | None = None,
    ) -> AsyncWorkflowHandle[ResultT]: ...
    @overload
    def get_handle(
        self,
        execution_id: None = None,
        *,
        workflow: Callable[..., Awaitable[ResultT]],
        workflow_id: str,
    ) -> AsyncWorkflowHandle[ResultT]: ...
    @overload
    def get_handle(
        self,
        execution_id: str | None = None,
        workflow: str | WorkflowDefinition | None = None,
        *,
        workflow_id: str | None = None,
    ) -> AsyncWorkflowHandle[Any]: ...
    def get_handle(
        self, execution_id: str | None = None, workflow: Any = None, *, workflow_id: str | None = None
    ) -> AsyncWorkflowHandle[Any]:
        """See :meth:`Client.get_handle`."""
        return cast(
            "AsyncWorkflowHandle[Any]",
            _handle_of(AsyncWorkflowHandle, self, execution_id, workflow, workflow_id),
        )
