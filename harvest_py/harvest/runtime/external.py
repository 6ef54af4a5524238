"""Signalling and cancelling another workflow from workflow code (docs/messages.md).

``ctx.signal_external_workflow`` and ``ctx.cancel_external_workflow`` issue the
commands ``signal_external_workflow`` / ``cancel_external_workflow``. The database
records ``ExternalSignalRequested`` / ``ExternalCancelRequested`` and delivers the
effect through a relay; the outcome comes back as a resolution event
(``ExternalSignalDelivered``, ``ExternalCancelDelivered``, or ``...Failed`` with a
``reason``) that resolves the awaitable or raises an ``ExternalWorkflowError``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, cast

from harvest.core.errors import InvalidArgument
from harvest.core.payload import check_text
from harvest.runtime.children import ChildHandle

__all__ = ["ExternalWorkflow", "describe_target", "external_target"]


@dataclass(frozen=True)
class ExternalWorkflow:
    """The target of an external signal or cancel.

    ``ExternalWorkflow(execution_id=...)`` is one run (a run that continued as new
    hands the signal on to its successor, as a client's signal does);
    ``ExternalWorkflow(workflow_id=..., workflow_name=None)`` is the business key:
    the run of that workflow_id (of that workflow name, when given) that is running
    when the relay is delivered. A plain string or ``uuid.UUID`` target is an
    execution id; a ``ChildHandle`` is its child's execution id.
    """

    execution_id: str | None = None
    workflow_id: str | None = None
    workflow_name: str | None = None

    def __post_init__(self) -> None:
        if (self.execution_id is None) == (self.workflow_id is None):
            raise InvalidArgument("ExternalWorkflow: give exactly one of execution_id and workflow_id")
        if self.execution_id is not None:
            object.__setattr__(self, "execution_id", _execution_id(self.execution_id))
            if self.workflow_name is not None:
                raise InvalidArgument(
                    "ExternalWorkflow: workflow_name goes with a workflow_id, not with an execution_id"
                )
        elif not isinstance(self.workflow_id, str) or not self.workflow_id:
            raise InvalidArgument(
                f"ExternalWorkflow: workflow_id must be a non-empty string, got {self.workflow_id!r}"
            )
        if self.workflow_name is not None and (
            not isinstance(self.workflow_name, str) or not self.workflow_name
        ):
            raise InvalidArgument(
                "ExternalWorkflow: workflow_name must be a non-empty string or None, "
                f"got {self.workflow_name!r}"
            )
        for what, text in (("workflow_id", self.workflow_id), ("workflow_name", self.workflow_name)):
            if text is not None:
                check_text(text, f"ExternalWorkflow: {what}")

    def fields(self) -> dict[str, Any]:
        """The target fields of the command (and of its recorded event)."""
        return {
            "execution_id": self.execution_id,
            "workflow_id": self.workflow_id,
            "workflow_name": self.workflow_name,
        }


def _execution_id(value: Any) -> str:
    try:
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
    except ValueError:
        raise InvalidArgument(
            f"{value!r} is not an execution id (a UUID); to address a workflow by its business key, "
            f"pass ExternalWorkflow(workflow_id={value!r})"
        ) from None


def external_target(target: Any) -> ExternalWorkflow:
    """The ``ExternalWorkflow`` a ``target`` argument names."""
    if isinstance(target, ExternalWorkflow):
        return target
    if isinstance(target, ChildHandle):
        if target.child_execution_id is None:
            raise InvalidArgument(
                f"{target!r} has no execution id yet: await handle.started() first, or address the "
                f"child by ExternalWorkflow(workflow_id=...)"
            )
        return ExternalWorkflow(execution_id=target.child_execution_id)
    if isinstance(target, (str, uuid.UUID)):
        return ExternalWorkflow(execution_id=cast(str, target))  # a UUID is made text by __post_init__
    raise TypeError(
        f"external workflow target: {target!r} is not an execution id, a ChildHandle or an ExternalWorkflow"
    )


def describe_target(fields: dict[str, Any]) -> str:
    """How a replay names a command's target (``describe_command``)."""
    if fields.get("execution_id"):
        return f"execution {fields['execution_id']}"
    name = f" ({fields['workflow_name']})" if fields.get("workflow_name") else ""
    return f"workflow_id {fields.get('workflow_id')!r}{name}"
