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
    QueryFailed,
    QueryTimeout,
    SignalTimeout,
    UpdateFailed,
    UpdateRejected,
    WorkflowAlreadyExists,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotRunning,
    WorkflowTerminated,
    WorkflowTimedOut,
)
from harvest.flow_control import Batch, Concurrency, Debounce, Quota, RateLimit, Throttle
from harvest.handlers import describe_handlers, query, update
from harvest.messaging import UpdateHandle
from harvest.runtime import DEFAULT_VERSION, WorkflowContext
from harvest.saga import Saga
from harvest.worker import ActivityContext, Worker

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_VERSION",
    "ActivityContext",
    "ActivityError",
    "ActivityFailure",
    "App",
    "AsyncClient",
    "AsyncWorkflowHandle",
    "Batch",
    "ChildWorkflowError",
    "Client",
    "Concurrency",
    "Debounce",
    "HarvestError",
    "NonDeterminismError",
    "QueryFailed",
    "QueryTimeout",
    "Quota",
    "RateLimit",
    "RetryPolicy",
    "Saga",
    "SignalTimeout",
    "Throttle",
    "UpdateFailed",
    "UpdateHandle",
    "UpdateRejected",
    "Worker",
    "WorkflowAlreadyExists",
    "WorkflowCancelled",
    "WorkflowContext",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowNotRunning",
    "WorkflowTerminated",
    "WorkflowTimedOut",
    "activity",
    "describe_handlers",
    "query",
    "update",
    "workflow",
]
