"""Deciding on an activity's result before it is committed (docs/internals.md, "Deciding ahead").

When this worker's cached run of a workflow decided it last and has read its
whole history, the result of one of its activities is all that the workflow
task this result wakes would bring. So the worker feeds the result to the run
at once, as the database will store it (``harvest.core.jsonb``), and sends the run's
decision along with the result: one transaction and no workflow task, where
the plain path takes two transactions and a workflow task row.

The database applies the decision only if the run is where the worker left it
(nothing appended since its last decision, no workflow task open, the result
stored as the run saw it, the hand-off rules met); the history is then exactly
the one the plain path writes. Otherwise it records the result alone, and the
worker drops the run: it holds a step that the history does not, and the woken
workflow task replays the history instead. The run's next results then go the
plain way for as long as something keeps reaching it while its activities run
(worker/plain_runs.py), so that a run receiving a storm of signals does not
replay on each of them.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from harvest.core import jsonb
from harvest.db.connection import failure_reason
from harvest.telemetry import tracing
from harvest.telemetry.logs import LOG_FIELDS, log_fields
from harvest.worker.completions import Recorded
from harvest.worker.lanes import lane_of
from harvest.worker.workflows import (
    closing_status,
    encoded_commands,
    payloads_fit,
    traced_commands,
    warn_on_bloat,
    with_hold,
)

if TYPE_CHECKING:
    from harvest.runtime import Activation, WorkflowRun
    from harvest.worker.worker import SlotGrant, Worker

log = logging.getLogger("harvest.worker")


class DecisionAhead:
    """A decision made on a result not yet committed, and the run that made it."""

    def __init__(
        self,
        worker: Worker,
        task: dict[str, Any],
        run: WorkflowRun,
        activation: Activation,
        after: int,
        result_text: str,
        grant: SlotGrant,
        commands: list[dict[str, Any]] | None = None,
    ):
        self._worker = worker
        self._task = task  # the activity task whose result this decision rides with
        self._execution_id = str(task["execution_id"])
        self._workflow_name = task["workflow_name"]
        self._run = run
        self._activation = activation
        self._grant = grant
        # What complete_activities reads (functions/activities.sql).
        commands = activation.commands if commands is None else commands
        self.decision: dict[str, Any] = {
            "after": after,
            "result_text": result_text,
            "commands": with_hold(commands, activation.hold, activation.awaiting),
            "hand_off_slots": grant.slots,
        }
        epoch = lane_of(task).owners.epoch_for(task["workflow_id"])
        if epoch is not None:  # owner mode: only the partition's owner, at this epoch, decides
            self.decision["owner_epoch"] = epoch

    def settle(self, recorded: Recorded | None) -> None:
        """Take the commit's answer (None: the result was not recorded at all), and give the
        run back, put back or dropped: its hold ends (StickyCache.release)."""
        try:
            self._settle(recorded)
        finally:
            self._worker.cache.release(self._execution_id, self._task)

    def _settle(self, recorded: Recorded | None) -> None:
        worker, run = self._worker, self._run
        worker.release_slots(self._grant)
        decided = recorded.decided if recorded is not None else None
        if decided is None:
            run.close()  # it holds a step the history does not
            if recorded is not None:  # refused: its next results go the plain way (plain_runs.py)
                worker.refused_ahead += 1
                worker.plain_runs.interleaved(self._execution_id)
            return
        worker.decided_ahead += 1
        for handed in decided["handed"]:
            worker.run_handed(handed, self._task)
        if self._activation.finished or decided["execution_status"] != "RUNNING":
            status = closing_status(self._activation.commands, decided["execution_status"])
            if status is not None:
                worker.metrics.workflow_closed(self._workflow_name, status, decided["last_event_id"])
            run.close()
            return
        run.recorded(decided["last_event_id"])
        warn_on_bloat(worker, self._execution_id, self._workflow_name, decided["last_event_id"])
        worker.cache.put(self._execution_id, run)


async def decide_ahead(
    worker: Worker, task: dict[str, Any], result: Any, plain: Any = None, result_text: str | None = None
) -> DecisionAhead | None:
    """The cached run's decision on this activity result, or None where none can be made.

    ``result`` is the result as it will be stored; ``plain`` the same before the worker's
    codecs (docs/payloads.md), what the run reads (None: ``result`` itself); ``result_text``
    ``result``'s stored text where the caller has it already (its size check printed it), else
    None."""
    if not worker.accepts_hand_off():
        return None
    execution_id = str(task["execution_id"])
    if execution_id in worker.plain_runs.runs:
        # A decision ahead of this run's was refused lately, and something keeps reaching it
        # while its activities run: the plain path costs it no replay (plain_runs.py).
        worker.plain_by_rule += 1
        return None
    run = worker.cache.take_settled(execution_id, task)  # (held by this task until released)
    if run is None:
        return None
    ahead = None
    try:
        ahead = await _step(worker, task, execution_id, run, result, plain, result_text)
        return ahead
    finally:
        if ahead is None:  # put back or dropped (else DecisionAhead.settle gives it back)
            worker.cache.release(execution_id, task)


async def _step(
    worker: Worker,
    task: dict[str, Any],
    execution_id: str,
    run: WorkflowRun,
    result: Any,
    plain: Any,
    result_text: str | None = None,
) -> DecisionAhead | None:
    """The decision of ``run`` (taken from the cache) on the result, or None: the run put back
    or closed."""
    if run.holding:
        # Its results do not wake it until its activities drain: a decision here would be
        # one of the wake-ups the hold saves (and the last result's is refused anyway, the
        # history having moved past the run's last decision).
        worker.cache.put(execution_id, run)
        return None
    read = result if plain is None else plain
    try:
        if result_text is None:
            result_text = jsonb.stored_text(result)
        if read is None or type(read) is int or type(read) is bool:
            seen = read  # what reading its stored text back gives, without the print and parse
        elif read is result:  # no codec changed it: its stored text is result_text
            seen = json.loads(result_text)
        else:
            seen = json.loads(jsonb.stored_text(read))
    except (ValueError, TypeError):  # not storable as it stands: the plain path reports it
        worker.cache.put(execution_id, run)
        return None
    event = {
        "event_id": run.last_event_id + 1,
        "event_type": "ActivityCompleted",
        "event_data": {"seq": task["seq"], "result": seen, "attempt": task["attempt"]},
    }
    if not tracing.ACTIVE:
        return await _decide(worker, task, execution_id, run, event, result_text)
    # Tracing on: the decision is the run's workflow task, in the run's trace as one the
    # workflow task would make (worker/workflows.py, _task_span): its child, timer and
    # continue-as-new spans hang from it, and its activities and signals carry it.
    with tracing.span(
        "harvest.workflow.task",
        execution_id=execution_id,
        attributes={"harvest.workflow": task["workflow_name"], "harvest.decided_ahead": True},
        **(run.trace_seed or {}),
    ):
        return await _decide(worker, task, execution_id, run, event, result_text)


async def _decide(
    worker: Worker,
    task: dict[str, Any],
    execution_id: str,
    run: WorkflowRun,
    event: dict[str, Any],
    result_text: str,
) -> DecisionAhead | None:
    after = run.last_event_id
    # The workflow code's log lines carry the run, not the activity whose result it decides on.
    fields = log_fields(
        execution_id=execution_id, workflow_id=task["workflow_id"], workflow=task["workflow_name"]
    )
    try:
        # A step that runs local activities would hold the result back (and risk it with
        # the activity's lease) for as long as they run: leave it to the workflow task.
        activation = await run.advance([event], local_activities=False)
    except Exception as exc:
        log.debug("no decision ahead for %s: %s", execution_id, exc)
        run.close()
        return None
    finally:
        LOG_FIELDS.reset(fields)
    try:
        # (no codec nor offload: the commands as they are, without the coroutine)
        commands = (
            await encoded_commands(worker, task, execution_id, run, activation.commands)
            if worker.payloads.active
            else activation.commands
        )
    except Exception as exc:  # (a codec's, or an offload's write: a database error's text stays out)
        log.debug("no decision ahead for %s: %s", execution_id, failure_reason(exc))
        run.close()
        return None
    if not payloads_fit(commands, worker.max_payload_bytes, task["workflow_name"]):
        run.close()  # the database would refuse it: the woken workflow task fails the run, typed
        return None
    scheduled = 0  # the step's activities: the slots its commit may hand tasks back to
    for command in activation.commands:
        if "placement" in command:
            run.close()  # a placed child is resolved to its shard by the workflow task (place_children)
            return None
        if command["type"] == "schedule_activity":
            scheduled += 1
    if tracing.ACTIVE:
        commands = traced_commands(commands, execution_id)
    grant = worker.reserve_slots(scheduled, task)
    return DecisionAhead(worker, task, run, activation, after, result_text, grant, commands)
