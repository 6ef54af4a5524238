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
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from harvest.core.errors import NonDeterminismError, PayloadError
from harvest.declare.definitions import App
from harvest.runtime.run import HistoryMismatch, WorkflowRun

__all__ = ["ReplayResult", "WorkflowReplayer"]


# The schema name of a `harvest history export-batch` document (harvest/cli/export_batch.py).
BATCH_SCHEMA = "harvest.history_export_batch"


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


def load_history(history: Any) -> list[dict]:
    """Events from a list, or from a JSON file (a list, or an object with ``events``)."""
    if isinstance(history, (str, os.PathLike)):
        with open(history, encoding="utf-8") as fh:
            history = json.load(fh)
    if isinstance(history, dict):
        history = history.get("events")
    if not isinstance(history, list):
        raise TypeError(
            "a history is a list of {event_id, event_type, event_data} (or the path "
            f"of a JSON file holding one), got {type(history).__name__}"
        )
    return sorted(history, key=lambda e: int(e["event_id"]))


class WorkflowReplayer:
    """Replay whole histories with a fresh ``WorkflowRun`` and report, never raise."""

    def __init__(self, app: App):
        self.app = app

    def replay(self, history: Any, workflow: Any = None) -> ReplayResult:
        """Replay ``history`` against ``workflow`` (a name or function; by default the one
        named in its ``WorkflowStarted``)."""
        # Payloads as the App's codecs wrote them (an export keeps them encoded; docs/payloads.md).
        try:
            events = self.app.payloads.chain.decode_tree(load_history(history))
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

    def replay_batch(self, batch: Any) -> dict[str, ReplayResult]:
        """Replay each history of a ``harvest history export-batch`` document (a dict or the path
        of its JSON file): execution id -> result. A redacted export cannot be replayed (its
        payloads are gone) and reports so; export with ``--payload-policy full``."""
        if isinstance(batch, (str, os.PathLike)):
            with open(batch, encoding="utf-8") as fh:
                batch = json.load(fh)
        if not isinstance(batch, dict) or batch.get("schema") != BATCH_SCHEMA:
            raise TypeError(
                f"not a history export batch: expected a JSON object with schema {BATCH_SCHEMA!r}"
            )
        results = {}
        for export in batch.get("exports") or []:
            if export.get("redacted"):
                results[export["execution_id"]] = ReplayResult(
                    False, "a redacted export cannot be replayed: export with --payload-policy full"
                )
            else:
                results[export["execution_id"]] = self.replay(export)
        return results

    def replay_or_raise(self, history: Any, workflow: Any = None) -> ReplayResult:
        """``replay``, raising the ``NonDeterminismError`` (or ``HistoryMismatch``) it found."""
        result = self.replay(history, workflow)
        if not result.ok:
            raise result.exception or HistoryMismatch(result.error)
        return result
