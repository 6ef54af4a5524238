"""The client: start, signal, query, update and wait for workflows, over ``harvest.db``."""

from harvest.client.client import AsyncClient, AsyncWorkflowHandle, Client, StartOptions, WorkflowHandle
from harvest.client.messages import UpdateHandle

__all__ = ["AsyncClient", "AsyncWorkflowHandle", "Client", "StartOptions", "UpdateHandle", "WorkflowHandle"]
