"""Harvest: durable workflows whose only required infrastructure is Postgres.

The public surface is what this module exports; everything else is internal.
"""

from harvest.client import AsyncClient, AsyncWorkflowHandle, Client, WorkflowHandle
from harvest.definitions import App, RetryPolicy, activity, workflow
from harvest.errors import (
    ActivityError,
    ActivityFailure,
    HarvestError,
    NonDeterminismError,
    WorkflowAlreadyExists,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotRunning,
    WorkflowTerminated,
    WorkflowTimedOut,
)
from harvest.runtime import WorkflowContext
from harvest.worker import ActivityContext, Worker

__version__ = "0.1.0"

__all__ = [
    "ActivityContext", "ActivityError", "ActivityFailure", "App", "AsyncClient", "AsyncWorkflowHandle",
    "Client", "HarvestError", "NonDeterminismError", "RetryPolicy", "Worker", "WorkflowAlreadyExists",
    "WorkflowCancelled", "WorkflowContext", "WorkflowFailed", "WorkflowHandle", "WorkflowNotRunning",
    "WorkflowTerminated", "WorkflowTimedOut", "activity", "workflow",
]
