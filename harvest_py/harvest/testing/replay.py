"""Test helpers: replay recorded histories against the current workflow code.

``WorkflowReplayer`` answers "can I deploy this change?": export histories of
runs in flight (a JSON list of ``{event_id, event_type, event_data}``), replay
them against the new code, and see every non-determinism (a reordered activity,
a removed timer, a renamed child, a command the code no longer issues) before a
worker does.

::

    replayer = WorkflowReplayer(app)
    result = replayer.replay("histories/order-42.json")
    assert result.ok, result.error

``replay_with_reset(history, event_id)`` answers the same for a reset (``harvest workflow
reset --to-event``): it replays only what a fork would carry, the history through
``event_id`` and the reset marker, against the current code, after checking ``event_id`` is
a point a reset accepts (the checks of ``harvest._reset_problems`` that a history can
answer: a completed boundary, not inside a workflow task's commands).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from harvest.core.errors import NonDeterminismError, PayloadError
from harvest.declare.definitions import App
from harvest.runtime.commands import TERMINAL_COMMANDS, TERMINAL_EVENTS
from harvest.runtime.run import HistoryMismatch, WorkflowRun

__all__ = ["ReplayResult", "WorkflowReplayer", "reset_problems"]

# A command event and the events that resolve it (functions/reset.sql, _reset_problems).
_RESOLVED_BY = {
    "ActivityScheduled": ("ActivityCompleted", "ActivityFailed"),
    "TimerStarted": ("TimerFired",),
    "ChildWorkflowStarted": ("ChildWorkflowCompleted", "ChildWorkflowFailed"),
    "ExternalSignalRequested": ("ExternalSignalDelivered", "ExternalSignalFailed"),
    "ExternalCancelRequested": ("ExternalCancelDelivered", "ExternalCancelFailed"),
}
# Events that belong to a workflow task's command group: a boundary may not fall before one.
_GROUP_EVENTS = frozenset(
    {
        "ActivityScheduled",
        "TimerStarted",
        "MarkerRecorded",
        "TimerCancelled",
        "ChildWorkflowStarted",
        "UpdateCompleted",
        "ExternalSignalRequested",
        "ExternalCancelRequested",
    }
)


@dataclass
class ReplayResult:
    """``ok``, or the first difference: ``seq`` and the ``expected`` (recorded) vs ``got``."""

    ok: bool
    error: str | None = None
    seq: int | None = None
    expected: Any = None
    got: Any = None
    exception: BaseException | None = None

    def __bool__(self) -> bool:
        return self.ok


# What a redacted export (`harvest history export` without --full, export-batch's default) gets:
# its payloads are {"redacted": true, "bytes": n}, which the code cannot run on.
REDACTED = (
    "a redacted export cannot be replayed (its payloads are gone): export with "
    "`harvest history export --full` (a batch: --payload-policy full)"
)


def _document(history: Any) -> Any:
    """``history`` itself, or the JSON a path names."""
    if isinstance(history, (str, os.PathLike)):
        with open(history, encoding="utf-8") as fh:
            return json.load(fh)
    return history


def _redacted(document: Any) -> bool:
    return isinstance(document, dict) and document.get("redacted") is True


def load_history(history: Any) -> list[dict[str, Any]]:
    """Events from a list, or from a JSON file (a list, or an object with ``events``)."""
    history = _document(history)
    if isinstance(history, dict):
        history = history.get("events")
    if not isinstance(history, list):
        raise TypeError(
            "a history is a list of {event_id, event_type, event_data} (or the path "
            f"of a JSON file holding one), got {type(history).__name__}"
        )
    for index, event in enumerate(history):
        keys = event if isinstance(event, dict) else {}
        missing = [key for key in ("event_id", "event_type") if key not in keys]
        if missing:
            got = f"a {type(event).__name__}" if not isinstance(event, dict) else f"keys {sorted(event)}"
            raise TypeError(
                f"event {index} of the history has no {' or '.join(missing)} (got {got}): each event is "
                "{event_id, event_type, event_data}, as `harvest history export --full` or "
                "handle.history() give them"
            )
    return sorted(history, key=lambda e: int(e["event_id"]))


def _data(event: dict[str, Any]) -> dict[str, Any]:
    data = event.get("event_data") or {}
    return json.loads(data) if isinstance(data, str) else data


def reset_problems(history: Any, event_id: int) -> list[str]:
    """Why ``event_id`` is not a point a reset of this history accepts (empty: it is). The same
    rules as the database's ``harvest._reset_problems``, as far as a history can tell: the point
    is inside the history and before its end (a terminal event), it does not cut a workflow
    task's commands in half, every activity, timer, child, external signal or cancel and
    update issued by then is resolved by then, and no durable mutex asked for by then is still
    held or awaited. (Whether the run is running, a child or a
    continue-as-new successor, only the database knows.)"""
    events = load_history(history)
    last = int(events[-1]["event_id"]) if events else 0
    if not isinstance(event_id, int) or not 1 <= event_id <= last:
        return [f"event {event_id} is outside the history (1..{last})"]
    problems = []
    after = next((e for e in events if int(e["event_id"]) == event_id + 1), None)
    # (A closing command, WorkflowCompleted..., ends a group too: the database refuses a
    # terminal run before it looks, a history must say so itself.)
    if after is not None and (
        after["event_type"] in _GROUP_EVENTS or after["event_type"] in TERMINAL_COMMANDS.values()
    ):
        problems.append(
            f"event {event_id} is inside a workflow task's commands ({after['event_type']} follows); "
            "pick the last event of that group"
        )
    carried = [e for e in events if int(e["event_id"]) <= event_id]
    ended = next((e for e in carried if e["event_type"] in TERMINAL_EVENTS), None)
    if ended is not None:
        problems.append(
            f"the run ended at event {ended['event_id']} ({ended['event_type']}): a reset forks a running "
            "run from an earlier event"
        )
    resolved = {(e["event_type"], _data(e).get("seq")) for e in carried}
    cancelled_timers = {_data(e).get("timer_seq") for e in carried if e["event_type"] == "TimerCancelled"}
    for e in carried:
        kinds = _RESOLVED_BY.get(e["event_type"])
        if kinds is None:
            continue
        seq = _data(e).get("seq")
        if any((kind, seq) in resolved for kind in kinds):
            continue
        if e["event_type"] == "TimerStarted" and seq in cancelled_timers:
            continue
        problems.append(
            f"{e['event_type']} (seq {seq}, event {e['event_id']}) is unresolved at event {event_id}"
        )
    completed = {_data(e).get("update_id") for e in carried if e["event_type"] == "UpdateCompleted"}
    for e in carried:
        if e["event_type"] == "UpdateAccepted" and _data(e).get("update_id") not in completed:
            update_id = _data(e).get("update_id")
            problems.append(f"update {update_id} (event {e['event_id']}) is unresolved at event {event_id}")
    held: dict[str, int] = {}  # key -> the event of its open acquire marker
    for e in carried:
        data = _data(e)
        if e["event_type"] == "MarkerRecorded" and data.get("kind") in ("mutex_acquire", "mutex_release"):
            key = str((data.get("value") or {}).get("key"))
            if data["kind"] == "mutex_acquire":
                held.setdefault(key, int(e["event_id"]))
            else:
                held.pop(key, None)
    for key, asked_at in sorted(held.items(), key=lambda item: item[1]):
        quoted = "'" + key.replace("'", "''") + "'"  # (as quote_literal)
        problems.append(
            f"mutex {quoted} (asked for at event {asked_at}) is held or awaited at event {event_id}; a fork "
            f"cannot take a mutex over: reset to before event {asked_at} or to after the block released it"
        )
    return problems


class WorkflowReplayer:
    """Replay whole histories with a fresh ``WorkflowRun`` and report, never raise."""

    def __init__(self, app: App):
        self.app = app

    def replay(self, history: Any, workflow: Any = None) -> ReplayResult:
        """Replay ``history`` against ``workflow`` (a name or function; by default the one
        named in its ``WorkflowStarted``)."""
        document = _document(history)
        if _redacted(document):
            return ReplayResult(False, REDACTED)
        # Payloads as the App's codecs wrote them (an export keeps them encoded; docs/payloads.md).
        try:
            events = self.app.payloads.chain.decode_tree(load_history(document))
        except PayloadError as exc:
            return ReplayResult(False, f"{type(exc).__name__}: {exc}", exception=exc)
        if workflow is None:
            started = next((e for e in events if e["event_type"] == "WorkflowStarted"), None)
            data = (started or {}).get("event_data") or {}
            if isinstance(data, str):
                data = json.loads(data)
            workflow = data.get("workflow_name")
            if workflow is None:
                return ReplayResult(False, "the history has no WorkflowStarted event")
        if isinstance(workflow, str):
            workflow = self.app.workflow(workflow)
        run = WorkflowRun(self.app, workflow, "replay")
        try:
            run.replay_history(events)
        except PayloadError as exc:  # an erased run's history (its inputs are markers)
            return ReplayResult(False, f"{type(exc).__name__}: {exc}", exception=exc)
        except (NonDeterminismError, HistoryMismatch) as exc:
            return ReplayResult(
                False,
                f"{type(exc).__name__}: {exc}",
                getattr(exc, "seq", None),
                getattr(exc, "expected", None),
                getattr(exc, "got", None),
                exc,
            )
        finally:
            run.close()
        return ReplayResult(True)

    def replay_with_reset(self, history: Any, event_id: int, workflow: Any = None) -> ReplayResult:
        """Replay what a reset to ``event_id`` would carry (the history through it, then the
        ``WorkflowResetFork`` marker) against the current code, the way the fork's first
        workflow task replays it; not ok, naming each problem, when ``event_id`` is not a point a
        reset accepts (:func:`reset_problems`). The fork then runs on from there under the
        current code: what it does next is not replayed (it is new)."""
        document = _document(history)
        if _redacted(document):
            return ReplayResult(False, REDACTED)
        events = load_history(document)
        problems = reset_problems(events, event_id)
        if problems:
            return ReplayResult(False, "not a valid reset point: " + "; ".join(problems))
        carried = [e for e in events if int(e["event_id"]) <= event_id]
        marker = {
            "event_id": event_id + 1,
            "event_type": "WorkflowResetFork",
            "event_data": {
                "source_execution_id": None,
                "to_event": event_id,
                "reason": "replay_with_reset",
                "operator_id": None,
                "signal_reapply": "drop",
            },
        }
        return self.replay([*carried, marker], workflow)

    def replay_batch(self, batch: Any) -> dict[str, ReplayResult]:
        """Replay each history of a ``harvest history export-batch`` document (a dict or the path
        of its JSON file): execution id -> result. A redacted export cannot be replayed (its
        payloads are gone) and reports so; export with ``--payload-policy full``."""
        from harvest.client.export_batch import BATCH_SCHEMA  # its writer's name (loads no driver here)

        if isinstance(batch, (str, os.PathLike)):
            with open(batch, encoding="utf-8") as fh:
                batch = json.load(fh)
        if not isinstance(batch, dict) or batch.get("schema") != BATCH_SCHEMA:
            raise TypeError(
                f"not a history export batch: expected a JSON object with schema {BATCH_SCHEMA!r}"
            )
        results = {}
        for export in batch.get("exports") or []:
            results[export["execution_id"]] = self.replay(export)  # (a redacted one: REDACTED)
        return results

    def replay_or_raise(self, history: Any, workflow: Any = None) -> ReplayResult:
        """``replay``, raising the ``NonDeterminismError`` (or ``HistoryMismatch``) it found."""
        result = self.replay(history, workflow)
        if not result.ok:
            raise result.exception or HistoryMismatch(result.error)
        return result
