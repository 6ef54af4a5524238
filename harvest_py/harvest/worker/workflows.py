"""Running one workflow task: fetch the unseen history, step the workflow, commit its commands.

A sticky cache keeps recently stepped runs in memory, so a warm worker fetches
and feeds only the events after the ones it has seen; a miss (or any doubt)
replays the whole history on a fresh run. Both paths give the same commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable
from time import perf_counter
from typing import TYPE_CHECKING, Any, cast

from harvest.core import payload
from harvest.core.codecs import undecodable_path
from harvest.core.errors import (
    HarvestError,
    InvalidArgument,
    NonDeterminismError,
    PayloadError,
    PayloadTooLarge,
    ShardUnavailable,
    StaleTask,
    UnknownWorkflow,
    failure_traceback,
)
from harvest.core.ids import shard_of
from harvest.core.statuses import LIVE_STATUSES
from harvest.db.connection import DatabaseError, error_line, redact
from harvest.db.resend import RefusedOnResend
from harvest.runtime import WorkflowRun
from harvest.runtime.messages import UnknownHandler
from harvest.shard.children import place_child
from harvest.shard.router import ShardRouter
from harvest.telemetry import tracing
from harvest.telemetry.logs import LOG_FIELDS, log_fields
from harvest.worker.completions import refusal
from harvest.worker.lanes import lane_of
from harvest.worker.lease_keeper import LeaseKeeper

if TYPE_CHECKING:
    from harvest.db.sqlapi import OpenClaim
    from harvest.worker.worker import Worker

log = logging.getLogger("harvest.worker")

# How many runs' bloat warnings a worker remembers (so each run warns once, in bounded memory).
_BLOAT_WARNED_MAX = 10_000
# A workflow task that fails on the worker side (non-determinism, a bug) is retried after this.
WORKFLOW_TASK_RETRY_SECS = 5.0


# The sticky cache's estimate of a cached run: this fixed cost (the run's loop, task, context,
# coroutine frame and bookkeeping: about 12.7 KB traced per cached run of the canonical
# workflow, bench/cache_memory.py) plus the payloads fed to it (WorkflowRun.payload_bytes).
CACHED_RUN_BASE_BYTES = 16 * 1024


def cached_run_bytes(run: WorkflowRun) -> int:
    """What the sticky cache counts for ``run`` against its byte bound."""
    return CACHED_RUN_BASE_BYTES + run.payload_bytes


# How long a workflow task waits for its run while another handler of this worker has it out
# (StickyCache.wait_back) before it replays the history instead. A run has one workflow task at a
# time, so that handler's decision (or a decision ahead's result) has already committed: what is
# left is hearing the answer and a few steps of the loop, a few ms, tens of ms on a loaded machine.
# The bound is for what cannot be foreseen (an answer whose connection failed, sent again, or a
# task claimed again after a lost lease while its first handler still runs): ten times the
# longest wait seen under load, and well under a workflow task's lease (30 s by default), which
# nothing renews while the task waits (docs/performance.md, "In-flight cache misses").
STICKY_WAIT_SECS = 0.5


class StickyCache:
    """LRU of execution id -> WorkflowRun, bounded in runs (``capacity``) and in the estimated
    bytes of the runs it keeps (``max_bytes``; None: no byte bound): past either, the least
    recently used runs are closed and dropped. A run over ``max_bytes`` by itself is not kept
    (and evicts nobody).

    It also knows which runs are out in a handler of this worker: a take with a ``holder`` (the
    task taking it, hit or miss) marks the run held until that holder's ``release``, which
    every such take must end in (a finally), whether the run was put back or dropped. Another
    workflow task of the run waits for it (``wait_back``) rather than replaying the history
    while the holder's commit is still being heard of."""

    def __init__(self, capacity: int, max_bytes: int | None = None):
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._runs: OrderedDict[str, WorkflowRun] = OrderedDict()
        self._sizes: dict[str, int] = {}  # each cached run's estimate when it was put
        self._out: dict[str, object] = {}  # execution id -> the holder that has its run out
        self._back: dict[str, asyncio.Future[None]] = {}  # a run's waiters' wake-up, made by the first
        self.bytes = 0  # their sum
        self.hits = 0
        self.misses = 0
        self.evictions = 0  # runs dropped for either bound
        self.waits = 0  # takes that waited for a run out in another handler (wait_back)
        self.wait_timeouts = 0  # of those, waits that ran out (STICKY_WAIT_SECS): a replay

    def _forget(self, execution_id: str) -> WorkflowRun | None:
        run = self._runs.pop(execution_id, None)
        if run is not None:
            self.bytes -= self._sizes.pop(execution_id)
        return run

    def take(self, execution_id: str, holder: object = None) -> WorkflowRun | None:
        """The cached run, taken out (None: a miss). With ``holder``, the run is out in that
        holder's hands, hit or miss, until ``release(execution_id, holder)``."""
        run = self._forget(execution_id)
        if run is None:
            self.misses += 1
        else:
            self.hits += 1
        if holder is not None and self.capacity > 0:  # (no cache: no run comes back to wait for)
            self._out[execution_id] = holder
        return run

    def take_settled(self, execution_id: str, holder: object) -> WorkflowRun | None:
        """The cached run if it has read its whole history (WorkflowRun.settled), taken out
        and held by ``holder`` (see ``take``). Never waits: a run out in another handler is
        None here (so a decision ahead never waits on a workflow task that may wait on it)."""
        run = self._runs.get(execution_id)
        if run is None or not run.settled:
            return None
        self._out[execution_id] = holder
        return self._forget(execution_id)

    def held(self, execution_id: str) -> bool:
        """Whether a handler of this worker has the run out and it is not back."""
        return execution_id in self._out and execution_id not in self._runs

    async def wait_back(self, execution_id: str, timeout: float) -> None:
        """Wait while another handler has the run out (``held``): until it puts the run back
        or releases it (dropped: then return at once, to replay), or ``timeout`` seconds.
        Returns in the step that saw the run back, so a ``take`` right after gets it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self.waits += 1
        while self.held(execution_id):
            left = deadline - loop.time()
            if left <= 0:
                self.wait_timeouts += 1
                return
            back = self._back.get(execution_id)
            if back is None:
                back = self._back[execution_id] = loop.create_future()
            # (asyncio.wait leaves the shared future alone on a timeout or a cancellation.)
            await asyncio.wait((back,), timeout=left)

    def _wake(self, execution_id: str) -> None:
        back = self._back.pop(execution_id, None)
        if back is not None and not back.done():
            back.set_result(None)

    def release(self, execution_id: str, holder: object) -> None:
        """``holder`` is done with the run (put back or dropped): wake its waiters. A holder
        whose waiter gave up and took the run itself releases nothing of the newer holder's."""
        if self._out.get(execution_id) is holder:
            del self._out[execution_id]
            if self._back:
                self._wake(execution_id)

    def peek(self, execution_id: str) -> WorkflowRun | None:
        """The cached run, left in place (queries read it; see worker/queries.py)."""
        return self._runs.get(execution_id)

    def put(self, execution_id: str, run: WorkflowRun) -> None:
        if self._back:
            self._wake(execution_id)  # (its waiters take it in a later step: the put comes first)
        if self.capacity <= 0:
            run.close()
            return
        replaced = self._forget(execution_id)
        if replaced is not None and replaced is not run:
            if replaced.last_event_id > run.last_event_id:
                # Two tasks of one run raced (a waiter gave up and replayed): the run that has
                # read further in the history stays, whichever was put last.
                run, replaced = replaced, run
            replaced.close()
        size, limit = cached_run_bytes(run), self.max_bytes
        if limit is not None and size > limit:
            self.evictions += 1  # over the bound alone: not kept, and nobody else evicted for it
            run.close()
            return
        self._runs[execution_id] = run
        self._sizes[execution_id] = size
        self.bytes += size
        while len(self._runs) > self.capacity or (limit is not None and self.bytes > limit):
            evicted_id, evicted = self._runs.popitem(last=False)
            self.bytes -= self._sizes.pop(evicted_id)
            self.evictions += 1
            evicted.close()

    def drop(self, execution_id: str) -> None:
        """Forget a cached run (owner mode: its partition was taken by another worker)."""
        run = self._forget(execution_id)
        if run is not None:
            run.close()

    def ids(self) -> set[str]:
        return set(self._runs)

    def __len__(self) -> int:
        return len(self._runs)


