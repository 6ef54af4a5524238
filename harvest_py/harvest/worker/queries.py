"""Answering queries and validating updates: the worker side of functions/messages.sql.

A background loop of :class:`~harvest.worker.Worker` claims requests for its
queues (``harvest.claim_query_requests``, woken by NOTIFY ``harvest_queries``), rebuilds
the workflow's state and answers each one:

* the state is the sticky cache's run when it is current (the history holds
  nothing past the activation it produced but resolution events), else a fresh
  run replaying the recorded steps (``WorkflowRun.replay_history``): the state as
  of the last completed workflow task, on any worker. Nothing issues a command
  and nothing is written to the history;
* a query runs its handler read-only and answers (``answer_query``);
* an update runs its validator read-only; a refusal is an answer (``rejected``),
  a pass is ``accept_update`` (``UpdateAccepted`` + a workflow task), after which
  the workflow itself runs the handler;
* a request for a run whose workflow this worker's App lacks, or naming a handler its
  replay does not know (a rolling deploy's old worker), is declined
  (``release_query_request``): back to the queue for a live worker that has not tried
  it, else answered (``UnknownWorkflow``; the unknown handler's own error).

A run that has not completed its first workflow task has no state yet (its body has not
run): a query, or an update with a declared validator, waits for that task
(``wait_for_first_workflow_task``: out of every claim until a claim finds the task's decision
or the run's end and sets it pending again; the caller's timeout bounds it). It has registered no handler
of its own yet either, so an update unknown to the App is accepted for it and the
workflow decides at its first step (``UnknownUpdate`` if it never registers one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from harvest.core import payload
from harvest.core.errors import ExecutionMigrated, NotFound, PayloadTooLarge
from harvest.core.statuses import LIVE_STATUSES
from harvest.db import channels
from harvest.db.connection import DatabaseError, error_line, failure_reason, redact
from harvest.runtime import WorkflowRun
from harvest.runtime.messages import UnknownHandler, failure_of
from harvest.telemetry import tracing
from harvest.worker.stopping import cancel_and_wait

if TYPE_CHECKING:
    from harvest.worker.lanes import ShardLane
    from harvest.worker.worker import Worker

log = logging.getLogger("harvest.worker")

CLAIM_BATCH = 16
MAX_IN_FLIGHT = 32
LEASE_SECS = 30.0
EXPIRE_EVERY_SECS = 5.0
# A request parked for its run's first workflow task is set pending again by a claim that finds
# the task completed (claim_query_requests): the worker that parked it claims again this soon,
# then twice as late each time, up to its poll interval (a query just after a start waits for
# the first decision's milliseconds, not for a poll).
FIRST_TASK_RECHECK_SECS = 0.05
# What stops the worker or its task, never a handler's answer: every other BaseException a
# query handler or validator raises (ctx.continue_as_new() among them) is answered as a failure.
_STOPS = (asyncio.CancelledError, SystemExit, KeyboardInterrupt, GeneratorExit)


def _event(row: dict[str, Any]) -> dict[str, Any]:
    return {"event_id": row["event_id"], "event_type": row["event_type"], "event_data": row["event_data"]}


def _is_current(run: WorkflowRun, events: list[dict[str, Any]]) -> bool:
    """The history past the run's last event only confirms its last activation, or there is
    none past it (the run took its own commit's events as read: WorkflowRun.recorded)."""
    if run.settled:
        return not events
    live = run._live
    if live is None or run.finished:
        return False
    markers = [e for e in events if e["event_type"] == "WorkflowTaskCompleted"]
    return len(markers) == 1 and int((markers[0]["event_data"] or {}).get("through", -1)) == live[0]


class QueryResponder:
    """Answers the requests of one shard (``lane``): a request lives on its execution's shard."""

    def __init__(self, worker: Worker, lane: ShardLane):
        self.worker = worker
        self.lane = lane
        self._wake = asyncio.Event()
        self._inflight: set[asyncio.Task[Any]] = set()
        self.answered = 0
        self._recheck: float | None = None  # (FIRST_TASK_RECHECK_SECS)

    async def run(self) -> None:
        listener = asyncio.create_task(self.lane.listen(channels.QUERIES, self._wake.set, "query listener"))
        last_expire = 0.0
        try:
            while True:
                w, lane = self.worker, self.lane
                free = MAX_IN_FLIGHT - len(self._inflight)
                claimed: list[dict[str, Any]] = []
                if free > 0 and lane.usable:
                    try:
                        claimed = await lane.sql.claim_query_requests(
                            w.worker_id, w.queues, min(free, CLAIM_BATCH), LEASE_SECS
                        )
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        if not lane.note_failure(exc, "claiming queries"):
                            log.warning("claiming queries failed (%s); retrying", failure_reason(exc))
                for request in claimed:
                    task = asyncio.create_task(self._answer(request))
                    self._inflight.add(task)
                    task.add_done_callback(self._done)
                if time.monotonic() - last_expire > EXPIRE_EVERY_SECS and lane.usable:
                    last_expire = time.monotonic()
                    with contextlib.suppress(Exception):
                        await lane.sql.expire_query_requests(1000)
                if claimed and len(claimed) == min(free, CLAIM_BATCH):
                    continue
                timeout = w.poll_interval
                if self._recheck is not None:  # a request this worker parked: claim again soon
                    timeout = min(timeout, self._recheck)
                    self._recheck = self._recheck * 2 if self._recheck * 2 < w.poll_interval else None
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                self._wake.clear()
        finally:
            await cancel_and_wait([listener, *self._inflight], f"query responder (shard {self.lane.shard})")

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._inflight.discard(task)
        self._wake.set()

    # ------------------------------------------------------------------ one request
    async def _answer(self, request: dict[str, Any]) -> None:
        if request["kind"] != "update" or not tracing.ACTIVE:
            await self._respond(request)
            return
        # The validation's span (docs/observability.md): the child of the client's update span
        # (the request's traceparent; the client waits for this answer), else in the run's trace.
        execution_id = str(request["execution_id"])
        cached = self.worker.cache.peek(execution_id)
        seed = (cached.trace_seed if cached is not None else None) or {}
        attributes = {"harvest.update": request["name"], "harvest.workflow": request["workflow_name"]}
        with tracing.span(
            "harvest.update.validate",
            execution_id=execution_id,
            traceparent_of=request.get("traceparent"),
            attributes=attributes,
            **seed,
        ) as current:
            outcome = await self._respond(request)
            if outcome is not None:
                current.set_attribute("harvest.update.outcome", outcome)

    async def _respond(self, request: dict[str, Any]) -> str | None:
        """Answer one request; for an update, whether it was ``accepted`` or ``rejected``, or
        ``waiting`` for the run's first workflow task (None: the answer failed and the request
        goes to the next claimer)."""
        w = self.worker
        request_id, kind, name = request["request_id"], request["kind"], request["name"]
        if request["workflow_name"] not in w.app.workflows:
            # A rolling deploy: the run's workflow is a new deploy's. Handed back for a worker
            # that has it (this one's claims skip it), or answered UnknownWorkflow if none live.
            return await self._decline(
                request, f"this worker's App has no workflow {request['workflow_name']!r}"
            )
        try:
            # Payloads in and out are decoded and encoded here (docs/payloads.md).
            request = {**request, "arg": await w.payloads.decode(self.lane.sql, request["arg"])}
            run, fresh = await self._state(request)
        except UnknownHandler as exc:  # its replay lacks an update handler the run ran: a newer worker's
            return await self._decline(request, str(exc), failure_of(exc))
        except Exception as exc:
            log.info(
                "%s %r on %s: cannot rebuild the workflow state: %s",
                kind,
                name,
                request["execution_id"],
                failure_reason(exc),
            )
            # The answer is stored and read by the caller: a database error (the history not
            # read) says its first line and SQLSTATE, never its DETAIL; a codec's error is theirs.
            failure = failure_of(exc)
            if isinstance(exc, DatabaseError):
                failure = {**failure, "message": redact(error_line(exc))}
            await self._reply(request, None, failure)
            return "rejected"
        try:
            live = request["execution_status"] in LIVE_STATUSES
            if run.through == 0 and live and self._reads_state(run, kind, name):
                # The run has not completed its first workflow task: its state does not exist yet.
                return await self._await_first_task(request)
            if kind == "query":
                try:
                    answer, error = run.handlers.answer_query(name, request["arg"]), None
                    # An answer the database would refuse: the caller hears why, at once.
                    payload.check_size(answer, f"the answer to query {name}", w.max_payload_bytes)
                except PayloadTooLarge as exc:
                    answer, error = None, failure_of(exc)
                except UnknownHandler as exc:  # a new deploy's query? Another worker may know it
                    return await self._decline(request, str(exc), failure_of(self._explain(run, exc)))
                except _STOPS:
                    raise
                except BaseException as exc:  # a handler's own BaseException is its answer too
                    answer, error = None, self._never_ran(run, request, failure_of(self._explain(run, exc)))
                await self._reply(request, answer, error)
                return None
            try:
                run.handlers.validate_update(name, request["arg"])
            except UnknownHandler as exc:
                if run.through != 0:  # a run that has stepped: its handlers are all known here
                    return await self._decline(request, str(exc), failure_of(exc))
            except _STOPS:
                raise
            except BaseException as exc:
                await self._reply(request, None, self._never_ran(run, request, failure_of(exc)))
                return "rejected"
            await self.lane.sql.accept_update(request_id, w.worker_id)
            self.answered += 1
            return "accepted"
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # (a database error of the traceback is printed by its line and SQLSTATE, not its
            # DETAIL: DatabaseTextFilter, on this logger)
            log.error(
                "answering %s %r (request %s) failed: %s",
                kind,
                name,
                request_id,
                failure_reason(exc),
                exc_info=True,
            )
            return None
        finally:
            if fresh:
                run.close()
            elif run.handlers.tainted:
                evicted = w.cache.take(str(request["execution_id"]))
                if evicted is not None:
                    evicted.close()

    async def _decline(
        self, request: dict[str, Any], why: str, error: dict[str, Any] | None = None
    ) -> str | None:
        """Hand the request back (``release_query_request``): a live worker polling the queue
        that has not tried it may have what this one lacks (a rolling deploy's new workflow or
        handler). Once none is left it is answered ``error`` (None: UnknownWorkflow). Returns
        ``rejected`` for an update answered so, else None (as ``_respond``)."""
        w, request_id = self.worker, request["request_id"]
        try:
            if error is not None:
                _, error = await self._encoded(str(request["execution_id"]), None, error)
            status = await self.lane.sql.release_query_request(request_id, w.worker_id, error)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # its lease runs out: the next claimer has it
            log.warning("declining request %s failed: %s", request_id, failure_reason(exc))
            return None
        done = "handed back for a worker that may have it" if status == "pending" else f"answered {status}"
        log.info("%s %r on %s: %s: %s", request["kind"], request["name"], request["execution_id"], why, done)
        return "rejected" if status == "rejected" else None

    @staticmethod
    def _never_ran(run: WorkflowRun, request: dict[str, Any], failure: dict[str, Any]) -> dict[str, Any]:
        """A handler's or validator's error on a run that ended before its first workflow task
        completed (terminated, timed out): its code never ran, so the state it read is empty."""
        if run.through != 0 or request["execution_status"] in LIVE_STATUSES:
            return failure
        return {
            **failure,
            "message": f"{failure.get('message', '')} (execution {request['execution_id']} ended "
            f"{request['execution_status']} before completing its first workflow task: the workflow's "
            "code never ran, so its state is empty)",
        }

    @staticmethod
    def _reads_state(run: WorkflowRun, kind: str, name: str) -> bool:
        """Whether answering the request reads the workflow's state: a query does, an update
        only through a declared validator (one with none is accepted for the run's first step)."""
        if kind == "query":
            return True
        handler = run.handlers.find("update", name)
        return handler is not None and handler.validator is not None

    async def _await_first_task(self, request: dict[str, Any]) -> str | None:
        """Park the request until the run's first workflow task completes
        (``wait_for_first_workflow_task``): out of every claim until a claim finds that task's
        decision or the run's end (this worker claims again soon: FIRST_TASK_RECHECK_SECS); the
        caller's timeout bounds the wait. ``waiting`` once parked (an update's validation span
        ends so: the validation runs later, in a span of its own), else None."""
        w, request_id = self.worker, request["request_id"]
        try:
            status = await self.lane.sql.wait_for_first_workflow_task(request_id, w.worker_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # its lease runs out: the next claimer has it
            log.warning("parking request %s failed: %s", request_id, failure_reason(exc))
            return None
        if status == "waiting":
            self._recheck = FIRST_TASK_RECHECK_SECS
            self._wake.set()  # (the loop's wait takes the shorter timeout)
        log.debug(
            "%s %r on %s: the run has not completed its first workflow task: %s",
            request["kind"],
            request["name"],
            request["execution_id"],
            "waits for it" if status == "waiting" else f"{status} again",
        )
        return "waiting" if status == "waiting" else None

    async def _reply(self, request: dict[str, Any], answer: Any, error: dict[str, Any] | None) -> None:
        w = self.worker
        try:
            # A large answer is stored as the run's own: erased and deleted with it.
            answer, error = await self._encoded(str(request["execution_id"]), answer, error)
        except (NotFound, ExecutionMigrated):
            # The run is gone, or moved, since the request: the answer's rows go run-less
            # (retention's run-less sweep deletes them).
            answer, error = await self._encoded(None, answer, error)
        await self.lane.sql.answer_query(request["request_id"], w.worker_id, answer, error)
        self.answered += 1

    async def _encoded(
        self, execution_id: str | None, answer: Any, error: dict[str, Any] | None
    ) -> tuple[Any, dict[str, Any] | None]:
        payloads, sql = self.worker.payloads, self.lane.sql
        encoded = await payloads.encode(sql, execution_id, answer)
        return encoded, await payloads.encode_failure(sql, execution_id, error)

    @staticmethod
    def _explain(run: WorkflowRun, exc: BaseException) -> BaseException:
        if isinstance(exc, UnknownHandler) and run.through == 0:
            return UnknownHandler(
                f"{exc} (the run has not completed its first workflow task, so "
                "handlers it registers itself do not exist yet)",
                exc.error_type,
            )
        return exc

    async def _state(self, request: dict[str, Any]) -> tuple[WorkflowRun, bool]:
        """The workflow's state: (the cached run, False) when current, else (a replay, True)."""
        w = self.worker
        execution_id = str(request["execution_id"])
        cached = w.cache.peek(execution_id)
        if cached is not None and request["execution_status"] == "RUNNING":
            seen = cached.last_event_id
            events = await self.lane.sql.get_history(execution_id, seen)
            if (
                w.cache.peek(execution_id) is cached
                and cached.last_event_id == seen
                and _is_current(cached, events)
            ):
                return cached, False
        definition = w.app.workflow(request["workflow_name"])
        run = WorkflowRun(w.app, definition, execution_id, request["workflow_id"], request["queue"])
        try:
            events = await self.lane.sql.get_history(execution_id, 0)
            run.replay_history(await w.payloads.decode(self.lane.sql, [_event(e) for e in events]))
        except BaseException:
            run.close()  # (its main task never stepped: the loop closes its coroutine)
            raise
        return run, True


async def serve_queries(worker: Worker, lane: ShardLane) -> None:
    """The worker's background loop answering queries and validating updates on one shard."""
    await QueryResponder(worker, lane).run()
