"""Harvest: durable workflows whose only required infrastructure is Postgres.

The public surface is what this module exports; everything else is internal.
"""

from harvest.client import AsyncClient, AsyncWorkflowHandle, Client, WorkflowHandle
from harvest.definitions import App, RetryPolicy, activity, workflow
from harvest.errors import (
    ActivityError,
    ActivityFailure,
    ChildWorkflowError,
    HarvestError,
    NonDeterminismError,
    SignalTimeout,
    WorkflowAlreadyExists,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotRunning,
    WorkflowTerminated,
    WorkflowTimedOut,
)
from harvest.runtime import DEFAULT_VERSION, WorkflowContext
from harvest.saga import Saga
from harvest.worker import ActivityContext, Worker

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_VERSION", "ActivityContext", "ActivityError", "ActivityFailure", "App", "AsyncClient",
    "AsyncWorkflowHandle", "ChildWorkflowError", "Client", "HarvestError", "NonDeterminismError",
    "RetryPolicy", "Saga", "SignalTimeout", "Worker", "WorkflowAlreadyExists",
    "WorkflowCancelled", "WorkflowContext", "WorkflowFailed", "WorkflowHandle", "WorkflowNotRunning",
    "WorkflowTerminated", "WorkflowTimedOut", "activity", "workflow",
]
