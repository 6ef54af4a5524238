"""Running one activity task: decode, call the user's function, report the outcome."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import logging
from collections.abc import Coroutine, Generator, Iterator
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeVar

from harvest.core import payload
from harvest.core.codecs import is_marked, undecodable_path
from harvest.core.deprecation import renamed_attribute
from harvest.core.errors import ActivityFailure, InvalidArgument, PayloadError, PayloadTooLarge, StaleTask
from harvest.core.idempotency import IdempotencyKey
from harvest.core.task_token import TaskToken
from harvest.db.connection import DatabaseError, error_line, redact
from harvest.db.resend import RefusedOnResend, resend_lost
from harvest.runtime.local import UNAWAITED_HEARTBEAT, UNAWAITED_LLM_CALL, MustAwait, activity_logger
from harvest.telemetry import tracing
from harvest.telemetry.logs import LOG_FIELDS, log_fields
from harvest.worker.decide_ahead import decide_ahead
from harvest.worker.heartbeats import Beats, Records, send_interval
from harvest.worker.lanes import lane_of
from harvest.worker.workflows import makes_nothing_due_later

if TYPE_CHECKING:
    from harvest.worker.lanes import ShardLane
    from harvest.worker.worker import Worker

log = logging.getLogger("harvest.worker")

T = TypeVar("T")


class CompleteAsync(Exception):
    """Raised by an activity (``raise ctx.complete_async()``) whose result will come from
    elsewhere, by its task token (docs/lifecycle.md): the worker records nothing, lets go
    of the task, and its lease, heartbeat timeout and retries stay in force."""


class ActivityContext:
    """The ``ctx`` an activity receives: identity, attempt, idempotency key, heartbeats."""

    task_queue = renamed_attribute("queue", "ctx.task_queue")

    def __init__(
        self,
        worker: Worker,
        task: dict[str, Any],
        execution_id: str | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ):
        self._worker = worker
        self._task = task
        self._loop = asyncio.get_running_loop() if loop is None else loop
        self.execution_id = str(task["execution_id"]) if execution_id is None else execution_id
        self.workflow_id = task["workflow_id"]
        self.workflow_name = task["workflow_name"]
        self.activity_name = task["activity_name"]
        self.queue = task["queue"]
        self.heartbeat_details = task.get("heartbeat_details")
        self.cancel_requested = False
        self._beats: Beats | None = None  # (the first ctx.heartbeat of an async def activity makes it)
        self._records: Records | None = None  # (its first ctx.record_llm_call makes it)

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger whose lines carry the run, the activity and the attempt."""
        return activity_logger(self)

    def idempotency_key(self) -> IdempotencyKey:
        """Stable across retries, replays, restarts and duplicate dispatch of this invocation."""
        return IdempotencyKey.for_activity(self.execution_id, self._task["seq"])

    def attempt(self) -> int:
        return int(self._task["attempt"])

    @property
    def task_token(self) -> str:
        """This attempt's task token: complete, fail or heartbeat it from any process
        (``Client.complete_activity(token, result)``) after ``raise ctx.complete_async()``."""
        task = self._task
        return str(
            TaskToken(
                self.execution_id,
                int(task["task_id"]),
                int(task["seq"]),
                int(task["attempt"]),
                int(task["fencing_token"]),
            )
        )

    def complete_async(self) -> CompleteAsync:
        """The exception to raise when the result will be given later by the task token:
        ``raise ctx.complete_async()``. Hand ``ctx.task_token`` on before raising."""
        return CompleteAsync(self.task_token)

    def aheartbeat(self, details: Any = None) -> Coroutine[Any, Any, bool]:
        """Extend the lease and record progress; returns True when cancellation was requested.
        After ``ctx.heartbeat`` calls it first raises their unseen error, and sends after the
        heartbeat in flight. Not awaited: a RuntimeWarning naming it and what to do."""
        return MustAwait(self._aheartbeat(details), self, UNAWAITED_HEARTBEAT)

    async def _aheartbeat(self, details: Any) -> bool:
        if asyncio.get_running_loop() is not self._loop:
            return await self._on_worker_loop(self._aheartbeat(details))
        encoded = None if details is None else payload.encode(details)
        if self._beats is not None:
            await self._beats.send_now(encoded)
            return self.cancel_requested
        return await self._send_heartbeat(encoded)

    async def _on_worker_loop(self, call: Coroutine[Any, Any, T]) -> T:
        """Await ``call`` on the worker's loop, from a loop of the activity's own (``asyncio.run``
        in a plain ``def`` activity's thread): the worker's connections are its loop's alone."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, self._loop))

    async def _send_heartbeat(self, encoded: Any) -> bool:
        """Send one heartbeat with ``encoded`` details (None: keep the stored ones)."""
        sql, task = lane_of(self._task).sql, self._task
        encoded = await self._worker.payloads.encode(sql, self.execution_id, encoded)
        payload.check_size(
            encoded, f"the heartbeat details of activity {self.activity_name}", self._worker.max_payload_bytes
        )
        self.cancel_requested = await resend_lost(
            lambda: sql.heartbeat_activity(task["task_id"], task["fencing_token"], encoded),
            f"a heartbeat of activity {self.activity_name} (task {task['task_id']})",
        )
        return self.cancel_requested

    def heartbeat(self, details: Any = None) -> bool:
        """Heartbeat without awaiting. From a plain ``def`` activity (the worker's thread pool)
        it sends and returns the answer. From an ``async def`` one it records the details and
        returns at once what is known (``cancel_requested``); they are sent in the background,
        coalesced and throttled (worker/heartbeats.py), and a failed send raises here next time
        (or fails the attempt when it returns)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            beats = self._beats
            if beats is None:
                beats = self._beats = Beats(self._send_heartbeat, send_interval(self._heartbeat_timeout()))
            beats.beat(None if details is None else payload.encode(details))
            return self.cancel_requested
        future = asyncio.run_coroutine_threadsafe(self._aheartbeat(details), self._loop)
        return future.result()

    def _heartbeat_timeout(self) -> float | None:
        """This attempt's heartbeat_timeout: its options' (a database whose function files are
        older sends none: the activity's declared one then)."""
        options = self._task.get("options") or {}
        if "heartbeat_timeout" in options:
            return options["heartbeat_timeout"]  # type: ignore[no-any-return]
        definition = self._worker.app.find_activity(self.activity_name)
        return None if definition is None else definition.heartbeat_timeout

    def arecord_llm_call(
        self,
        model: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd_micros: int | None = None,
        latency_ms: int | None = None,
    ) -> Coroutine[Any, Any, int]:
        """Record one model call this attempt made in the agent cost ledger (what the usage
        report's ``llm_*`` fields sum; docs/flow-control.md, "Usage"): tokens, cost in
        millionths of a US dollar (None: no known price, counted as unpriced), latency.
        Returns the ledger row's id; ``StaleTask`` (HR004) once this attempt is not
        held any more. After ``ctx.record_llm_call`` calls it first raises their unseen
        error, and records after the ones they queued. Not awaited: a RuntimeWarning naming
        it and what to do."""
        call = (model, input_tokens, output_tokens, cost_usd_micros, latency_ms)
        return MustAwait(self._arecord_llm_call(*call), self, UNAWAITED_LLM_CALL)

    async def _arecord_llm_call(self, *call: Any) -> int:
        if asyncio.get_running_loop() is not self._loop:
            return await self._on_worker_loop(self._arecord_llm_call(*call))
        if self._records is not None:
            return int(await self._records.send_now(*call))
        return await self._send_llm_call(*call)

    async def _send_llm_call(self, *call: Any) -> int:
        """Record one call (``arecord_llm_call``'s arguments, in order) under this attempt."""
        task = self._task
        return int(await lane_of(task).sql.record_llm_call(task["task_id"], task["fencing_token"], *call))

    def record_llm_call(
        self,
        model: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd_micros: int | None = None,
        latency_ms: int | None = None,
    ) -> int | None:
        """Record one model call without awaiting. From a plain ``def`` activity (the worker's
        thread pool) it records it and returns the ledger row's id. From an ``async def`` one it
        does not block: it checks the arguments, queues the call and returns None; the worker
        records the queued calls in the background, in order, all of them before the attempt's
        outcome is reported (worker/heartbeats.py), and a failed one raises here next time (or
        fails the attempt when it returns). ``await ctx.arecord_llm_call(...)`` for the id."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        call = (model, input_tokens, output_tokens, cost_usd_micros, latency_ms)
        if running is self._loop:
            _check_llm_call(*call)
            records = self._records
            if records is None:
                records = self._records = Records(self._send_llm_call)
            records.add(*call)
            return None
        return asyncio.run_coroutine_threadsafe(self._arecord_llm_call(*call), self._loop).result()

    async def _end_sends(self, raised: BaseException | None) -> None:
        """The attempt ended (``raised``: its exception, None: it returned): stop the background
        sends of its unawaited calls (worker/heartbeats.py); an error it has not seen fails an
        attempt that returned."""
        what = _attempt_name(self._task)
        error: Exception | None = None
        for sends in (self._records, self._beats):
            if sends is None:
                continue
            try:
                await sends.end(raised, what)
            except Exception as exc:  # (only when it returned: the attempt now fails with it)
                error = raised = exc
        if error is not None:
            raise error


def _check_llm_call(
    model: str, input_tokens: int, output_tokens: int, cost_usd_micros: int | None, latency_ms: int | None
) -> None:
    """What harvest.record_llm_call refuses (HR001), checked at an unawaited call, which would
    otherwise learn of it only at its next call."""
    if not isinstance(model, str) or not model:
        raise InvalidArgument(
            f"record_llm_call: model must be a non-empty string (the model's name), got {model!r}"
        )
    for name, value in (
        ("input_tokens", input_tokens),
        ("output_tokens", output_tokens),
        ("cost_usd_micros", cost_usd_micros),
        ("latency_ms", latency_ms),
    ):
        if value is None and name in ("cost_usd_micros", "latency_ms"):
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidArgument(f"record_llm_call: {name} must be an int >= 0, got {value!r}")


class StartToCloseExpired(TimeoutError):
    """An attempt's start_to_close deadline expired (not a TimeoutError the activity raised)."""


async def _run_within(call: Coroutine[Any, Any, Any], deadline: float | None) -> Any:
    """``await call`` bounded by ``deadline`` (the loop's clock; None: unbounded); the
    deadline's expiry, and only it, raises StartToCloseExpired.

    The first step runs at once: an activity that returns without suspending (most
    small ones) is done before any timer is armed, and one that does suspend goes on
    under ``asyncio.timeout_at`` from where it stopped. A timer could not interrupt
    that first step anyway (it fires only when the coroutine suspends), and the
    deadline was fixed before it ran, so a first step that overran it still ends in
    TimeoutError at its first suspension, as before. (asyncio.timeout, not wait_for:
    no second task per activity.)"""
    try:
        yielded = call.send(None)
    except StopIteration as done:
        return done.value
    timer = asyncio.timeout_at(deadline)
    try:
        async with timer:
            return await _Resumed(call, yielded)
    except TimeoutError:
        if timer.expired():
            raise StartToCloseExpired from None
        raise  # the activity's own: typed as it was raised


class _Resumed:
    """A coroutine that already ran to its first suspension (which yielded ``first``),
    awaited from there: what ``await`` of the coroutine would have done next."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any):
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value = self._coro, self._first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation or a timeout thrown in: pass it on
                try:
                    value = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as done:
                    return done.value


# A failure report's message is cut to this many characters when the report is over the limit.
_MESSAGE_CUT = 2000


@contextlib.contextmanager
def _payload_database_call() -> Iterator[None]:
    """Harvest's own read or write of an activity's payloads (offload): a database error fails
    the attempt (retried, as before) with its first line and SQLSTATE, redacted, not its text,
    whose DETAIL and CONTEXT quote values: the failure is stored in the run's history, every
    reader's. (The activity's own exceptions are its author's, kept whole: _typed.)"""
    try:
        yield
    except DatabaseError as exc:
        raise ActivityFailure(type(exc).__name__, redact(error_line(exc))) from exc


@contextlib.contextmanager
def _undecodable(name: str, what: str, stored: Any) -> Iterator[None]:
    """An activity's stored ``what`` (its input, its heartbeat details) its worker cannot decode
    fails the attempt, naming it (``input[1]``); one no parser reads (``Undecodable``) fails it
    for good: no attempt reads it, and the dead letter keeps it for a replay (docs/failures.md)."""
    try:
        yield
    except PayloadError as exc:
        where = undecodable_path(stored, "input" if what == "input" else "")
        at = f" (at {where})" if where else ""
        raise ActivityFailure(
            type(exc).__name__,  # (PayloadKeyMissing stays itself: a worker with the key reads it)
            f"the {what} of activity {name}{at} cannot be decoded: {exc}",
            non_retryable=where is not None,
        ) from exc


def _typed(exc: BaseException) -> ActivityFailure:
    """The failure an exception is reported as; a payload over the limit fails for good."""
    if isinstance(exc, PayloadTooLarge):
        return ActivityFailure(
            "PayloadTooLarge", str(exc), non_retryable=True, details={"bytes": exc.bytes, "limit": exc.limit}
        )
    return ActivityFailure.from_exception(exc)


def _attempt_name(task: dict[str, Any]) -> str:
    return f"activity {task['activity_name']} (task {task['task_id']}, attempt {task['attempt']})"


def _already_recorded(task: dict[str, Any], what: str) -> None:
    """A report sent again after its connection failed (db/resend.py) was refused: the first
    send had recorded it, or the lease passed meanwhile. Nothing is left to do."""
    log.info(
        "activity %s (task %s): its %s was already recorded (its first report's connection "
        "failed after the commit) or its lease passed meanwhile",
        task["activity_name"],
        task["task_id"],
        what,
    )


async def _report_failure(worker: Worker, task: dict[str, Any], failure: ActivityFailure) -> bool:
    """Send an attempt's failure (fail_activity), made small enough to be stored; False when the
    attempt's lease was lost (StaleTask): the scanner that expired it counted its failure, or
    the run ended meanwhile, so this process does not count it again (telemetry/metrics.py)."""
    report = failure.to_json()
    report["details"] = payload.encode_details(report["details"])
    execution_id = str(task["execution_id"])
    try:
        report = await worker.payloads.encode_failure(lane_of(task).sql, execution_id, report)
    except Exception:
        if report.get("traceback") is None:
            raise
        # The traceback is extra: its encoding (a codec, an offload's write) failing must not
        # lose the failure itself, which goes without it (never in plain).
        report.pop("traceback")
        report = await worker.payloads.encode_failure(lane_of(task).sql, execution_id, report)
    limit = worker.max_payload_bytes
    if limit is not None and "traceback" in report and payload.payload_size(report) > limit:
        report.pop("traceback")  # (the first to go: the failure itself is what must be stored)
    if limit is not None and payload.payload_size(report) > limit:
        # A failure too large to store would be refused, and the attempt would hang until
        # its lease expired: keep the type and the start of the message, drop the details.
        size = payload.payload_size(report)
        report["details"] = {"truncated": True, "bytes": size, "limit": limit}
        report["message"] = report["message"][:_MESSAGE_CUT]
        while payload.payload_size(report) > limit and report["message"]:
            report["message"] = report["message"][: len(report["message"]) // 2]
    sql = lane_of(task).sql
    try:
        outcome = await resend_lost(
            lambda: sql.fail_activity(task["task_id"], task["fencing_token"], report),
            f"the failure of activity {task['activity_name']} (task {task['task_id']})",
        )
    except RefusedOnResend:
        _already_recorded(task, "failure")
        return True
    except StaleTask as stale:
        log.warning(
            "activity %s (task %s) failed after its lease was lost: %s",
            task["activity_name"],
            task["task_id"],
            stale,
        )
        return False
    # (the history keeps the message as raised; the log line masks a password in it: a URL's
    # userinfo, a password= keyword, as every line Harvest logs about an error)
    # A dead letter waits for an operator (`harvest dlq replay`): a warning; a retry, or a
    # failure handed to the workflow's code, is the run's business: info.
    log.log(
        logging.WARNING if outcome == "dead_lettered" else logging.INFO,
        "activity %s attempt %s failed (%s): %s",
        task["activity_name"],
        task["attempt"],
        outcome,
        redact(str(failure)),
    )
    return True


async def _fail_attempt(
    worker: Worker, task: dict[str, Any], failure: ActivityFailure, seconds: float
) -> None:
    """Report an attempt's failure and count it (harvest_activity_failed_total) once it is
    recorded: an attempt whose lease a scanner expired first was counted by that scanner
    (expire_tasks' error_type), and its handler's late end is not a second failure. Its time in
    the handler is observed either way."""
    if await _report_failure(worker, task, failure):
        worker.metrics.activity_finished(
            task["workflow_name"], task["activity_name"], seconds, failure.error_type
        )
    else:
        worker.metrics.activity_duration(task["activity_name"]).observe(seconds)


async def run_activity_task(worker: Worker, task: dict[str, Any]) -> None:
    """Run one claimed activity task to a reported outcome (or a lost lease)."""
    execution_id = str(task["execution_id"])
    token = log_fields(
        execution_id=execution_id,
        workflow_id=task["workflow_id"],
        workflow=task["workflow_name"],
        activity=task["activity_name"],
        attempt=task["attempt"],
    )
    try:
        if not tracing.ACTIVE:
            return await _run_activity_task(worker, task, execution_id)
        with tracing.span(
            "harvest.activity.execute",
            execution_id=execution_id,
            traceparent_of=(task.get("options") or {}).get("traceparent"),
            attributes={
                "harvest.workflow": task["workflow_name"],
                "harvest.activity": task["activity_name"],
                "harvest.attempt": task["attempt"],
                "harvest.queue": task["queue"],
            },
        ):
            return await _run_activity_task(worker, task, execution_id)
    finally:
        LOG_FIELDS.reset(token)


async def _run_activity_task(worker: Worker, task: dict[str, Any], execution_id: str) -> None:
    definition = worker.app.find_activity(task["activity_name"])
    task_id, token = task["task_id"], task["fencing_token"]
    lane: ShardLane = task["_lane"]  # (lane_of, inline)
    started = perf_counter()
    try:
        if definition is None:
            name = task["activity_name"]
            close = difflib.get_close_matches(name, worker.app.activities, n=1)  # a misspelt name?
            raise ActivityFailure(
                "ActivityNotRegistered",
                f"no activity named {name!r} is registered on "
                f"worker {worker.worker_id}; register it in the App of the workers "
                f"polling queue {task['queue']!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
            )
        # One running-loop look-up for the context and the deadline (in 3.11 each is a getpid()).
        loop = asyncio.get_running_loop()
        ctx = ActivityContext(worker, task, execution_id, loop)
        # The one place an activity's payloads are decoded (codecs, offload; docs/payloads.md).
        sql = lane.sql
        stored_input = task["input"] or []
        if is_marked(stored_input):  # (nearly never: no coroutine for the plain input)
            with _payload_database_call(), _undecodable(definition.name, "input", stored_input):
                stored_input = await worker.payloads.decode(sql, stored_input)
        if ctx.heartbeat_details is not None:  # (a first attempt has none)
            with (
                _payload_database_call(),
                _undecodable(definition.name, "heartbeat details", ctx.heartbeat_details),
            ):
                ctx.heartbeat_details = await worker.payloads.decode(sql, ctx.heartbeat_details)
        try:
            args, kwargs = payload.decode_args(definition.fn, stored_input)
        except PayloadError as exc:
            # The same input fails the same way on every attempt: do not retry it.
            raise ActivityFailure(
                "PayloadError",
                f"the input does not fit {definition.name}'s signature: {exc}; not retried, retrying "
                "cannot help: fix the arguments the workflow passes (or the activity's annotations)",
                non_retryable=True,
            ) from exc
        timeout = (task.get("options") or {}).get("start_to_close") or definition.start_to_close
        # The deadline counts from here, before the first step runs.
        deadline = None if timeout is None else loop.time() + timeout
        try:
            if definition.is_async:
                try:
                    result = await _run_within(definition.fn(ctx, *args, **kwargs), deadline)
                except BaseException as raised:
                    # (only after an unawaited ctx.heartbeat or ctx.record_llm_call: no coroutine else)
                    if ctx._beats is not None or ctx._records is not None:
                        await ctx._end_sends(raised)
                    raise
                if ctx._beats is not None or ctx._records is not None:
                    await ctx._end_sends(None)  # raises an error it has not seen
            else:  # a thread, or a process: its first step hands the call over and suspends
                result = await _run_within(worker.executors.run(definition, ctx, args, kwargs), deadline)
        except CompleteAsync:
            # Completed elsewhere: the task stays running under its lease, held by no worker.
            detached = await resend_lost(
                lambda: sql.detach_activity(task_id, token),
                f"the detach of activity {task['activity_name']} (task {task_id})",
            )
            log.info(
                "activity %s (task %s) will be completed by its task token%s",
                task["activity_name"],
                task_id,
                "" if detached else " (it was already completed, or its lease was lost)",
            )
            return
        try:
            encoded = payload.encode(result)
        except PayloadError as exc:
            raise ActivityFailure("PayloadError", f"the result cannot be stored: {exc}", True) from exc
        plain = encoded
        if worker.payloads.active:  # (codecs or offload configured: else no coroutine)
            with _payload_database_call():
                encoded = await worker.payloads.encode(sql, execution_id, encoded)
        # (The text measured is the one a decision ahead sends as the result's stored text.)
        try:
            result_text = payload.checked_text(
                encoded, f"the result of activity {definition.name}", worker.max_payload_bytes
            )
        except PayloadError as exc:  # (a string holding U+0000: the database would refuse the report)
            raise ActivityFailure("PayloadError", str(exc), True) from exc
    except (Exception, SystemExit, asyncio.CancelledError) as exc:  # (sys.exit() fails it, not the worker)
        own_cancel = ActivityFailure.own_cancel(exc) if isinstance(exc, asyncio.CancelledError) else None
        if isinstance(exc, asyncio.CancelledError) and own_cancel is None:
            raise  # the worker's stop: the handler hands the task back (Worker._guard)
        if isinstance(exc, StartToCloseExpired):
            failure = ActivityFailure(
                "StartToCloseTimeout", f"attempt {task['attempt']} ran longer than its start_to_close"
            )
        elif own_cancel is not None:
            # The activity's own code raised it: a failure of the attempt like any other, not
            # the worker's stop, which would hand the task back unreported, to run again at once.
            failure = own_cancel
        else:
            failure = _typed(exc)
        tracing.failed(failure.error_type)
        await _fail_attempt(worker, task, failure, perf_counter() - started)
        return
    seconds = perf_counter() - started
    # The cached run may decide on this result now, to commit both at once.
    ahead = await decide_ahead(worker, task, encoded, plain, result_text)
    recorded = None
    try:
        recorded = await lane.completions.complete(task_id, token, encoded, ahead.decision if ahead else None)
    except PayloadError as exc:  # (PayloadTooLarge is an InvalidArgument, not one of them)
        # Nested past the server's depth bound (a worker of this release refuses it first).
        await _fail_attempt(
            worker, task, ActivityFailure("PayloadError", str(exc), non_retryable=True), seconds
        )
        return
    except PayloadTooLarge as exc:
        # The server's limit is lower than ours (it is the authority): the same result
        # would be refused on every attempt, so the activity fails for good, typed.
        await _fail_attempt(worker, task, _typed(exc), seconds)
        return
    except RefusedOnResend:
        # (What the lost answer carried, a handed or claimed task, waits for its lease.)
        _already_recorded(task, "result")
        worker.metrics.activity_finished(task["workflow_name"], task["activity_name"], seconds)
        return
    except StaleTask as stale:
        # Another attempt owns the invocation now; its result will be the one recorded. (Not
        # counted completed: the scanner that expired its lease counted it failed.)
        log.warning(
            "activity %s (task %s) finished after its lease was lost: %s",
            task["activity_name"],
            task_id,
            stale,
        )
        worker.metrics.activity_duration(task["activity_name"]).observe(seconds)
        return
    finally:
        if ahead is not None:
            ahead.settle(recorded)
    # (recorded is set: every except above returns)
    worker.metrics.activity_finished(task["workflow_name"], task["activity_name"], seconds)
    if ahead is None or makes_nothing_due_later(ahead.decision["commands"]):
        task["_nothing_due_later"] = True  # a result wakes its run at once (read by Worker._finished)
    if recorded.handed is not None:  # pyright: ignore[reportOptionalMemberAccess]
        worker.run_handed(recorded.handed, task)  # pyright: ignore[reportOptionalMemberAccess]
    if recorded.claimed is not None:  # pyright: ignore[reportOptionalMemberAccess]
        # Claimed with the batch for the slots its results free (worker/completions.py).
        for claimed in recorded.claimed:  # pyright: ignore[reportOptionalMemberAccess]
            worker.run_claimed(claimed)
