"""Deterministic workflow execution: a history in, commands out, no database."""

from harvest.runtime.context import WorkflowContext, WorkflowInfo
from harvest.runtime.local import LocalActivityContext
from harvest.runtime.loop import DeterministicEventLoop, IllegalWorkflowOperation
from harvest.runtime.run import Activation, HistoryMismatch, WorkflowRun

__all__ = ["Activation", "DeterministicEventLoop", "HistoryMismatch", "IllegalWorkflowOperation",
           "LocalActivityContext", "WorkflowContext", "WorkflowInfo", "WorkflowRun"]