# The payloads of a decision's commands that the database checks against its payload
# limit (functions/decide.sql), and how its HR008 message names each. A child's input
# is not here: the database turns one over the limit into a typed START_FAILED the parent can
# catch (_CHILD_INPUT: only one it cannot store at all is refused here).
_COMMAND_PAYLOADS: dict[str, tuple[str, str]] = {
    "schedule_activity": ("input", "the input of activity {name} (command {seq})"),
    "record_marker": ("value", "the value of marker {kind} (command {seq})"),
    "cancel_workflow": ("details", "the cancellation details of the workflow"),
    "signal_external_workflow": ("payload", "the payload of signal {signal_name}"),
    "cancel_external_workflow": ("reason", "the reason of an external cancel"),
    "continue_as_new": ("input", "the continue-as-new input of workflow {workflow}"),
    "complete_workflow": ("result", "the result of workflow {workflow}"),
    "fail_workflow": ("failure", "the failure of workflow {workflow}"),
}
_CHILD_INPUT = "the input of child workflow {name} (command {seq})"


def payload_failure(exc: PayloadTooLarge | PayloadError, limit: int | None) -> dict[str, Any]:
    """The non-retryable ``PayloadTooLarge`` failure for ``exc``, itself small enough to store
    (a ``PayloadError`` for a payload jsonb cannot store: a string holding U+0000).

    Under a small limit it loses, in turn, the message's hint, its details and its message
    (the smallest, ``{error_type, non_retryable}``, is 56 bytes).
    """
    if isinstance(exc, PayloadError):
        return {"error_type": "PayloadError", "message": str(exc), "non_retryable": True, "details": None}
    failure: dict[str, Any] = {
        "error_type": "PayloadTooLarge",
        "message": str(exc),
        "non_retryable": True,
        "details": {"what": exc.what, "bytes": exc.bytes, "limit": exc.limit},
    }
    if limit is None:
        return failure
    if payload.payload_size(failure) > limit and exc.what is not None:
        failure["message"] = f"{exc.what} is {exc.bytes} bytes, over the payload limit of {exc.limit} bytes"
    if payload.payload_size(failure) > limit:
        del failure["details"]
    while payload.payload_size(failure) > limit and failure.get("message"):
        failure["message"] = failure["message"][: len(failure["message"]) // 2]
    if payload.payload_size(failure) > limit:
        failure.pop("message", None)
    return failure


def _oversized(
    command: dict[str, Any], limit: int, workflow_name: str, child: bool = False
) -> PayloadTooLarge | PayloadError | None:
    """The database's refusal of ``command`` for a payload over ``limit``, or None."""
    kind = command["type"]
    if kind == "start_child_workflow":
        # A string jsonb cannot store (U+0000) was refused with the whole decision (22P05), before
        # _start_child could make it a failed start: the task crashed its handler at every lease.
        try:
            payload.stored_size(command.get("input"))
        except ValueError:
            try:
                what = _CHILD_INPUT.format(name=command.get("workflow_name"), seq=command.get("seq"))
                payload.check_storable(command.get("input"), what)
            except PayloadError as exc:
                return exc
        return None
    if kind == "complete_update":
        field = "failure" if "failure" in command else "result"
    elif kind in _COMMAND_PAYLOADS:
        field = _COMMAND_PAYLOADS[kind][0]
    else:
        return None
    if kind == "continue_as_new":  # its carried signals, encoded again (a codec may have grown one)
        for signal in command.get("signals") or ():
            try:
                what = f"the payload of signal {signal.get('name')} carried over by continue-as-new"
                payload.check_size(signal.get("payload"), what, limit)
            except (PayloadTooLarge, PayloadError) as exc:
                return exc
    value = command.get(field)
    try:
        if payload.stored_size(value) <= limit:
            return None  # nearly always: what the refusal would name is worked out for a refusal only
    except ValueError:
        pass  # a string holding U+0000, which the database refuses: check_size names it below
    if kind == "complete_update":
        what = f"the {field} of update {command.get('update_id')}"
    else:
        what = _COMMAND_PAYLOADS[kind][1].format(
            name=command.get("name"),
            seq=command.get("seq"),
            kind=command.get("kind"),
            workflow=workflow_name,
            signal_name=command.get("signal_name"),
        )
        if child and kind in ("complete_workflow", "fail_workflow", "cancel_workflow"):
            what += " (a child's end is never offloaded: its parent's history holds it)"
    try:
        payload.check_size(value, what, limit)
    except (PayloadTooLarge, PayloadError) as exc:
        return exc
    return None


def encoded_commands(
    worker: Worker, task: dict[str, Any], execution_id: str, run: WorkflowRun, commands: list[dict[str, Any]]
) -> Awaitable[list[dict[str, Any]]]:
    """The one place a worker encodes a decision's payloads (codecs, offload; docs/payloads.md),
    on the task's lane: a workflow task's decision and one decided ahead. Callers skip it while
    ``worker.payloads.active`` is false (the commands as they are, no coroutine made)."""
    return worker.payloads.encode_commands(lane_of(task).sql, execution_id, commands, child=run.is_child)


def payloads_fit(commands: list[dict[str, Any]], limit: int | None, workflow_name: str) -> bool:
    """Whether the database would take every payload of ``commands`` (see fit_payloads)."""
    if limit is None:
        return True
    for command in commands:  # noqa: SIM110 (all() of a generator is what this avoids)
        if _oversized(command, limit, workflow_name) is not None:
            return False
    return True


def fit_payloads(
    commands: list[dict[str, Any]],
    limit: int | None,
    workflow_name: str,
    execution_id: str = "",
    child: bool = False,
) -> list[dict[str, Any]]:
    """The decision to commit: ``commands`` when every payload fits under ``limit``.

    The database would refuse a decision holding a payload over the limit on every
    attempt, so the workflow task would retry forever. Instead a failure's traceback goes
    first (``fail_workflow``'s, an update's, a local activity's or a DAG task's recorded
    failure), as in an activity attempt's report (activities._report_failure): it is extra; an
    update whose result (or failure) is still too large fails, typed, and the run goes on; any
    other payload over the limit ends the run: the decision becomes one ``fail_workflow`` with
    the non-retryable ``PayloadTooLarge`` (what, size, limit), and nothing else of it is
    written.
    """
    if payloads_fit(commands, limit, workflow_name):
        return commands
    fitted = []
    for command in commands:
        exc = _oversized(command, cast(int, limit), workflow_name, child)  # payloads_fit is True without one
        untraced = _without_traceback(command) if exc is not None else None
        if untraced is not None:
            command = untraced
            exc = _oversized(command, cast(int, limit), workflow_name, child)
        if exc is not None and command["type"] == "complete_update":
            log.warning("workflow %s (%s): update fails: %s", execution_id, workflow_name, exc)
            command = {k: v for k, v in command.items() if k not in ("result", "failure")}
            command["failure"] = payload_failure(exc, limit)
        elif exc is not None:
            log.error("workflow %s (%s) fails: %s", execution_id, workflow_name, exc)
            return [{"type": "fail_workflow", "failure": payload_failure(exc, limit)}]
        fitted.append(command)
    return fitted


def _without_traceback(command: dict[str, Any]) -> dict[str, Any] | None:
    """``command`` without the traceback its failure records (a workflow's, an update's, a local
    activity's outcome in its marker), or None when it records none."""
    if command["type"] == "record_marker" and command.get("kind") in payload.OUTCOME_MARKERS:
        outcome = command.get("value")
        if not isinstance(outcome, dict):
            return None
        failure = outcome.get("failure")
        untraced = _without_traceback({"type": "", "failure": failure})
        return None if untraced is None else {**command, "value": {**outcome, "failure": untraced["failure"]}}
    failure = command.get("failure")
    if not isinstance(failure, dict) or failure.get("traceback") is None:
        return None
    return {**command, "failure": {k: v for k, v in failure.items() if k != "traceback"}}


def place_children(worker: Worker, execution_id: str, commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``commands`` with each placed child's ``placement`` resolved to its shard (``"shard"``,
    harvest/shard/children.py); a child placed on the parent's shard is today's command.
    Without a relay pump (one database) the router is the parent's shard alone."""
    if not any("placement" in c for c in commands):
        return commands
    parent_shard = shard_of(execution_id)
    pump = worker.relay_pump
    router = pump.pools.router if pump is not None else ShardRouter.single(parent_shard)
    pooled = pump.pools.shards if pump is not None else ()
    placed = []
    for command in commands:
        if "placement" in command:
            shard = place_child(router, pooled, parent_shard, execution_id, command)
            command = {k: v for k, v in command.items() if k != "placement"}
            if shard != parent_shard:
                command["shard"] = shard
        placed.append(command)
    return placed


def _trace_seed(started: dict[str, Any]) -> dict[str, Any]:
    """Where a run's spans go (its WorkflowStarted; harvest/telemetry/tracing.py): under the
    span that started it (``traceparent``: a caller's start, a parent's child.start, a
    predecessor's continue_as_new) when there was one, else in the trace of the root of its
    family of children (written at the child's start, or, in histories from before, its parent)."""
    return {
        "parent_id": started.get("trace_root") or started.get("parent_id"),
        "started_by": started.get("traceparent"),
    }


def _event(row: dict[str, Any]) -> dict[str, Any]:
    return {"event_id": row["event_id"], "event_type": row["event_type"], "event_data": row["event_data"]}


async def _decoded(
    worker: Worker, task: dict[str, Any], events: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The events a run reads, with offloaded payloads resolved and codec envelopes decoded
    (docs/payloads.md): the one place a worker decodes a history. A payload it cannot decode
    fails the workflow task with a ``PayloadError`` naming the event (docs/failures.md)."""
    sql, read = lane_of(task).sql, [_event(e) for e in events]
    try:
        return cast("list[dict[str, Any]]", await worker.payloads.decode(sql, read))
    except (DatabaseError, HarvestError) as exc:
        if type(exc) is not PayloadError:
            raise  # (the store's database, typed: a missing key, a bound: as they were)
        raise PayloadError(f"{await _undecoded_event(worker, sql, read)} cannot be decoded: {exc}") from exc
    except Exception as exc:  # a codec's own error
        where = await _undecoded_event(worker, sql, read)
        raise PayloadError(f"{where} cannot be decoded: {type(exc).__name__}: {exc}") from exc


async def _undecoded_event(worker: Worker, sql: Any, events: list[dict[str, Any]]) -> str:
    """Which of ``events`` a decode failed on (each decoded again, alone: a failure's cost)."""
    for event in events:
        named = f"event {event['event_id']} ({event['event_type']}) of the history"
        where = undecodable_path(event["event_data"], "event_data")
        if where is not None:
            return f"{named}, at {where},"
        try:
            await worker.payloads.decode(sql, event)
        except DatabaseError:
            break
        except Exception:
            return named
    return "the history"


def _carried_after(task: dict[str, Any], last_event_id: int) -> list[dict[str, Any]] | None:
    """The events after ``last_event_id`` that the claim or hand-off carried, or None.

    A task carries every event after its worker's last decision (new_events_after);
    our run may have read some of them already: the ones our own commit wrote
    (WorkflowRun.recorded).
    """
    events, since = task.get("new_events"), task.get("new_events_after")
    if events is None or since is None or since > last_event_id:
        return None
    skip = last_event_id - since
    if skip > len(events) or (skip < len(events) and events[skip]["event_id"] != last_event_id + 1):
        return None
    return cast("list[dict[str, Any]] | None", events[skip:])


async def run_workflow_task(worker: Worker, task: dict[str, Any]) -> None:
    execution_id = str(task["execution_id"])
    cache = worker.cache
    # Every line the workflow code logs carries the run (harvest/telemetry/logs.py).
    token = log_fields(
        execution_id=execution_id, workflow_id=task["workflow_id"], workflow=task["workflow_name"]
    )
    try:
        if cache.held(execution_id) and "_open_claim" not in task:
            # The handler of the run's previous task (or a decision ahead) has its run out: its
            # commit is in (a run has one workflow task at a time) but not yet heard of. Wait
            # for it to put the run back rather than replay the history (docs/internals.md,
            # "The sticky cache and its handlers"). (A claim that decides is made with nothing
            # in flight, so it does not find its run held; were it to, it would not keep its
            # transaction open to wait.)
            await cache.wait_back(execution_id, STICKY_WAIT_SECS)
        run = cache.take(execution_id, task)
        if not tracing.ACTIVE:
            return await _run_workflow_task(worker, task, run)
        with _task_span(task, execution_id, run):
            return await _run_workflow_task(worker, task, run)
    finally:
        # The run is back in the cache (its put woke a waiter already) or dropped: wake a task
        # of the run waiting for it, to replay. (Nothing, if this one never took it.)
        cache.release(execution_id, task)
        LOG_FIELDS.reset(token)


def _task_span(task: dict[str, Any], execution_id: str, cached: WorkflowRun | None) -> Any:
    """The workflow task's span: in the run's trace, or a new root for a whole replay."""
    fresh = task.get("new_events_after") == 0 and task.get("new_events")
    attributes = {"harvest.workflow": task["workflow_name"], "harvest.queue": task["queue"]}
    if cached is None and not fresh:  # a replay of the whole history: a new root, linked to the run
        attributes["harvest.replay"] = True
        return tracing.span(
            "harvest.workflow.execute", execution_id=execution_id, root=True, attributes=attributes
        )
    seed = _trace_seed(task["new_events"][0]["event_data"]) if cached is None else cached.trace_seed or {}
    return tracing.span("harvest.workflow.task", execution_id=execution_id, attributes=attributes, **seed)


async def _run_workflow_task(worker: Worker, task: dict[str, Any], cached: WorkflowRun | None) -> None:
    # A task still running after a third of its lease (a local activity, a long replay)
    # keeps the lease until it ends, so no other worker takes it and runs it again.
    keeper = LeaseKeeper(lane_of(task).sql, task["task_id"], task["fencing_token"], worker.workflow_lease)
    try:
        await _decide_workflow_task(worker, task, cached)
    finally:
        keeper.stop()


async def _decide_workflow_task(worker: Worker, task: dict[str, Any], run: WorkflowRun | None) -> None:
    """Decide ``task`` on ``run``, its run taken from the cache (None: a miss), which ends put
    back or closed."""
    execution_id = str(task["execution_id"])
    task_id, token = task["task_id"], task["fencing_token"]
    started = perf_counter()
    replayed = False
    unseen = task.get("new_events")  # the events new to this task, when the claim carried them
    try:
        if run is not None:
            events = _carried_after(task, run.last_event_id)  # we decided it last
            if events is None:
                events = await lane_of(task).sql.get_history(execution_id, run.last_event_id)
            if execution_id in worker.plain_runs.runs:  # would a decision ahead have stood? (plain_runs.py)
                worker.plain_runs.observe(execution_id, events)
            tracing.link_signals(events)  # the new events: their senders' spans
            try:
                activation = await run.advance(await _decoded(worker, task, events))
            except NonDeterminismError:
                raise
            except HarvestError:
                # The cached run disagrees with the history (another worker moved it on,
                # or our last commit was refused): start over from the whole history.
                run.close()
                run = None
        if run is None:
            if task["workflow_name"] not in worker.app.workflows:
                # Typed: after a bounded number of these the run fails (fail_workflow_task).
                raise UnknownWorkflow(
                    f"this worker's App has no workflow {task['workflow_name']!r} "
                    f"(registered: {', '.join(sorted(worker.app.workflows)) or 'none'})",
                    task["workflow_name"],
                    task["queue"],
                    sorted(worker.app.workflows),
                )
            definition = worker.app.workflow(task["workflow_name"])
            run = WorkflowRun(
                worker.app,
                definition,
                execution_id,
                task["workflow_id"],
                task["queue"],
                continue_as_new_threshold=worker.continue_as_new_threshold,
                clock=worker.clock,
                inputs_encoded=bool(worker.payloads.chain.codecs),
            )
            if task.get("new_events") is not None and task.get("new_events_after") == 0:
                events = task["new_events"]  # a run nobody decided yet: the claim carried it all
                tracing.link_signals(events)
            else:
                events = await lane_of(task).sql.get_history(execution_id, 0)
                replayed = True
                if tracing.ACTIVE and unseen is None:
                    # (the run was decided last by another worker, so the claim carried no
                    # events: what is new to this task, whose senders it links, is the history's)
                    since = task.get("new_events_after") or 0
                    unseen = [e for e in events if e["event_id"] > since]
            if events and events[0]["event_type"] == "WorkflowStarted":
                run.trace_seed = _trace_seed(events[0]["event_data"])
                if replayed:  # the replay's new root span links to the run's trace
                    tracing.link_run(execution_id, **run.trace_seed)
            activation = await run.advance(await _decoded(worker, task, events))
    except Exception as exc:
        if run is not None:
            run.close()
        kind = type(exc).__name__
        worker.metrics.workflow_task_failure(task["workflow_name"], kind)
        tracing.failed(kind)
        # The failure is recorded in the run's history, every reader's: a database error (its
        # history not read, a payload not fetched) goes as its first line and SQLSTATE, redacted,
        # with the stack but not the text, whose DETAIL and CONTEXT quote values. Any other
        # error is the workflow's code or codec (theirs, kept whole) or Harvest's own.
        database = isinstance(exc, DatabaseError)
        message = redact(error_line(exc)) if database else str(exc)
        log.error(  # (the message as recorded, a password in it masked: security.md)
            "workflow task for %s (%s) failed: %s: %s",
            execution_id,
            task["workflow_name"],
            kind,
            redact(message),
        )
        if isinstance(exc, (UnknownWorkflow, UnknownHandler)):
            # (UnknownHandler: its replay lacks an update handler the run ran, runtime/messages.py)
            failure = {
                "error_type": kind if isinstance(exc, UnknownWorkflow) else exc.error_type,
                "message": message,
                "non_retryable": False,
                "details": {"worker_id": worker.worker_id}
                | ({"worker_registered": exc.registered} if isinstance(exc, UnknownWorkflow) else {}),
            }
            # Its retry is not ours to time (we lack the workflow): no read of the next due time
            # arms a wake-up at it, so a worker that has it, polling, is not beaten to every claim.
            task["_nothing_due_later"] = True  # (read by Worker._finished)
        else:
            failure = {
                "error_type": kind,
                "message": message,
                "non_retryable": False,
                "details": None,
                # (a database error's line redacted, as the message: failure_traceback)
                "traceback": failure_traceback(exc),
            }
            try:  # (a payload: encoded as an activity failure's is, docs/payloads.md)
                failure = await worker.payloads.encode_failure(lane_of(task).sql, execution_id, failure)
            except Exception:  # (the codec itself failing: the type and message still go)
                failure = {**failure, "traceback": None}
        await commit_open_claim(task)  # (its row lock would hold the call up)
        with contextlib.suppress(StaleTask):
            await lane_of(task).sql.fail_workflow_task(task_id, token, failure, WORKFLOW_TASK_RETRY_SECS)
        return

    unknown = unknown_updates(activation.commands)
    if unknown and await _hand_back(worker, task, unknown):
        run.close()  # (it holds the step the history does not: the next claimer decides it)
        return

    try:
        # (no codec nor offload: the commands as they are, without the coroutine)
        commands = (
            await encoded_commands(worker, task, execution_id, run, activation.commands)
            if worker.payloads.active
            else activation.commands
        )
    except Exception:
        run.close()
        raise
    commands = fit_payloads(
        commands, worker.max_payload_bytes, task["workflow_name"], execution_id, run.is_child
    )
    try:
        commands = place_children(worker, execution_id, commands)
    except (ShardUnavailable, InvalidArgument) as exc:
        # Nothing is recorded: the decision is made again (and placed again, the same
        # way) after the retry delay, never placed on another shard instead.
        run.close()
        log.error("workflow task for %s (%s) not committed: %s", execution_id, task["workflow_name"], exc)
        failure = {
            "error_type": type(exc).__name__,
            "message": str(exc),
            "non_retryable": False,
            "details": None,
        }
        await commit_open_claim(task)
        with contextlib.suppress(StaleTask):
            await worker.sql.fail_workflow_task(task_id, token, failure, WORKFLOW_TASK_RETRY_SECS)
        return
    if tracing.ACTIVE and replayed:
        # The replay is its own root; the decision's steps still belong to the run's trace,
        # and so do the links to the senders of what is new to this task (only that: the
        # replayed messages were linked by the tasks that read them first), as a task that
        # found its run cached links them (docs/observability.md).
        with tracing.span(
            "harvest.workflow.task",
            execution_id=execution_id,
            attributes={"harvest.workflow": task["workflow_name"], "harvest.after_replay": True},
            **(run.trace_seed or {}),
        ):
            tracing.link_signals(unseen or ())
            commands = traced_commands(commands, execution_id)
    elif tracing.ACTIVE:
        commands = traced_commands(commands, execution_id)
    # Activities this decision schedules may come back leased to us (claim.sql, "Hand-off").
    grant = worker.reserve_slots(sum(1 for c in commands if c["type"] == "schedule_activity"), task)
    try:
        # Group commit (worker/completions.py): decisions made together share a transaction.
        try:
            decision = (
                task_id,
                token,
                activation.through,
                with_hold(commands, activation.hold, activation.awaiting),
                grant.slots,
                task.get("owner_epoch"),
            )
            outcome = await decide_in_claim(worker, task, decision)
            if outcome is None:
                outcome = await lane_of(task).decisions.complete(*decision)
        except ClaimRolledBack as exc:
            # Nothing of the claim or the decision was written: the task is pending again,
            # and the worker claims it again the ordinary way.
            log.warning(
                "workflow task for %s: its claim and decision were rolled back: %s", execution_id, exc
            )
            run.close()
            worker.claim_decision_rolled_back()
            return
        except PayloadTooLarge as exc:
            # The server's limit is stricter than ours (it is the authority): the same
            # decision would be refused on every attempt, so the run fails, typed.
            log.error(
                "workflow %s (%s) fails: the database refused its decision: %s",
                execution_id,
                task["workflow_name"],
                exc,
            )
            commands = [{"type": "fail_workflow", "failure": payload_failure(exc, exc.limit)}]
            outcome = await lane_of(task).decisions.complete(
                task_id, token, activation.through, commands, 0, task.get("owner_epoch")
            )
    except StaleTask as stale:
        # A lost lease, or (owner mode) a partition another worker acquired: nothing of
        # the decision was written, and the run's cached state goes with it. (Refused when
        # sent again after its connection failed, db/resend.py: the first send had most
        # likely committed it, and the cached run is dropped all the same.)
        log.log(
            logging.INFO if isinstance(stale, RefusedOnResend) else logging.WARNING,
            "workflow task for %s was refused: %s",
            execution_id,
            stale,
        )
        if task.get("owner_epoch") is not None:
            lane_of(task).owners.forget_run(execution_id)
        run.close()
        return
    except Exception:
        run.close()
        raise
    finally:
        worker.release_slots(grant)
    if outcome["execution_status"] in LIVE_STATUSES and closing_status(commands, "RUNNING") is not None:
        # The database refused the close: a signal or an update reached the run while this task
        # ran, which the close would have dropped (functions/decide.sql, _apply_decision). Nothing
        # of the decision was written; the run's next task, queued already, replays it with them.
        log.info(
            "workflow %s (%s): its end waits: a message reached it while its last task ran; its "
            "next task reads it",
            execution_id,
            task["workflow_name"],
        )
        worker.metrics.workflow_task(task["workflow_name"], perf_counter() - started, replayed)
        run.close()
        return
    if makes_nothing_due_later(commands):
        task["_nothing_due_later"] = True  # (read by Worker._finished)
    for handed in outcome["handed"]:
        worker.run_handed(handed, task)
    warn_on_bloat(worker, execution_id, task["workflow_name"], outcome["last_event_id"])
    worker.metrics.workflow_task(task["workflow_name"], perf_counter() - started, replayed)
    finished = (
        activation.finished
        or outcome["execution_status"] not in LIVE_STATUSES
        or any(c["type"] in ("complete_workflow", "fail_workflow") for c in commands)
    )
    if finished:
        status = closing_status(commands, outcome["execution_status"])
        # A run terminated or timed out meanwhile was closed by no decision: the placed
        # sampler counts it (harvest.list_forced_closes), not this worker.
        if status is not None and status not in ("TERMINATED", "TIMED_OUT"):
            worker.metrics.workflow_closed(task["workflow_name"], status, outcome["last_event_id"])
        run.close()
    else:
        run.recorded(outcome["last_event_id"])  # our own events need not be read back
        worker.cache.put(execution_id, run)


def unknown_updates(commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The failures of the accepted updates this decision completes ``UnknownUpdate``: no handler
    on this worker's App nor registered by the run (runtime/messages.py, end_of_step)."""
    return [
        c["failure"]
        for c in commands
        if c["type"] == "complete_update" and (c.get("failure") or {}).get("error_type") == "UnknownUpdate"
    ]


async def _hand_back(worker: Worker, task: dict[str, Any], unknown: list[dict[str, Any]]) -> bool:
    """Hand the task back, nothing written, while a live worker of its queue has not tried it:
    in a rolling deploy a newer worker may have the handler (docs/operations.md, "Rolling
    deploys"). False once every live one has: the decision, UnknownUpdate and all, is recorded."""
    failure = {
        "error_type": "UnknownUpdate",
        "message": "; ".join(str(f.get("message")) for f in unknown),
        "non_retryable": False,
        "details": {"worker_id": worker.worker_id},
    }
    await commit_open_claim(task)  # (its row lock would hold the call up)
    try:
        found = await lane_of(task).sql.release_workflow_task(
            task["task_id"], task["fencing_token"], failure, WORKFLOW_TASK_RETRY_SECS
        )
    except StaleTask:
        return True  # (the lease is lost: nothing of ours may be written; the next claimer decides)
    if not (found and found["handed_back"]):
        return False
    log.info(
        "workflow task for %s (%s) handed back: %s",
        task["execution_id"],
        task["workflow_name"],
        failure["message"],
    )
    worker.metrics.workflow_task_failure(task["workflow_name"], "UnknownUpdate")
    # Its retry is not ours to time (as an unknown workflow's, above).
    task["_nothing_due_later"] = True  # (read by Worker._finished)
    return True


# Commands whose decision takes start locks (functions/decide.sql, _starts_runs).
_STARTS_RUNS = frozenset(("continue_as_new", "start_child_workflow"))


def _commits_claim_first(command: dict[str, Any]) -> bool:
    """Whether a decision with ``command`` must not ride in its claim's transaction: the claim
    commits first and the decision goes the ordinary way. A start's locks come before any row
    lock (docs/internals.md, "Lock order") and the claim holds the task's. A local activity's
    marker records work already done outside the database: a claim rolled back with it (a lock
    wait past the claim's lock_timeout) would make the task run the activity again."""
    if command["type"] in _STARTS_RUNS:
        return True
    return command["type"] == "record_marker" and command.get("kind") == "local_activity"


class ClaimRolledBack(Exception):
    """A decision made in its claim's transaction failed with it (the claim is undone)."""


def _take_open_claim(task: dict[str, Any]) -> OpenClaim | None:
    """The open claim ``task`` carries (worker.py, _claim_deciding), now this caller's to end,
    its window's timer cancelled; None when it has none."""
    claim: OpenClaim | None = task.pop("_open_claim", None)
    if claim is not None:
        task.pop("_window").cancel()
    return claim


async def commit_open_claim(task: dict[str, Any]) -> None:
    """Commit the claim of ``task`` if its transaction is still open (worker.py,
    _claim_deciding): before any other call that locks the task's row."""
    claim = _take_open_claim(task)
    if claim is not None:
        await claim.commit()


async def decide_in_claim(
    worker: Worker, task: dict[str, Any], decision: tuple[Any, ...]
) -> dict[str, Any] | None:
    """Commit ``decision`` in its claim's transaction when that is still open (worker.py,
    _claim_deciding): the decision's row, or None (commit it the ordinary way). Raises the
    item's refusal as the batch would (completions.refusal), or ClaimRolledBack when the call
    failed: then neither the claim nor the decision was written."""
    claim = _take_open_claim(task)
    if claim is None:
        return None
    if any(_commits_claim_first(c) for c in decision[3]):
        await claim.commit()
        return None
    try:
        rows = await claim.decide(
            worker.worker_id, [decision], worker.history_event_hard_cap, worker.history_byte_hard_cap
        )
    except Exception as exc:
        raise ClaimRolledBack(redact(error_line(exc))) from exc  # (the server's line and SQLSTATE)
    if rows is None:
        return None
    row = rows[0]
    if row["outcome"] != "completed":
        raise refusal(row)
    worker.claims_decided += 1
    return row


def with_hold(
    commands: list[dict[str, Any]], hold: bool, awaiting: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The decision's commands, led by ``hold_wakeups`` when the run waits for all of its open
    activities at once (``Activation.hold``, WorkflowRun.holds_wakeups), so their results need
    not wake it until they drain (functions/decide.sql, _apply_decision; docs/internals.md,
    "Held wake-ups"), and before it by ``await_signals`` when the run waits on signals
    (``Activation.awaiting``: its marker names them, for the run's stack). First, so the
    database has them before the decision's marker is written. A run that waits on neither
    sends neither."""
    if awaiting is not None:
        return [
            {"type": "await_signals", "signals": awaiting},
            *([{"type": "hold_wakeups"}] if hold else []),
            *commands,
        ]
    return [{"type": "hold_wakeups"}, *commands] if hold else commands


def traced_commands(commands: list[dict[str, Any]], execution_id: str) -> list[dict[str, Any]]:
    """Tracing on: the decision's child, timer and continue-as-new spans (a child's start and a
    continue-as-new carry theirs), each scheduled activity's options carrying the current
    span's traceparent (its parent, on any worker), and each external signal carrying it (the
    target's task links to it)."""
    commands = tracing.decision_spans(commands, execution_id)
    parent = tracing.traceparent()
    if parent is None:
        return commands
    return [
        {**c, "options": {**(c.get("options") or {}), "traceparent": parent}}
        if c["type"] == "schedule_activity"
        else {**c, "traceparent": parent}  # the target's task links to the sending task
        if c["type"] == "signal_external_workflow"
        else c
        for c in commands
    ]


# The status each closing command leaves a run in.
_CLOSING = {
    "complete_workflow": "COMPLETED",
    "fail_workflow": "FAILED",
    "cancel_workflow": "CANCELLED",
    "continue_as_new": "CONTINUED_AS_NEW",
}


# Commands whose transaction makes no task due later (a timer, a retry, a deferred or gated
# start): an activity due at once, handed or announced by its NOTIFY, and the run's end.
_DUE_NOW_ONLY = frozenset(("schedule_activity", "complete_workflow"))
# An activity with one of these options may be held back by its gate (claim.sql moves its due time).
_GATED_OPTIONS = ("concurrency_key", "rate_limit")


def makes_nothing_due_later(commands: list[dict[str, Any]]) -> bool:
    """Whether committing ``commands`` leaves no task due later than now: the worker's next due
    time (worker.py, _finished) then stands, and its end needs no ``next_due_at`` read."""
    for command in commands:
        if command["type"] not in _DUE_NOW_ONLY:
            return False
        options = command.get("options")
        # (_GATED_OPTIONS, tested inline: no generator per command)
        if options and ("concurrency_key" in options or "rate_limit" in options):
            return False
    return True


def closing_status(commands: list[dict[str, Any]], execution_status: str) -> str | None:
    """The terminal status a committed decision left its run in (None: still running)."""
    for command in commands:
        status = _CLOSING.get(command["type"])
        if status is not None:
            return status
    return None if execution_status == "RUNNING" else execution_status


def warn_on_bloat(worker: Worker, execution_id: str, workflow_name: str, events: int) -> None:
    """Warn once per run as its history nears the hard cap (harvest.workflow.history_bloat)."""
    limit = worker.history_bloat_warn_at
    if limit is None or events < limit or execution_id in worker._bloat_warned:
        return
    if len(worker._bloat_warned) >= _BLOAT_WARNED_MAX:  # bounded: forget the oldest half
        for stale in list(worker._bloat_warned)[: _BLOAT_WARNED_MAX // 2]:
            worker._bloat_warned.pop(stale, None)
    worker._bloat_warned[execution_id] = None
    worker.metrics.history_bloat(workflow_name)
    log.warning(
        "harvest.workflow.history_bloat: %s (%s) has %d events, past %d of the %d-event "
        "hard cap; call ctx.continue_as_new() when ctx.should_continue_as_new() is true",
        execution_id,
        workflow_name,
        events,
        limit,
        worker.history_event_hard_cap,
    )
