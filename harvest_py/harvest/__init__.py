"""Harvest: durable workflows whose only required infrastructure is Postgres.

The public surface is what this module exports; everything else is internal.

Names resolve lazily (PEP 562): ``import harvest`` loads no layer, so
``import harvest.runtime`` (replay, the replayer, their tests) needs neither psycopg nor
pglast, and a name pulls in its layer on first use (``harvest.Client`` loads the client).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harvest.client import (
        AsyncClient,
        AsyncWorkflowHandle,
        Client,
        StartOptions,
        UpdateHandle,
        WorkflowHandle,
    )
    from harvest.core.durations import Duration
    from harvest.core.errors import (
        ActivityError,
        ActivityFailure,
        ChildWorkflowError,
        ConditionTimeout,
        ExternalWorkflowError,
        ExternalWorkflowNotFound,
        ExternalWorkflowNotRunning,
        ExternalWorkflowUnreachable,
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
    from harvest.declare.dags import Dag, SkipTask
    from harvest.declare.definitions import App, RetryPolicy, activity, workflow
    from harvest.declare.flow_control import Batch, Concurrency, Debounce, Quota, RateLimit, Throttle
    from harvest.declare.messages import describe_handlers, query, update
    from harvest.declare.schedules import Schedule, WorkflowSchedule
    from harvest.runtime import DEFAULT_VERSION, WorkflowContext
    from harvest.runtime.children import ChildHandle, ChildPlacement
    from harvest.runtime.external import ExternalWorkflow
    from harvest.runtime.local import LocalActivityContext
    from harvest.runtime.saga import Saga
    from harvest.worker import ActivityContext, Worker

__version__ = "0.1.0"

# `harvest.errors` is the documented home of the exception hierarchy (the spec names it): it is
# harvest.core.errors (pure, imports only json), registered under its public name so that
# `from harvest.errors import NotFound` keeps working without a module outside the layers.
_errors = importlib.import_module("harvest.core.errors")
sys.modules.setdefault(__name__ + ".errors", _errors)
errors = _errors

# public name -> the module that defines it (imported on first access)
_WHERE: dict[str, str] = {
    **dict.fromkeys(
        ["AsyncClient", "AsyncWorkflowHandle", "Client", "StartOptions", "UpdateHandle", "WorkflowHandle"],
        "harvest.client",
    ),
    **dict.fromkeys(
        [
            "ActivityError",
            "ActivityFailure",
            "ChildWorkflowError",
            "ConditionTimeout",
            "ExternalWorkflowError",
            "ExternalWorkflowNotFound",
            "ExternalWorkflowNotRunning",
            "ExternalWorkflowUnreachable",
            "HarvestError",
            "NonDeterminismError",
            "QueryFailed",
            "QueryTimeout",
            "SignalTimeout",
            "UpdateFailed",
            "UpdateRejected",
            "WorkflowAlreadyExists",
            "WorkflowCancelled",
            "WorkflowFailed",
            "WorkflowNotRunning",
            "WorkflowTerminated",
            "WorkflowTimedOut",
        ],
        "harvest.core.errors",
    ),
    **dict.fromkeys(["App", "RetryPolicy", "activity", "workflow"], "harvest.declare.definitions"),
    "Duration": "harvest.core.durations",
    **dict.fromkeys(["Dag", "SkipTask"], "harvest.declare.dags"),
    **dict.fromkeys(
        ["Batch", "Concurrency", "Debounce", "Quota", "RateLimit", "Throttle"], "harvest.declare.flow_control"
    ),
    **dict.fromkeys(["describe_handlers", "query", "update"], "harvest.declare.messages"),
    **dict.fromkeys(["Schedule", "WorkflowSchedule"], "harvest.declare.schedules"),
    **dict.fromkeys(["DEFAULT_VERSION", "WorkflowContext"], "harvest.runtime"),
    "Saga": "harvest.runtime.saga",
    "ExternalWorkflow": "harvest.runtime.external",
    **dict.fromkeys(["ChildHandle", "ChildPlacement"], "harvest.runtime.children"),
    "LocalActivityContext": "harvest.runtime.local",
    **dict.fromkeys(["ActivityContext", "Worker"], "harvest.worker"),
}

__all__ = [
    "DEFAULT_VERSION",
    "ActivityContext",
    "ActivityError",
    "ActivityFailure",
    "App",
    "AsyncClient",
    "AsyncWorkflowHandle",
    "Batch",
    "ChildHandle",
    "ChildPlacement",
    "ChildWorkflowError",
    "Client",
    "Concurrency",
    "ConditionTimeout",
    "Dag",
    "Debounce",
    "Duration",
    "ExternalWorkflow",
    "ExternalWorkflowError",
    "ExternalWorkflowNotFound",
    "ExternalWorkflowNotRunning",
    "ExternalWorkflowUnreachable",
    "HarvestError",
    "LocalActivityContext",
    "NonDeterminismError",
    "QueryFailed",
    "QueryTimeout",
    "Quota",
    "RateLimit",
    "RetryPolicy",
    "Saga",
    "Schedule",
    "SignalTimeout",
    "SkipTask",
    "StartOptions",
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
    "WorkflowSchedule",
    "WorkflowTerminated",
    "WorkflowTimedOut",
    "activity",
    "describe_handlers",
    "query",
    "update",
    "workflow",
]


if not TYPE_CHECKING:  # a checker sees the imports above, so a misspelt name is an error there

    def __getattr__(name: str) -> Any:
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module 'harvest' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # resolve once; later lookups skip this hook
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
