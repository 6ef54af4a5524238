"""The client: start, signal, query, update and wait for workflows, over ``harvest.db``.

Names resolve lazily (PEP 562), as ``harvest.worker``'s: importing a submodule that needs no
database (``harvest.client.history_export``, which `harvest workflow --help` loads) does not
load the client, the SQL API or the database driver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harvest.client.client import AsyncClient, AsyncWorkflowHandle, Client, StartOptions, WorkflowHandle
    from harvest.client.messages import UpdateHandle

__all__ = ["AsyncClient", "AsyncWorkflowHandle", "Client", "StartOptions", "UpdateHandle", "WorkflowHandle"]

_WHERE = {
    **dict.fromkeys(
        ["AsyncClient", "AsyncWorkflowHandle", "Client", "StartOptions", "WorkflowHandle"],
        "harvest.client.client",
    ),
    "UpdateHandle": "harvest.client.messages",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
