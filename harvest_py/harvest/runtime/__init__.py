"""Deterministic workflow execution: a history in, commands out, no database."""

from harvest.runtime.children import ChildHandle
from harvest.runtime.context import DEFAULT_VERSION, ContinueAsNew, WorkflowContext, WorkflowInfo
from harvest.runtime.local import LocalActivityContext
from harvest.runtime.loop import DeterministicEventLoop, IllegalWorkflowOperation, WorkflowCallError
from harvest.runtime.run import Activation, HistoryMismatch, WorkflowRun

__all__ = [
    "DEFAULT_VERSION",
    "Activation",
    "ChildHandle",
    "ContinueAsNew",
    "DeterministicEventLoop",
    "HistoryMismatch",
    "IllegalWorkflowOperation",
    "LocalActivityContext",
    "WorkflowCallError",
    "WorkflowContext",
    "WorkflowInfo",
    "WorkflowRun",
]
